//! DESIGN invariants 1 and 2 against the real binary: `kill -9` in the middle
//! of eight concurrent SendMessageBatch senders loses no acknowledged message,
//! and messages in flight at the crash come back after their lease.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackbox_testkit::client::sqs_client;
use ackbox_testkit::process::{ServerProcess, free_port};
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
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &[]);
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

    let acknowledged = Arc::new(Mutex::new(HashSet::new()));
    let mut senders = Vec::new();
    for sender in 0..8 {
        let (client, url, acknowledged) = (client.clone(), url.clone(), Arc::clone(&acknowledged));
        senders.push(tokio::spawn(async move {
            for round in 0..100_000 {
                let bodies: Vec<String> = (0..10)
                    .map(|index| format!("s{sender}-r{round}-m{index}"))
                    .collect();
                let mut request = client.send_message_batch().queue_url(&url);
                for (index, body) in bodies.iter().enumerate() {
                    request = request.entries(
                        SendMessageBatchRequestEntry::builder()
                            .id(index.to_string())
                            .message_body(body)
                            .build()
                            .unwrap(),
                    );
                }
                // Once the server is gone, a send fails and the sender stops;
                // only answered sends count as acknowledged.
                let Ok(output) = request.send().await else {
                    return;
                };
                let stored: HashSet<&str> =
                    output.successful().iter().map(|entry| entry.id()).collect();
                let mut acknowledged = acknowledged.lock().unwrap();
                for (index, body) in bodies.into_iter().enumerate() {
                    if stored.contains(index.to_string().as_str()) {
                        acknowledged.insert(body);
                    }
                }
            }
        }));
    }
    // Let the senders get going, then kill the server mid-flight.
    let deadline = Instant::now() + Duration::from_secs(10);
    while acknowledged.lock().unwrap().len() < 2_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed_at = Instant::now();
    server.kill9();
    for sender in senders {
        tokio::time::timeout(Duration::from_secs(60), sender)
            .await
            .expect("senders notice the crash")
            .unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() >= 100,
        "the senders made progress before the crash ({})",
        acknowledged.len()
    );

    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &[]);
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
