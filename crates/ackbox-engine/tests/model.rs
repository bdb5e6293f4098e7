//! Model-based property test of standard-queue semantics (invariants 2
//! and 3, ARCHITECTURE.md): random sequences of send, receive, delete, change-visibility and
//! clock moves run against the real engine (SQLite store, manual clock) and a
//! tiny in-memory reference model; everything observable must agree after
//! every step.

use ackbox_core::clock::ManualClock;
use ackbox_core::error::ErrorCode;
use ackbox_core::queue_name::QueueName;
use ackbox_engine::send::SendEntry;
use ackbox_engine::{Engine, EngineError};
use proptest::prelude::*;
use support::{receive_request, start_engine, start_engine_on_the_log};

mod support;

const START: i64 = 1_700_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    Send { delay_seconds: i32 },
    Receive { max: i32, visibility_seconds: i32 },
    Delete { handle: usize },
    ChangeVisibility { handle: usize, seconds: i32 },
    Advance { millis: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3i32).prop_map(|delay_seconds| Op::Send { delay_seconds }),
        3 => (1..4i32, 0..4i32).prop_map(|(max, visibility_seconds)| Op::Receive { max, visibility_seconds }),
        2 => any::<usize>().prop_map(|handle| Op::Delete { handle }),
        2 => (any::<usize>(), 0..4i32).prop_map(|(handle, seconds)| Op::ChangeVisibility { handle, seconds }),
        3 => (0..2_500i64).prop_map(|millis| Op::Advance { millis }),
    ]
}

#[derive(Debug)]
struct ModelMessage {
    body: String,
    visible_at: i64,
    receive_count: i64,
    deleted: bool,
}

/// The reference: a list of messages in send order.
#[derive(Debug, Default)]
struct Model {
    messages: Vec<ModelMessage>,
}

/// What a handle refers to in the model: message index and lease generation.
#[derive(Debug, Clone)]
struct HandleRecord {
    handle: String,
    message: usize,
    lease: i64,
}

enum ModelChange {
    Changed,
    NotAvailable,
}

impl Model {
    fn receive(&mut self, now: i64, max: usize, visibility_ms: i64) -> Vec<(usize, i64)> {
        let mut visible: Vec<usize> = (0..self.messages.len())
            .filter(|&index| {
                !self.messages[index].deleted && self.messages[index].visible_at <= now
            })
            .collect();
        // The engine hands out the message that became visible first; ties go
        // to the message received fewer times, then to send order.
        visible.sort_by_key(|&index| {
            (
                self.messages[index].visible_at,
                self.messages[index].receive_count,
                index,
            )
        });
        visible
            .into_iter()
            .take(max)
            .map(|index| {
                let message = &mut self.messages[index];
                message.visible_at = now + visibility_ms;
                message.receive_count += 1;
                (index, message.receive_count)
            })
            .collect()
    }

    fn change(&mut self, now: i64, index: usize, lease: i64, visibility_ms: i64) -> ModelChange {
        let message = &mut self.messages[index];
        // A lease that ran out still changes the message while nobody has
        // received it again (standard queues, as on AWS).
        if message.deleted || message.receive_count != lease {
            ModelChange::NotAvailable
        } else {
            message.visible_at = now + visibility_ms;
            ModelChange::Changed
        }
    }

    /// A handle deletes its own lease's message, or one nobody holds; a newer
    /// running lease keeps the message for its holder.
    fn delete(&mut self, now: i64, index: usize, lease: i64) {
        let message = &mut self.messages[index];
        if message.receive_count == lease || message.visible_at <= now {
            message.deleted = true;
        }
    }

    fn counts(&self, now: i64) -> (u64, u64, u64) {
        let live = self.messages.iter().filter(|message| !message.deleted);
        let (mut visible, mut in_flight, mut delayed) = (0, 0, 0);
        for message in live {
            if message.visible_at <= now {
                visible += 1;
            } else if message.receive_count > 0 {
                in_flight += 1;
            } else {
                delayed += 1;
            }
        }
        (visible, in_flight, delayed)
    }
}

