//! Queues: creating, finding, updating, deleting and purging them, and their counts.

use super::*;

pub async fn queue_create_is_visible_to_get_and_list(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "b-queue", T0).await;
    create(store, "a-queue", T0).await;
    let record = store
        .queue_get("b-queue")
        .await
        .unwrap()
        .expect("created queue is found");
    assert_eq!(record.id, id);
    assert_eq!(record.attributes, attributes());
    assert_eq!(record.created_at, T0);
    let names: Vec<String> = store
        .queue_list()
        .await
        .unwrap()
        .into_iter()
        .map(|queue| queue.name)
        .collect();
    assert_eq!(names, ["a-queue", "b-queue"]);
    assert!(store.queue_get("missing").await.unwrap().is_none());
    let again = store
        .queue_create(QueueCreateParams {
            name: "b-queue".into(),
            attributes: BTreeMap::new(),
            tags: BTreeMap::new(),
            now: T0,
            deleted_after: T0 - 60_000,
            fifo: false,
        })
        .await
        .unwrap();
    assert!(matches!(again, QueueCreateOutcome::Exists(record) if record.id == id));
}

pub async fn deleted_queue_names_are_held_for_the_cooldown(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    insert(store, id, vec![message("m", T0, T0)]).await;
    assert!(
        store
            .queue_delete(QueueDeleteParams {
                queue_id: id,
                now: T0
            })
            .await
            .unwrap()
    );
    assert!(
        !store
            .queue_delete(QueueDeleteParams {
                queue_id: id,
                now: T0
            })
            .await
            .unwrap()
    );
    let params = |now: i64| QueueCreateParams {
        name: "q".into(),
        attributes: attributes(),
        tags: BTreeMap::new(),
        now,
        deleted_after: now - 60_000,
        fifo: false,
    };
    assert_eq!(
        store.queue_create(params(T0 + 59_000)).await.unwrap(),
        QueueCreateOutcome::DeletedRecently
    );
    let QueueCreateOutcome::Created(record) =
        store.queue_create(params(T0 + 61_000)).await.unwrap()
    else {
        panic!("the name is free after the cooldown");
    };
    assert_ne!(record.id, id, "queue ids are never reused");
    assert_eq!(
        stats(store, record.id, T0 + 61_000).await.visible,
        0,
        "old messages died with the old queue"
    );
}

pub async fn queue_updates_persist(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    let mut changed = attributes();
    changed.insert("DelaySeconds".into(), "5".into());
    let tags: BTreeMap<String, String> = [("team".to_owned(), "ops".to_owned())]
        .into_iter()
        .collect();
    store
        .queue_update(QueueUpdateParams {
            queue_id: id,
            attributes: Some(changed.clone()),
            tags: None,
            now: T0 + 1,
        })
        .await
        .unwrap();
    store
        .queue_update(QueueUpdateParams {
            queue_id: id,
            attributes: None,
            tags: Some(tags.clone()),
            now: T0 + 2,
        })
        .await
        .unwrap();
    let record = store.queue_get("q").await.unwrap().unwrap();
    assert_eq!(record.attributes, changed);
    assert_eq!(record.tags, tags);
    assert_eq!(
        record.last_modified_at,
        T0 + 1,
        "only attribute changes move last-modified"
    );
}

pub async fn writes_to_a_deleted_queue_fail_cleanly(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    store
        .queue_delete(QueueDeleteParams {
            queue_id: id,
            now: T0,
        })
        .await
        .unwrap();
    let insert = store
        .message_insert_batch(MessageInsertParams {
            queue_id: id,
            messages: vec![message("late", T0, T0)],
            deduplication_window_start: T0,
        })
        .await;
    assert!(
        matches!(
            insert,
            Err(ackbox_engine::store::StoreError::QueueNotFound { .. })
        ),
        "{insert:?}"
    );
    let purge = store
        .queue_purge(QueuePurgeParams {
            queue_id: id,
            now: T0,
            purged_after: T0 - 60_000,
            delete_at_once: 100,
        })
        .await;
    assert!(
        matches!(
            purge,
            Err(ackbox_engine::store::StoreError::QueueNotFound { .. })
        ),
        "{purge:?}"
    );
}

pub async fn purge_empties_once_per_cooldown(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    insert(
        store,
        id,
        vec![message("a", T0, T0), message("b", T0, T0 + 60_000)],
    )
    .await;
    store
        .message_receive(receive_params(id, T0, 1, 1_000))
        .await
        .unwrap();
    let purge = |now: i64| QueuePurgeParams {
        queue_id: id,
        now,
        purged_after: now - 60_000,
        delete_at_once: 100,
    };
    assert_eq!(
        store.queue_purge(purge(T0)).await.unwrap(),
        QueuePurgeOutcome::Purged {
            deleted: 2,
            more: false
        }
    );
    assert_eq!(
        store.queue_purge(purge(T0 + 30_000)).await.unwrap(),
        QueuePurgeOutcome::InProgress
    );
    assert_eq!(
        store.queue_purge(purge(T0 + 61_000)).await.unwrap(),
        QueuePurgeOutcome::Purged {
            deleted: 0,
            more: false
        }
    );
    assert_eq!(store.message_sweep_left_behind(10).await.unwrap(), 0);
}

pub async fn stats_split_visible_in_flight_and_delayed(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    insert(
        store,
        id,
        vec![
            message("v1", T0, T0),
            message("v2", T0 + 1, T0),
            message("d", T0 + 2, T0 + 10_000),
        ],
    )
    .await;
    store
        .message_receive(receive_params(id, T0, 1, 5_000))
        .await
        .unwrap();
    assert_eq!(
        stats(store, id, T0).await,
        QueueStats {
            visible: 1,
            in_flight: 1,
            delayed: 1,
            oldest_sent_at: Some(T0)
        }
    );
    assert_eq!(
        stats(store, id, T0 + 10_000).await.visible,
        3,
        "leases and delays end"
    );
}
