//! Push subscriptions (`http`) through `aws-sdk-sns` against a real HTTP
//! endpoint on 127.0.0.1: confirmation as SNS does it, SNS's headers and
//! envelope, retries by the delivery policy after a 5xx or a timeout, and
//! the subscription's dead-letter queue with the reason.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::*;
use ackbox_testkit::client::create_topic;

/// One post the endpoint received.
#[derive(Debug, Clone)]
struct Post {
    headers: HeaderMap,
    body: String,
}

impl Post {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
    }

    fn message_type(&self) -> &str {
        self.header("x-amz-sns-message-type")
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// How the endpoint answers a notification.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Status(u16),
    /// Answers 200, but only after this long.
    Late(Duration),
}

/// An HTTP endpoint that records every post and answers notifications as
/// scripted (then 200); confirmation requests always get 200.
#[derive(Clone, Default)]
struct Endpoint {
    posts: Arc<Mutex<Vec<Post>>>,
    script: Arc<Mutex<Vec<Answer>>>,
}

impl Endpoint {
    /// Serves on 127.0.0.1; the URL posts go to.
    async fn start(script: Vec<Answer>) -> (Self, String) {
        let endpoint = Self {
            posts: Arc::default(),
            script: Arc::new(Mutex::new(script)),
        };
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(Self::receive))
            .with_state(endpoint.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (endpoint, url)
    }

    async fn receive(State(endpoint): State<Self>, headers: HeaderMap, body: String) -> StatusCode {
        let post = Post { headers, body };
        let notification = post.message_type() == "Notification";
        endpoint.posts.lock().unwrap().push(post);
        let answer = {
            let mut script = endpoint.script.lock().unwrap();
            (notification && !script.is_empty()).then(|| script.remove(0))
        };
        match answer {
            None => StatusCode::OK,
            Some(Answer::Status(status)) => StatusCode::from_u16(status).unwrap(),
            Some(Answer::Late(delay)) => {
                tokio::time::sleep(delay).await;
                StatusCode::OK
            }
        }
    }

    /// Serves HTTPS on 127.0.0.1 with `certificate`; the URL posts go to.
    async fn start_tls(certificate: &ackbox_server::tls::TlsFiles) -> (Self, String) {
        let endpoint = Self::default();
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(Self::receive))
            .with_state(endpoint.clone());
        let acceptor = certificate.acceptor().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (endpoint, url)
    }

    fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap().clone()
    }

    /// Waits until `count` posts of `message_type` have arrived; them.
    async fn wait_for(&self, message_type: &str, count: usize) -> Vec<Post> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let posts: Vec<Post> = self
                .posts()
                .into_iter()
                .filter(|post| post.message_type() == message_type)
                .collect();
            if posts.len() >= count {
                return posts;
            }
            assert!(
                Instant::now() < deadline,
                "{count} {message_type} posts expected, {} arrived: {posts:?}",
                posts.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// How many push subscriptions' delivery queues there are.
async fn delivery_queues(sqs: &aws_sdk_sqs::Client) -> usize {
    sqs.list_queues()
        .send()
        .await
        .unwrap()
        .queue_urls()
        .iter()
        .filter(|queue| queue.contains("ackbox-push-"))
        .count()
}

/// Subscribes `url` with `attributes`, confirms by the token the endpoint
/// got; the subscription's ARN.
async fn subscribe_confirmed(
    sns: &aws_sdk_sns::Client,
    topic: &str,
    endpoint: &Endpoint,
    url: &str,
    attributes: &[(&str, &str)],
) -> String {
    let mut request = sns
        .subscribe()
        .topic_arn(topic)
        .protocol("http")
        .endpoint(url)
        .return_subscription_arn(true);
    for (name, value) in attributes {
        request = request.attributes(*name, *value);
    }
    let arn = request.send().await.unwrap().subscription_arn.unwrap();
    let confirmation = endpoint.wait_for("SubscriptionConfirmation", 1).await;
    let token = confirmation[0].json()["Token"].as_str().unwrap().to_owned();
    let confirmed = sns
        .confirm_subscription()
        .topic_arn(topic)
        .token(token)
        .send()
        .await
        .unwrap();
    assert_eq!(confirmed.subscription_arn(), Some(arn.as_str()));
    arn
}

/// Every message in `url`, with the ackbox failure attributes.
async fn dead_letters(
    client: &aws_sdk_sqs::Client,
    url: &str,
    count: usize,
) -> Vec<aws_sdk_sqs::types::Message> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut messages = Vec::new();
    while messages.len() < count {
        assert!(
            Instant::now() < deadline,
            "{count} dead letters expected: {messages:?}"
        );
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::from("AckBoxFailureClass"))
            .message_system_attribute_names(MessageSystemAttributeName::from(
                "AckBoxFailureMessage",
            ))
            .message_system_attribute_names(MessageSystemAttributeName::from("AckBoxFailureCount"))
            .send()
            .await
            .unwrap();
        messages.extend(received.messages().iter().cloned());
    }
    messages
}

