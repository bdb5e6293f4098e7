//! Receives: leasing oldest first, dropping what is past retention within a budget, and moving what was received too often to the dead-letter queue.

use super::*;

pub async fn receive_leases_oldest_first_and_counts_receives(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    let seqs = insert(
        store,
        id,
        vec![
            message("a", T0, T0),
            message("b", T0, T0),
            message("c", T0, T0 + 5_000),
        ],
    )
    .await;
    assert!(
        seqs.windows(2).all(|pair| pair[0] < pair[1]),
        "sequence numbers increase"
    );

    let first = store
        .message_receive(receive_params(id, T0, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(
        bodies(&first),
        ["a", "b"],
        "the delayed message is held back"
    );
    assert!(
        first
            .messages
            .iter()
            .all(|message| message.receive_count == 1 && message.first_received_at == Some(T0))
    );

    let empty = store
        .message_receive(receive_params(id, T0 + 500, 10, 1_000))
        .await
        .unwrap();
    assert!(empty.messages.is_empty());
    assert_eq!(
        empty.next_visible_at,
        Some(T0 + 1_000),
        "the earliest lease end"
    );

    let again = store
        .message_receive(receive_params(id, T0 + 1_000, 1, 1_000))
        .await
        .unwrap();
    assert_eq!(again.messages.len(), 1);
    assert_eq!(again.messages[0].body, "a");
    assert_eq!(again.messages[0].receive_count, 2);
    assert_eq!(
        again.messages[0].first_received_at,
        Some(T0),
        "first receive time is kept"
    );
}

pub async fn a_zero_lease_never_returns_a_message_twice_in_one_receive(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    insert(store, id, vec![message("only", T0, T0)]).await;
    let outcome = store
        .message_receive(receive_params(id, T0, 10, 0))
        .await
        .unwrap();
    assert_eq!(outcome.messages.len(), 1);
}

/// A receive that meets a message due for its dead-letter queue may take
/// two steps (the PostgreSQL store moves it apart from leasing the rest);
/// with a zero lease the first step's messages stay visible, and the second
/// must not return them again.
pub async fn a_zero_lease_beside_a_dead_letter_move_returns_each_message_once(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let poisoned = PoisonedSource::create(store).await;
    let second = store
        .message_receive(poisoned.receive(T0 + 1_000, 10, 0))
        .await
        .unwrap();
    assert_eq!(
        bodies(&second),
        ["fine"],
        "received once, and the poison moved"
    );
    assert_eq!(second.dead_lettered.len(), 1);
}

pub async fn expired_messages_are_dropped_not_delivered(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    insert(
        store,
        id,
        vec![
            message("old", T0, T0),
            message("new", T0 + 10_000, T0 + 10_000),
        ],
    )
    .await;
    let now = T0 + 20_000;
    let outcome = store
        .message_receive(MessageReceiveParams {
            expired_at_or_before: T0,
            ..receive_params(id, now, 10, 1_000)
        })
        .await
        .unwrap();
    assert_eq!(outcome.expired, 1);
    assert_eq!(outcome.messages.len(), 1);
    assert_eq!(outcome.messages[0].body, "new");

    insert(
        store,
        id,
        vec![
            message("x", T0 + 11_000, T0 + 11_000),
            message("y", T0 + 12_000, T0 + 12_000),
        ],
    )
    .await;
    let expired = store
        .message_expire(MessageExpireParams {
            queue_id: id,
            expired_at_or_before: T0 + 11_500,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(expired, 2, "'new' and 'x' were sent before the cutoff");
    assert_eq!(stats(store, id, now).await.visible, 1);
}

/// A receive over a backlog past retention drops at most
/// `MAX_DROPPED_PER_RECEIVE` of it, so one receive never holds the store for
/// long; later receives drop the rest and reach the fresh message behind.
pub async fn a_receive_drops_at_most_its_budget_and_later_ones_do_the_rest(fixture: Fixture) {
    use ackbox_core::receive_policy::MAX_DROPPED_PER_RECEIVE;
    let store = fixture.store.as_ref();
    let id = create(store, "q", T0).await;
    let backlog = MAX_DROPPED_PER_RECEIVE + 5;
    insert(store, id, numbered("old", backlog, T0)).await;
    insert(store, id, vec![message("fresh", T0 + 10_000, T0 + 10_000)]).await;
    let now = T0 + 20_000;
    let mut expired = 0;
    for _ in 0..backlog {
        let outcome = store
            .message_receive(MessageReceiveParams {
                expired_at_or_before: T0,
                ..receive_params(id, now, 10, 1_000)
            })
            .await
            .unwrap();
        assert!(
            outcome.expired as usize <= MAX_DROPPED_PER_RECEIVE,
            "one receive dropped {}",
            outcome.expired
        );
        expired += outcome.expired as usize;
        if !outcome.messages.is_empty() {
            assert_eq!(bodies(&outcome), ["fresh"]);
            assert_eq!(
                expired, backlog,
                "the fresh message came before the backlog was gone"
            );
            return;
        }
    }
    panic!("the fresh message was never reached; {expired} of {backlog} expired");
}

/// A source queue holding "poison" (with attribute `kind`), received once
/// already, the limit, and "fine", never received; its dead-letter queue.
struct PoisonedSource {
    source: i64,
    dlq: i64,
    seqs: Vec<i64>,
}

impl PoisonedSource {
    async fn create(store: &dyn Store) -> Self {
        let source = create(store, "source", T0).await;
        let dlq = create(store, "dlq", T0).await;
        let mut poison = message("poison", T0, T0);
        poison.attributes.insert(
            "kind".into(),
            ackbox_core::message::MessageAttributeValue::string("x"),
        );
        let seqs = insert(store, source, vec![poison, message("fine", T0 + 1, T0)]).await;
        let poisoned = Self { source, dlq, seqs };
        let first = store
            .message_receive(poisoned.receive(T0, 1, 1_000))
            .await
            .unwrap();
        assert_eq!(
            first.messages[0].body, "poison",
            "the first receive is within the limit"
        );
        poisoned
    }

    /// A receive from the source with its dead-letter queue in force.
    fn receive(&self, now: i64, max: u32, lease_ms: i64) -> MessageReceiveParams {
        MessageReceiveParams {
            dead_letter: Some(DeadLetterTarget {
                queue_id: self.dlq,
                max_receive_count: 1,
                source_arn: "arn:source".into(),
            }),
            ..receive_params(self.source, now, max, lease_ms)
        }
    }
}

/// What a receive moved to the dead-letter queue, it reports with each
/// message's last failure class (the broker counts dead letters by it).
pub async fn a_dead_letter_move_reports_each_messages_last_failure_class(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let source = create(store, "source", T0).await;
    let dlq = create(store, "dlq", T0).await;
    insert(
        store,
        source,
        vec![
            message("declined", T0, T0),
            message("timed out", T0 + 1, T0),
        ],
    )
    .await;
    let first = store
        .message_receive(receive_params(source, T0, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(bodies(&first), ["declined", "timed out"]);
    // One consumer says why; the other's lease runs out.
    let declined = &first.messages[0];
    store
        .message_nack(MessageNackParams {
            queue_id: source,
            now: T0,
            lease: LeaseRef {
                seq: declined.seq,
                lease: declined.receive_count,
            },
            visible_at: T0,
            failure: Some(FailureReport {
                class: "CardDeclined".into(),
                message: "insufficient funds".into(),
            }),
            permanent: false,
            dead_letter: None,
        })
        .await
        .unwrap();
    let second = store
        .message_receive(MessageReceiveParams {
            dead_letter: Some(DeadLetterTarget {
                queue_id: dlq,
                max_receive_count: 1,
                source_arn: "arn:source".into(),
            }),
            ..receive_params(source, T0 + 2_000, 10, 1_000)
        })
        .await
        .unwrap();
    let mut classes = second.dead_lettered.clone();
    classes.sort();
    assert_eq!(classes, [None, Some("CardDeclined".to_owned())]);
}

pub async fn receive_moves_messages_past_the_limit_to_the_dead_letter_queue(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let poisoned = PoisonedSource::create(store).await;
    let (source, dlq, seqs) = (poisoned.source, poisoned.dlq, poisoned.seqs.clone());
    let second = store
        .message_receive(poisoned.receive(T0 + 1_000, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(
        bodies(&second),
        ["fine"],
        "the poison message is not delivered again"
    );
    assert_eq!(second.dead_lettered.len(), 1);
    let in_source = stats(store, source, T0 + 1_000).await;
    assert_eq!(
        in_source.visible + in_source.in_flight + in_source.delayed,
        1,
        "it left the source"
    );

    let moved = store
        .message_receive(receive_params(dlq, T0 + 1_000, 10, 1_000))
        .await
        .unwrap();
    assert_eq!(
        moved.messages.len(),
        1,
        "it is in the dead-letter queue, once"
    );
    let moved = &moved.messages[0];
    assert_eq!(
        (moved.message_id.as_str(), moved.body.as_str()),
        ("id-poison", "poison")
    );
    assert_ne!(
        moved.seq, seqs[0],
        "a moved message gets a new sequence number, so old handles miss it"
    );
    assert_eq!(moved.sent_at, T0, "the original SentTimestamp is kept");
    assert_eq!(moved.attributes["kind"].string_value.as_deref(), Some("x"));
    assert_eq!(moved.dead_letter_source_arn.as_deref(), Some("arn:source"));

    let stale = store
        .message_delete_batch(MessageDeleteParams {
            queue_id: source,
            now: T0 + 2_000,
            leases: vec![LeaseRef {
                seq: seqs[0],
                lease: 1,
            }],
        })
        .await
        .unwrap();
    assert_eq!(
        stale,
        [DeleteOutcome::AlreadyGone],
        "a source handle cannot delete it in the dead-letter queue"
    );
}

pub async fn a_missing_dead_letter_queue_moves_nothing(fixture: Fixture) {
    let store = fixture.store.as_ref();
    let source = create(store, "source", T0).await;
    let dlq = create(store, "dlq", T0).await;
    store
        .queue_delete(QueueDeleteParams {
            queue_id: dlq,
            now: T0,
        })
        .await
        .unwrap();
    insert(store, source, vec![message("poison", T0, T0)]).await;
    let target = DeadLetterTarget {
        queue_id: dlq,
        max_receive_count: 1,
        source_arn: "arn:source".into(),
    };
    for round in 0..3 {
        let now = T0 + round * 1_000;
        let outcome = store
            .message_receive(MessageReceiveParams {
                dead_letter: Some(target.clone()),
                ..receive_params(source, now, 1, 1_000)
            })
            .await
            .unwrap();
        assert_eq!(
            outcome.messages.len(),
            1,
            "round {round}: never dropped, still delivered"
        );
        assert!(outcome.dead_lettered.is_empty());
    }
}
