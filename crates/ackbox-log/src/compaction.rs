//! Reclaiming segments: removing those that hold nothing live, and copying
//! forward the few live messages that would otherwise pin an old segment —
//! and every segment after it — on disk.
//!
//! Only a prefix of segments is ever removed: a later segment may hold a
//! lease of a message whose send is in an earlier one. The oldest segment
//! that still holds a live send is copied forward only when little of it is
//! live (by default at most a tenth of its sends), so a deep backlog at a
//! queue's head is left where it is instead of being rewritten again and
//! again; a message delayed, retried or forgotten for days costs one copy.
//!
//! Crash safety comes from the order: the copies are appended and fsync'd
//! before any segment is removed, and segments are removed oldest first. A
//! crash between the two leaves both the original and the copy, and replay
//! keeps the later one; a crash mid-removal leaves a shorter prefix removed.

use crate::ledger::Ledger;
use crate::log::{Detached, Log, LogError, LogPosition};
use crate::record::Record;

/// When a segment is worth copying out of.
#[derive(Debug, Clone, Copy)]
pub struct CompactionPolicy {
    /// Copy the oldest live segment forward only when at most this share of
    /// the sends in it are live.
    pub max_live_share: f64,
    /// Copy at most this many messages in one call, so a caller holding the
    /// log is not held for long.
    pub max_copies: u64,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        Self {
            max_live_share: 0.1,
            max_copies: 10_000,
        }
    }
}

/// What one [`compact`] call did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CompactionReport {
    /// Live messages appended again, as sends with their current state.
    pub copied: u64,
    /// Segment files removed.
    pub removed: u64,
}

/// Removes every segment before the oldest live one, copying forward the
/// live messages of the oldest segments while the policy allows, and fsyncs
/// the copies before anything they replace is removed.
pub fn compact(
    log: &mut Log,
    ledger: &mut Ledger,
    policy: CompactionPolicy,
) -> Result<CompactionReport, LogError> {
    let (report, detached) = compact_detaching(log, ledger, policy)?;
    detached.remove()?;
    Ok(report)
}

/// [`compact`], leaving the files of the segments it frees to the caller
/// (to unlink once it no longer holds the log and the ledger).
pub fn compact_detaching(
    log: &mut Log,
    ledger: &mut Ledger,
    policy: CompactionPolicy,
) -> Result<(CompactionReport, Detached), LogError> {
    let mut report = CompactionReport::default();
    let mut detached = Detached::default();
    // Copies land from here on; copying them again would only churn.
    let copies_from = log.active_segment();
    loop {
        let active = log.active_segment();
        let oldest_live = ledger.oldest_live_segment().unwrap_or(active).min(active);
        let freed = log.detach_segments_before(oldest_live);
        report.removed += freed.len() as u64;
        detached.extend(freed);
        ledger.forget_segments_before(oldest_live);
        if oldest_live >= copies_from {
            return Ok((report, detached));
        }
        let live = ledger.live_in(oldest_live);
        let share = live as f64 / ledger.sends_in(oldest_live).max(1) as f64;
        if share > policy.max_live_share || report.copied + live > policy.max_copies {
            return Ok((report, detached));
        }
        let floor = log.seq_floor_of(oldest_live + 1).unwrap_or(u64::MAX);
        let mut messages = ledger.live_before(oldest_live + 1, floor);
        if (messages.len() as u64) < live {
            // A floor that does not bound them (a header rewritten after a
            // torn creation): walk everything rather than copy too little.
            messages = ledger.live_before(oldest_live + 1, u64::MAX);
        }
        let positions: Vec<_> = messages
            .iter()
            .map(|(_, _, state)| state.position)
            .collect();
        let copied = messages.len() as u64;
        let mut copies = log
            .read_many(&positions)?
            .iter()
            .zip(&messages)
            .map(|(payload, &(queue, seq, state))| {
                copy_forward(ledger, queue, seq, state.position, payload)
            })
            .collect::<Result<Vec<_>, _>>()?;
        // A purge not yet swept may be recorded in a segment about to go:
        // without its mark, the copies of what it purged would come back.
        copies.extend(
            ledger
                .purge_marks()
                .map(|(queue, through_seq)| Record::Purged { queue, through_seq }),
        );
        ledger.append_to(log, &copies)?;
        log.sync()?;
        report.copied += copied;
    }
}

/// Message `seq` of `queue` as a send record carrying its current state:
/// what compaction appends again. `payload` is the record at `position`,
/// its send or the move that brought it.
pub fn copy_forward(
    ledger: &Ledger,
    queue: u64,
    seq: u64,
    position: LogPosition,
    payload: &[u8],
) -> Result<Record, LogError> {
    let damaged = |reason: String| LogError::Damaged {
        segment: u64::from(position.segment),
        offset: u64::from(position.offset),
        reason,
    };
    let record = Record::decode(payload).map_err(|error| damaged(error.to_string()))?;
    let Some(mut message) = record.into_message() else {
        return Err(damaged(
            "a live message's position holds neither a send nor a move".to_owned(),
        ));
    };
    if !ledger.stamp(queue, seq, &mut message) {
        return Err(damaged(format!(
            "message {seq} of queue {queue} is not live"
        )));
    }
    Ok(Record::Sent(message))
}
