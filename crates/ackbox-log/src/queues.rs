//! Standard-queue semantics over the log: send, receive under a lease
//! (dropping what is past retention and moving what was received too often
//! to the dead-letter queue, in one record per move), delete and change
//! visibility with the embedded store's lease rules, nacks with failure
//! reports, retention's sweep, and purge.
//!
//! Each operation decides, appends its records and applies them to the
//! ledger under one lock, so the ledger and the log agree on the order of
//! everything; only the wait for the disk happens outside it. A send's
//! caller gets an LSN to wait on ([`GroupCommit::when_durable`]) before it
//! acknowledges; leases, deletes and visibility changes are not waited for
//! (a crash that loses one only delivers the message again).
//!
//! Move tasks' steps are here; their progress (the cursor, the counts) is
//! the caller's to keep, as is the thread that runs compaction (the log
//! store's, in `ackbox-engine`).
//!
//! One file though it is long: each operation decides, appends and applies
//! under the same lock, and that order is the crash argument; split, it would
//! have to be read across files to be checked.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use ackbox_core::receive_policy::{Fate, ReceivePolicy, nack_dead_letters};
use ackbox_core::visibility_change::{self, VisibilityChange};

use crate::compaction::{self, CompactionPolicy, CompactionReport};
use crate::disk::{Disk, RealDisk};
use crate::group_commit::{CommitError, GroupCommit, GroupCommitOptions, Lsn};
use crate::ledger::{Ledger, QueueCounts};
use crate::log::{Log, LogError, LogOptions, LogPosition, Recovery};
use crate::record::{Content, DecodeError, Failures, Record, SentMessage};

/// A message to send, and when.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outgoing {
    /// The message.
    pub content: Content,
    /// Epoch milliseconds: retention counts from here.
    pub sent_at: i64,
    /// Epoch milliseconds before which it is not delivered (its delay's end).
    pub visible_at: i64,
}

/// A message handed to a receiver, with its new lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The message as sent, with the state this delivery gave it: its
    /// `receive_count` is the lease the receipt handle must name.
    pub message: SentMessage,
}

/// Where a queue's messages go once received too often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The dead-letter queue. The caller makes sure it still exists (queues
    /// are the metadata store's): a message is never moved into nothing.
    pub queue: u64,
    /// A message already received this many times moves instead of being
    /// delivered.
    pub max_receive_count: u32,
    /// The source queue's ARN, recorded on the moved message.
    pub source_arn: String,
}

/// What a receive asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReceiveRequest {
    /// Messages to lease at most.
    pub max: usize,
    /// How long each lease runs.
    pub visibility_ms: i64,
    /// The queue's redrive policy, if it has one.
    pub dead_letter: Option<DeadLetter>,
    /// Messages sent at or before this are past retention: dropped, not
    /// delivered.
    pub expire_sent_at_or_before: Option<i64>,
}

/// What a receive did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Received {
    /// The messages leased, in receive order.
    pub deliveries: Vec<Delivery>,
    /// Messages dropped as past retention.
    pub expired: u64,
    /// Messages moved to the dead-letter queue: each one's last failure
    /// class, if a consumer ever reported one.
    pub dead_lettered: Vec<Option<String>>,
}

/// What a nack asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Nack {
    /// When the message may be delivered again, if it stays.
    pub visible_at: i64,
    /// The failure's class and message, if the consumer reported one.
    pub failure: Option<(String, String)>,
    /// Move it to the dead-letter queue now, whatever its receive count.
    pub permanent: bool,
    /// The queue's redrive policy, if it has one.
    pub dead_letter: Option<DeadLetter>,
}

/// What a nack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackOutcome {
    /// The message stays, visible again at the time asked.
    Retried,
    /// The message moved to the dead-letter queue.
    DeadLettered,
    /// The message is gone, or was received again under a newer lease.
    NotAvailable,
    /// The lease had already ended.
    NotInFlight,
}

/// What a move task decides for one message of the queue it drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveChoice {
    /// Move it to this queue.
    MoveTo(u64),
    /// Leave it: the task's filter does not take it.
    Skip,
    /// Stop here (its destination is gone, say); the cursor stays before it.
    Stop,
}

