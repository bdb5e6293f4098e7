//! FIFO queues: groups in order one run at a time, delays, deduplication, receive attempts, dead letters and retention.

use super::*;

fn lease_of(message: &StoredMessage) -> LeaseRef {
    LeaseRef {
        seq: message.seq,
        lease: message.receive_count,
    }
}

async fn delete_leases(
    store: &dyn Store,
    queue_id: i64,
    now: i64,
    leases: Vec<LeaseRef>,
) -> Vec<DeleteOutcome> {
    store
        .message_delete_batch(MessageDeleteParams {
            queue_id,
            now,
            leases,
        })
        .await
        .unwrap()
}

async fn assert_nothing_receivable(store: &dyn Store, queue_id: i64, now: i64) {
    let outcome = store
        .message_receive(receive_params(queue_id, now, 10, 30_000))
        .await
        .unwrap();
    assert!(
        outcome.messages.is_empty(),
        "received {:?}",
        bodies(&outcome)
    );
}

pub async fn fifo_groups_deliver_in_order_one_run_at_a_time(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create_fifo(store, "q.fifo").await;
    insert(
        store,
        id,
        vec![
            fifo_message("a1", "a", T0),
            fifo_message("b1", "b", T0),
            fifo_message("a2", "a", T0),
            fifo_message("a3", "a", T0),
            fifo_message("b2", "b", T0),
        ],
    )
    .await;
    // One receive takes a run from each available group, in send order.
    let first = store
        .message_receive(receive_params(id, T0, 3, 30_000))
        .await
        .unwrap();
    assert_eq!(bodies(&first), ["a1", "a2", "a3"]);
    // Group a is locked while any of its messages is leased; b proceeds.
    let second = store
        .message_receive(receive_params(id, T0, 10, 30_000))
        .await
        .unwrap();
    assert_eq!(bodies(&second), ["b1", "b2"]);
    let none = store
        .message_receive(receive_params(id, T0, 10, 30_000))
        .await
        .unwrap();
    assert!(none.messages.is_empty());
    assert_eq!(
        none.next_visible_at,
        Some(T0 + 30_000),
        "the earliest lease end"
    );
    // Deleting part of a run keeps the group locked.
    delete_leases(store, id, T0 + 1, vec![lease_of(&first.messages[0])]).await;
    assert_nothing_receivable(store, id, T0 + 2).await;
    // Making the middle of a run visible again does not unlock the group
    // while the rest of the run is leased.
    let outcomes = store
        .message_change_visibility_batch(MessageChangeVisibilityParams {
            queue_id: id,
            now: T0 + 3,
            changes: vec![VisibilityChange {
                lease: lease_of(&first.messages[1]),
                visible_at: T0 + 3,
            }],
        })
        .await
        .unwrap();
    assert_eq!(outcomes, [ChangeVisibilityOutcome::Changed]);
    assert_nothing_receivable(store, id, T0 + 4).await;
    // When the leases end, the group's head comes first again.
    let again = store
        .message_receive(receive_params(id, T0 + 30_000, 10, 30_000))
        .await
        .unwrap();
    // Both groups unlock at once; the one with the older head goes first.
    assert_eq!(bodies(&again), ["b1", "b2", "a2", "a3"]);
    assert_eq!(again.messages[2].receive_count, 2);
}

