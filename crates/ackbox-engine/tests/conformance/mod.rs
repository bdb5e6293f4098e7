//! The store conformance suite (ARCHITECTURE.md, "Conventions the tests cite"): every behaviour the engine relies
//! on, written once against `dyn Store` and instantiated per backend by
//! [`store_conformance!`]. A behaviour that differs between stores is a bug.

#![allow(dead_code, unreachable_pub)]

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use ackbox_engine::store::{
    ChangeVisibilityOutcome, DeadLetterTarget, Deduplication, DeleteOutcome, InsertedMessage,
    LeaseRef, MessageChangeVisibilityParams, MessageDeleteParams, MessageExpireParams,
    MessageInsertParams, MessageReceiveParams, MoveDestination, MoveFilter, MoveTaskCreateOutcome,
    MoveTaskCreateParams, MoveTaskFilter, MoveTaskStepParams, NewMessage, QueueCreateOutcome,
    QueueCreateParams, QueueDeleteParams, QueuePurgeOutcome, QueuePurgeParams, QueueStats,
    QueueStatsParams, QueueUpdateParams, ReceiveAttempt, ReceiveOutcome, Store, StoreEvent,
    StoredMessage, VisibilityChange,
};

/// A store under test and whatever keeps it alive (a temp dir, a schema).
pub struct Fixture {
    pub store: Arc<dyn Store>,
    pub _guard: Box<dyn Any + Send>,
}

pub(crate) const T0: i64 = 1_700_000_000_000;

fn attributes() -> BTreeMap<String, String> {
    [("VisibilityTimeout".to_owned(), "30".to_owned())]
        .into_iter()
        .collect()
}

pub(crate) async fn create(store: &dyn Store, name: &str, now: i64) -> i64 {
    let outcome = store
        .queue_create(QueueCreateParams {
            name: name.to_owned(),
            attributes: attributes(),
            tags: BTreeMap::new(),
            now,
            deleted_after: now - 60_000,
            fifo: false,
        })
        .await
        .unwrap();
    match outcome {
        QueueCreateOutcome::Created(record) => record.id,
        other => panic!("expected Created, got {other:?}"),
    }
}

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

pub(crate) fn message(body: &str, sent_at: i64, visible_at: i64) -> NewMessage {
    NewMessage {
        message_id: format!("id-{body}"),
        body: body.to_owned(),
        attributes: Default::default(),
        md5_of_body: "md5".to_owned(),
        md5_of_attributes: None,
        trace_header: None,
        group_id: None,
        sender_id: "sender".to_owned(),
        sent_at,
        visible_at,
        deduplication: None,
    }
}

/// The dedup window the suite's FIFO sends use: five minutes before `now`.
const DEDUP_WINDOW_MS: i64 = 300_000;

pub(crate) async fn insert(
    store: &dyn Store,
    queue_id: i64,
    messages: Vec<NewMessage>,
) -> Vec<i64> {
    insert_at(store, queue_id, messages, T0)
        .await
        .into_iter()
        .map(|inserted| inserted.seq)
        .collect()
}

async fn insert_at(
    store: &dyn Store,
    queue_id: i64,
    messages: Vec<NewMessage>,
    now: i64,
) -> Vec<InsertedMessage> {
    store
        .message_insert_batch(MessageInsertParams {
            queue_id,
            messages,
            deduplication_window_start: now - DEDUP_WINDOW_MS,
        })
        .await
        .unwrap()
}

fn receive_params(queue_id: i64, now: i64, max: u32, lease_ms: i64) -> MessageReceiveParams {
    MessageReceiveParams {
        queue_id,
        now,
        max_messages: max,
        visible_at: now + lease_ms,
        expired_at_or_before: now - 3_600_000,
        dead_letter: None,
        attempt: None,
    }
}

/// `count` messages `{prefix}0`, `{prefix}1`, … sent and visible at `at`.
fn numbered(prefix: &str, count: usize, at: i64) -> Vec<NewMessage> {
    (0..count)
        .map(|index| message(&format!("{prefix}{index}"), at, at))
        .collect()
}

/// Runs the sweep of deleted and purged queues until it finds nothing;
/// what each call dropped, each at most `limit`.
async fn sweep_until_done(store: &dyn Store, limit: u32) -> Vec<u64> {
    let mut swept = Vec::new();
    loop {
        match store.message_sweep_left_behind(limit).await.unwrap() {
            0 => return swept,
            dropped => {
                assert!(dropped <= u64::from(limit), "{dropped} > {limit}");
                swept.push(dropped);
            }
        }
        assert!(swept.len() <= 100, "the sweep does not end: {swept:?}");
    }
}