async fn count(engine: &Engine, queue: &QueueName, name: &str) -> u64 {
    let attributes = engine
        .get_queue_attributes(queue, &[name.to_owned()])
        .await
        .unwrap();
    attributes[name].parse().unwrap()
}

async fn run_case(ops: Vec<Op>, on_the_log: bool) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START);
    let engine = if on_the_log {
        start_engine_on_the_log(dir.path(), &clock).await
    } else {
        start_engine(dir.path(), &clock).await
    };
    let queue = engine
        .create_queue("model", &Default::default(), &Default::default())
        .await
        .unwrap();
    let mut model = Model::default();
    let mut handles: Vec<HandleRecord> = Vec::new();

    for (step, op) in ops.into_iter().enumerate() {
        let now = engine.now();
        match op {
            Op::Send { delay_seconds } => {
                let body = format!("m{step}");
                let entry = SendEntry {
                    body: body.clone(),
                    delay_seconds: Some(delay_seconds),
                    ..SendEntry::default()
                };
                engine.send_message(&queue, entry, "tester").await.unwrap();
                model.messages.push(ModelMessage {
                    body,
                    visible_at: now + i64::from(delay_seconds) * 1_000,
                    receive_count: 0,
                    deleted: false,
                });
            }
            Op::Receive {
                max,
                visibility_seconds,
            } => {
                let request = receive_request(max, visibility_seconds);
                let received = engine.receive_messages(&queue, &request).await.unwrap();
                let expected =
                    model.receive(now, max as usize, i64::from(visibility_seconds) * 1_000);
                let got: Vec<(&str, &str)> = received
                    .iter()
                    .map(|message| {
                        (
                            message.body.as_str(),
                            message.attributes["ApproximateReceiveCount"].as_str(),
                        )
                    })
                    .collect();
                let counts: Vec<String> = expected
                    .iter()
                    .map(|(_, count)| count.to_string())
                    .collect();
                let want: Vec<(&str, &str)> = expected
                    .iter()
                    .zip(&counts)
                    .map(|((index, _), count)| {
                        (model.messages[*index].body.as_str(), count.as_str())
                    })
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
                engine.delete_message(&queue, &record.handle).await.unwrap();
                model.delete(now, record.message, record.lease);
            }
            Op::ChangeVisibility { handle, seconds } => {
                if handles.is_empty() {
                    continue;
                }
                let record = handles[handle % handles.len()].clone();
                let result = engine
                    .change_message_visibility(&queue, &record.handle, seconds)
                    .await;
                let expected = model.change(
                    now,
                    record.message,
                    record.lease,
                    i64::from(seconds) * 1_000,
                );
                match (expected, result) {
                    (ModelChange::Changed, Ok(())) => {}
                    (ModelChange::NotAvailable, Err(EngineError::Sqs(error))) => {
                        prop_assert_eq!(
                            error.code,
                            ErrorCode::InvalidParameterValue,
                            "step {}",
                            step
                        );
                    }
                    (_, other) => prop_assert!(
                        false,
                        "step {step}: change visibility disagreed with the model: {other:?}"
                    ),
                }
            }
            Op::Advance { millis } => clock.advance_millis(millis),
        }
        let now = engine.now();
        let (visible, in_flight, delayed) = model.counts(now);
        prop_assert_eq!(
            count(&engine, &queue, "ApproximateNumberOfMessages").await,
            visible,
            "step {}",
            step
        );
        prop_assert_eq!(
            count(&engine, &queue, "ApproximateNumberOfMessagesNotVisible").await,
            in_flight,
            "step {}",
            step
        );
        prop_assert_eq!(
            count(&engine, &queue, "ApproximateNumberOfMessagesDelayed").await,
            delayed,
            "step {}",
            step
        );
    }
    engine.shutdown().await.unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn inv2_inv3_engine_agrees_with_the_reference_model(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run_case(ops, false))?;
    }

    #[test]
    fn inv2_inv3_engine_on_the_log_store_agrees_with_the_reference_model(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run_case(ops, true))?;
    }
}
