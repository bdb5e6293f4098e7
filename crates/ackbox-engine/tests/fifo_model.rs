//! Model-based property test of FIFO semantics (invariant 5, ARCHITECTURE.md): random
//! interleavings of sends (with repeated deduplication ids), receives,
//! deletes, visibility changes, clock moves and restarts, across several
//! message groups, run against the real engine (SQLite store, manual clock)
//! and an in-memory reference model. Every receive must return exactly what
//! the model returns; every duplicate send must name the first send.
//!
//! The model states the rules plainly: a group delivers only while none of
//! its messages is leased and its oldest message is visible; a receive takes
//! a run of visible messages from the head of each deliverable group, the
//! group that became deliverable first going first (ties: older head).

use std::collections::HashMap;

use ackbox_core::clock::ManualClock;
use ackbox_core::error::ErrorCode;
use ackbox_core::queue_name::QueueName;
use ackbox_engine::EngineError;
use ackbox_engine::send::SendEntry;
use proptest::prelude::*;
use support::{receive_request, start_engine};

mod support;

const START: i64 = 1_700_000_000_000;
const DEDUP_WINDOW_MS: i64 = 300_000;
const GROUPS: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    Send { group: usize, dedup: u8 },
    Receive { max: i32, visibility_seconds: i32 },
    Delete { handle: usize },
    ChangeVisibility { handle: usize, seconds: i32 },
    Advance { millis: i64 },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..GROUPS, 0..12u8).prop_map(|(group, dedup)| Op::Send { group, dedup }),
        4 => (1..5i32, 0..4i32).prop_map(|(max, visibility_seconds)| Op::Receive { max, visibility_seconds }),
        3 => any::<usize>().prop_map(|handle| Op::Delete { handle }),
        2 => (any::<usize>(), 0..4i32).prop_map(|(handle, seconds)| Op::ChangeVisibility { handle, seconds }),
        3 => prop_oneof![0..2_500i64, Just(DEDUP_WINDOW_MS / 2)].prop_map(|millis| Op::Advance { millis }),
        1 => Just(Op::Restart),
    ]
}

#[derive(Debug)]
struct ModelMessage {
    group: usize,
    body: String,
    message_id: String,
    visible_at: i64,
    receive_count: i64,
    deleted: bool,
}

#[derive(Debug, Default)]
struct Model {
    /// In send order, which is sequence order.
    messages: Vec<ModelMessage>,
    /// Deduplication id → (first message, when it was sent).
    first_sends: HashMap<String, (usize, i64)>,
}

impl Model {
    fn live_in_group(&self, group: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.messages.len()).filter(move |&index| {
            self.messages[index].group == group && !self.messages[index].deleted
        })
    }

    /// When `group` may deliver: `None` if it is empty.
    fn available_at(&self, group: usize) -> Option<(i64, usize)> {
        let mut live = self.live_in_group(group);
        let head = live.next()?;
        let leases = self
            .live_in_group(group)
            .filter(|&index| self.messages[index].receive_count > 0)
            .map(|index| self.messages[index].visible_at);
        let available_at = leases.fold(self.messages[head].visible_at, i64::max);
        Some((available_at, head))
    }

    fn receive(&mut self, now: i64, max: usize, visibility_ms: i64) -> Vec<(usize, i64)> {
        let mut groups: Vec<(i64, usize, usize)> = (0..GROUPS)
            .filter_map(|group| {
                self.available_at(group)
                    .filter(|(at, _)| *at <= now)
                    .map(|(at, head)| (at, head, group))
            })
            .collect();
        groups.sort_unstable();
        let mut taken = Vec::new();
        for (_, _, group) in groups {
            let run: Vec<usize> = self
                .live_in_group(group)
                .take_while(|&index| self.messages[index].visible_at <= now)
                .take(max - taken.len())
                .collect();
            for index in run {
                let message = &mut self.messages[index];
                message.visible_at = now + visibility_ms;
                message.receive_count += 1;
                taken.push((index, message.receive_count));
            }
            if taken.len() == max {
                break;
            }
        }
        taken
    }
}

#[derive(Debug, Clone)]
struct HandleRecord {
    handle: String,
    message: usize,
    lease: i64,
}

