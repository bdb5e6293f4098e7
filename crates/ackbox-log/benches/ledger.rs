//! What a standard queue's message costs the log store outside the kernel:
//! encoding its records, applying them to the ledger, and appending them to
//! a segment (page cache, no fsync; the disk's share is the group commit's).
//! Compare with the embedded SQLite store's 10–25 µs of server CPU per
//! message (README, Performance).
#![allow(missing_docs)]

mod support;

use std::hint::black_box;

use ackbox_log::ledger::Ledger;
use ackbox_log::log::{Log, LogOptions};
use ackbox_log::record::{Record, SentMessage};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

const BATCH: u64 = 10;
const QUEUE: u64 = 1;

fn sent(seq: u64, now: i64) -> Record {
    Record::Sent(SentMessage {
        queue: QUEUE,
        seq,
        sent_at: now,
        visible_at: now,
        content: support::content(),
        ..SentMessage::default()
    })
}

/// Send, receive and delete a batch of 10, as W1 and W2 do, on a queue
/// holding `backlog` messages: records encoded and appended, ledger updated.
fn lifecycle(criterion: &mut Criterion, backlog: u64) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut log, _) =
        Log::open(dir.path(), LogOptions::default(), |_, _| Ok(())).expect("a fresh log");
    let mut ledger = Ledger::new(1);
    let mut encoded: Vec<Vec<u8>> = Vec::new();
    let fill = |log: &mut Log, ledger: &mut Ledger, count: u64, now: i64| {
        let records: Vec<Record> = ledger
            .allocate_seqs(count)
            .map(|seq| sent(seq, now))
            .collect();
        ledger.append_to(log, &records).expect("an append");
    };
    for _ in 0..backlog / 1_000 {
        fill(&mut log, &mut ledger, 1_000, 0);
    }
    let mut now = 1;
    criterion.bench_function(
        &format!("send+receive+delete of 10, {backlog} queued"),
        |bench| {
            bench.iter(|| {
                now += 1;
                fill(&mut log, &mut ledger, BATCH, now);
                // Receive 10 from the head (the backlog's oldest first) and lease them.
                let leased: Vec<u64> = ledger.deliverable(QUEUE, now, BATCH as usize);
                let leases: Vec<Record> = leased
                    .iter()
                    .map(|&seq| Record::Leased {
                        queue: QUEUE,
                        seq,
                        visible_at: now + 30_000,
                        receive_count: 1,
                        received_at: now,
                    })
                    .collect();
                ledger.append_to(&mut log, &leases).expect("an append");
                // Bodies are read back from the log for the answer.
                let positions: Vec<_> = leased
                    .iter()
                    .map(|&seq| ledger.message(QUEUE, seq).expect("a live message").position)
                    .collect();
                encoded = log.read_many(&positions).expect("the records");
                let deletes: Vec<Record> = leased
                    .iter()
                    .map(|&seq| Record::Deleted { queue: QUEUE, seq })
                    .collect();
                ledger.append_to(&mut log, &deletes).expect("an append");
                black_box(&encoded);
            });
        },
    );
    drop(log);
}

fn codec(criterion: &mut Criterion) {
    let record = sent(42, 1_700_000_000_000);
    let bytes = record.to_bytes();
    criterion.bench_function("encode a 256 B send record", |bench| {
        let mut out = Vec::with_capacity(1024);
        bench.iter(|| {
            out.clear();
            black_box(&record).encode(&mut out);
            black_box(&out);
        });
    });
    criterion.bench_function("decode a 256 B send record", |bench| {
        bench.iter(|| Record::decode(black_box(&bytes)));
    });
    criterion.bench_function("apply 10 sends to a ledger", |bench| {
        bench.iter_batched(
            || {
                let ledger = Ledger::new(1);
                let records: Vec<Record> = (1..=BATCH).map(|seq| sent(seq, 0)).collect();
                (ledger, records)
            },
            |(mut ledger, records)| {
                for (offset, record) in records.iter().enumerate() {
                    let position = ackbox_log::log::LogPosition {
                        segment: 1,
                        offset: offset as u32,
                        len: 0,
                    };
                    ledger.apply(record, position);
                }
                ledger
            },
            BatchSize::SmallInput,
        );
    });
}

fn lifecycles(criterion: &mut Criterion) {
    lifecycle(criterion, 0);
    lifecycle(criterion, 1_000_000);
}

criterion_group!(benches, codec, lifecycles);
criterion_main!(benches);
