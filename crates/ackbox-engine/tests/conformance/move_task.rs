//! Move tasks: moving dead letters back (or on) once, their filters, their relapse brake and finding them by handle.

use super::*;

/// A move task from queue `dlq` (ARN `arn:dlq`), without filters.
fn task_params(handle: &str, dlq: i64, destination_arn: Option<&str>) -> MoveTaskCreateParams {
    MoveTaskCreateParams {
        handle: handle.to_owned(),
        source_queue_id: dlq,
        source_arn: "arn:dlq".into(),
        destination_arn: destination_arn.map(str::to_owned),
        rate: None,
        requested_by: "anonymous".into(),
        filter: MoveFilter::default(),
        now: T0,
    }
}

/// A store shared by several nodes tells them all where a move task's step
/// brought messages, so their long polls there wake. Only for such stores
/// (a store of one node has nobody to tell): registered by `store_postgres.rs`.
pub async fn a_move_task_step_announces_where_its_messages_arrived(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let mut events = store.events().expect("a shared store reports its events");
    let dlq = create(store, "dlq", T0).await;
    let home = create(store, "home", T0).await;
    insert(store, dlq, vec![message("failed", T0, T0)]).await;
    store
        .move_task_create(task_params("task-1", dlq, Some("arn:home")))
        .await
        .unwrap();
    let stepped = store
        .move_task_step(MoveTaskStepParams {
            handle: "task-1".into(),
            now: T0 + 1_000,
            limit: 10,
            destination: MoveDestination::Queue(home),
        })
        .await
        .unwrap();
    assert_eq!(stepped.moved, 1);
    let announced = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            match events.recv().await {
                Ok(StoreEvent::MessagesAvailable { queue_id }) if queue_id == home => return true,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return false,
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(
        announced,
        Ok(true),
        "no node heard that messages arrived in the destination"
    );
}

pub async fn move_tasks_move_visible_messages_once_and_wait_for_held_ones(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let dlq = create(store, "dlq", T0).await;
    let home = create(store, "home", T0).await;
    insert(
        store,
        dlq,
        vec![message("held", T0, T0), message("free", T0 + 1, T0)],
    )
    .await;
    let held = store
        .message_receive(receive_params(dlq, T0, 1, 10_000))
        .await
        .unwrap();
    assert_eq!(held.messages[0].body, "held");
    let created = store
        .move_task_create(task_params("task-1", dlq, Some("arn:home")))
        .await
        .unwrap();
    assert!(matches!(created, MoveTaskCreateOutcome::Created(ref task) if task.to_move == 2));
    let again = store
        .move_task_create(task_params("task-2", dlq, None))
        .await
        .unwrap();
    assert_eq!(again, MoveTaskCreateOutcome::AlreadyRunning);
    let step = |now: i64| MoveTaskStepParams {
        handle: "task-1".into(),
        now,
        limit: 10,
        destination: MoveDestination::Queue(home),
    };
    let first = store.move_task_step(step(T0 + 1_000)).await.unwrap();
    assert_eq!(
        (first.moved, first.finished),
        (0, false),
        "the task waits at the held message"
    );
    insert(store, dlq, vec![message("late", T0 + 2_000, T0 + 2_000)]).await;
    let second = store.move_task_step(step(T0 + 10_000)).await.unwrap();
    assert_eq!(
        (second.moved, second.finished),
        (2, true),
        "held then free move once the lease ends"
    );
    let home_bodies: Vec<String> = store
        .message_receive(receive_params(home, T0 + 10_000, 10, 1_000))
        .await
        .unwrap()
        .messages
        .into_iter()
        .map(|message| message.body)
        .collect();
    assert_eq!(home_bodies, ["held", "free"]);
    let left = store
        .message_receive(receive_params(dlq, T0 + 10_000, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(
        left.messages.len(),
        1,
        "a message that arrived after the start stays"
    );
    assert_eq!(left.messages[0].body, "late");
}

pub async fn a_move_task_is_found_by_its_handle_whatever_its_status(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let dlq = create(store, "dlq", T0).await;
    let other = create(store, "other-dlq", T0).await;
    insert(store, dlq, vec![message("m", T0, T0)]).await;
    for (handle, queue) in [("task-a", dlq), ("task-b", other)] {
        store
            .move_task_create(task_params(handle, queue, None))
            .await
            .unwrap();
    }
    store.move_task_cancel("task-a", T0 + 1).await.unwrap();
    let by_handle = |handle: &str| MoveTaskFilter::Handle(handle.to_owned());
    let found = store.move_task_list(by_handle("task-a"), 10).await.unwrap();
    assert_eq!(found.len(), 1, "one task per handle");
    assert_eq!(
        (found[0].handle.as_str(), found[0].status.as_str()),
        ("task-a", "CANCELLED"),
        "a finished task is still found"
    );
    let other_task = store.move_task_list(by_handle("task-b"), 10).await.unwrap();
    assert_eq!(other_task[0].source_queue_id, other);
    assert!(
        store
            .move_task_list(by_handle("no-such-task"), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn the_relapse_brake_pauses_a_task_whose_messages_come_back(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let dlq = create(store, "dlq", T0).await;
    let home = create(store, "home", T0).await;
    let poison: Vec<NewMessage> = (0..20)
        .map(|index| message(&format!("m{index}"), T0, T0))
        .collect();
    insert(store, dlq, poison).await;
    store
        .move_task_create(task_params("brake", dlq, Some("arn:home")))
        .await
        .unwrap();
    let step = || MoveTaskStepParams {
        handle: "brake".into(),
        now: T0,
        limit: 10,
        destination: MoveDestination::Queue(home),
    };
    let first = store.move_task_step(step()).await.unwrap();
    assert_eq!((first.moved, first.finished), (10, false));
    // Two of the ten die again at once: 20% relapse, over the 10% limit.
    let target = DeadLetterTarget {
        queue_id: dlq,
        max_receive_count: 1,
        source_arn: "arn:home".into(),
    };
    store
        .message_receive(MessageReceiveParams {
            dead_letter: Some(target.clone()),
            ..receive_params(home, T0, 2, 0)
        })
        .await
        .unwrap();
    let relapsed = store
        .message_receive(MessageReceiveParams {
            dead_letter: Some(target),
            ..receive_params(home, T0, 10, 0)
        })
        .await
        .unwrap();
    assert_eq!(relapsed.dead_lettered.len(), 2);
    let second = store.move_task_step(step()).await.unwrap();
    assert!(second.finished, "the brake stopped the task");
    assert_eq!(second.moved, 0, "before moving more");
    let task = store
        .move_task_list(MoveTaskFilter::Source("arn:dlq".into()), 1)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(task.status, "PAUSED");
    let reason = task.failure_reason.unwrap();
    assert!(reason.contains("Relapse brake: 2 of the 10"), "{reason}");
    assert_eq!(
        stats(store, dlq, T0).await.visible,
        12,
        "the unmoved ten and the two relapses stay"
    );

    // Cause fixed: resuming judges only what happens from now on.
    assert!(store.move_task_resume("brake").await.unwrap().is_some());
    let third = store.move_task_step(step()).await.unwrap();
    assert_eq!(
        third.moved, 10,
        "the rest moves; the relapses stay for review"
    );
    let last = store.move_task_step(step()).await.unwrap();
    assert!(last.finished);
    let task = store
        .move_task_list(MoveTaskFilter::Source("arn:dlq".into()), 1)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(task.status, "COMPLETED");
}

pub async fn move_task_filters_pick_by_class_age_and_count(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let dlq = create(store, "dlq", T0).await;
    let home = create(store, "home", T0).await;
    let mut messages = Vec::new();
    for index in 0..6i64 {
        messages.push(message(&format!("m{index}"), T0 + index * 1_000, T0));
    }
    insert(store, dlq, messages).await;
    // Record a failure class on the even ones.
    for index in 0..6i64 {
        let received = store
            .message_receive(receive_params(dlq, T0, 1, 60_000))
            .await
            .unwrap();
        let message = &received.messages[0];
        let failure = (index % 2 == 0).then(|| ackbox_engine::store::FailureReport {
            class: "Timeout".into(),
            message: "slow".into(),
        });
        store
            .message_nack(ackbox_engine::store::MessageNackParams {
                queue_id: dlq,
                now: T0,
                lease: LeaseRef {
                    seq: message.seq,
                    lease: message.receive_count,
                },
                visible_at: T0 + 100_000,
                failure,
                permanent: false,
                dead_letter: None,
            })
            .await
            .unwrap();
    }
    let created = store
        .move_task_create(MoveTaskCreateParams {
            filter: MoveFilter {
                class: Some("Timeout".into()),
                sent_before: Some(T0 + 3_000),
                max_messages: Some(2),
                sample: None,
            },
            ..task_params("picky", dlq, Some("arn:home"))
        })
        .await
        .unwrap();
    // Timeout and sent by T0+3s: m0 and m2 (m4 is too young, odd ones have no class).
    assert!(matches!(created, MoveTaskCreateOutcome::Created(ref task) if task.to_move == 2));
    let step = store
        .move_task_step(MoveTaskStepParams {
            handle: "picky".into(),
            now: T0 + 200_000,
            limit: 10,
            destination: MoveDestination::Queue(home),
        })
        .await
        .unwrap();
    assert_eq!(
        (step.moved, step.finished),
        (2, true),
        "the cap of two ends the task"
    );
    let task = store
        .move_task_list(MoveTaskFilter::Source("arn:dlq".into()), 1)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(task.status, "COMPLETED");
    assert_eq!(task.moved, 2);
    assert_eq!(task.skipped, 1, "m1 (no failure class) was passed over");
    let moved = store
        .message_receive(receive_params(home, T0 + 200_000, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(
        moved
            .messages
            .iter()
            .map(|message| message.body.as_str())
            .collect::<Vec<_>>(),
        ["m0", "m2"]
    );
}
