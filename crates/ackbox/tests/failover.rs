//! The PostgreSQL store when PostgreSQL fails under load (invariants 1 and
//! 2, ARCHITECTURE.md: no acknowledged send is lost; in-flight messages come
//! back after a crash), and a failure is an SQS error a client retries.
//!
//! - A primary with a synchronous streaming replica, and two `ackbox serve`
//!   nodes on a URL listing both: mid-load the primary is killed with
//!   `kill -9` (its backends too, as a crash of its machine) and the replica
//!   promoted, as an HA manager would. Every acknowledged send is received,
//!   messages leased before the kill come back, a move task started before
//!   it finishes, and both nodes serve again without a restart.
//! - One node whose database connections are terminated every 100 ms
//!   (`pg_terminate_backend`), called by a client that does not retry:
//!   every failed call is `ServiceUnavailable` (503, which SQS clients
//!   retry), none hangs, and every acknowledged send is received.
//!
//! The first runs when `ACKBOX_TEST_POSTGRES_BINDIR` names the PostgreSQL
//! server binaries, the second when `ACKBOX_TEST_POSTGRES_URL` is set
//! (`.ci/run` sets both). Print the figures with
//! `cargo nextest run -p ackbox --test failover --no-capture`.

#[path = "failover/load.rs"]
mod load;
#[path = "failover/replicated.rs"]
mod replicated;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use ackbox_testkit::client::{create_queue, queue_arn, sqs_config};
use ackbox_testkit::postgres::PostgresSchema;
use ackbox_testkit::process::{ServerProcess, free_port};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};

