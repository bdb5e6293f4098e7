//! Sends in batches, deletes and visibility changes under a lease.

use super::*;

/// A batch longer than a send's ten, every optional column set on some
/// messages: each message comes back under the sequence number the insert
/// reported for it, with what it was sent with.
pub async fn a_batch_stores_each_message_under_the_sequence_number_it_reports(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    let sent: Vec<NewMessage> = (0..12)
        .map(|index| {
            let mut message = message(&format!("m{index}"), T0 + index, T0);
            if index % 3 == 1 {
                message.attributes = [(
                    format!("a{index}"),
                    ackbox_core::message::MessageAttributeValue::string(format!("v{index}")),
                )]
                .into_iter()
                .collect();
                message.md5_of_attributes = Some(format!("md5-attributes-{index}"));
            }
            if index % 4 == 2 {
                message.trace_header = Some(format!("Root=trace-{index}"));
                message.group_id = Some(format!("tenant-{index}"));
            }
            message.md5_of_body = format!("md5-{index}");
            message.sender_id = format!("sender-{index}");
            message
        })
        .collect();
    let inserted = insert_at(store, id, sent.clone(), T0).await;
    assert_eq!(
        inserted
            .iter()
            .map(|inserted| inserted.message_id.as_str())
            .collect::<Vec<_>>(),
        sent.iter()
            .map(|message| message.message_id.as_str())
            .collect::<Vec<_>>(),
        "one result per message, in the batch's order"
    );
    assert!(inserted.iter().all(|inserted| !inserted.duplicate));
    assert!(
        inserted.windows(2).all(|pair| pair[0].seq < pair[1].seq),
        "sequence numbers increase along the batch: {inserted:?}"
    );

    let mut received = store
        .message_receive(receive_params(id, T0, 10, 1_000))
        .await
        .unwrap()
        .messages;
    received.extend(
        store
            .message_receive(receive_params(id, T0, 10, 1_000))
            .await
            .unwrap()
            .messages,
    );
    assert_eq!(received.len(), sent.len());
    for stored in &received {
        let index = sent
            .iter()
            .position(|message| message.message_id == stored.message_id)
            .expect("a message of the batch");
        let message = &sent[index];
        assert_eq!(stored.seq, inserted[index].seq, "{}", stored.message_id);
        assert_eq!(
            (
                &stored.body,
                &stored.attributes,
                &stored.md5_of_body,
                &stored.md5_of_attributes,
                &stored.trace_header,
                &stored.group_id,
                &stored.sender_id,
                stored.sent_at,
            ),
            (
                &message.body,
                &message.attributes,
                &message.md5_of_body,
                &message.md5_of_attributes,
                &message.trace_header,
                &message.group_id,
                &message.sender_id,
                message.sent_at,
            ),
        );
    }
}

/// A reader walks a queue in pages (topic archives are replayed so):
/// each page starts after the last sequence number it read, and nothing is
/// leased, so a receive still gets every message.
pub async fn a_peek_pages_after_a_sequence_number_and_leases_nothing(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    let sent: Vec<NewMessage> = (0..7)
        .map(|index| message(&format!("m{index}"), T0 + index, T0))
        .collect();
    insert_at(store, id, sent, T0).await;
    let mut read = Vec::new();
    let mut after_seq = 0;
    loop {
        let page = store
            .message_peek(MessagePeekParams {
                queue_id: id,
                limit: 3,
                after_seq,
            })
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after_seq = last.seq;
        read.extend(page.into_iter().map(|message| message.body));
    }
    assert_eq!(read, ["m0", "m1", "m2", "m3", "m4", "m5", "m6"]);
    let received = store
        .message_receive(receive_params(id, T0, 10, 1_000))
        .await
        .unwrap()
        .messages;
    assert_eq!(received.len(), 7, "a peek leases nothing");
}

pub async fn delete_is_idempotent_and_respects_newer_leases(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    let other = create(store, "other", T0).await;
    let seqs = insert(store, id, vec![message("a", T0, T0)]).await;
    store
        .message_receive(receive_params(id, T0, 1, 1_000))
        .await
        .unwrap();
    store
        .message_receive(receive_params(id, T0 + 1_000, 1, 1_000))
        .await
        .unwrap();
    let stale = LeaseRef {
        seq: seqs[0],
        lease: 1,
    };
    let current = LeaseRef {
        seq: seqs[0],
        lease: 2,
    };
    let delete = |queue_id: i64, now: i64, leases: Vec<LeaseRef>| MessageDeleteParams {
        queue_id,
        now,
        leases,
    };
    let wrong_queue = store
        .message_delete_batch(delete(other, T0 + 1_500, vec![current]))
        .await
        .unwrap();
    assert_eq!(
        wrong_queue,
        [DeleteOutcome::AlreadyGone],
        "a message is deleted only through its own queue"
    );
    let held = store
        .message_delete_batch(delete(id, T0 + 1_500, vec![stale]))
        .await
        .unwrap();
    assert_eq!(
        held,
        [DeleteOutcome::LeasedToAnother],
        "a stale handle cannot take a message from its new holder"
    );
    let deleted = store
        .message_delete_batch(delete(id, T0 + 1_500, vec![current, current]))
        .await
        .unwrap();
    assert_eq!(
        deleted,
        [DeleteOutcome::Deleted, DeleteOutcome::AlreadyGone]
    );
    assert_eq!(stats(store, id, T0).await, QueueStats::default());

    let seqs = insert(store, id, vec![message("b", T0, T0)]).await;
    store
        .message_receive(receive_params(id, T0, 1, 1_000))
        .await
        .unwrap();
    let expired_lease = store
        .message_delete_batch(delete(
            id,
            T0 + 1_000,
            vec![LeaseRef {
                seq: seqs[0],
                lease: 1,
            }],
        ))
        .await
        .unwrap();
    assert_eq!(
        expired_lease,
        [DeleteOutcome::Deleted],
        "a handle whose lease ran out still deletes an unheld message"
    );
}

