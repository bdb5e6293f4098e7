//! Invariants 1 and 2 (ARCHITECTURE.md) against the real binary: `kill -9` in the middle
//! of eight concurrent SendMessageBatch senders loses no acknowledged message,
//! and messages in flight at the crash come back after their lease.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackbox_testkit::client::sqs_client;
use ackbox_testkit::process::{ServerProcess, free_port};
use ackbox_testkit::writers::{Writers, send_batch};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");

/// Receives and deletes until the queue has stayed empty past `quiet_until`.
async fn drain(client: &Client, url: &str, quiet_until: Instant) -> Vec<String> {
    let mut bodies = Vec::new();
    loop {
        let output = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(120)
            .send()
            .await
            .expect("ReceiveMessage after restart");
        let messages = output.messages();
        if messages.is_empty() {
            if Instant::now() >= quiet_until {
                return bodies;
            }
            continue;
        }
        for message in messages {
            bodies.push(message.body().unwrap_or_default().to_owned());
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("DeleteMessage after restart");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv1_inv2_kill9_mid_flight_loses_no_acknowledged_message() {
    kill9_mid_flight(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv1_inv2_kill9_mid_flight_on_the_log_store_loses_no_acknowledged_message() {
    kill9_mid_flight(&["--store", "log"]).await;
}

/// Eight senders, ten messages leased, `kill -9`, a restart with the same
/// `args`: every acknowledged message and every leased one is received.
async fn kill9_mid_flight(args: &[&str]) {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, args);
    let client = sqs_client(&server.url());
    let url = client
        .create_queue()
        .queue_name("crash")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();

    // Messages leased at the moment of the crash, with a short lease.
    for index in 0..10 {
        client
            .send_message()
            .queue_url(&url)
            .message_body(format!("leased-{index}"))
            .send()
            .await
            .unwrap();
    }
    let leased = client
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .visibility_timeout(3)
        .send()
        .await
        .unwrap();
    let leased: HashSet<String> = leased
        .messages()
        .iter()
        .map(|message| message.body().unwrap().to_owned())
        .collect();
    assert_eq!(leased.len(), 10);

    let writers = Writers::start(8, {
        let (client, url) = (client.clone(), url.clone());
        move |bodies| {
            let (client, url) = (client.clone(), url.clone());
            async move { send_batch(&client, &url, bodies).await }
        }
    });
    // Let the senders get going, then kill the server mid-flight.
    writers.wait_for(2_000, Duration::from_secs(10)).await;
    let killed_at = Instant::now();
    server.kill9();
    let acknowledged = writers.stopped().await;

    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, args);
    let client = sqs_client(&server.url());
    // The leased messages come back once their 3 s lease has run out.
    let found: HashSet<String> = drain(&client, &url, killed_at + Duration::from_secs(5))
        .await
        .into_iter()
        .collect();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|body| !found.contains(*body))
        .take(5)
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged messages lost after kill -9: {lost:?} (of {})",
        acknowledged.len()
    );
    let missing_leased: Vec<&String> = leased
        .iter()
        .filter(|body| !found.contains(*body))
        .collect();
    assert!(
        missing_leased.is_empty(),
        "in-flight messages did not come back: {missing_leased:?}"
    );
    assert!(
        server.terminate(),
        "the restarted server exits cleanly on SIGTERM"
    );
}

#[tokio::test]
async fn sigterm_flushes_and_a_restart_finds_everything() {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(
        BINARY.as_ref(),
        data_dir.path(),
        port,
        &["--durability", "relaxed", "--fsync-interval-ms", "10000"],
    );
    let client = sqs_client(&server.url());
    let url = client
        .create_queue()
        .queue_name("graceful")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for index in 0..50 {
        client
            .send_message()
            .queue_url(&url)
            .message_body(format!("m{index}"))
            .send()
            .await
            .unwrap();
    }
    assert!(server.terminate(), "SIGTERM exits with success");
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &[]);
    let client = sqs_client(&server.url());
    let found = drain(&client, &url, Instant::now()).await;
    assert_eq!(found.len(), 50);
}

