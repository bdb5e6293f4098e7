//! The append-only message log that `--store log` keeps standard queues
//! in, in place of SQLite's B-trees (see `docs/storage.md`, "What a
//! message costs the embedded store").
//!
//! SQLite logs whole 4 KiB pages and keeps three B-trees per message, so a
//! lease rewrites two pages and a message costs the broker 10–25 µs of CPU.
//! Here a send is one record with the whole message, a lease or a delete a
//! record of a few dozen bytes, all fsync'd by one group commit, and each
//! queue's order and leases live in memory, rebuilt from the log at start.
//!
//! This crate is the log and the ledger; `ackbox_engine::store::log::LogStore`
//! wires them into the broker's `Store`, with SQLite beside them for
//! queues, FIFO queues and move tasks.
//!
//! # Layout
//! - [`frame`]: one record's framing and checksum; what counts as a torn tail.
//! - [`disk`]: the filesystem the log writes through, as a seam: the real
//!   one, or (feature `disk-model`) a disk that loses power, for tests.
//! - [`log`]: segment files: append, fsync, recover, read back, remove.
//! - [`record`]: the records about standard queues and their binary form.
//! - [`ledger`]: what the records add up to: live messages, receive order,
//!   leases, and which segments hold nothing live.
//! - [`compaction`]: removing what holds nothing live, copying forward the
//!   few live messages that pin old segments.
//! - [`queues`]: standard-queue semantics over both: send, receive under a
//!   lease (with retention and dead-letter moves), delete, change
//!   visibility, nack with failure reports, retention's sweep, move-task
//!   steps, peek, purge.
//! - [`group_commit`]: callers append; a flusher thread covers them all with
//!   one `fdatasync` and answers whoever waits.
//!
//! # Example
//! ```
//! use ackbox_log::ledger::Ledger;
//! use ackbox_log::log::{Log, LogOptions};
//! use ackbox_log::record::{Content, Record, SentMessage};
//!
//! let dir = tempfile::tempdir()?;
//! let (mut log, recovery) = Log::open(dir.path(), LogOptions::default(), |_, _| Ok(()))?;
//! let mut ledger = Ledger::new(recovery.seq_floor);
//! let seq = ledger.allocate_seqs(1).start;
//! let content = Content { body: "hello".into(), ..Content::default() };
//! let sent = Record::Sent(SentMessage { queue: 1, seq, content, ..SentMessage::default() });
//! ledger.append_to(&mut log, &[sent])?;
//! log.sync()?;
//! assert_eq!(ledger.deliverable(1, 0, 10), vec![seq]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod compaction;
pub mod disk;
pub mod frame;
pub mod group_commit;
pub mod ledger;
pub mod log;
pub mod queues;
pub mod record;
