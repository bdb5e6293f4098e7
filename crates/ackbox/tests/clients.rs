//! The client matrix: real AWS clients no one here wrote, each against its
//! own `ackbox serve` process, each running the same story (create with a
//! dead-letter queue, send with attributes, receive, change visibility,
//! dead-letter, batches, errors, FIFO order and deduplication, delete).
//!
//! - `aws-sdk-sqs` (Rust, JSON 1.0), here;
//! - boto3 and the `awscli` package (JSON 1.0), `clients/python/matrix.py`,
//!   and their SNS clients (query) against ackbox's topics;
//! - botocore forced to the query protocol by loading SQS's query model;
//! - `@aws-sdk/client-sqs` (JavaScript v3) on the machine's Node.js,
//!   `clients/node/matrix.cjs`.
//!
//! Clients sign with the matrix's key; the query-protocol, JavaScript and
//! Rust clients run against a server that checks the signatures.
//!
//! The Python and Node clients live where `clients/setup.sh` installed them,
//! named by `ACKBOX_TEST_CLIENTS`; without it those tests say they skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use ackbox_testkit::client::{create_queue, error_code, queue_arn, sqs_client_with_key};
use ackbox_testkit::process::{ServerProcess, free_port};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");

/// The key every client of the matrix signs with.
const ACCESS_KEY_ID: &str = "matrix";
const SECRET_ACCESS_KEY: &str = "matrix-secret-access-key";

/// How the server under test admits requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    /// Open, as `ackbox serve` starts by default.
    Open,
    /// `--auth sigv4`, with the matrix's key allowed everything.
    SigV4,
}