async fn stats(store: &dyn Store, queue_id: i64, now: i64) -> QueueStats {
    store
        .queue_stats(QueueStatsParams { queue_id, now })
        .await
        .unwrap()
}

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
    assert_eq!(second.dead_lettered, 1);
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
    assert_eq!(ended, [ChangeVisibilityOutcome::NotInFlight]);
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
    assert_eq!(second.dead_lettered, 1);
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
        assert_eq!(outcome.dead_lettered, 0);
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
    assert_eq!(relapsed.dead_lettered, 2);
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

async fn create_fifo(store: &dyn Store, name: &str) -> i64 {
    let outcome = store
        .queue_create(QueueCreateParams {
            name: name.to_owned(),
            attributes: attributes(),
            tags: BTreeMap::new(),
            now: T0,
            deleted_after: T0 - 60_000,
            fifo: true,
        })
        .await
        .unwrap();
    match outcome {
        QueueCreateOutcome::Created(record) => record.id,
        other => panic!("expected Created, got {other:?}"),
    }
}

/// A FIFO message of `group`, deduplicated queue-wide by its body.
fn fifo_message(body: &str, group: &str, now: i64) -> NewMessage {
    NewMessage {
        group_id: Some(group.to_owned()),
        deduplication: Some(Deduplication {
            scope: String::new(),
            id: body.to_owned(),
        }),
        ..message(body, now, now)
    }
}

/// Which sends of a batch the deduplication window answered.
fn duplicates(inserted: &[InsertedMessage]) -> Vec<bool> {
    inserted.iter().map(|inserted| inserted.duplicate).collect()
}

fn bodies(outcome: &ReceiveOutcome) -> Vec<&str> {
    outcome
        .messages
        .iter()
        .map(|message| message.body.as_str())
        .collect()
}

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
    assert_eq!(second.dead_lettered, 1);
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

/// Instantiates every conformance case for a store built by `$factory`
/// (an async fn returning a [`Fixture`]).
#[macro_export]
macro_rules! store_conformance {
    ($factory:path) => {
        $crate::store_conformance!(@cases $factory;
            queue_create_is_visible_to_get_and_list,
            deleted_queue_names_are_held_for_the_cooldown,
            deleted_queues_leave_their_messages_to_a_chunked_sweep,
            a_deep_purge_leaves_the_rest_to_the_sweep_and_spares_later_sends,
            a_deep_fifo_purge_clears_the_window_at_once_and_the_rest_through_the_sweep,
            a_deleted_fifo_queue_leaves_its_messages_to_the_sweep_and_its_window_to_expire,
            queue_updates_persist,
            receive_leases_oldest_first_and_counts_receives,
            a_batch_stores_each_message_under_the_sequence_number_it_reports,
            a_zero_lease_never_returns_a_message_twice_in_one_receive,
            a_zero_lease_beside_a_dead_letter_move_returns_each_message_once,
            expired_messages_are_dropped_not_delivered,
            a_receive_drops_at_most_its_budget_and_later_ones_do_the_rest,
            delete_is_idempotent_and_respects_newer_leases,
            visibility_changes_need_the_current_running_lease,
            purge_empties_once_per_cooldown,
            writes_to_a_deleted_queue_fail_cleanly,
            receive_moves_messages_past_the_limit_to_the_dead_letter_queue,
            move_tasks_move_visible_messages_once_and_wait_for_held_ones,
            the_relapse_brake_pauses_a_task_whose_messages_come_back,
            a_move_task_is_found_by_its_handle_whatever_its_status,
            move_task_filters_pick_by_class_age_and_count,
            a_missing_dead_letter_queue_moves_nothing,
            stats_split_visible_in_flight_and_delayed,
            fifo_groups_deliver_in_order_one_run_at_a_time,
            fifo_delays_hold_back_the_rest_of_their_group,
            fifo_deduplication_returns_the_first_send_within_the_window,
            fifo_delete_needs_a_running_lease,
            fifo_receive_attempts_replay_until_a_message_changes,
            fifo_dead_letter_moves_keep_the_rest_of_the_group_in_order,
            fifo_retention_drops_heads_and_unblocks_groups,
        );
    };
    (@cases $factory:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(fixture) = $factory().await {
                    conformance::$case(fixture).await;
                }
            }
        )*
    };
}
