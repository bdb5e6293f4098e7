//! A topic's subscriber that receives a publish twice applies it once
//! (invariant 7, ARCHITECTURE.md; the testing matrix's "SNS subscriber
//! receives a duplicate"). The queue subscribes to an ackbox topic without
//! raw delivery, so each delivery is SNS's envelope; SNS may deliver one
//! publish twice, as two SQS messages with the same envelope. The consumer
//! unwraps the envelope and keys the effect on the publish's `MessageId`,
//! so the second delivery finds the first's inbox record.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ackbox_consumer::{CancellationToken, Consumer, RetryPolicy};
use support::sqs::SqsBroker;
use support::{Backend, Broker, Ledger, Script, body, eventually};

support::for_each_backend!(a_publish_delivered_twice_to_a_subscriber_is_applied_once);

async fn a_publish_delivered_twice_to_a_subscriber_is_applied_once<B: Backend>(backend: B) {
    let broker = <SqsBroker as Broker>::start(30, 5).await;
    let sns = broker
        .server
        .sns_client_with_key("CONSUMER", "consumer-secret-0123456789");
    let topic = sns
        .create_topic()
        .name("orders")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:work")
        .send()
        .await
        .unwrap();
    sns.publish()
        .topic_arn(&topic)
        .message(body("order-9"))
        .send()
        .await
        .unwrap();
    // The duplicate SNS would deliver: the same envelope, another message.
    let delivered = broker
        .client
        .receive_message()
        .queue_url(&broker.url)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let envelope = delivered.messages()[0].body().unwrap().to_owned();
    assert!(envelope.contains("\"Notification\""), "{envelope}");
    broker.send(&envelope).await;

    let consumer = Arc::new(
        Consumer::builder("subscriber")
            .transport(broker.transport().await)
            .inbox(backend.inbox())
            .retry(RetryPolicy::exponential(5, Duration::ZERO, Duration::ZERO))
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let script = Arc::new(Script::default());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        let handler = Ledger::<B>::new(Arc::clone(&script));
        async move { consumer.run(handler, shutdown).await }
    });
    eventually(
        Duration::from_secs(15),
        "both deliveries are decided",
        || async {
            consumer.stats().applied() + consumer.stats().duplicates() == 2
                && broker.depth().await == (0, 0)
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
        "the duplicate never reached the handler"
    );
    assert_eq!(consumer.stats().duplicates(), 1);
}
