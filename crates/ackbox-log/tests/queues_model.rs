//! `StandardQueues` against a reference model, with restarts: random sends,
//! receives, deletes (with current and stale handles), visibility changes,
//! nacks, peeks, retention sweeps, move-task steps, purges, compactions and
//! the clock moving,
//! on a queue with a dead-letter queue, one with a short retention and the
//! dead-letter queue itself; after every step the same answers and the same
//! counts — including after the log is closed and replayed.

use std::collections::BTreeMap;
use std::path::Path;

use ackbox_log::compaction::CompactionPolicy;
use ackbox_log::group_commit::GroupCommitOptions;
use ackbox_log::ledger::QueueCounts;
use ackbox_log::log::LogOptions;
use ackbox_log::queues::{
    DeadLetter, Deleted, MoveChoice, Nack, NackOutcome, Outgoing, ReceiveRequest, StandardQueues,
    VisibilityChanged,
};
use ackbox_log::record::{Content, SentMessage};
use proptest::prelude::*;

const QUEUES: u64 = 3;
/// Queue 0's messages move here once received twice.
const SOURCE: u64 = 0;
const DEAD_LETTERS: u64 = 2;
const MAX_RECEIVES: u32 = 2;
/// Queue 1 keeps messages this long.
const SHORT_LIVED: u64 = 1;
const RETENTION_MS: i64 = 40;

#[derive(Debug, Clone)]
enum Op {
    Send {
        queue: u64,
        count: usize,
        delay_ms: i64,
    },
    Receive {
        queue: u64,
        max: usize,
        visibility_ms: i64,
    },
    Delete {
        handle: usize,
    },
    ChangeVisibility {
        handle: usize,
        visibility_ms: i64,
    },
    /// A purge dropping at most `at_once` at once and marking the rest.
    Purge {
        queue: u64,
        at_once: usize,
    },
    /// The sweep of what purges marked.
    Sweep {
        limit: usize,
    },
    /// Give a message back, with or without a failure, or dead-letter it.
    Nack {
        handle: usize,
        delay_ms: i64,
        with_failure: bool,
        permanent: bool,
    },
    /// Reclaim segments, copying forward however much of one is live, or
    /// only what the default policy would.
    Compact {
        copy_anything: bool,
    },
    /// A step of a move task draining the dead-letter queue back to the
    /// source, leaving messages whose body ends in "-1".
    Redrive {
        limit: usize,
    },
    /// A look at the oldest messages, leasing nothing.
    Peek {
        queue: u64,
        max: usize,
    },
    /// Retention's sweep: drops what was sent `RETENTION_MS` ago or more.
    Expire {
        queue: u64,
        limit: usize,
    },
    Tick {
        ms: i64,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..QUEUES, 1usize..4, prop_oneof![Just(0i64), Just(5)])
            .prop_map(|(queue, count, delay_ms)| Op::Send { queue, count, delay_ms }),
        4 => (0..QUEUES, 1usize..5, (0i64..5).prop_map(|steps| steps * 5))
            .prop_map(|(queue, max, visibility_ms)| Op::Receive { queue, max, visibility_ms }),
        3 => any::<usize>().prop_map(|handle| Op::Delete { handle }),
        2 => (any::<usize>(), (0i64..5).prop_map(|steps| steps * 5))
            .prop_map(|(handle, visibility_ms)| Op::ChangeVisibility { handle, visibility_ms }),
        2 => (any::<usize>(), (0i64..3).prop_map(|steps| steps * 5), any::<bool>(), any::<bool>())
            .prop_map(|(handle, delay_ms, with_failure, permanent)| Op::Nack {
                handle,
                delay_ms,
                with_failure,
                permanent,
            }),
        1 => (0..QUEUES, 0usize..3).prop_map(|(queue, at_once)| Op::Purge { queue, at_once }),
        1 => (1usize..4).prop_map(|limit| Op::Sweep { limit }),
        2 => (0..QUEUES, 1usize..4).prop_map(|(queue, limit)| Op::Expire { queue, limit }),
        1 => (0..QUEUES, 1usize..5).prop_map(|(queue, max)| Op::Peek { queue, max }),
        // Leases and ticks in steps of 5 ms land exactly on retention's and
        // leases' edges often.
        3 => (1i64..4).prop_map(|steps| Op::Tick { ms: steps * 5 }),
        1 => Just(Op::Reopen),
        2 => (1usize..4).prop_map(|limit| Op::Redrive { limit }),
        1 => any::<bool>().prop_map(|copy_anything| Op::Compact { copy_anything }),
    ]
}