fn start_server(auth: Auth) -> (ServerProcess, tempfile::TempDir) {
    let data_dir = tempfile::tempdir().unwrap();
    let credentials = data_dir.path().join("credentials.toml");
    std::fs::write(
        &credentials,
        format!(
            "[[keys]]\naccess_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \
             \"{SECRET_ACCESS_KEY}\"\nallow_queues = [\"*\"]\nallow_topics = [\"*\"]\nallow_actions = [\"*\"]\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &credentials,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let credentials = credentials.to_string_lossy().into_owned();
    let args: &[&str] = match auth {
        Auth::Open => &[],
        Auth::SigV4 => &["--auth", "sigv4", "--credentials", &credentials],
    };
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), args);
    (server, data_dir)
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs one client of the matrix against a fresh server; panics with its
/// output unless every step passed.
fn run_client(name: &str, auth: Auth, program: &str, args: &[&str]) {
    let Ok(clients) = std::env::var("ACKBOX_TEST_CLIENTS") else {
        eprintln!(
            "skipped: ACKBOX_TEST_CLIENTS is not set (run clients/setup.sh), so {name} is not \
             tested here"
        );
        return;
    };
    let clients = PathBuf::from(clients);
    let (server, _data_dir) = start_server(auth);
    let program = if program == "node" {
        PathBuf::from("node")
    } else {
        clients.join("venv/bin").join(program)
    };
    let output = Command::new(&program)
        .args(args)
        .current_dir(repository())
        .env("ACKBOX_ENDPOINT", server.url())
        .env(
            "ACKBOX_QUERY_MODEL",
            clients.join("query-model").to_string_lossy().as_ref(),
        )
        .env("NODE_PATH", clients.join("node/node_modules"))
        .env("ACKBOX_ACCESS_KEY_ID", ACCESS_KEY_ID)
        .env("ACKBOX_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
        .output()
        .unwrap_or_else(|error| panic!("{name}: {} does not run: {error}", program.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{name} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let passed = stdout
        .lines()
        .find(|line| line.starts_with("passed: "))
        .unwrap_or_else(|| panic!("{name} did not report passing:\n{stdout}"));
    let steps = stdout
        .lines()
        .filter(|line| line.starts_with("ok "))
        .count();
    assert!(steps >= 12, "{name} ran only {steps} steps:\n{stdout}");
    eprintln!("{passed}; {steps} steps");
}

#[test]
fn boto3_over_json() {
    run_client(
        "boto3",
        Auth::Open,
        "python",
        &["clients/python/matrix.py", "boto3"],
    );
}

#[test]
fn botocore_forced_to_the_query_protocol() {
    run_client(
        "botocore (query protocol, signed)",
        Auth::SigV4,
        "python",
        &["clients/python/matrix.py", "botocore-query"],
    );
}

#[test]
fn the_aws_cli() {
    run_client(
        "awscli",
        Auth::Open,
        "python",
        &["clients/python/matrix.py", "awscli"],
    );
}

#[test]
fn boto3_sns_topics() {
    run_client(
        "boto3 sns (query protocol, signed)",
        Auth::SigV4,
        "python",
        &["clients/python/matrix.py", "boto3-sns"],
    );
}

#[test]
fn the_aws_cli_sns_commands() {
    run_client(
        "awscli sns",
        Auth::Open,
        "python",
        &["clients/python/matrix.py", "awscli-sns"],
    );
}

#[test]
fn the_aws_sdk_for_javascript_v3() {
    run_client(
        "@aws-sdk/client-sqs (signed)",
        Auth::SigV4,
        "node",
        &["clients/node/matrix.cjs"],
    );
}

#[tokio::test]
async fn the_aws_sdk_for_rust() {
    let (server, _data_dir) = start_server(Auth::SigV4);
    let sqs = sqs_client_with_key(&server.url(), ACCESS_KEY_ID, SECRET_ACCESS_KEY);

    let dlq = create_queue(&sqs, "matrix-rust-dlq").await;
    let dlq_arn = queue_arn(&sqs, &dlq).await;
    let url = sqs
        .create_queue()
        .queue_name("matrix-rust")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":1}}"#),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();

    let body = "héllo <&> \r\n \"quoted\"";
    sqs.send_message()
        .queue_url(&url)
        .message_body(body)
        .message_attributes(
            "kind",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("card")
                .build()
                .unwrap(),
        )
        .message_attributes(
            "blob",
            MessageAttributeValue::builder()
                .data_type("Binary")
                .binary_value(Blob::new(vec![0, 1, 255]))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let received = sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let message = &received.messages()[0];
    assert_eq!(message.body(), Some(body));
    let attributes = message.message_attributes().unwrap();
    assert_eq!(attributes["kind"].string_value(), Some("card"));
    assert_eq!(
        attributes["blob"].binary_value().map(Blob::as_ref),
        Some(&[0, 1, 255][..])
    );
    assert_eq!(
        message.attributes().unwrap()[&MessageSystemAttributeName::ApproximateReceiveCount],
        "1"
    );

    // Back at once; the second receive exceeds maxReceiveCount.
    sqs.change_message_visibility()
        .queue_url(&url)
        .receipt_handle(message.receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let again = sqs.receive_message().queue_url(&url).send().await.unwrap();
    assert!(again.messages().is_empty(), "{again:?}");
    let dead = sqs
        .receive_message()
        .queue_url(&dlq)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert_eq!(dead.messages()[0].body(), Some(body));

    let entries = (0..5).map(|i| {
        SendMessageBatchRequestEntry::builder()
            .id(format!("e{i}"))
            .message_body(format!("batch {i}"))
            .build()
            .unwrap()
    });
    let sent = sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(entries.collect()))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.successful().len(), 5);
    let batch = sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let mut bodies: Vec<&str> = batch.messages().iter().filter_map(|m| m.body()).collect();
    bodies.sort_unstable();
    assert_eq!(
        bodies,
        ["batch 0", "batch 1", "batch 2", "batch 3", "batch 4"]
    );
    let deletes = batch.messages().iter().enumerate().map(|(i, m)| {
        DeleteMessageBatchRequestEntry::builder()
            .id(format!("d{i}"))
            .receipt_handle(m.receipt_handle().unwrap())
            .build()
            .unwrap()
    });
    let deleted = sqs
        .delete_message_batch()
        .queue_url(&url)
        .set_entries(Some(deletes.collect()))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.successful().len(), 5);

    let missing = sqs
        .get_queue_url()
        .queue_name("matrix-missing")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        error_code(missing),
        "AWS.SimpleQueueService.NonExistentQueue"
    );

    let fifo = sqs
        .create_queue()
        .queue_name("matrix-rust.fifo")
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let mut ids = Vec::new();
    for (body, dedup) in [("first", "a"), ("second", "b"), ("first again", "a")] {
        let sent = sqs
            .send_message()
            .queue_url(&fifo)
            .message_body(body)
            .message_group_id("order-1")
            .message_deduplication_id(dedup)
            .send()
            .await
            .unwrap();
        ids.push(sent.message_id.unwrap());
    }
    assert_eq!(ids[2], ids[0], "a duplicate gets the first send's id");
    let ordered = sqs
        .receive_message()
        .queue_url(&fifo)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let bodies: Vec<&str> = ordered.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["first", "second"]);
}