async fn run_case(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START);
    let mut engine = start_engine(dir.path(), &clock).await;
    let attributes = [("FifoQueue".to_owned(), "true".to_owned())].into();
    let queue: QueueName = engine
        .create_queue("model.fifo", &attributes, &Default::default())
        .await
        .unwrap();
    let mut model = Model::default();
    let mut handles: Vec<HandleRecord> = Vec::new();

    for (step, op) in ops.into_iter().enumerate() {
        let now = engine.now();
        match op {
            Op::Send { group, dedup } => {
                let body = format!("m{step}");
                let dedup_id = format!("d{dedup}");
                let entry = SendEntry {
                    body: body.clone(),
                    group_id: Some(format!("g{group}")),
                    deduplication_id: Some(dedup_id.clone()),
                    ..SendEntry::default()
                };
                let sent = engine.send_message(&queue, entry, "tester").await.unwrap();
                match model.first_sends.get(&dedup_id) {
                    Some(&(first, sent_at)) if sent_at > now - DEDUP_WINDOW_MS => {
                        prop_assert_eq!(
                            &sent.message_id,
                            &model.messages[first].message_id,
                            "step {}: a duplicate names the first send",
                            step
                        );
                    }
                    _ => {
                        model
                            .first_sends
                            .insert(dedup_id, (model.messages.len(), now));
                        model.messages.push(ModelMessage {
                            group,
                            body,
                            message_id: sent.message_id,
                            visible_at: now,
                            receive_count: 0,
                            deleted: false,
                        });
                    }
                }
            }
            Op::Receive {
                max,
                visibility_seconds,
            } => {
                let request = receive_request(max, visibility_seconds);
                let received = engine.receive_messages(&queue, &request).await.unwrap();
                let expected =
                    model.receive(now, max as usize, i64::from(visibility_seconds) * 1_000);
                let got: Vec<(String, String)> = received
                    .iter()
                    .map(|message| {
                        (
                            message.body.clone(),
                            message.attributes["ApproximateReceiveCount"].clone(),
                        )
                    })
                    .collect();
                let want: Vec<(String, String)> = expected
                    .iter()
                    .map(|(index, count)| (model.messages[*index].body.clone(), count.to_string()))
                    .collect();
                prop_assert_eq!(got, want, "step {}", step);
                for (message, (index, lease)) in received.iter().zip(expected) {
                    handles.push(HandleRecord {
                        handle: message.receipt_handle.clone(),
                        message: index,
                        lease,
                    });
                }
            }
            Op::Delete { handle } => {
                if handles.is_empty() {
                    continue;
                }
                let record = handles[handle % handles.len()].clone();
                let result = engine.delete_message(&queue, &record.handle).await;
                let message = &mut model.messages[record.message];
                let running = message.receive_count == record.lease && message.visible_at > now;
                match result {
                    Ok(()) if running => message.deleted = true,
                    Ok(()) => prop_assert!(
                        message.deleted,
                        "step {step}: an ended lease deleted a live message"
                    ),
                    Err(EngineError::Sqs(error)) => {
                        prop_assert!(
                            !running && !message.deleted,
                            "step {step}: refused a delete: {error:?}"
                        );
                        prop_assert_eq!(error.code, ErrorCode::InvalidParameterValue);
                        prop_assert!(error.message.ends_with("The receipt handle has expired."));
                    }
                    Err(other) => prop_assert!(false, "step {step}: {other:?}"),
                }
            }
            Op::ChangeVisibility { handle, seconds } => {
                if handles.is_empty() {
                    continue;
                }
                let record = handles[handle % handles.len()].clone();
                let result = engine
                    .change_message_visibility(&queue, &record.handle, seconds)
                    .await;
                let message = &mut model.messages[record.message];
                if message.deleted || message.receive_count != record.lease {
                    prop_assert!(
                        matches!(&result, Err(EngineError::Sqs(error)) if error.code == ErrorCode::InvalidParameterValue),
                        "step {step}: {result:?}"
                    );
                } else if message.visible_at <= now {
                    prop_assert!(
                        matches!(&result, Err(EngineError::Sqs(error)) if error.code == ErrorCode::MessageNotInflight),
                        "step {step}: {result:?}"
                    );
                } else {
                    prop_assert!(result.is_ok(), "step {step}: {result:?}");
                    message.visible_at = now + i64::from(seconds) * 1_000;
                }
            }
            Op::Advance { millis } => clock.advance_millis(millis),
            Op::Restart => {
                engine.shutdown().await.unwrap();
                engine = start_engine(dir.path(), &clock).await;
            }
        }
    }
    engine.shutdown().await.unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn inv5_fifo_engine_agrees_with_the_reference_model(ops in prop::collection::vec(op(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run_case(ops))?;
    }
}