fn failure(message: &aws_sdk_sqs::types::Message, name: &str) -> String {
    message.attributes().unwrap()[&MessageSystemAttributeName::from(name)].clone()
}

#[tokio::test]
async fn an_http_endpoint_confirms_then_gets_each_publish_with_snss_headers() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let topic = create_topic(&sns, "orders").await;
    let (endpoint, url) = Endpoint::start(Vec::new()).await;

    let pending = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("http")
        .endpoint(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(pending.subscription_arn(), Some("pending confirmation"));
    let listed = sns
        .list_subscriptions_by_topic()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap();
    assert_eq!(
        listed.subscriptions()[0].subscription_arn(),
        Some("PendingConfirmation")
    );
    sns.publish()
        .topic_arn(&topic)
        .message("before the confirmation")
        .send()
        .await
        .unwrap();

    let confirmation = endpoint.wait_for("SubscriptionConfirmation", 1).await;
    let request = confirmation[0].json();
    assert_eq!(request["Type"], "SubscriptionConfirmation");
    assert_eq!(request["TopicArn"], topic.as_str());
    assert_eq!(confirmation[0].header("x-amz-sns-topic-arn"), topic);
    // The SubscribeURL confirms with a plain GET, as a browser or curl would.
    let subscribe_url = request["SubscribeURL"].as_str().unwrap();
    assert!(subscribe_url.starts_with(&server.url()), "{subscribe_url}");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let answer = client.get(subscribe_url.parse().unwrap()).await.unwrap();
    assert_eq!(answer.status(), 200);
    let arn = sns
        .list_subscriptions_by_topic()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .subscriptions()[0]
        .subscription_arn()
        .unwrap()
        .to_owned();
    assert!(arn.starts_with(&format!("{topic}:")), "{arn}");

    let published = sns
        .publish()
        .topic_arn(&topic)
        .subject("placed")
        .message("order 7")
        .send()
        .await
        .unwrap();
    let notifications = endpoint.wait_for("Notification", 1).await;
    let notification = &notifications[0];
    let message_id = published.message_id().unwrap();
    assert_eq!(notification.header("x-amz-sns-message-id"), message_id);
    assert_eq!(notification.header("x-amz-sns-topic-arn"), topic);
    assert_eq!(notification.header("x-amz-sns-subscription-arn"), arn);
    assert_eq!(
        notification.header("content-type"),
        "text/plain; charset=UTF-8"
    );
    let envelope = notification.json();
    assert_eq!(envelope["Message"], "order 7");
    assert_eq!(envelope["Subject"], "placed");
    assert_eq!(envelope["MessageId"], message_id);

    let attributes = sns
        .get_subscription_attributes()
        .subscription_arn(&arn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(attributes["PendingConfirmation"], "false");
    assert!(attributes["EffectiveDeliveryPolicy"].contains("\"numRetries\":3"));

    // The delivery queue goes with the subscription.
    assert_eq!(delivery_queues(&sqs).await, 1);
    sns.unsubscribe()
        .subscription_arn(&arn)
        .send()
        .await
        .unwrap();
    assert_eq!(delivery_queues(&sqs).await, 0);
    assert!(
        endpoint
            .posts()
            .iter()
            .all(|post| !post.body.contains("before the confirmation")),
        "nothing is published to a subscription before it is confirmed"
    );
}

#[tokio::test]
async fn a_failing_endpoint_is_retried_by_the_policy_then_dead_lettered_with_the_reason() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let topic = create_topic(&sns, "payments").await;
    let dlq = create(&sqs, "hooks-dlq").await;
    // Three tries of the first message fail with 503; the second is refused.
    let (endpoint, url) = Endpoint::start(vec![
        Answer::Status(503),
        Answer::Status(503),
        Answer::Status(503),
        Answer::Status(400),
    ])
    .await;
    let policy = r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":1,"numRetries":2,"numNoDelayRetries":1}}"#;
    let redrive = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:hooks-dlq"}"#;
    // Policies that cannot work are refused, naming them.
    for (attribute, value) in [
        (
            "RedrivePolicy",
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:nowhere"}"#,
        ),
        (
            "DeliveryPolicy",
            r#"{"healthyRetryPolicy":{"minDelayTarget":5,"maxDelayTarget":1,"numRetries":2}}"#,
        ),
    ] {
        let refused = sns
            .subscribe()
            .topic_arn(&topic)
            .protocol("http")
            .endpoint(&url)
            .attributes(attribute, value)
            .send()
            .await
            .unwrap_err();
        let message = format!("{refused:?}");
        assert!(message.contains(attribute), "{message}");
    }
    subscribe_confirmed(
        &sns,
        &topic,
        &endpoint,
        &url,
        &[
            ("DeliveryPolicy", policy),
            ("RedrivePolicy", redrive),
            ("RawMessageDelivery", "true"),
        ],
    )
    .await;

    sns.publish()
        .topic_arn(&topic)
        .message("flaky")
        .send()
        .await
        .unwrap();
    let tries = endpoint.wait_for("Notification", 3).await;
    assert!(tries.iter().all(|post| post.body == "flaky"));
    assert!(
        tries
            .iter()
            .all(|post| post.header("x-amz-sns-rawdelivery") == "true")
    );
    let ids: std::collections::BTreeSet<&str> = tries
        .iter()
        .map(|post| post.header("x-amz-sns-message-id"))
        .collect();
    assert_eq!(ids.len(), 1, "every try carries the notification's one id");
    let dead = dead_letters(&sqs, &dlq, 1).await;
    assert_eq!(dead[0].body(), Some("flaky"));
    assert_eq!(failure(&dead[0], "AckBoxFailureClass"), "http.503");
    assert!(failure(&dead[0], "AckBoxFailureMessage").contains("503"));
    assert_eq!(failure(&dead[0], "AckBoxFailureCount"), "3");

    // A 4xx is the endpoint refusing the message: no retry.
    sns.publish()
        .topic_arn(&topic)
        .message("malformed")
        .send()
        .await
        .unwrap();
    let dead = dead_letters(&sqs, &dlq, 1).await;
    assert_eq!(dead[0].body(), Some("malformed"));
    assert_eq!(failure(&dead[0], "AckBoxFailureClass"), "http.400");
    let malformed = endpoint
        .posts()
        .iter()
        .filter(|post| post.body == "malformed")
        .count();
    assert_eq!(malformed, 1);
}

