//! A full disk under the real binary, on each embedded store: `ackbox
//! serve` on a 6 MiB tmpfs, holding 3 MiB in reserve (a lease rewrites a
//! large message's pages in SQLite's WAL), takes sends until the disk is
//! full; then a send is answered `ServiceUnavailable`
//! (which every SQS client retries), never a hang or an internal error;
//! `/healthz` and `ackbox_store_disk_full` say the disk is full; receives,
//! deletes and visibility changes go on in the released reserve while sends
//! are refused; once the filesystem has room again, sends are taken without
//! a restart; and every acknowledged message not deleted is there.
//!
//! Mounting a tmpfs needs root (as `.ci/run` runs); elsewhere the test says
//! it is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ackbox_testkit::client::{call_json, call_raw};
use ackbox_testkit::process::{ServerProcess, free_port};
use serde_json::{Value, json};

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");

/// A tmpfs mounted for the test's life.
struct SmallDisk {
    mount_point: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    /// A tmpfs of `size` (as `mount -o size=` takes it), or `None` when this
    /// process may not mount one.
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mount_point = dir.path().to_owned();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount_point)
            .output()
            .ok()?;
        if !mounted.status.success() {
            eprintln!(
                "skipped: cannot mount a tmpfs here (needs root): {}",
                String::from_utf8_lossy(&mounted.stderr)
            );
            return None;
        }
        Some(Self {
            mount_point,
            _dir: dir,
        })
    }

    fn resize(&self, size: &str) {
        let remounted = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.mount_point)
            .status()
            .unwrap();
        assert!(remounted.success(), "remount to {size}");
    }

    fn path(&self) -> &Path {
        &self.mount_point
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("--lazy")
            .arg(&self.mount_point)
            .status();
    }
}

async fn sqs(endpoint: &str, action: &str, body: Value) -> (u16, Value) {
    call_json(endpoint, &format!("AmazonSQS.{action}"), &body).await
}

async fn healthz(endpoint: &str) -> (u16, String) {
    let reply = call_raw(endpoint, "GET", "/healthz", &[], b"").await;
    (
        reply.status,
        String::from_utf8_lossy(&reply.body).into_owned(),
    )
}

async fn disk_full_gauge(endpoint: &str) -> String {
    let reply = call_raw(endpoint, "GET", "/metrics", &[], b"").await;
    String::from_utf8_lossy(&reply.body)
        .lines()
        .find(|line| line.starts_with("ackbox_store_disk_full "))
        .unwrap_or("ackbox_store_disk_full missing")
        .to_owned()
}

async fn send(endpoint: &str, queue_url: &str, body: &str) -> (u16, Value) {
    sqs(
        endpoint,
        "SendMessage",
        json!({"QueueUrl": queue_url, "MessageBody": body}),
    )
    .await
}

async fn receive(endpoint: &str, queue_url: &str, visibility_seconds: u32) -> (u16, Value) {
    sqs(
        endpoint,
        "ReceiveMessage",
        json!({"QueueUrl": queue_url, "MaxNumberOfMessages": 10, "VisibilityTimeout": visibility_seconds}),
    )
    .await
}

/// Deletes `message`, which must be answered 200 though the disk is full.
async fn delete_on_full_disk(store: &str, endpoint: &str, queue_url: &str, message: &Value) {
    let (status, answer) = sqs(
        endpoint,
        "DeleteMessage",
        json!({"QueueUrl": queue_url, "ReceiptHandle": message["ReceiptHandle"]}),
    )
    .await;
    assert_eq!(
        status, 200,
        "--store {store}: a delete on a full disk: {answer}"
    );
}

