//! A push target the topic retries after a timeout applies the message once
//! (invariant 7, ARCHITECTURE.md; the testing matrix's "target retried
//! after a timeout"). A real ackbox topic pushes to an `http` subscription
//! served by [`PushEndpoint`]; the handler takes longer than the topic's
//! push timeout, so the topic gives up on the first post and pushes the
//! message again while the first attempt is still committing. The inbox,
//! keyed on the notification's `MessageId`, makes the second push a
//! duplicate: one effect, one handler call.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ackbox_consumer::push::PushEndpoint;
use ackbox_consumer::{CancellationToken, Consumer, RetryPolicy};
use ackbox_testkit::server::TestServer;
use support::{Backend, Ledger, Script, body, eventually};

support::for_each_backend!(a_push_retried_after_a_timeout_is_applied_once);

async fn a_push_retried_after_a_timeout_is_applied_once<B: Backend>(backend: B) {
    let server = TestServer::builder()
        .push_timeout(Duration::from_secs(1))
        .start()
        .await;
    let sns = server.sns_client();
    let (endpoint, transport) = PushEndpoint::with_lease("orders-hook", Duration::from_secs(10));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = endpoint.router("/hook");
    tokio::spawn(async move { axum::serve(listener, app).await });

    let consumer = Arc::new(
        Consumer::builder("orders")
            .transport(transport)
            .inbox(backend.inbox())
            .retry(RetryPolicy::exponential(5, Duration::ZERO, Duration::ZERO))
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let script = Arc::new(Script::default());
    *script.delay.lock().unwrap() = Duration::from_secs(3);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        let handler = Ledger::<B>::new(Arc::clone(&script));
        async move { consumer.run(handler, shutdown).await }
    });

    let topic = sns
        .create_topic()
        .name("orders")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let subscription = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("http")
        .endpoint(&url)
        .attributes(
            "DeliveryPolicy",
            r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":1,"numRetries":5}}"#,
        )
        .return_subscription_arn(true)
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    // The endpoint confirms by the SubscribeURL on its own.
    eventually(
        Duration::from_secs(15),
        "the subscription is confirmed",
        || {
            let sns = sns.clone();
            let subscription = subscription.clone();
            async move {
                sns.get_subscription_attributes()
                    .subscription_arn(subscription)
                    .send()
                    .await
                    .unwrap()
                    .attributes
                    .unwrap()["PendingConfirmation"]
                    == "false"
            }
        },
    )
    .await;

    sns.publish()
        .topic_arn(&topic)
        .message(body("order-9"))
        .send()
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the first push and the retry are decided",
        || async { consumer.stats().applied() + consumer.stats().duplicates() >= 2 },
    )
    .await;
    // The topic's delivery queue drains: a retry was answered 200.
    let sqs = server.client();
    eventually(
        Duration::from_secs(15),
        "the topic has nothing left to push",
        || {
            let sqs = sqs.clone();
            async move {
                let queues = sqs.list_queues().send().await.unwrap();
                let url = queues
                    .queue_urls()
                    .iter()
                    .find(|url| url.contains("ackbox-push-"))
                    .unwrap()
                    .clone();
                let attributes = sqs
                    .get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
                    .send()
                    .await
                    .unwrap();
                let count = |name: &str| {
                    attributes
                        .attributes()
                        .and_then(|attributes| {
                            attributes.get(&aws_sdk_sqs::types::QueueAttributeName::from(name))
                        })
                        .cloned()
                        .unwrap_or_default()
                };
                count("ApproximateNumberOfMessages") == "0"
                    && count("ApproximateNumberOfMessagesNotVisible") == "0"
            }
        },
    )
    .await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the consumer stops")
        .unwrap()
        .unwrap();
    assert_eq!(backend.effects("order-9").await, 1, "one business effect");
    assert_eq!(
        script.calls("order-9"),
        1,
        "the retried push never reached the handler"
    );
}