#[tokio::test]
async fn an_endpoint_that_answers_too_late_gets_the_message_again() {
    let server = TestServer::builder()
        .push_timeout(Duration::from_secs(1))
        .start()
        .await;
    let sns = server.sns_client();
    let topic = create_topic(&sns, "slow").await;
    let (endpoint, url) = Endpoint::start(vec![Answer::Late(Duration::from_secs(3))]).await;
    let policy = r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":1,"numRetries":3}}"#;
    subscribe_confirmed(&sns, &topic, &endpoint, &url, &[("DeliveryPolicy", policy)]).await;

    let published = sns
        .publish()
        .topic_arn(&topic)
        .message("once")
        .send()
        .await
        .unwrap();
    let tries = endpoint.wait_for("Notification", 2).await;
    for post in &tries {
        assert_eq!(
            post.header("x-amz-sns-message-id"),
            published.message_id().unwrap()
        );
    }
    // Delivered on the second try: nothing more comes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(endpoint.wait_for("Notification", 2).await.len(), 2);
}

#[tokio::test]
async fn an_https_endpoint_is_posted_to_through_the_roots_the_server_trusts() {
    let dir = tempfile::tempdir().unwrap();
    let certificate = ackbox_testkit::tls::TestCertificate::generate(dir.path());
    let authority = dir.path().join("authority.pem");
    std::fs::write(&authority, &certificate.authority_pem).unwrap();
    let server = TestServer::builder().push_roots(authority).start().await;
    let sns = server.sns_client();
    let topic = create_topic(&sns, "secure").await;
    let (endpoint, url) = Endpoint::start_tls(&certificate.files).await;
    let arn = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("https")
        .endpoint(&url)
        .return_subscription_arn(true)
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    let confirmation = endpoint.wait_for("SubscriptionConfirmation", 1).await;
    let token = confirmation[0].json()["Token"].as_str().unwrap().to_owned();
    sns.confirm_subscription()
        .topic_arn(&topic)
        .token(token)
        .send()
        .await
        .unwrap();
    sns.publish()
        .topic_arn(&topic)
        .message("over TLS")
        .send()
        .await
        .unwrap();
    let notifications = endpoint.wait_for("Notification", 1).await;
    assert_eq!(notifications[0].json()["Message"], "over TLS");
    assert_eq!(notifications[0].header("x-amz-sns-subscription-arn"), arn);

    let http = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("https")
        .endpoint("http://127.0.0.1:1/plain")
        .send()
        .await
        .unwrap_err();
    assert!(
        format!("{http:?}").contains("https://"),
        "an https subscription needs an https URL: {http:?}"
    );
    let unescaped = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("https")
        .endpoint("https://127.0.0.1/<hook>")
        .send()
        .await
        .unwrap_err();
    assert!(
        format!("{unescaped:?}").contains("Endpoint"),
        "{unescaped:?}"
    );
}
