//! `StandardQueues` against a reference model, with restarts: random sends,
//! receives, deletes (with current and stale handles), visibility changes,
//! purges and the clock moving, and after every step the same answers and
//! the same counts — including after the log is closed and replayed.

use std::path::Path;

use ackbox_log::group_commit::GroupCommitOptions;
use ackbox_log::ledger::QueueCounts;
use ackbox_log::log::LogOptions;
use ackbox_log::queues::{Deleted, Outgoing, StandardQueues, VisibilityChanged};
use ackbox_log::record::Content;
use proptest::prelude::*;

const QUEUES: u64 = 2;

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
    Purge {
        queue: u64,
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
        4 => (0..QUEUES, 1usize..5, 0i64..20)
            .prop_map(|(queue, max, visibility_ms)| Op::Receive { queue, max, visibility_ms }),
        3 => any::<usize>().prop_map(|handle| Op::Delete { handle }),
        2 => (any::<usize>(), 0i64..20)
            .prop_map(|(handle, visibility_ms)| Op::ChangeVisibility { handle, visibility_ms }),
        1 => (0..QUEUES).prop_map(|queue| Op::Purge { queue }),
        3 => (1i64..15).prop_map(|ms| Op::Tick { ms }),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Debug, Clone)]
struct Message {
    queue: u64,
    seq: u64,
    visible_at: i64,
    receive_count: u32,
    body: String,
}

#[derive(Debug, Default)]
struct Model {
    messages: Vec<Message>,
    next_seq: u64,
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

fn open(dir: &Path) -> StandardQueues {
    StandardQueues::open(dir, LogOptions::default(), GroupCommitOptions::default())
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
                        delay_ms,
                    })
                    .collect();
                let (seqs, lsn) = queues.send(queue, outgoing, now).expect("a send");
                queues.commit().wait_durable(lsn).expect("a durable send");
                let expected: Vec<u64> = (model.next_seq..model.next_seq + count as u64).collect();
                prop_assert_eq!(&seqs, &expected);
                for (index, seq) in seqs.into_iter().enumerate() {
                    model.messages.push(Message {
                        queue,
                        seq,
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
                let delivered = queues
                    .receive(queue, now, max, visibility_ms)
                    .expect("a receive");
                let mut visible: Vec<&mut Message> = model
                    .messages
                    .iter_mut()
                    .filter(|m| m.queue == queue && m.visible_at <= now)
                    .collect();
                visible.sort_by_key(|m| (m.visible_at, m.receive_count, m.seq));
                visible.truncate(max);
                prop_assert_eq!(delivered.len(), visible.len());
                for (delivery, message) in delivered.iter().zip(visible) {
                    message.receive_count += 1;
                    message.visible_at = now + visibility_ms;
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
                    handles.push((queue, got.seq, got.receive_count));
                }
            }
            Op::Delete { handle } => {
                let Some(&(queue, seq, lease)) = handles.get(handle % handles.len().max(1)) else {
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
                let Some(&(queue, seq, lease)) = handles.get(handle % handles.len().max(1)) else {
                    continue;
                };
                let outcome = queues
                    .change_visibility(queue, (seq, lease), now + visibility_ms, now)
                    .expect("a visibility change");
                let expected = match model.find(queue, seq) {
                    Some(m) if m.receive_count != lease => VisibilityChanged::NotAvailable,
                    Some(m) if m.visible_at <= now => VisibilityChanged::NotInFlight,
                    Some(m) => {
                        m.visible_at = now + visibility_ms;
                        VisibilityChanged::Changed
                    }
                    None => VisibilityChanged::NotAvailable,
                };
                prop_assert_eq!(outcome, expected);
            }
            Op::Purge { queue } => {
                let lsn = queues.purge(queue).expect("a purge");
                queues.commit().wait_durable(lsn).expect("a durable purge");
                model.messages.retain(|m| m.queue != queue);
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
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_log_store_behaves_as_the_model_across_restarts(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
