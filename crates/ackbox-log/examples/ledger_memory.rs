//! How much memory the ledger takes per queued message: applies N sends
//! (default 1,000,000) and prints the process's resident set before and after.
//! `cargo run --release -p ackbox-log --example ledger_memory -- 5000000`
#![allow(missing_docs)]

use ackbox_log::ledger::Ledger;
use ackbox_log::log::LogPosition;
use ackbox_log::record::{Record, SentMessage};

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn main() {
    let count: u64 = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(1_000_000);
    let before = resident_bytes();
    let mut ledger = Ledger::new(1);
    for seq in ledger.allocate_seqs(count) {
        let record = Record::Sent(SentMessage {
            queue: 1,
            seq,
            sent_at: seq as i64,
            visible_at: seq as i64,
            ..SentMessage::default()
        });
        let position = LogPosition {
            segment: (seq / 200_000) as u32,
            offset: (seq % 200_000 * 330) as u32,
            len: 330,
        };
        ledger.apply(&record, position);
    }
    let after = resident_bytes();
    println!(
        "{count} messages: resident {} → {} MiB, {} bytes per message",
        before >> 20,
        after >> 20,
        (after - before) / count.max(1)
    );
}