/// One acknowledged FIFO send: its group, its index in the group, and what
/// the broker answered.
#[derive(Debug, Clone)]
struct FifoAck {
    group: usize,
    index: usize,
    message_id: String,
    sequence_number: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inv5_kill9_keeps_fifo_order_and_the_dedup_window() {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &[]);
    let client = sqs_client(&server.url());
    let url = client
        .create_queue()
        .queue_name("crash.fifo")
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let acknowledged = Arc::new(Mutex::new(Vec::<FifoAck>::new()));
    let mut senders = Vec::new();
    for group in 0..4 {
        let (client, url, acknowledged) = (client.clone(), url.clone(), Arc::clone(&acknowledged));
        senders.push(tokio::spawn(async move {
            for round in 0..100_000 {
                let mut request = client.send_message_batch().queue_url(&url);
                for offset in 0..10 {
                    let index = round * 10 + offset;
                    request = request.entries(
                        SendMessageBatchRequestEntry::builder()
                            .id(offset.to_string())
                            .message_body(format!("g{group}-{index}"))
                            .message_group_id(format!("g{group}"))
                            .message_deduplication_id(format!("g{group}-{index}"))
                            .build()
                            .unwrap(),
                    );
                }
                let Ok(output) = request.send().await else {
                    return;
                };
                let mut acknowledged = acknowledged.lock().unwrap();
                for entry in output.successful() {
                    acknowledged.push(FifoAck {
                        group,
                        index: round * 10 + entry.id().parse::<usize>().unwrap(),
                        message_id: entry.message_id().to_owned(),
                        sequence_number: entry.sequence_number().unwrap().to_owned(),
                    });
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while acknowledged.lock().unwrap().len() < 2_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9();
    for sender in senders {
        tokio::time::timeout(Duration::from_secs(60), sender)
            .await
            .expect("senders notice the crash")
            .unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.len() >= 100, "progress before the crash");

    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &[]);
    let client = sqs_client(&server.url());
    // The window survived: resending an acknowledged message returns the
    // first send's id and sequence number and enqueues nothing.
    for ack in acknowledged.iter().step_by(97) {
        let again = client
            .send_message()
            .queue_url(&url)
            .message_body("resent after the crash")
            .message_group_id(format!("g{}", ack.group))
            .message_deduplication_id(format!("g{}-{}", ack.group, ack.index))
            .send()
            .await
            .unwrap();
        assert_eq!(again.message_id(), Some(ack.message_id.as_str()));
        assert_eq!(again.sequence_number(), Some(ack.sequence_number.as_str()));
    }
    // Every group comes back complete up to its last acknowledged send, in
    // order, without a gap or a repeat.
    let drained = drain(&client, &url, Instant::now()).await;
    let mut per_group: Vec<Vec<usize>> = vec![Vec::new(); 4];
    for body in &drained {
        assert_ne!(body, "resent after the crash", "a duplicate was enqueued");
        let (group, index) = body[1..].split_once('-').unwrap();
        per_group[group.parse::<usize>().unwrap()].push(index.parse().unwrap());
    }
    for (group, indices) in per_group.iter().enumerate() {
        let last_acknowledged = acknowledged
            .iter()
            .filter(|ack| ack.group == group)
            .map(|ack| ack.index)
            .max();
        let expected_at_least = last_acknowledged.map_or(0, |last| last + 1);
        assert!(
            indices.len() >= expected_at_least,
            "group {group} lost messages"
        );
        assert!(
            indices
                .iter()
                .enumerate()
                .all(|(position, index)| position == *index),
            "group {group} out of order or with a gap: {:?}",
            &indices[..indices.len().min(20)]
        );
    }
    assert!(server.terminate());
}