#[derive(Debug, Clone)]
struct Message {
    queue: u64,
    seq: u64,
    sent_at: i64,
    visible_at: i64,
    /// Moved here from the source queue: carries its ARN.
    dead_lettered: bool,
    last_received_at: Option<i64>,
    receive_count: u32,
    body: String,
    /// Failures reported, and the latest one's class.
    failures: Option<(u32, String)>,
    redriven: bool,
}

#[derive(Debug, Default)]
struct Model {
    messages: Vec<Message>,
    next_seq: u64,
    /// Purges not yet swept: each queue's messages up to the mark.
    purges: BTreeMap<u64, u64>,
}

impl Model {
    fn find(&mut self, queue: u64, seq: u64) -> Option<&mut Message> {
        self.messages
            .iter_mut()
            .find(|message| message.queue == queue && message.seq == seq)
    }

    fn counts(&self, queue: u64, now: i64) -> QueueCounts {
        let mut counts = QueueCounts::default();
        for message in self.messages.iter().filter(|m| m.queue == queue) {
            if message.visible_at <= now {
                counts.visible += 1;
            } else if message.receive_count == 0 {
                counts.delayed += 1;
            } else {
                counts.in_flight += 1;
            }
        }
        counts
    }
}

/// A receipt handle issued so far: half the time one of the latest three
/// (most likely still current), otherwise any (most likely stale).
fn pick(handles: &[(u64, u64, u32)], choice: usize) -> Option<(u64, u64, u32)> {
    let latest = handles.len().min(3);
    let index = if choice.is_multiple_of(2) && latest > 0 {
        handles.len() - 1 - (choice / 2) % latest
    } else {
        choice / 2 % handles.len().max(1)
    };
    handles.get(index).copied()
}

/// The redrive policy of `queue`: only the source queue has one.
fn dead_letter_of(queue: u64) -> Option<DeadLetter> {
    (queue == SOURCE).then(|| DeadLetter {
        queue: DEAD_LETTERS,
        max_receive_count: MAX_RECEIVES,
        source_arn: "arn:source".to_owned(),
    })
}

/// A message's failure count and latest class, as the model keeps them.
fn failures(message: &SentMessage) -> Option<(u32, String)> {
    message
        .failures
        .as_ref()
        .map(|failures| (failures.count, failures.last_class.clone()))
}

