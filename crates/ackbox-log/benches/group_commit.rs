//! W1's shape against the log alone: 4 producers (and 1 and 8), each with
//! one batch of 10 256 B sends in flight, every batch answered only after an
//! `fdatasync` covers it. The time reported is per batch across all producers, so
//! 10 ÷ it is the log's durable send rate on this disk — the ceiling a log
//! store would give W1 before HTTP, JSON and the load generator take their
//! share. `/var/tmp` is used rather than a tmpfs so the fsyncs reach a disk.
#![allow(missing_docs)]

mod support;

use std::thread;
use std::time::{Duration, Instant};

use ackbox_log::group_commit::{GroupCommit, GroupCommitOptions};
use ackbox_log::log::{Log, LogOptions};
use ackbox_log::record::{Record, SentMessage};
use criterion::{Criterion, criterion_group, criterion_main};

const BATCH: u64 = 10;

fn batch(first_seq: u64) -> Vec<Vec<u8>> {
    (first_seq..first_seq + BATCH)
        .map(|seq| {
            Record::Sent(SentMessage {
                queue: 1,
                seq,
                content: support::content(),
                ..SentMessage::default()
            })
            .to_bytes()
        })
        .collect()
}

fn durable_sends(criterion: &mut Criterion) {
    let dir = tempfile::tempdir_in("/var/tmp").expect("a temporary directory on disk");
    let (log, _) = Log::open(dir.path(), LogOptions::default(), |_, _| Ok(())).expect("a log");
    let commit = GroupCommit::start(log, GroupCommitOptions::default()).expect("a flusher");
    let mut group = criterion.benchmark_group("group commit");
    group.measurement_time(Duration::from_secs(5));
    // 4 is W1's shape; 1 and 8 show whether the rate follows the number of
    // batches in flight (the fsync's latency bounds it) or not (the CPU does).
    for producers in [1, 4, 8] {
        let name = format!("durable batch of 10, {producers} producers");
        group.bench_function(name, |bench| {
            bench.iter_custom(|iterations| run_producers(&commit, producers, iterations));
        });
    }
    group.finish();
    drop(commit.close());
}

/// `producers` threads, each sending its share of `iterations` batches one
/// at a time; the time per batch across all of them, scaled to `iterations`.
fn run_producers(commit: &GroupCommit, producers: u64, iterations: u64) -> Duration {
    let per_producer = iterations.div_ceil(producers);
    let started = Instant::now();
    thread::scope(|scope| {
        for producer in 0..producers {
            scope.spawn(move || {
                for round in 0..per_producer {
                    let first_seq = (producer * per_producer + round) * BATCH;
                    let payloads = batch(first_seq);
                    let (_, lsn) = commit
                        .append(payloads.iter().map(Vec::as_slice), first_seq + BATCH)
                        .expect("an append");
                    commit.wait_durable(lsn).expect("a durable batch");
                }
            });
        }
    });
    started.elapsed() * u32::try_from(iterations).unwrap_or(u32::MAX)
        / u32::try_from(per_producer * producers).unwrap_or(u32::MAX)
}

criterion_group!(benches, durable_sends);
criterion_main!(benches);
