//! W1 and W2's shapes against `StandardQueues` alone, in one process, to
//! see what the log store costs per message before HTTP is added:
//! 4 producers send durable batches of 10 × 256 B for a while (W1), the log
//! is closed and replayed (a restart), then 4 consumers receive 10 and
//! delete them until the queue is empty (W2).
//! Prints messages per second and the process's CPU per message (user +
//! system, from `/proc/self/stat`).
//!
//! `cargo run --release -p ackbox-log --example queues_load -- [seconds] [dir]`
//! (the directory defaults to a fresh one under `/var/tmp`, so the fsyncs
//! reach a disk).
#![allow(missing_docs)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use ackbox_log::group_commit::GroupCommitOptions;
use ackbox_log::log::LogOptions;
use ackbox_log::queues::{Outgoing, ReceiveRequest, StandardQueues};
use ackbox_log::record::Content;

const QUEUE: u64 = 1;
const WORKERS: usize = 4;
const BATCH: usize = 10;

/// The process's CPU time so far (user + system).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat(5): 11 and 12 after ')'.
    // The kernel counts them in USER_HZ, 100 on Linux.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

fn report(name: &str, messages: u64, elapsed: Duration, cpu: Duration) {
    println!(
        "{name}: {messages} messages in {:.2} s = {:.0} msg/s, {:.2} µs CPU per message",
        elapsed.as_secs_f64(),
        messages as f64 / elapsed.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / messages.max(1) as f64
    );
}

fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let scratch = tempfile::tempdir_in("/var/tmp").expect("a scratch directory");
    let dir = std::env::args()
        .nth(2)
        .map_or_else(|| scratch.path().to_owned(), PathBuf::from);
    let (queues, _) =
        StandardQueues::open(&dir, LogOptions::default(), GroupCommitOptions::default())
            .expect("the log opens");
    let outgoing = || -> Vec<Outgoing> {
        (0..BATCH)
            .map(|_| Outgoing {
                content: Content {
                    message_id: "0d6c8f2e-8a3b-4c7e-9a41-3b5f0e2d9c11".to_owned(),
                    body: "x".repeat(256),
                    md5_of_body: "4c2b1e8f0a9d7c6b5a4f3e2d1c0b9a88".to_owned(),
                    sender_id: "AIDAEXAMPLE".to_owned(),
                    ..Content::default()
                },
                sent_at: now_ms(),
                visible_at: now_ms(),
            })
            .collect()
    };

    let sent = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (started, cpu) = (Instant::now(), cpu_time());
    thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let (_, lsn) = queues.send(QUEUE, outgoing()).expect("a send");
                    queues.commit().wait_durable(lsn).expect("a durable send");
                    sent.fetch_add(BATCH as u64, Ordering::Relaxed);
                }
            });
        }
        thread::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    let sent = sent.into_inner();
    report(
        "W1 (durable sends)",
        sent,
        started.elapsed(),
        cpu_time() - cpu,
    );

    // A restart: everything W1 sent is rebuilt from the log.
    drop(queues.close());
    let started = Instant::now();
    let (queues, recovery) =
        StandardQueues::open(&dir, LogOptions::default(), GroupCommitOptions::default())
            .expect("the log reopens");
    println!(
        "restart: {} records replayed in {:.2} s, {} messages queued",
        recovery.records,
        started.elapsed().as_secs_f64(),
        queues.counts(QUEUE, now_ms()).visible
    );

    let received = AtomicU64::new(0);
    let (started, cpu) = (Instant::now(), cpu_time());
    thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                loop {
                    let now = now_ms();
                    let request = ReceiveRequest {
                        max: BATCH,
                        visibility_ms: 30_000,
                        ..ReceiveRequest::default()
                    };
                    let deliveries = queues
                        .receive(QUEUE, now, &request)
                        .expect("a receive")
                        .deliveries;
                    if deliveries.is_empty() {
                        return;
                    }
                    let leases: Vec<(u64, u32)> = deliveries
                        .iter()
                        .map(|delivery| (delivery.message.seq, delivery.message.receive_count))
                        .collect();
                    queues.delete(QUEUE, &leases, now).expect("a delete");
                    received.fetch_add(leases.len() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    report(
        "W2 (receive + delete)",
        received.into_inner(),
        started.elapsed(),
        cpu_time() - cpu,
    );
    drop(queues.close());
}