fn open(dir: &Path) -> StandardQueues {
    // Small segments, so that appends roll and compaction has work.
    let options = LogOptions {
        segment_bytes: 1024,
    };
    StandardQueues::open(dir, options, GroupCommitOptions::default())
        .expect("the log opens")
        .0
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut queues = open(dir.path());
    let mut model = Model {
        next_seq: 1,
        ..Model::default()
    };
    // Receipt handles issued so far: (queue, seq, receive count).
    let mut handles: Vec<(u64, u64, u32)> = Vec::new();
    let mut now = 1_000;
    // The move task's cursor in the dead-letter queue.
    let mut cursor = 0;
    for op in ops {
        match op {
            Op::Send {
                queue,
                count,
                delay_ms,
            } => {
                let outgoing: Vec<Outgoing> = (0..count)
                    .map(|index| Outgoing {
                        content: Content {
                            body: format!("{now}-{index}"),
                            ..Content::default()
                        },
                        sent_at: now,
                        visible_at: now + delay_ms,
                    })
                    .collect();
                let (seqs, lsn) = queues.send(queue, outgoing).expect("a send");
                queues.commit().wait_durable(lsn).expect("a durable send");
                let expected: Vec<u64> = (model.next_seq..model.next_seq + count as u64).collect();
                prop_assert_eq!(&seqs, &expected);
                for (index, seq) in seqs.into_iter().enumerate() {
                    model.messages.push(Message {
                        queue,
                        seq,
                        sent_at: now,
                        dead_lettered: false,
                        last_received_at: None,
                        failures: None,
                        redriven: false,
                        visible_at: now + delay_ms,
                        receive_count: 0,
                        body: format!("{now}-{index}"),
                    });
                }
                model.next_seq += count as u64;
            }
            Op::Receive {
                queue,
                max,
                visibility_ms,
            } => {
                let request = ReceiveRequest {
                    max,
                    visibility_ms,
                    dead_letter: dead_letter_of(queue),
                    expire_sent_at_or_before: (queue == SHORT_LIVED).then_some(now - RETENTION_MS),
                };
                let received = queues.receive(queue, now, &request).expect("a receive");
                let mut visible: Vec<(i64, u32, u64)> = model
                    .messages
                    .iter()
                    .filter(|m| m.queue == queue && m.visible_at <= now)
                    .map(|m| (m.visible_at, m.receive_count, m.seq))
                    .collect();
                visible.sort_unstable();
                let (mut leased, mut expired, mut moved) = (Vec::new(), 0, 0);
                for (_, _, seq) in visible {
                    if leased.len() >= max {
                        break;
                    }
                    let next_seq = model.next_seq;
                    let message = model.find(queue, seq).expect("a visible message");
                    if queue == SHORT_LIVED && message.sent_at <= now - RETENTION_MS {
                        model
                            .messages
                            .retain(|m| !(m.queue == queue && m.seq == seq));
                        expired += 1;
                    } else if queue == SOURCE && message.receive_count >= MAX_RECEIVES {
                        message.queue = DEAD_LETTERS;
                        message.seq = next_seq;
                        message.visible_at = now;
                        message.dead_lettered = true;
                        model.next_seq += 1;
                        moved += 1;
                    } else {
                        message.receive_count += 1;
                        message.visible_at = now + visibility_ms;
                        message.last_received_at = Some(now);
                        leased.push(message.clone());
                    }
                }
                prop_assert_eq!(
                    (received.expired, received.dead_lettered.len() as u64),
                    (expired, moved)
                );
                prop_assert_eq!(received.deliveries.len(), leased.len());
                for (delivery, message) in received.deliveries.iter().zip(&leased) {
                    let got = &delivery.message;
                    prop_assert_eq!(
                        (
                            got.seq,
                            got.receive_count,
                            got.visible_at,
                            &got.content.body
                        ),
                        (
                            message.seq,
                            message.receive_count,
                            message.visible_at,
                            &message.body
                        )
                    );
                    prop_assert_eq!(got.dead_letter_source_arn.is_some(), message.dead_lettered);
                    prop_assert_eq!(got.last_received_at, Some(now));
                    prop_assert_eq!(got.redriven_by_task.is_some(), message.redriven);
                    prop_assert_eq!(failures(got), message.failures.clone());
                    handles.push((queue, got.seq, got.receive_count));
                }
            }
            Op::Delete { handle } => {
                let Some((queue, seq, lease)) = pick(&handles, handle) else {
                    continue;
                };
                let outcome = queues
                    .delete(queue, &[(seq, lease)], now)
                    .expect("a delete");
                let expected = match model.find(queue, seq) {
                    None => Deleted::AlreadyGone,
                    Some(m) if m.receive_count == lease || m.visible_at <= now => {
                        model
                            .messages
                            .retain(|m| !(m.queue == queue && m.seq == seq));
                        Deleted::Deleted
                    }
                    Some(_) => Deleted::LeasedToAnother,
                };
                prop_assert_eq!(outcome, vec![expected]);
            }
            Op::ChangeVisibility {
                handle,
                visibility_ms,
            } => {
                let Some((queue, seq, lease)) = pick(&handles, handle) else {
                    continue;
                };
                let outcome = queues
                    .change_visibility(queue, (seq, lease), now + visibility_ms, now)
                    .expect("a visibility change");
                let expected = match model.find(queue, seq) {
                    Some(m) if m.receive_count != lease => VisibilityChanged::NotAvailable,
                    Some(m) => {
                        m.visible_at = now + visibility_ms;
                        VisibilityChanged::Changed
                    }
                    None => VisibilityChanged::NotAvailable,
                };
                prop_assert_eq!(outcome, expected);
            }
            Op::Purge { queue, at_once } => {
                let purge = queues.purge(queue, at_once).expect("a purge");
                queues
                    .commit()
                    .wait_durable(purge.lsn)
                    .expect("a durable purge");
                let mut seqs: Vec<u64> = model
                    .messages
                    .iter()
                    .filter(|m| m.queue == queue)
                    .map(|m| m.seq)
                    .collect();
                seqs.sort_unstable();
                let more = seqs.len() > at_once;
                seqs.truncate(at_once);
                model
                    .messages
                    .retain(|m| m.queue != queue || !seqs.contains(&m.seq));
                if more {
                    let mark = model.purges.entry(queue).or_default();
                    *mark = (*mark).max(model.next_seq - 1);
                }
                prop_assert_eq!((purge.deleted, purge.more), (seqs.len() as u64, more));
            }
            Op::Sweep { limit } => {
                let (swept, _) = queues.sweep(limit, |_| true).expect("a sweep");
                let mut expected = 0;
                for (queue, through) in model.purges.clone() {
                    let left = limit - expected;
                    if left == 0 {
                        break;
                    }
                    let mut seqs: Vec<u64> = model
                        .messages
                        .iter()
                        .filter(|m| m.queue == queue && m.seq <= through)
                        .map(|m| m.seq)
                        .collect();
                    seqs.sort_unstable();
                    seqs.truncate(left);
                    if seqs.is_empty() {
                        model.purges.remove(&queue);
                    }
                    expected += seqs.len();
                    model
                        .messages
                        .retain(|m| m.queue != queue || !seqs.contains(&m.seq));
                }
                prop_assert_eq!(swept, expected as u64);
            }
            Op::Expire { queue, limit } => {
                let cutoff = now - RETENTION_MS;
                let (expired, _) = queues.expire(queue, cutoff, limit).expect("a sweep");
                let mut old: Vec<(i64, u64)> = model
                    .messages
                    .iter()
                    .filter(|m| m.queue == queue && m.sent_at <= cutoff)
                    .map(|m| (m.sent_at, m.seq))
                    .collect();
                old.sort_unstable();
                old.truncate(limit);
                model
                    .messages
                    .retain(|m| !(m.queue == queue && old.contains(&(m.sent_at, m.seq))));
                prop_assert_eq!(expired, old.len() as u64);
            }
            Op::Nack {
                handle,
                delay_ms,
                with_failure,
                permanent,
            } => {
                let Some((queue, seq, lease)) = pick(&handles, handle) else {
                    continue;
                };
                let class = format!("E{now}");
                let nack = Nack {
                    visible_at: now + delay_ms,
                    failure: with_failure.then(|| (class.clone(), "it broke".to_owned())),
                    permanent,
                    dead_letter: dead_letter_of(queue),
                };
                let outcome = queues
                    .nack(queue, (seq, lease), now, &nack)
                    .expect("a nack");
                let next_seq = model.next_seq;
                let expected = match model.find(queue, seq) {
                    None => NackOutcome::NotAvailable,
                    Some(m) if m.receive_count != lease => NackOutcome::NotAvailable,
                    Some(m) if m.visible_at <= now => NackOutcome::NotInFlight,
                    Some(m) => {
                        if with_failure {
                            let count = m.failures.as_ref().map_or(0, |(count, _)| *count);
                            m.failures = Some((count + 1, class));
                        }
                        if queue == SOURCE && (permanent || m.receive_count >= MAX_RECEIVES) {
                            m.queue = DEAD_LETTERS;
                            m.seq = next_seq;
                            m.visible_at = now;
                            m.dead_lettered = true;
                            model.next_seq += 1;
                            NackOutcome::DeadLettered
                        } else {
                            m.visible_at = now + delay_ms;
                            NackOutcome::Retried
                        }
                    }
                };
                prop_assert_eq!(outcome, expected);
            }
            Op::Redrive { limit } => {
                let step = queues
                    .move_step(
                        DEAD_LETTERS,
                        (cursor, u64::MAX),
                        limit,
                        now,
                        "task-1",
                        |m| {
                            if m.content.body.ends_with("-1") {
                                MoveChoice::Skip
                            } else {
                                MoveChoice::MoveTo(SOURCE)
                            }
                        },
                    )
                    .expect("a move step");
                // The moves are durable before a task records its progress.
                queues
                    .commit()
                    .wait_durable(step.lsn)
                    .expect("durable moves");
                let mut candidates: Vec<u64> = model
                    .messages
                    .iter()
                    .filter(|m| m.queue == DEAD_LETTERS && m.seq > cursor)
                    .map(|m| m.seq)
                    .collect();
                candidates.sort_unstable();
                candidates.truncate(limit);
                let (mut moved, mut skipped, mut held) = (Vec::new(), 0, false);
                for seq in candidates {
                    let next_seq = model.next_seq;
                    let m = model.find(DEAD_LETTERS, seq).expect("a candidate");
                    if m.body.ends_with("-1") {
                        skipped += 1;
                        cursor = seq;
                        continue;
                    }
                    if m.visible_at > now {
                        held = true;
                        break;
                    }
                    m.queue = SOURCE;
                    m.seq = next_seq;
                    m.visible_at = now;
                    m.receive_count = 0;
                    m.last_received_at = None;
                    m.dead_lettered = false;
                    m.redriven = true;
                    model.next_seq += 1;
                    moved.push((seq, SOURCE, next_seq));
                    cursor = seq;
                }
                prop_assert_eq!(&step.moved, &moved);
                prop_assert_eq!(
                    (step.skipped, step.cursor, step.held),
                    (skipped, cursor, held)
                );
            }
            Op::Peek { queue, max } => {
                let peeked = queues.peek(queue, 0, max).expect("a peek");
                let mut oldest: Vec<&Message> =
                    model.messages.iter().filter(|m| m.queue == queue).collect();
                oldest.sort_by_key(|m| m.seq);
                oldest.truncate(max);
                let got: Vec<_> = peeked
                    .iter()
                    .map(|m| {
                        (
                            m.seq,
                            m.receive_count,
                            m.visible_at,
                            m.last_received_at,
                            failures(m),
                        )
                    })
                    .collect();
                let expected: Vec<_> = oldest
                    .iter()
                    .map(|m| {
                        let failures = m.failures.clone();
                        (
                            m.seq,
                            m.receive_count,
                            m.visible_at,
                            m.last_received_at,
                            failures,
                        )
                    })
                    .collect();
                prop_assert_eq!(got, expected);
            }
            Op::Compact { copy_anything } => {
                let policy = if copy_anything {
                    CompactionPolicy {
                        max_live_share: 1.0,
                        ..CompactionPolicy::default()
                    }
                } else {
                    CompactionPolicy::default()
                };
                queues.compact(policy).expect("a compaction");
            }
            Op::Tick { ms } => now += ms,
            Op::Reopen => {
                drop(queues.close());
                queues = open(dir.path());
            }
        }
        for queue in 0..QUEUES {
            prop_assert_eq!(
                queues.counts(queue, now),
                model.counts(queue, now),
                "queue {}",
                queue
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_log_store_behaves_as_the_model_across_restarts(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