pub async fn fifo_delays_hold_back_the_rest_of_their_group(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create_fifo(store, "q.fifo").await;
    insert(
        store,
        id,
        vec![
            fifo_message("a1", "a", T0),
            NewMessage {
                visible_at: T0 + 5_000,
                ..fifo_message("a2", "a", T0)
            },
            fifo_message("a3", "a", T0),
        ],
    )
    .await;
    let first = store
        .message_receive(receive_params(id, T0, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(bodies(&first), ["a1"], "a3 may not overtake the delayed a2");
    delete_leases(store, id, T0 + 1, vec![lease_of(&first.messages[0])]).await;
    let waiting = store
        .message_receive(receive_params(id, T0 + 2, 10, 1_000))
        .await
        .unwrap();
    assert!(waiting.messages.is_empty());
    assert_eq!(waiting.next_visible_at, Some(T0 + 5_000));
    let rest = store
        .message_receive(receive_params(id, T0 + 5_000, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(bodies(&rest), ["a2", "a3"]);
}

pub async fn fifo_deduplication_returns_the_first_send_within_the_window(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create_fifo(store, "q.fifo").await;
    let first = insert_at(store, id, vec![fifo_message("m", "a", T0)], T0).await;
    assert!(!first[0].duplicate);
    // A repeat in the same batch and a later repeat both name the first send.
    let repeated = insert_at(
        store,
        id,
        vec![
            NewMessage {
                message_id: "other-id".into(),
                ..fifo_message("m", "b", T0 + 1)
            },
            fifo_message("n", "a", T0 + 1),
            NewMessage {
                message_id: "third-id".into(),
                ..fifo_message("n", "a", T0 + 1)
            },
        ],
        T0 + 1,
    )
    .await;
    assert_eq!(
        repeated[0],
        InsertedMessage {
            duplicate: true,
            ..first[0].clone()
        }
    );
    assert!(!repeated[1].duplicate);
    assert_eq!(
        repeated[2],
        InsertedMessage {
            duplicate: true,
            ..repeated[1].clone()
        }
    );
    assert_eq!(stats(store, id, T0 + 1).await.visible, 2);
    // The window outlives the message.
    let received = store
        .message_receive(receive_params(id, T0 + 2, 10, 30_000))
        .await
        .unwrap();
    delete_leases(
        store,
        id,
        T0 + 3,
        received.messages.iter().map(lease_of).collect(),
    )
    .await;
    let after_delete = insert_at(store, id, vec![fifo_message("m", "a", T0 + 4)], T0 + 4).await;
    assert!(after_delete[0].duplicate);
    // After five minutes the id is new again.
    let later = T0 + DEDUP_WINDOW_MS + 1;
    let fresh = insert_at(store, id, vec![fifo_message("m", "a", later)], later).await;
    assert!(!fresh[0].duplicate);
    assert!(fresh[0].seq > first[0].seq);
    // Sweeping forgets what is past the window, and only that.
    assert_eq!(
        store.fifo_window_expire(T0 + 1).await.unwrap(),
        1,
        "n, first sent at T0 + 1"
    );
    let still = insert_at(
        store,
        id,
        vec![fifo_message("m", "a", later + 1)],
        later + 1,
    )
    .await;
    assert!(still[0].duplicate);
    // Purge clears the window.
    store
        .queue_purge(QueuePurgeParams {
            queue_id: id,
            now: later + 1,
            purged_after: later + 1 - 60_000,
            delete_at_once: 100,
        })
        .await
        .unwrap();
    let after_purge = insert_at(
        store,
        id,
        vec![fifo_message("m", "a", later + 2)],
        later + 2,
    )
    .await;
    assert!(!after_purge[0].duplicate);
    // Per-group scope: the same id in another group is another message.
    let scoped = |group: &str| NewMessage {
        deduplication: Some(Deduplication {
            scope: group.to_owned(),
            id: "same".into(),
        }),
        ..fifo_message(&format!("scoped-{group}"), group, later + 3)
    };
    let outcomes = insert_at(
        store,
        id,
        vec![scoped("x"), scoped("y"), scoped("x")],
        later + 3,
    )
    .await;
    assert_eq!(duplicates(&outcomes), [false, false, true]);
}

pub async fn fifo_delete_needs_a_running_lease(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create_fifo(store, "q.fifo").await;
    insert(store, id, vec![fifo_message("a1", "a", T0)]).await;
    let first = store
        .message_receive(receive_params(id, T0, 1, 1_000))
        .await
        .unwrap();
    let lease = lease_of(&first.messages[0]);
    assert_eq!(
        delete_leases(store, id, T0 + 1_000, vec![lease]).await,
        [DeleteOutcome::Expired]
    );
    let second = store
        .message_receive(receive_params(id, T0 + 1_000, 1, 1_000))
        .await
        .unwrap();
    assert_eq!(bodies(&second), ["a1"]);
    assert_eq!(
        delete_leases(store, id, T0 + 1_001, vec![lease]).await,
        [DeleteOutcome::Expired],
        "a handle of an older lease has expired too"
    );
    let current = lease_of(&second.messages[0]);
    assert_eq!(
        delete_leases(store, id, T0 + 1_001, vec![current, current]).await,
        [DeleteOutcome::Deleted, DeleteOutcome::AlreadyGone]
    );
}

pub async fn fifo_receive_attempts_replay_until_a_message_changes(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create_fifo(store, "q.fifo").await;
    insert(
        store,
        id,
        vec![fifo_message("a1", "a", T0), fifo_message("b1", "b", T0)],
    )
    .await;
    let attempt = |now: i64| MessageReceiveParams {
        attempt: Some(ReceiveAttempt {
            id: "try-1".into(),
            valid_after: now - 300_000,
        }),
        ..receive_params(id, now, 1, 30_000)
    };
    let first = store.message_receive(attempt(T0)).await.unwrap();
    assert_eq!(bodies(&first), ["a1"]);
    // The retry gets the same lease (so the same handle), with the
    // visibility timeout started again.
    let retry = store.message_receive(attempt(T0 + 10_000)).await.unwrap();
    assert_eq!(retry.messages, first.messages);
    assert_eq!(
        stats(store, id, T0 + 35_000).await.in_flight,
        1,
        "the lease restarted at the retry"
    );
    // Once a message of the attempt changed, a retry is an ordinary receive.
    store
        .message_change_visibility_batch(MessageChangeVisibilityParams {
            queue_id: id,
            now: T0 + 11_000,
            changes: vec![VisibilityChange {
                lease: lease_of(&first.messages[0]),
                visible_at: T0 + 60_000,
            }],
        })
        .await
        .unwrap();
    let after_change = store.message_receive(attempt(T0 + 12_000)).await.unwrap();
    assert_eq!(bodies(&after_change), ["b1"]);
    // Past the attempt window nothing is replayed.
    let late = T0 + 12_000 + 300_001;
    let expired = store
        .message_receive(MessageReceiveParams {
            max_messages: 10,
            ..attempt(late)
        })
        .await
        .unwrap();
    assert_eq!(bodies(&expired), ["b1", "a1"], "b's lease ended first");
    assert_eq!(expired.messages[1].receive_count, 2);
}

pub async fn fifo_dead_letter_moves_keep_the_rest_of_the_group_in_order(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create_fifo(store, "q.fifo").await;
    let dlq = create_fifo(store, "dlq.fifo").await;
    insert(
        store,
        id,
        vec![fifo_message("a1", "a", T0), fifo_message("a2", "a", T0)],
    )
    .await;
    let with_dlq = |now: i64| MessageReceiveParams {
        dead_letter: Some(DeadLetterTarget {
            queue_id: dlq,
            max_receive_count: 1,
            source_arn: "arn:q.fifo".into(),
        }),
        ..receive_params(id, now, 1, 1_000)
    };
    let first = store.message_receive(with_dlq(T0)).await.unwrap();
    assert_eq!(bodies(&first), ["a1"]);
    let second = store.message_receive(with_dlq(T0 + 1_000)).await.unwrap();
    assert_eq!(second.dead_lettered.len(), 1);
    assert_eq!(
        bodies(&second),
        ["a2"],
        "the next message of the group follows"
    );
    let moved = store
        .message_receive(receive_params(dlq, T0 + 1_000, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(bodies(&moved), ["a1"]);
    assert_eq!(moved.messages[0].group_id.as_deref(), Some("a"));
    assert_eq!(
        moved.messages[0].sent_at,
        T0 + 1_000,
        "a FIFO dead-letter queue restarts retention"
    );
}

pub async fn fifo_retention_drops_heads_and_unblocks_groups(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create_fifo(store, "q.fifo").await;
    insert(
        store,
        id,
        vec![
            fifo_message("old", "a", T0),
            fifo_message("new", "a", T0 + 10),
        ],
    )
    .await;
    let expired = store
        .message_expire(MessageExpireParams {
            queue_id: id,
            expired_at_or_before: T0,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(expired, 1);
    let received = store
        .message_receive(receive_params(id, T0 + 20, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(bodies(&received), ["new"]);
}