use load::{Ledger, Load};
use replicated::ReplicatedPostgres;

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");
/// Short, so that messages leased before the failover come back soon.
const LEASE_SECONDS: i32 = 3;
/// Messages a move task carries across the failover, at [`MOVE_RATE`] a
/// second: it runs before, during and after it.
const PARKED: usize = 200;
const MOVE_RATE: i32 = 40;
/// How long a node may take to serve again after the promotion before the
/// test calls it stuck (it takes about a second).
const SERVE_AGAIN_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_primary_fails_over_to_its_synchronous_replica_losing_nothing_acknowledged() {
    let Some(bindir) = ReplicatedPostgres::bindir("failover to a streaming replica") else {
        return;
    };
    let mut database = ReplicatedPostgres::start(bindir).await;
    let store = database.url();
    let data_dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<ServerProcess> = data_dirs
        .iter()
        .map(|dir| {
            ServerProcess::start(
                BINARY.as_ref(),
                dir.path(),
                free_port(),
                &["--store", &store],
            )
        })
        .collect();
    let clients: Vec<Client> = nodes
        .iter()
        .map(|node| patient_client(&node.url()))
        .collect();

    let orders = clients[0]
        .create_queue()
        .queue_name("orders")
        .attributes(
            QueueAttributeName::VisibilityTimeout,
            LEASE_SECONDS.to_string(),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let (parked_arn, redriven) = park_and_start_moving(&clients[0]).await;
    let load = Load::start(&clients, &orders, 3, 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = hold_a_lease(&clients[1], &orders).await;

    let killed_at = Instant::now();
    database.kill_primary();
    database.promote_replica().await;
    let promoted_in = killed_at.elapsed();
    let mut served_again_in = Vec::new();
    for (node, client) in clients.iter().enumerate() {
        served_again_in.push(serve_again(client, &orders, node).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ledger = load.drain(Duration::from_secs(60)).await;

    eprintln!(
        "failover: promoted {promoted_in:?} after the kill; the nodes served again {served_again_in:?} after the promotion; \
         {} sends acknowledged, {} received, errors {:?}",
        ledger.acknowledged.len(),
        ledger.received.len(),
        ledger.errors
    );
    assert_nothing_lost(&ledger);
    for body in &held {
        assert!(
            ledger.received[body].iter().any(|at| *at > killed_at),
            "{body}, leased before the kill and never deleted, did not come back"
        );
    }
    assert!(
        ledger.received.len() > 200,
        "too little went through for the failover to prove anything"
    );
    wait_for_move_task(&clients[0], &parked_arn).await;
    let moved = receive_all(&clients[1], &redriven).await;
    let expected: HashSet<String> = (0..PARKED).map(|index| format!("parked {index}")).collect();
    assert_eq!(
        moved, expected,
        "the move task did not carry every parked message across the failover"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminated_database_connections_give_retryable_errors_never_a_hang_or_a_loss() {
    let Some(schema) = PostgresSchema::new("connection loss") else {
        return;
    };
    // The node's sessions carry a name of their own, so that only they are
    // terminated, not those of tests running beside this one.
    let application = format!("ackbox_connection_loss_{}", std::process::id());
    let separator = if schema.url().contains('?') { '&' } else { '?' };
    let store = format!("{}{separator}application_name={application}", schema.url());
    let data_dir = tempfile::tempdir().unwrap();
    let node = ServerProcess::start(
        BINARY.as_ref(),
        data_dir.path(),
        free_port(),
        &["--store", &store, "--store-schema", schema.name()],
    );
    // No retries: every failure the server answers is seen, and counted.
    let client = Client::from_conf(
        sqs_config(&node.url(), "test", "test")
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(Duration::from_secs(30))
                    .build(),
            )
            .build(),
    );
    let url = create_queue(&client, "terminated").await;
    let load = Load::start(std::slice::from_ref(&client), &url, 3, 2);
    let admin = sqlx::PgPool::connect(schema.url()).await.unwrap();
    let mut terminated = 0usize;
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        let ended: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&application)
        .fetch_all(&admin)
        .await
        .unwrap();
        terminated += ended.into_iter().filter(|ended| *ended).count();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ledger = load.drain(Duration::from_secs(60)).await;
    eprintln!(
        "connection loss: {terminated} sessions terminated; {} sends acknowledged, {} received, errors {:?}",
        ledger.acknowledged.len(),
        ledger.received.len(),
        ledger.errors
    );
    assert!(
        terminated >= 20,
        "only {terminated} sessions were terminated"
    );
    assert!(
        ledger.errors.values().sum::<usize>() > 0,
        "no call failed: the terminations did not reach a request in flight"
    );
    assert_nothing_lost(&ledger);
}

/// A client that retries as the SDK does by default, with a bound on each
/// call so that a hang fails the test rather than stalling it.
fn patient_client(endpoint: &str) -> Client {
    Client::from_conf(
        sqs_config(endpoint, "test", "test")
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(Duration::from_secs(60))
                    .build(),
            )
            .build(),
    )
}

fn assert_nothing_lost(ledger: &Ledger) {
    let missing = ledger.missing();
    assert!(
        missing.is_empty(),
        "{} acknowledged sends were never received, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(
        ledger.not_unavailable().is_empty(),
        "calls failed with errors other than ServiceUnavailable: {:?}",
        ledger.not_unavailable()
    );
}

/// Fills a dead-letter queue and starts moving it, slowly, to another
/// queue; the dead-letter queue's ARN and the destination's URL.
async fn park_and_start_moving(client: &Client) -> (String, String) {
    let parked = create_queue(client, "parked").await;
    let parked_arn = queue_arn(client, &parked).await;
    // The dead-letter queue of this one, so a move task may take from it.
    client
        .create_queue()
        .queue_name("failing")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{parked_arn}","maxReceiveCount":"1"}}"#),
        )
        .send()
        .await
        .unwrap();
    ackbox_testkit::client::send_numbered(client, &parked, PARKED, |index| {
        SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(format!("parked {index}"))
            .build()
            .unwrap()
    })
    .await;
    let redriven = create_queue(client, "redriven").await;
    client
        .start_message_move_task()
        .source_arn(&parked_arn)
        .destination_arn(queue_arn(client, &redriven).await)
        .max_number_of_messages_per_second(MOVE_RATE)
        .send()
        .await
        .unwrap();
    (parked_arn, redriven)
}

/// Receives messages and never deletes them: leased when the primary dies.
async fn hold_a_lease(client: &Client, url: &str) -> Vec<String> {
    loop {
        let output = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let bodies: Vec<String> = output
            .messages()
            .iter()
            .map(|message| message.body().unwrap().to_owned())
            .collect();
        if !bodies.is_empty() {
            return bodies;
        }
    }
}

/// How long until `client`'s node acknowledges a send again.
async fn serve_again(client: &Client, url: &str, node: usize) -> Duration {
    let since = Instant::now();
    loop {
        let sent = client
            .send_message()
            .queue_url(url)
            .message_body(format!("probe {node}"))
            .send()
            .await;
        if sent.is_ok() {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < SERVE_AGAIN_WITHIN,
            "node {node} still fails {SERVE_AGAIN_WITHIN:?} after the promotion: {sent:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for_move_task(client: &Client, source_arn: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = client
            .list_message_move_tasks()
            .source_arn(source_arn)
            .send()
            .await
            .unwrap();
        let status = listed.results()[0].status().unwrap_or_default().to_owned();
        if status == "COMPLETED" {
            return;
        }
        assert!(
            Instant::now() < deadline && status == "RUNNING",
            "the move task is {status} a minute after the failover: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every distinct body in the queue, received and deleted.
async fn receive_all(client: &Client, url: &str) -> HashSet<String> {
    let mut bodies = HashSet::new();
    let mut empty_receives = 0;
    while empty_receives < 3 {
        let output = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        if output.messages().is_empty() {
            empty_receives += 1;
        }
        for message in output.messages() {
            bodies.insert(message.body().unwrap().to_owned());
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    bodies
}