pub async fn visibility_changes_need_the_current_running_lease(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    let seqs = insert(store, id, vec![message("a", T0, T0)]).await;
    store
        .message_receive(receive_params(id, T0, 1, 1_000))
        .await
        .unwrap();
    let change = |lease: i64, visible_at: i64| VisibilityChange {
        lease: LeaseRef {
            seq: seqs[0],
            lease,
        },
        visible_at,
    };
    let outcomes = store
        .message_change_visibility_batch(MessageChangeVisibilityParams {
            queue_id: id,
            now: T0 + 500,
            changes: vec![change(1, T0 + 9_000), change(0, T0 + 9_000)],
        })
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [
            ChangeVisibilityOutcome::Changed,
            ChangeVisibilityOutcome::NotAvailable
        ]
    );
    assert_eq!(
        stats(store, id, T0 + 8_999).await.in_flight,
        1,
        "the lease was extended"
    );
    let ended = store
        .message_change_visibility_batch(MessageChangeVisibilityParams {
            queue_id: id,
            now: T0 + 9_000,
            changes: vec![change(1, T0 + 20_000)],
        })
        .await
        .unwrap();
    // A standard queue's lease that ran out while nobody received the
    // message again is taken up again, as on AWS.
    assert_eq!(ended, [ChangeVisibilityOutcome::Changed]);
    assert_eq!(
        stats(store, id, T0 + 19_999).await.in_flight,
        1,
        "the ended lease was taken up again"
    );
    store
        .message_delete_batch(MessageDeleteParams {
            queue_id: id,
            now: T0 + 9_000,
            leases: vec![LeaseRef {
                seq: seqs[0],
                lease: 1,
            }],
        })
        .await
        .unwrap();
    let gone = store
        .message_change_visibility_batch(MessageChangeVisibilityParams {
            queue_id: id,
            now: T0,
            changes: vec![change(1, T0 + 1)],
        })
        .await
        .unwrap();
    assert_eq!(gone, [ChangeVisibilityOutcome::NotAvailable]);
}

/// Sends of several sizes, to several queues at once, one of them deleted:
/// each send's messages are stored under the sequence numbers it reports,
/// in its order, and only the sends to the deleted queue fail. A store that
/// gathers concurrent sends into one statement must hand each its own.
pub async fn concurrent_sends_each_get_their_own_sequence_numbers(fixture: Fixture) {
    let store = Arc::clone(&fixture.store);
    let queues = [
        create(store.as_ref(), "a", T0).await,
        create(store.as_ref(), "b", T0).await,
        create(store.as_ref(), "gone", T0).await,
    ];
    assert!(
        store
            .queue_delete(QueueDeleteParams {
                queue_id: queues[2],
                now: T0,
            })
            .await
            .unwrap()
    );
    let mut sends = tokio::task::JoinSet::new();
    for send in 0..48usize {
        let store = Arc::clone(&store);
        let queue_id = queues[send % 3];
        let bodies: Vec<String> = (0..=send % 10)
            .map(|index| format!("q{queue_id}-s{send}-m{index}"))
            .collect();
        sends.spawn(async move {
            let messages = bodies.iter().map(|body| message(body, T0, T0)).collect();
            let inserted = store
                .message_insert_batch(MessageInsertParams {
                    queue_id,
                    messages,
                    deduplication_window_start: T0 - DEDUP_WINDOW_MS,
                })
                .await;
            (queue_id, bodies, inserted)
        });
    }
    let mut stored_by_send = Vec::new();
    while let Some(joined) = sends.join_next().await {
        let (queue_id, bodies, inserted) = joined.unwrap();
        if queue_id == queues[2] {
            assert!(
                matches!(inserted, Err(StoreError::QueueNotFound { .. })),
                "a send to a deleted queue: {inserted:?}"
            );
            continue;
        }
        let inserted = inserted.unwrap();
        let seqs: Vec<i64> = inserted.iter().map(|inserted| inserted.seq).collect();
        assert!(
            seqs.windows(2).all(|pair| pair[0] < pair[1]),
            "a batch's sequence numbers follow its order: {seqs:?}"
        );
        stored_by_send.push((queue_id, bodies, seqs));
    }
    let mut bodies_by_seq = BTreeMap::new();
    for queue_id in &queues[..2] {
        for stored in store
            .message_peek(MessagePeekParams {
                queue_id: *queue_id,
                limit: 1_000,
                after_seq: 0,
            })
            .await
            .unwrap()
        {
            bodies_by_seq.insert(stored.seq, stored.body);
        }
    }
    let sent: usize = stored_by_send
        .iter()
        .map(|(_, bodies, _)| bodies.len())
        .sum();
    assert_eq!(bodies_by_seq.len(), sent, "every message stored once");
    for (_, bodies, seqs) in &stored_by_send {
        for (body, seq) in bodies.iter().zip(seqs) {
            assert_eq!(bodies_by_seq.get(seq), Some(body), "sequence number {seq}");
        }
    }
}