/// Sends `body` until it is taken, within 10 s: the store takes its
/// reserve back at most once a second, without a restart.
async fn send_once_there_is_room(store: &str, endpoint: &str, queue_url: &str, body: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, answer) = send(endpoint, queue_url, body).await;
        if status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "--store {store}: sends did not resume without a restart: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn a_full_disk_refuses_sends_with_service_unavailable_until_it_has_room(store: &str) {
    let Some(disk) = SmallDisk::mount("6m") else {
        return;
    };
    let data_dir = disk.path().join("data");
    let server = ServerProcess::start(
        BINARY.as_ref(),
        &data_dir,
        free_port(),
        &["--store", store, "--disk-reserve-mib", "3"],
    );
    let endpoint = server.url();
    let (status, created) = sqs(&endpoint, "CreateQueue", json!({"QueueName": "full"})).await;
    assert_eq!(status, 200, "{created}");
    let queue_url = created["QueueUrl"].as_str().unwrap().to_owned();
    let filler = "x".repeat(100_000);
    let mut acknowledged = Vec::new();
    let refusal = loop {
        let body = format!("{}-{filler}", acknowledged.len());
        let started = Instant::now();
        let (status, answer) = send(&endpoint, &queue_url, &body).await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a send on a full disk hung"
        );
        if status != 200 {
            break (status, answer);
        }
        acknowledged.push(body);
        assert!(acknowledged.len() < 200, "6 MiB never filled");
    };
    assert_eq!(
        (refusal.0, refusal.1["__type"].as_str()),
        (503, Some("com.amazonaws.sqs#ServiceUnavailable")),
        "--store {store}: {}",
        refusal.1
    );
    assert!(acknowledged.len() > 5, "{}", acknowledged.len());
    println!(
        "--store {store}: {} sends acknowledged before the disk was full",
        acknowledged.len()
    );
    let (status, health) = healthz(&endpoint).await;
    assert_eq!(status, 503, "--store {store}: {health}");
    assert!(health.contains("disk is full"), "{health}");
    assert_eq!(disk_full_gauge(&endpoint).await, "ackbox_store_disk_full 1");

    // The reserve went to the store: receives, visibility changes and
    // deletes, which write too, go on while sends are refused.
    let (status, answer) = receive(&endpoint, &queue_url, 30).await;
    assert_eq!(
        status, 200,
        "--store {store}: a receive on a full disk: {answer}"
    );
    let leased = answer["Messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(leased.len(), 10, "{answer}");
    for message in &leased[..5] {
        delete_on_full_disk(store, &endpoint, &queue_url, message).await;
        let body = message["Body"].as_str().unwrap();
        acknowledged.retain(|sent| sent != body);
    }
    for message in &leased[5..] {
        let (status, answer) = sqs(
            &endpoint,
            "ChangeMessageVisibility",
            json!({"QueueUrl": queue_url, "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 0}),
        )
        .await;
        assert_eq!(
            status, 200,
            "--store {store}: a visibility change on a full disk: {answer}"
        );
    }
    let (status, _) = send(&endpoint, &queue_url, "still full").await;
    assert_eq!(
        status, 503,
        "--store {store}: a send while the reserve is given away"
    );

    disk.resize("64m");
    let after = format!("{}-after", acknowledged.len());
    send_once_there_is_room(store, &endpoint, &queue_url, &after).await;
    acknowledged.push(after);
    assert_eq!(healthz(&endpoint).await.0, 200);
    assert_eq!(disk_full_gauge(&endpoint).await, "ackbox_store_disk_full 0");

    let mut received = Vec::new();
    for _ in 0..100 {
        let (status, answer) = receive(&endpoint, &queue_url, 300).await;
        assert_eq!(status, 200, "{answer}");
        let Some(messages) = answer["Messages"].as_array().filter(|m| !m.is_empty()) else {
            break;
        };
        received.extend(
            messages
                .iter()
                .map(|message| message["Body"].as_str().unwrap().to_owned()),
        );
    }
    received.sort_unstable();
    acknowledged.sort_unstable();
    assert_eq!(
        received.len(),
        acknowledged.len(),
        "--store {store}: every acknowledged message, once"
    );
    assert_eq!(received, acknowledged);
    drop(server);
}

#[tokio::test]
async fn the_default_store_refuses_sends_on_a_full_disk_until_it_has_room() {
    a_full_disk_refuses_sends_with_service_unavailable_until_it_has_room("sqlite").await;
}

#[tokio::test]
async fn the_log_store_refuses_sends_on_a_full_disk_until_it_has_room() {
    a_full_disk_refuses_sends_with_service_unavailable_until_it_has_room("log").await;
}

/// Fills what is left of `disk` with a file of its own, as another program
/// on the same filesystem would; the file, to be removed later.
fn fill_from_outside(disk: &SmallDisk) -> PathBuf {
    use std::io::Write;
    let path = disk.path().join("someone-else");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    // What is left of the last chunk, page by page.
    while file.write_all(&chunk[..4_096]).is_ok() {}
    path
}

/// Another program fills the disk: the first write to meet it may be a
/// receive, not a send. The store must give its reserve up then too, so
/// that receives and deletes go on while sends wait for room.
async fn a_disk_filled_by_another_program_still_takes_receives_and_deletes(store: &str) {
    const SENT: usize = 20;
    let Some(disk) = SmallDisk::mount("6m") else {
        return;
    };
    let server = ServerProcess::start(
        BINARY.as_ref(),
        &disk.path().join("data"),
        free_port(),
        &["--store", store, "--disk-reserve-mib", "3"],
    );
    let endpoint = server.url();
    let (status, created) = sqs(&endpoint, "CreateQueue", json!({"QueueName": "q"})).await;
    assert_eq!(status, 200, "{created}");
    let queue_url = created["QueueUrl"].as_str().unwrap().to_owned();
    for index in 0..SENT {
        let (status, answer) = send(&endpoint, &queue_url, &format!("m{index}")).await;
        assert_eq!(status, 200, "{answer}");
    }
    let filler = fill_from_outside(&disk);
    // Receives that give their leases straight back write a record each
    // time, until one meets the full disk; the next ones must go through.
    let mut refused = 0;
    let mut taken_after_refusal = false;
    for _ in 0..500 {
        let (status, answer) = receive(&endpoint, &queue_url, 0).await;
        match status {
            200 if refused > 0 => {
                taken_after_refusal = true;
                break;
            }
            200 => {}
            503 => {
                refused += 1;
                assert!(
                    refused <= 3,
                    "--store {store}: receives stay refused on a disk another program filled: \
                     {answer}"
                );
            }
            _ => panic!("--store {store}: a receive on a full disk: {status} {answer}"),
        }
    }
    assert!(
        taken_after_refusal,
        "--store {store}: the receives never met the full disk"
    );
    let mut deleted = 0;
    while deleted < SENT {
        let (status, answer) = receive(&endpoint, &queue_url, 60).await;
        assert_eq!(status, 200, "--store {store}: {answer}");
        let messages = answer["Messages"].as_array().cloned().unwrap_or_default();
        assert!(
            !messages.is_empty(),
            "--store {store}: {deleted} of {SENT} found"
        );
        for message in &messages {
            delete_on_full_disk(store, &endpoint, &queue_url, message).await;
            deleted += 1;
        }
    }
    std::fs::remove_file(filler).unwrap();
    send_once_there_is_room(store, &endpoint, &queue_url, "room again").await;
    drop(server);
}

#[tokio::test]
async fn the_default_store_takes_receives_on_a_disk_another_program_filled() {
    a_disk_filled_by_another_program_still_takes_receives_and_deletes("sqlite").await;
}

#[tokio::test]
async fn the_log_store_takes_receives_on_a_disk_another_program_filled() {
    a_disk_filled_by_another_program_still_takes_receives_and_deletes("log").await;
}
