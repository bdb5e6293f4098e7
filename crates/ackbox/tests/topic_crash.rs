//! Invariant 11 (ARCHITECTURE.md) against the real binary: a topic's
//! fan-out is atomic. Publishers keep publishing to a topic with three
//! subscribed queues; the server is killed with `kill -9`; after a restart
//! every queue holds exactly the same messages — none has one another lacks
//! — and every acknowledged publish is among them, on each store. And a push subscription
//! gets every acknowledged publish, however the server died mid-push.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackbox_testkit::client::{create_queue, create_topic, sns_client, sqs_client, subscribe_queue};
use ackbox_testkit::postgres::PostgresSchema;
use ackbox_testkit::process::{ServerProcess, free_port};
use ackbox_testkit::writers::{Writers, publish_batch, send_batch};
use aws_sdk_sns::types::PublishBatchRequestEntry;

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");
const QUEUES: [&str; 3] = ["billing", "shipping", "audit"];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv11_kill9_mid_publish_leaves_every_queue_the_same_messages() {
    kill9_mid_publish(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv11_kill9_mid_publish_on_the_log_store_leaves_every_queue_the_same_messages() {
    kill9_mid_publish(&["--store", "log"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv11_kill9_mid_publish_on_postgresql_leaves_every_queue_the_same_messages() {
    let Some(schema) = PostgresSchema::new("a topic's fan-out across kill -9 on PostgreSQL") else {
        return;
    };
    kill9_mid_publish(&schema.serve_args()).await;
}

async fn kill9_mid_publish(args: &[&str]) {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, args);
    let sqs = sqs_client(&server.url());
    let sns = sns_client(&server.url());
    let topic = create_topic(&sns, "orders").await;
    let mut urls = Vec::new();
    for name in QUEUES {
        urls.push(create_queue(&sqs, name).await);
        subscribe_queue(&sns, &topic, name, true).await;
    }

    let writers = Writers::start(6, move |bodies| {
        let (sns, topic) = (sns.clone(), topic.clone());
        async move { publish_batch(&sns, &topic, bodies).await }
    });
    writers.wait_for(1_500, Duration::from_secs(15)).await;
    server.kill9();
    let acknowledged = writers.stopped().await;

    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, args);
    let sqs = sqs_client(&server.url());
    let mut held = Vec::new();
    for url in &urls {
        held.push(drain(&sqs, url).await);
    }
    for (name, bodies) in QUEUES.iter().zip(&held).skip(1) {
        let only_first: Vec<&String> = held[0].difference(bodies).take(5).collect();
        let only_here: Vec<&String> = bodies.difference(&held[0]).take(5).collect();
        assert!(
            only_first.is_empty() && only_here.is_empty(),
            "{} and {name} differ after kill -9: only in {}: {only_first:?}; only in {name}: \
             {only_here:?}",
            QUEUES[0],
            QUEUES[0]
        );
    }
    let lost: Vec<&String> = acknowledged.difference(&held[0]).take(5).collect();
    assert!(
        lost.is_empty(),
        "acknowledged publishes lost after kill -9: {lost:?} (of {})",
        acknowledged.len()
    );
    assert!(server.terminate(), "the restarted server exits cleanly");
}

/// What an `http` endpoint was posted, by message type.
#[derive(Clone, Default)]
struct Endpoint {
    notifications: Arc<Mutex<Vec<String>>>,
    confirmations: Arc<Mutex<Vec<String>>>,
    /// Server lives: a post the server made before it was killed gets no
    /// answer it could act on, so it does not count as delivered.
    lives: Arc<std::sync::atomic::AtomicU32>,
}

impl Endpoint {
    async fn start() -> (Self, String) {
        let endpoint = Self::default();
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(
                    |axum::extract::State(endpoint): axum::extract::State<Endpoint>,
                     headers: axum::http::HeaderMap,
                     body: String| async move {
                        let kind = headers
                            .get("x-amz-sns-message-type")
                            .and_then(|kind| kind.to_str().ok())
                            .unwrap_or_default();
                        let posts = if kind == "Notification" {
                            // Slow enough that posts are in flight when the
                            // server dies; counted only when the server that
                            // made it is alive to hear the answer.
                            let life = endpoint.lives.load(std::sync::atomic::Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            if endpoint.lives.load(std::sync::atomic::Ordering::SeqCst) != life {
                                return;
                            }
                            &endpoint.notifications
                        } else {
                            &endpoint.confirmations
                        };
                        posts.lock().unwrap().push(body);
                    },
                ),
            )
            .with_state(endpoint.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (endpoint, url)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv11_a_push_subscription_gets_every_acknowledged_publish_after_kill9() {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args = ["--push-timeout-secs", "2"];
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &args);
    let sns = sns_client(&server.url());
    let topic = sns
        .create_topic()
        .name("orders")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let (endpoint, url) = Endpoint::start().await;
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("http")
        .endpoint(&url)
        .attributes("RawMessageDelivery", "true")
        .attributes(
            "DeliveryPolicy",
            r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":1,"numRetries":30}}"#,
        )
        .send()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let token = loop {
        let confirmation = endpoint.confirmations.lock().unwrap().first().cloned();
        if let Some(confirmation) = confirmation {
            let request: serde_json::Value = serde_json::from_str(&confirmation).unwrap();
            break request["Token"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no confirmation request came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    sns.confirm_subscription()
        .topic_arn(&topic)
        .token(token)
        .send()
        .await
        .unwrap();

    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let mut publishers = Vec::new();
    for publisher in 0..3 {
        let (sns, topic, acknowledged) = (sns.clone(), topic.clone(), Arc::clone(&acknowledged));
        publishers.push(tokio::spawn(async move {
            for round in 0..150 {
                let body = format!("p{publisher}-r{round}");
                // Once the server is gone a publish fails and the publisher stops.
                if sns
                    .publish()
                    .topic_arn(&topic)
                    .message(&body)
                    .send()
                    .await
                    .is_err()
                {
                    return;
                }
                acknowledged.lock().unwrap().insert(body);
            }
        }));
    }
    // Killed while publishes are being posted, some in flight.
    let deadline = Instant::now() + Duration::from_secs(15);
    while endpoint.notifications.lock().unwrap().len() < 50 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    endpoint
        .lives
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    server.kill9();
    for publisher in publishers {
        tokio::time::timeout(Duration::from_secs(60), publisher)
            .await
            .expect("publishers notice the crash")
            .unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() >= 100,
        "the publishers made progress before the crash ({})",
        acknowledged.len()
    );

    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &args);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let posted: BTreeSet<String> = endpoint
            .notifications
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect();
        let missing: Vec<&String> = acknowledged.difference(&posted).take(5).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acknowledged publishes never pushed after kill -9: {missing:?} (of {})",
            acknowledged.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(server.terminate(), "the restarted server exits cleanly");
}

/// Every body left in the queue, read without deleting (each lease outlasts the drain).
async fn drain(client: &aws_sdk_sqs::Client, url: &str) -> BTreeSet<String> {
    let mut bodies = BTreeSet::new();
    loop {
        let output = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .send()
            .await
            .expect("ReceiveMessage after restart");
        if output.messages().is_empty() {
            return bodies;
        }
        for message in output.messages() {
            let body = message.body().unwrap_or_default().to_owned();
            assert!(bodies.insert(body.clone()), "{url} delivered {body} twice");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv13_a_replay_killed_midway_resumes_after_restart_and_delivers_every_archived_publish() {
    replay_across_kill9(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv13_a_replay_killed_midway_on_the_log_store_resumes_and_delivers_every_publish() {
    replay_across_kill9(&["--store", "log"]).await;
}

/// Invariant 13: a replay is a task the store keeps, with a cursor. It is
/// killed with `kill -9` halfway; after a restart it goes on from its cursor
/// and delivers every archived publish, the slice in flight at the kill at
/// most twice.
async fn replay_across_kill9(args: &[&str]) {
    const PUBLISHES: usize = 300;
    const RATE: i64 = 50;
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, args);
    let sqs = sqs_client(&server.url());
    let sns = sns_client(&server.url());
    let topic = sns
        .create_topic()
        .name("orders")
        .attributes("ArchivePolicy", r#"{"MessageRetentionPeriod":"1"}"#)
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    for batch in 0..PUBLISHES / 10 {
        let entries = (0..10)
            .map(|index| {
                PublishBatchRequestEntry::builder()
                    .id(format!("e{index}"))
                    .message(format!("order-{}", batch * 10 + index))
                    .build()
                    .unwrap()
            })
            .collect();
        sns.publish_batch()
            .topic_arn(&topic)
            .set_publish_batch_request_entries(Some(entries))
            .send()
            .await
            .unwrap();
    }
    let url = sqs
        .create_queue()
        .queue_name("rebuild")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let (status, started) = ackbox_testkit::client::call_json(
        &server.url(),
        "AckBox.StartReplay",
        &serde_json::json!({
            "TopicArn": topic,
            "DestinationArn": "arn:aws:sqs:us-east-1:000000000000:rebuild",
            "StartTimestamp": 0,
            "RawMessageDelivery": true,
            "MaxNumberOfMessagesPerSecond": RATE,
        }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let replayed = |server_url: String| async move {
        let (_, listing) = ackbox_testkit::client::call_json(
            &server_url,
            "AckBox.ListReplays",
            &serde_json::json!({}),
        )
        .await;
        let replay = listing["Replays"][0].clone();
        (
            replay["Status"].as_str().unwrap_or_default().to_owned(),
            replay["ApproximateNumberOfMessagesReplayed"]
                .as_i64()
                .unwrap_or_default(),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, count) = replayed(server.url()).await;
        assert_eq!(status, "RUNNING", "the replay was to be killed midway");
        if count >= 100 {
            break;
        }
        assert!(Instant::now() < deadline, "the replay made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9();

    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, args);
    let sqs = sqs_client(&server.url());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _) = replayed(server.url()).await;
        if status == "COMPLETED" {
            break;
        }
        assert_eq!(status, "RUNNING", "the replay resumes after the restart");
        assert!(Instant::now() < deadline, "the replay never completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut deliveries = Vec::new();
    loop {
        let output = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .send()
            .await
            .unwrap();
        if output.messages().is_empty() {
            break;
        }
        deliveries.extend(
            output
                .messages()
                .iter()
                .map(|message| message.body().unwrap_or_default().to_owned()),
        );
    }
    let distinct: BTreeSet<&String> = deliveries.iter().collect();
    let expected: BTreeSet<String> = (0..PUBLISHES)
        .map(|index| format!("order-{index}"))
        .collect();
    let missing: Vec<&String> = expected
        .iter()
        .filter(|body| !distinct.contains(body))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "archived publishes never replayed: {missing:?}"
    );
    // One slice is a tenth of a second's worth at the replay's rate.
    let repeated = deliveries.len() - distinct.len();
    assert!(
        repeated as i64 <= RATE / 10,
        "{repeated} publishes replayed twice: more than the slice in flight at the kill"
    );
    assert!(server.terminate(), "the restarted server exits cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv13_kill9_mid_send_leaves_a_queue_and_its_archive_the_same_messages() {
    kill9_mid_archived_send(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv13_kill9_mid_send_on_the_log_store_leaves_a_queue_and_its_archive_the_same_messages() {
    kill9_mid_archived_send(&["--store", "log"]).await;
}

/// Invariant 13 for a queue's archive: senders keep sending to a queue
/// with an `AckBoxArchivePolicy`; the server is killed with `kill -9`;
/// after a restart the archive (replayed into an empty queue) holds exactly
/// what the queue holds, every acknowledged send among it.
async fn kill9_mid_archived_send(args: &[&str]) {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, args);
    let sqs = sqs_client(&server.url());
    let url = sqs
        .create_queue()
        .queue_name("orders")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::from("AckBoxArchivePolicy"),
            r#"{"MessageRetentionPeriod":"1"}"#,
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let writers = Writers::start(6, {
        let url = url.clone();
        move |bodies| {
            let (sqs, url) = (sqs.clone(), url.clone());
            async move { send_batch(&sqs, &url, bodies).await }
        }
    });
    writers.wait_for(1_500, Duration::from_secs(15)).await;
    server.kill9();
    let acknowledged = writers.stopped().await;

    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, args);
    let sqs = sqs_client(&server.url());
    let held = drain(&sqs, &url).await;
    let rebuild = sqs
        .create_queue()
        .queue_name("rebuild")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let (status, started) = ackbox_testkit::client::call_json(
        &server.url(),
        "AckBox.StartReplay",
        &serde_json::json!({
            "SourceArn": "arn:aws:sqs:us-east-1:000000000000:orders",
            "DestinationArn": "arn:aws:sqs:us-east-1:000000000000:rebuild",
            "StartTimestamp": 0,
        }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, listing) = ackbox_testkit::client::call_json(
            &server.url(),
            "AckBox.ListReplays",
            &serde_json::json!({}),
        )
        .await;
        let status = listing["Replays"][0]["Status"].clone();
        if status != "RUNNING" {
            assert_eq!(status, "COMPLETED", "{listing}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replay never ended: {listing}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let archived = drain(&sqs, &rebuild).await;
    let only_queue: Vec<&String> = held.difference(&archived).take(5).collect();
    let only_archive: Vec<&String> = archived.difference(&held).take(5).collect();
    assert!(
        only_queue.is_empty() && only_archive.is_empty(),
        "the queue and its archive differ after kill -9: only in the queue: {only_queue:?}; \
         only in the archive: {only_archive:?}"
    );
    let lost: Vec<&String> = acknowledged.difference(&held).take(5).collect();
    assert!(
        lost.is_empty(),
        "acknowledged sends lost after kill -9: {lost:?} (of {})",
        acknowledged.len()
    );
    assert!(server.terminate(), "the restarted server exits cleanly");
}
