//! The chunked sweep that drops what deleted and purged queues left behind.

use super::*;

pub async fn deleted_queues_leave_their_messages_to_a_chunked_sweep(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let deep = create(store, "deep", T0).await;
    let kept = create(store, "kept", T0).await;
    let shallow = create(store, "shallow", T0).await;
    insert(store, deep, numbered("d", 25, T0)).await;
    insert(store, kept, numbered("k", 4, T0)).await;
    insert(store, shallow, numbered("s", 3, T0)).await;
    assert_eq!(store.message_sweep_left_behind(10).await.unwrap(), 0);
    for queue_id in [deep, shallow] {
        assert!(
            store
                .queue_delete(QueueDeleteParams { queue_id, now: T0 })
                .await
                .unwrap()
        );
    }
    assert_eq!(
        stats(store, deep, T0).await.visible,
        25,
        "DeleteQueue itself leaves the messages"
    );
    let swept = sweep_until_done(store, 10).await;
    assert_eq!(swept.iter().sum::<u64>(), 28, "{swept:?}");
    assert_eq!(stats(store, deep, T0).await.visible, 0);
    assert_eq!(stats(store, shallow, T0).await.visible, 0);
    assert_eq!(
        stats(store, kept, T0).await.visible,
        4,
        "a live queue keeps its messages"
    );
}

pub async fn a_deep_purge_leaves_the_rest_to_the_sweep_and_spares_later_sends(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let deep = create(store, "deep", T0).await;
    let other = create(store, "other", T0).await;
    insert(store, deep, numbered("old", 25, T0)).await;
    insert(store, other, numbered("other", 3, T0)).await;
    let purge = |now: i64| QueuePurgeParams {
        queue_id: deep,
        now,
        purged_after: now - 60_000,
        delete_at_once: 10,
    };
    assert_eq!(
        store.queue_purge(purge(T0)).await.unwrap(),
        QueuePurgeOutcome::Purged {
            deleted: 10,
            more: true
        }
    );
    insert(store, deep, numbered("new", 2, T0)).await;
    assert_eq!(stats(store, deep, T0).await.visible, 17);
    let swept = sweep_until_done(store, 10).await;
    assert_eq!(swept.iter().sum::<u64>(), 15, "{swept:?}");
    let received = store
        .message_receive(receive_params(deep, T0, 10, 1_000))
        .await
        .unwrap();
    let mut left = bodies(&received);
    left.sort_unstable();
    assert_eq!(left, ["new0", "new1"], "messages sent after the purge stay");
    assert_eq!(stats(store, other, T0).await.visible, 3);
    // A purge that empties the queue at once leaves nothing to sweep.
    assert_eq!(
        store.queue_purge(purge(T0 + 61_000)).await.unwrap(),
        QueuePurgeOutcome::Purged {
            deleted: 2,
            more: false
        }
    );
    assert_eq!(store.message_sweep_left_behind(10).await.unwrap(), 0);
}

pub async fn a_deep_fifo_purge_clears_the_window_at_once_and_the_rest_through_the_sweep(
    fixture: Fixture,
) {
    let store = fixture.store.as_ref();
    let deep = create_fifo(store, "deep.fifo").await;
    let other = create_fifo(store, "other.fifo").await;
    let group = |n: usize| if n.is_multiple_of(2) { "a" } else { "b" };
    let old: Vec<NewMessage> = (0..12)
        .map(|n| fifo_message(&format!("old{n}"), group(n), T0))
        .collect();
    insert(store, deep, old).await;
    insert(store, other, vec![fifo_message("old0", "a", T0)]).await;
    assert_eq!(
        store
            .queue_purge(QueuePurgeParams {
                queue_id: deep,
                now: T0,
                purged_after: T0 - 60_000,
                delete_at_once: 5,
            })
            .await
            .unwrap(),
        QueuePurgeOutcome::Purged {
            deleted: 5,
            more: true
        },
        "a deep FIFO queue is not emptied in the purge's own transaction"
    );
    // The window is clear at once, though its entries wait for the sweep:
    // an id first sent before the purge is a new message now.
    let resent = insert_at(
        store,
        deep,
        vec![
            fifo_message("old11", "b", T0 + 1),
            fifo_message("new", "a", T0 + 1),
        ],
        T0 + 1,
    )
    .await;
    assert_eq!(duplicates(&resent), [false, false]);
    // Until swept, the purge's leftovers still count.
    assert_eq!(stats(store, deep, T0 + 1).await.visible, 9);
    let swept = sweep_until_done(store, 4).await;
    assert_eq!(
        swept.iter().sum::<u64>(),
        7 + 11,
        "7 messages and the 11 ids not sent again: {swept:?}"
    );
    let received = store
        .message_receive(receive_params(deep, T0 + 2, 10, 1_000))
        .await
        .unwrap();
    let mut left = bodies(&received);
    left.sort_unstable();
    assert_eq!(left, ["new", "old11"], "messages sent after the purge stay");
    // Ids sent after the purge still deduplicate; the other queue's window
    // and messages are untouched.
    let again = insert_at(
        store,
        deep,
        vec![
            fifo_message("new", "a", T0 + 3),
            fifo_message("old3", "b", T0 + 3),
        ],
        T0 + 3,
    )
    .await;
    assert_eq!(duplicates(&again), [true, false]);
    let elsewhere = insert_at(
        store,
        other,
        vec![fifo_message("old0", "a", T0 + 3)],
        T0 + 3,
    )
    .await;
    assert!(elsewhere[0].duplicate);
    assert_eq!(stats(store, other, T0 + 3).await.visible, 1);
}

pub async fn a_deleted_fifo_queue_leaves_its_messages_to_the_sweep_and_its_window_to_expire(
    fixture: Fixture,
) {
    let store = fixture.store.as_ref();
    let id = create_fifo(store, "gone.fifo").await;
    let sent: Vec<NewMessage> = (0..12)
        .map(|n| fifo_message(&format!("m{n}"), &format!("g{}", n % 3), T0))
        .collect();
    insert(store, id, sent).await;
    assert!(
        store
            .queue_delete(QueueDeleteParams {
                queue_id: id,
                now: T0,
            })
            .await
            .unwrap()
    );
    let swept = sweep_until_done(store, 5).await;
    assert_eq!(swept, [5, 5, 2], "the messages, in chunks");
    // DeleteQueue did not go through the window (five minutes of sends):
    // its entries run out with it.
    assert_eq!(store.fifo_window_expire(T0).await.unwrap(), 12);
}
