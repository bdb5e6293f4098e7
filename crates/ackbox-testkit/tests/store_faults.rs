//! A store failure in the middle of an operation, before or after the store
//! applied it, loses no message and doubles none: the engine runs on a
//! [`FaultyStore`] over the embedded SQLite store, under a manual clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackbox_core::clock::ManualClock;
use ackbox_core::error::ErrorCode;
use ackbox_core::queue_name::QueueName;
use ackbox_core::receipt::ReceiptKey;
use ackbox_engine::receive::{ReceiveRequest, ReceivedMessage};
use ackbox_engine::send::SendEntry;
use ackbox_engine::store::{MoveFilter, StoreConfig};
use ackbox_engine::{Engine, EngineConfig, EngineError};
use ackbox_testkit::faulty_store::{FaultPoint, FaultyStore};

const START: i64 = 1_700_000_000_000;

struct Rig {
    engine: Engine,
    store: Arc<FaultyStore>,
    clock: ManualClock,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let opened = ackbox_engine::store::open(&StoreConfig::embedded(dir.path().to_owned()))
        .await
        .unwrap();
    let store = FaultyStore::new(opened.store);
    let clock = ManualClock::new(START);
    let engine = Engine::start(
        EngineConfig::new(ReceiptKey::new([9; 32])),
        store.clone(),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    Rig {
        engine,
        store,
        clock,
        _dir: dir,
    }
}

impl Rig {
    async fn queue(&self, name: &str, attributes: &[(&str, &str)]) -> QueueName {
        let attributes: BTreeMap<String, String> = attributes
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        self.engine
            .create_queue(name, &attributes, &BTreeMap::new())
            .await
            .unwrap()
    }

    async fn send(&self, queue: &QueueName, body: &str) {
        let entry = SendEntry {
            body: body.to_owned(),
            ..SendEntry::default()
        };
        self.engine
            .send_message(queue, entry, "tester")
            .await
            .unwrap();
    }

    async fn receive(
        &self,
        queue: &QueueName,
        visibility_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, EngineError> {
        let request = ReceiveRequest {
            max_number_of_messages: Some(10),
            visibility_timeout: Some(visibility_seconds),
            wait_time_seconds: Some(0),
            system_attribute_names: vec!["ApproximateReceiveCount".into()],
            ..ReceiveRequest::default()
        };
        self.engine.receive_messages(queue, &request).await
    }

    /// Receives and deletes until the queue has nothing visible: each body
    /// delivered, in order.
    async fn drain(&self, queue: &QueueName) -> Vec<String> {
        let mut bodies = Vec::new();
        loop {
            let received = self.receive(queue, 30).await.unwrap();
            if received.is_empty() {
                return bodies;
            }
            for message in received {
                self.engine
                    .delete_message(queue, &message.receipt_handle)
                    .await
                    .unwrap();
                bodies.push(message.body);
            }
        }
    }
}

fn receive_count(message: &ReceivedMessage) -> &str {
    &message.attributes["ApproximateReceiveCount"]
}

#[tokio::test]
async fn a_receive_that_fails_before_or_after_the_lease_loses_nothing_and_doubles_nothing() {
    for point in [FaultPoint::Before, FaultPoint::After] {
        let rig = rig().await;
        let queue = rig.queue("work", &[]).await;
        rig.send(&queue, "only").await;
        rig.store.fail("message_receive", point, 1);
        let failed = rig.receive(&queue, 30).await;
        assert!(
            matches!(failed, Err(EngineError::Store(_))),
            "{point:?}: {failed:?}"
        );
        if point == FaultPoint::After {
            // The lease was taken and its answer lost: the message waits
            // out the lease, then comes back.
            assert!(rig.receive(&queue, 30).await.unwrap().is_empty());
            rig.clock.advance_millis(31_000);
        }
        let again = rig.receive(&queue, 30).await.unwrap();
        assert_eq!(again.len(), 1, "{point:?}");
        assert_eq!(again[0].body, "only");
        let expected_count = if point == FaultPoint::After { "2" } else { "1" };
        assert_eq!(receive_count(&again[0]), expected_count, "{point:?}");
        rig.engine
            .delete_message(&queue, &again[0].receipt_handle)
            .await
            .unwrap();
        rig.clock.advance_millis(31_000);
        assert!(
            rig.receive(&queue, 30).await.unwrap().is_empty(),
            "{point:?}"
        );
        assert_eq!(rig.store.fired(), [("message_receive", point)]);
    }
}

#[tokio::test]
async fn a_move_task_whose_steps_fail_before_and_after_moving_moves_each_message_once() {
    const MESSAGES: usize = 25;
    let rig = rig().await;
    let dlq = rig.queue("work-dlq", &[]).await;
    let dlq_arn = rig.engine.realm().queue_arn(&dlq);
    let redrive = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":1}}"#);
    let work = rig.queue("work", &[("RedrivePolicy", &redrive)]).await;
    let sent: BTreeSet<String> = (0..MESSAGES).map(|index| format!("m{index}")).collect();
    for body in &sent {
        rig.send(&work, body).await;
    }
    // One receive each, then the next receive moves them all.
    while !rig.receive(&work, 1).await.unwrap().is_empty() {}
    rig.clock.advance_millis(2_000);
    assert!(rig.receive(&work, 1).await.unwrap().is_empty());
    assert_eq!(
        rig.engine.queue_depth(&dlq).await.unwrap().stats.visible,
        MESSAGES as u64
    );

    rig.store.fail("move_task_step", FaultPoint::Before, 2);
    rig.store.fail("move_task_step", FaultPoint::After, 3);
    let handle = rig
        .engine
        .start_message_move_task(&dlq_arn, None, Some(10), MoveFilter::default(), "tester")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = rig.engine.move_task(&handle).await.unwrap().unwrap();
        if task.status != "RUNNING" {
            assert_eq!(task.status, "COMPLETED", "{task:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the task is still running: {task:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rig.store.fired().len(), 5, "every fault struck");
    let mut redriven = rig.drain(&work).await;
    redriven.sort();
    let expected: Vec<String> = sent.into_iter().collect();
    assert_eq!(redriven, expected, "each message back once");
    assert!(rig.drain(&dlq).await.is_empty());
}

#[tokio::test]
async fn a_purge_whose_answer_is_lost_is_not_applied_twice_and_spares_later_sends() {
    let rig = rig().await;
    let queue = rig.queue("work", &[]).await;
    for index in 0..3 {
        rig.send(&queue, &format!("before-{index}")).await;
    }
    rig.store.fail("queue_purge", FaultPoint::After, 1);
    assert!(matches!(
        rig.engine.purge_queue(&queue).await,
        Err(EngineError::Store(_))
    ));
    rig.clock.advance_millis(1_000);
    rig.send(&queue, "after").await;
    // The purge was applied: retried, it is the second within the minute.
    match rig.engine.purge_queue(&queue).await {
        Err(EngineError::Sqs(error)) => assert_eq!(error.code, ErrorCode::PurgeQueueInProgress),
        other => panic!("a second purge ran: {other:?}"),
    }
    assert_eq!(rig.drain(&queue).await, ["after"]);
}