/// What one step of a move task did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveStep {
    /// The messages moved: sequence number before, queue and sequence number
    /// after.
    pub moved: Vec<(u64, u64, u64)>,
    /// Messages the filter left.
    pub skipped: u64,
    /// The last sequence number judged (moved or skipped): the next step
    /// starts after it.
    pub cursor: u64,
    /// Stopped at a message someone is working on (leased): the task waits
    /// at it until the lease ends or it is deleted.
    pub held: bool,
    /// The LSN to wait on before recording the step's progress.
    pub lsn: Lsn,
    /// Messages the step read to judge (at most its limit): fewer than the
    /// limit means the walk reached its end.
    pub candidates: usize,
}

/// What a delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The message is gone.
    Deleted,
    /// It was already gone.
    AlreadyGone,
    /// Another receiver holds a newer lease on it: the message stays.
    LeasedToAnother,
}

/// What a visibility change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisibilityChanged {
    /// The lease now ends at the time asked (a lease that had ended while
    /// nobody received the message again is taken up again).
    Changed,
    /// The message is gone, or was received again under a newer lease.
    NotAvailable,
}

/// What [`StandardQueues::purge`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purge {
    /// Messages dropped at once.
    pub deleted: u64,
    /// More were purged, left for [`StandardQueues::sweep`].
    pub more: bool,
    /// The LSN to wait on.
    pub lsn: Lsn,
}

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum QueuesError {
    /// The log refused the records (the store is poisoned) or failed a read.
    #[error(transparent)]
    Commit(#[from] CommitError),
    /// Reading a record back failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The ledger's position for a message holds a record of another kind.
    #[error("the record at message {seq}'s position is not a send or a move")]
    NotAMessage {
        /// The message.
        seq: u64,
    },
    /// A record read back is not what the ledger says is there.
    #[error("the record of message {seq} does not decode: {source}")]
    Decode {
        /// The message.
        seq: u64,
        /// Why.
        source: DecodeError,
    },
}

impl QueuesError {
    /// Whether the disk was full: nothing was written, and the same call may
    /// succeed once space is freed.
    pub fn is_no_space(&self) -> bool {
        match self {
            Self::Commit(error) => error.log_error().is_no_space(),
            Self::Log(error) => error.is_no_space(),
            Self::NotAMessage { .. } | Self::Decode { .. } => false,
        }
    }
}

/// Message `seq` of `queue`, whose record is `payload`, as it goes into the
/// dead-letter queue under `new_seq`: its current state and failures, its
/// original send time, visible at once, and the source's ARN recorded.
fn dead_letter_copy(
    ledger: &Ledger,
    queue: u64,
    seq: u64,
    payload: &[u8],
    new_seq: u64,
    target: &DeadLetter,
    now: i64,
) -> Result<SentMessage, QueuesError> {
    let mut message = decode_message(payload, seq)?;
    ledger.stamp(queue, seq, &mut message);
    message.queue = target.queue;
    message.seq = new_seq;
    message.visible_at = now;
    message.dead_letter_source_arn = Some(target.source_arn.clone());
    Ok(message)
}

/// The message a live message's position holds (its send, or the move that
/// brought it to its queue).
fn decode_message(payload: &[u8], seq: u64) -> Result<SentMessage, QueuesError> {
    Record::decode(payload)
        .map_err(|source| QueuesError::Decode { seq, source })?
        .into_message()
        .ok_or(QueuesError::NotAMessage { seq })
}

/// Every standard queue's messages, in one log.
#[derive(Debug)]
pub struct StandardQueues {
    ledger: Mutex<Ledger>,
    commit: GroupCommit,
}

impl StandardQueues {
    /// Opens the log in `dir`, rebuilding the ledger from it.
    pub fn open(
        dir: &Path,
        log_options: LogOptions,
        commit_options: GroupCommitOptions,
    ) -> Result<(Self, Recovery), QueuesError> {
        Self::open_on(RealDisk::shared(), dir, log_options, commit_options)
    }

    /// [`StandardQueues::open`] on `disk`.
    pub fn open_on(
        disk: Arc<dyn Disk>,
        dir: &Path,
        log_options: LogOptions,
        commit_options: GroupCommitOptions,
    ) -> Result<(Self, Recovery), QueuesError> {
        let (log, ledger, recovery) = Ledger::recover_on(disk, dir, log_options)?;
        let commit = GroupCommit::start(log, commit_options)?;
        Ok((
            Self {
                ledger: Mutex::new(ledger),
                commit,
            },
            recovery,
        ))
    }

    /// The group commit behind the queues: wait on a send's LSN here.
    pub fn commit(&self) -> &GroupCommit {
        &self.commit
    }

    /// Stops the flusher after a last sync and hands the log back.
    pub fn close(self) -> Log {
        self.commit.close()
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends `records` and applies them, under the ledger's lock held by
    /// the caller, so the ledger and the log keep one order.
    fn append(&self, ledger: &mut Ledger, records: &[Record]) -> Result<Lsn, QueuesError> {
        if records.is_empty() {
            return Ok(0);
        }
        let (positions, lsn) = self.commit.append(records, ledger.next_seq())?;
        for (record, position) in records.iter().zip(positions) {
            ledger.apply(record, position);
        }
        Ok(lsn)
    }

    /// Sends `messages` to `queue`: their sequence numbers, and the LSN to
    /// wait on before acknowledging them.
    pub fn send(
        &self,
        queue: u64,
        messages: Vec<Outgoing>,
    ) -> Result<(Vec<u64>, Lsn), QueuesError> {
        let (mut seqs, lsn) = self.send_to_each(vec![(queue, messages)])?;
        Ok((seqs.pop().unwrap_or_default(), lsn))
    }

    /// Sends each queue its messages in one append — one group of frames —
    /// so that a killed process or a power cut keeps all of them or none (a
    /// topic's fan-out, a send and its archive copy): their sequence
    /// numbers, queue by queue, and the LSN to wait on before acknowledging
    /// them.
    pub fn send_to_each(
        &self,
        sends: Vec<(u64, Vec<Outgoing>)>,
    ) -> Result<(Vec<Vec<u64>>, Lsn), QueuesError> {
        let mut ledger = self.ledger();
        let total = sends
            .iter()
            .map(|(_, messages)| messages.len() as u64)
            .sum();
        let mut numbers = ledger.allocate_seqs(total);
        let mut seqs = Vec::with_capacity(sends.len());
        let mut records = Vec::with_capacity(total as usize);
        for (queue, messages) in sends {
            let queue_seqs: Vec<u64> = numbers.by_ref().take(messages.len()).collect();
            records.extend(
                messages
                    .into_iter()
                    .zip(&queue_seqs)
                    .map(|(message, &seq)| {
                        Record::Sent(SentMessage {
                            queue,
                            seq,
                            sent_at: message.sent_at,
                            visible_at: message.visible_at,
                            receive_count: 0,
                            first_received_at: None,
                            last_received_at: None,
                            dead_letter_source_arn: None,
                            failures: None,
                            redriven_by_task: None,
                            content: message.content,
                        })
                    }),
            );
            seqs.push(queue_seqs);
        }
        let lsn = self.append(&mut ledger, &records)?;
        Ok((seqs, lsn))
    }

    /// Leases up to `request.max` of `queue`'s visible messages, oldest
    /// visible first, a noisy tenant's after every quiet one's. On the way it drops what is past retention and moves
    /// what was received too often to the dead-letter queue (at most
    /// [`MAX_DROPPED_PER_RECEIVE`](ackbox_core::receive_policy::MAX_DROPPED_PER_RECEIVE) in one call, so one receive never holds
    /// every queue for a huge backlog; later receives do the rest).
    pub fn receive(
        &self,
        queue: u64,
        now: i64,
        request: &ReceiveRequest,
    ) -> Result<Received, QueuesError> {
        let mut ledger = self.ledger();
        let mut expired = Vec::new();
        let mut doomed = Vec::new();
        let mut leases = Vec::new();
        let mut leased = Vec::new();
        let mut policy = ReceivePolicy::new(
            request.expire_sent_at_or_before,
            request
                .dead_letter
                .as_ref()
                .map(|target| (target, i64::from(target.max_receive_count))),
        );
        // Quiet tenants first, then each noisy one (fair queues); leases are
        // applied after the walk, so no pass meets a message twice.
        let order = ledger.fair_order(queue, now);
        'receive: for pass in order.passes() {
            for (seq, state) in ledger.visible(queue, now) {
                if leased.len() >= request.max {
                    break 'receive;
                }
                if !pass.takes(ledger.tenant(queue, seq).as_ref()) {
                    continue;
                }
                match policy.fate(state.sent_at, i64::from(state.receive_count)) {
                    Fate::OutOfBudget => break 'receive,
                    Fate::Expire => {
                        expired.push(Record::Deleted { queue, seq });
                        continue;
                    }
                    Fate::DeadLetter(_) => {
                        doomed.push((seq, *state));
                        continue;
                    }
                    Fate::Lease => {}
                }
                leases.push(Record::Leased {
                    queue,
                    seq,
                    visible_at: now + request.visibility_ms.max(0),
                    receive_count: state.receive_count.saturating_add(1),
                    received_at: now,
                });
                leased.push((seq, state.position));
            }
        }
        let mut records = expired;
        let expired = records.len();
        let dead_lettered: Vec<Option<String>> = doomed
            .iter()
            .map(|&(seq, _)| {
                ledger
                    .failures(queue, seq)
                    .map(|failures| failures.last_class.clone())
                    .filter(|class| !class.is_empty())
            })
            .collect();
        if let Some(target) = &request.dead_letter
            && !doomed.is_empty()
        {
            let positions: Vec<_> = doomed.iter().map(|(_, state)| state.position).collect();
            let payloads = self.commit.read_log().read_many(&positions)?;
            let new_seqs = ledger.allocate_seqs(doomed.len() as u64);
            for ((payload, (seq, _)), new_seq) in payloads.iter().zip(&doomed).zip(new_seqs) {
                let message =
                    dead_letter_copy(&ledger, queue, *seq, payload, new_seq, target, now)?;
                records.push(Record::Moved {
                    from_queue: queue,
                    from_seq: *seq,
                    to: message,
                });
            }
        }
        records.extend(leases);
        self.append(&mut ledger, &records)?;
        let positions: Vec<_> = leased.iter().map(|&(_, position)| position).collect();
        let payloads = self.commit.read_log().read_many(&positions)?;
        let mut deliveries = Vec::with_capacity(payloads.len());
        for (payload, &(seq, _)) in payloads.iter().zip(&leased) {
            let mut message = decode_message(payload, seq)?;
            ledger.stamp(queue, seq, &mut message);
            deliveries.push(Delivery { message });
        }
        Ok(Received {
            deliveries,
            expired: expired as u64,
            dead_lettered,
        })
    }

    /// Deletes the messages `leases` name (sequence number and the receive
    /// count their receipt handle carries): a handle deletes its own lease's
    /// message, or one nobody holds now; never one received again since.
    pub fn delete(
        &self,
        queue: u64,
        leases: &[(u64, u32)],
        now: i64,
    ) -> Result<Vec<Deleted>, QueuesError> {
        let mut ledger = self.ledger();
        let mut records = Vec::new();
        let mut deleted = Vec::new();
        let outcomes = leases
            .iter()
            .map(|&(seq, lease)| match ledger.message(queue, seq) {
                // A batch naming a message twice deletes it once.
                Some(_) if deleted.contains(&seq) => Deleted::AlreadyGone,
                None => Deleted::AlreadyGone,
                Some(state) if state.receive_count == lease || state.visible_at <= now => {
                    records.push(Record::Deleted { queue, seq });
                    deleted.push(seq);
                    Deleted::Deleted
                }
                Some(_) => Deleted::LeasedToAnother,
            })
            .collect();
        self.append(&mut ledger, &records)?;
        Ok(outcomes)
    }

    /// Moves the end of the lease `lease` names to `visible_at`.
    pub fn change_visibility(
        &self,
        queue: u64,
        (seq, lease): (u64, u32),
        visible_at: i64,
        now: i64,
    ) -> Result<VisibilityChanged, QueuesError> {
        let mut ledger = self.ledger();
        // The log holds standard queues only.
        let outcome = match ledger.message(queue, seq).map(|state| {
            visibility_change::judge(lease, state.receive_count, state.visible_at, now, false)
        }) {
            Some(VisibilityChange::Apply) => VisibilityChanged::Changed,
            Some(VisibilityChange::Stale | VisibilityChange::LeaseEnded) | None => {
                VisibilityChanged::NotAvailable
            }
        };
        if outcome == VisibilityChanged::Changed {
            let record = Record::VisibilityChanged {
                queue,
                seq,
                visible_at,
            };
            self.append(&mut ledger, &[record])?;
        }
        Ok(outcome)
    }

    /// Drops up to `limit` of `queue`'s messages sent at or before `cutoff`
    /// (its retention), leased or not: how many, and the LSN of the deletes.
    pub fn expire(&self, queue: u64, cutoff: i64, limit: usize) -> Result<(u64, Lsn), QueuesError> {
        let mut ledger = self.ledger();
        let records: Vec<Record> = ledger
            .expired(queue, cutoff, limit)
            .into_iter()
            .map(|seq| Record::Deleted { queue, seq })
            .collect();
        let lsn = self.append(&mut ledger, &records)?;
        Ok((records.len() as u64, lsn))
    }

    /// Up to `max` of `queue`'s messages after sequence number `after`, in
    /// sequence order, as they are now, without leasing anything.
    pub fn peek(
        &self,
        queue: u64,
        after: u64,
        max: usize,
    ) -> Result<Vec<SentMessage>, QueuesError> {
        let ledger = self.ledger();
        let live: Vec<_> = ledger
            .in_order(queue, after)
            .take(max)
            .map(|(seq, state)| (seq, *state))
            .collect();
        let positions: Vec<_> = live.iter().map(|(_, state)| state.position).collect();
        let payloads = self.commit.read_log().read_many(&positions)?;
        payloads
            .iter()
            .zip(&live)
            .map(|(payload, (seq, _))| {
                let mut message = decode_message(payload, *seq)?;
                ledger.stamp(queue, *seq, &mut message);
                Ok(message)
            })
            .collect()
    }

    /// Gives back the message the lease `(seq, lease)` names, with a failure
    /// if the consumer reported one: visible again at `nack.visible_at`, or
    /// moved to the dead-letter queue at once when the nack is permanent or
    /// the next receive would exceed the queue's `maxReceiveCount`.
    pub fn nack(
        &self,
        queue: u64,
        (seq, lease): (u64, u32),
        now: i64,
        nack: &Nack,
    ) -> Result<NackOutcome, QueuesError> {
        let mut ledger = self.ledger();
        let state = match ledger.message(queue, seq) {
            None => return Ok(NackOutcome::NotAvailable),
            Some(state) if state.receive_count != lease => return Ok(NackOutcome::NotAvailable),
            Some(state) if state.visible_at <= now => return Ok(NackOutcome::NotInFlight),
            Some(state) => *state,
        };
        let dead_letter = nack.dead_letter.as_ref().filter(|target| {
            nack_dead_letters(
                nack.permanent,
                i64::from(state.receive_count),
                i64::from(target.max_receive_count),
            )
        });
        let (record, outcome) = match (dead_letter, &nack.failure) {
            (Some(target), failure) => {
                let payload = self.commit.read_log().read(state.position)?;
                let new_seq = ledger.allocate_seqs(1).start;
                let mut message =
                    dead_letter_copy(&ledger, queue, seq, &payload, new_seq, target, now)?;
                if let Some((class, reason)) = failure {
                    message.failures =
                        Some(Failures::and(message.failures.as_ref(), now, class, reason));
                }
                let record = Record::Moved {
                    from_queue: queue,
                    from_seq: seq,
                    to: message,
                };
                (record, NackOutcome::DeadLettered)
            }
            (None, Some((class, message))) => {
                let record = Record::Nacked {
                    queue,
                    seq,
                    visible_at: nack.visible_at,
                    failed_at: now,
                    class: class.clone(),
                    message: message.clone(),
                };
                (record, NackOutcome::Retried)
            }
            (None, None) => {
                let record = Record::VisibilityChanged {
                    queue,
                    seq,
                    visible_at: nack.visible_at,
                };
                (record, NackOutcome::Retried)
            }
        };
        self.append(&mut ledger, &[record])?;
        Ok(outcome)
    }

    /// Reclaims segments (see [`compaction`]); the copies it made are
    /// fsync'd before it returns, and the segments it freed unlinked once
    /// the locks are released.
    pub fn compact(&self, policy: CompactionPolicy) -> Result<CompactionReport, QueuesError> {
        let mut ledger = self.ledger();
        let ((report, detached), _) = self
            .commit
            .with_log(|log| compaction::compact_detaching(log, &mut ledger, policy))?;
        drop(ledger);
        // Unlinked with no lock held: each takes tens of milliseconds.
        detached.remove()?;
        Ok(report)
    }

    /// One step of a message move task draining `from`: the messages numbered
    /// after `cursor` and up to `until_seq`, in sequence order, at most
    /// `limit` judged. `choose` sees each as it is now and decides; a chosen
    /// message that is leased holds the step there. A moved message starts
    /// over in its new queue, as on the SQLite store: new sequence number,
    /// visible now, no receives, no dead-letter source, `task` recorded, its
    /// failures and send time kept. Each move is one record.
    pub fn move_step(
        &self,
        from: u64,
        (cursor, until_seq): (u64, u64),
        limit: usize,
        now: i64,
        task: &str,
        mut choose: impl FnMut(&SentMessage) -> MoveChoice,
    ) -> Result<MoveStep, QueuesError> {
        let mut ledger = self.ledger();
        let candidates: Vec<(u64, LogPosition)> = ledger
            .in_order(from, cursor)
            .take_while(|&(seq, _)| seq <= until_seq)
            .take(limit)
            .map(|(seq, state)| (seq, state.position))
            .collect();
        let positions: Vec<_> = candidates.iter().map(|&(_, position)| position).collect();
        let payloads = self.commit.read_log().read_many(&positions)?;
        let mut step = MoveStep {
            cursor,
            candidates: candidates.len(),
            ..MoveStep::default()
        };
        let mut records = Vec::new();
        for (payload, &(seq, _)) in payloads.iter().zip(&candidates) {
            let mut message = decode_message(payload, seq)?;
            ledger.stamp(from, seq, &mut message);
            let to = match choose(&message) {
                MoveChoice::Skip => {
                    step.skipped += 1;
                    step.cursor = seq;
                    continue;
                }
                MoveChoice::Stop => break,
                MoveChoice::MoveTo(_) if message.visible_at > now => {
                    step.held = true;
                    break;
                }
                MoveChoice::MoveTo(to) => to,
            };
            let new_seq = ledger.allocate_seqs(1).start;
            message.queue = to;
            message.seq = new_seq;
            message.visible_at = now;
            message.receive_count = 0;
            message.first_received_at = None;
            message.last_received_at = None;
            message.dead_letter_source_arn = None;
            message.redriven_by_task = Some(task.to_owned());
            records.push(Record::Moved {
                from_queue: from,
                from_seq: seq,
                to: message,
            });
            step.moved.push((seq, to, new_seq));
            step.cursor = seq;
        }
        step.lsn = self.append(&mut ledger, &records)?;
        Ok(step)
    }

    /// Purges `queue`: drops at most `at_once` of the messages sent so far
    /// now, oldest first, and marks the rest for [`Self::sweep`], so that
    /// purging millions never holds every queue behind one lock for long.
    /// Messages sent after the purge are not touched.
    pub fn purge(&self, queue: u64, at_once: usize) -> Result<Purge, QueuesError> {
        let mut ledger = self.ledger();
        let through_seq = ledger.next_seq() - 1;
        let mut records: Vec<Record> = ledger
            .in_order(queue, 0)
            .take(at_once.saturating_add(1))
            .map(|(seq, _)| Record::Deleted { queue, seq })
            .collect();
        let more = records.len() > at_once;
        if more {
            records.pop();
            records.push(Record::Purged { queue, through_seq });
        }
        let deleted = records.len() as u64 - u64::from(more);
        let lsn = self.append(&mut ledger, &records)?;
        Ok(Purge { deleted, more, lsn })
    }

    /// Drops up to `limit` messages left behind: first those of queues
    /// `is_live` no longer knows (deleted ones), then those purges marked.
    /// How many it dropped, and the LSN to wait on.
    pub fn sweep(
        &self,
        limit: usize,
        is_live: impl Fn(u64) -> bool,
    ) -> Result<(u64, Lsn), QueuesError> {
        let mut ledger = self.ledger();
        let mut records = Vec::new();
        for queue in ledger.queue_ids() {
            if is_live(queue) {
                continue;
            }
            let left = limit - records.len();
            records.extend(
                ledger
                    .in_order(queue, 0)
                    .take(left)
                    .map(|(seq, _)| Record::Deleted { queue, seq }),
            );
            if records.len() >= limit {
                break;
            }
        }
        let marks: Vec<(u64, u64)> = ledger.purge_marks().collect();
        for (queue, through_seq) in marks {
            let left = limit - records.len();
            if left == 0 {
                break;
            }
            let purged: Vec<u64> = ledger
                .in_order(queue, 0)
                .take_while(|&(seq, _)| seq <= through_seq)
                .take(left)
                .map(|(seq, _)| seq)
                .collect();
            if purged.is_empty() {
                ledger.clear_purge(queue);
            }
            records.extend(purged.into_iter().map(|seq| Record::Deleted { queue, seq }));
        }
        let lsn = self.append(&mut ledger, &records)?;
        Ok((records.len() as u64, lsn))
    }

    /// `queue`'s approximate counts at `now`.
    pub fn counts(&self, queue: u64, now: i64) -> QueueCounts {
        self.ledger().counts(queue, now)
    }

    /// Answers a question about the live messages from the ledger, under
    /// its lock: keep it short, every queue waits.
    pub fn inspect<R>(&self, question: impl FnOnce(&Ledger) -> R) -> R {
        question(&self.ledger())
    }
}
