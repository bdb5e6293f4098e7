//! The store conformance suite (ARCHITECTURE.md, "Conventions the tests
//! cite"): every behaviour the engine relies on, written once against
//! `dyn Store` and instantiated per backend by [`store_conformance!`]. A
//! behaviour that differs between stores is a bug.
//!
//! The cases live in files named like the stores' own (`queue.rs`,
//! `message.rs`, `receive.rs`, `fifo.rs`, `move_task.rs`, `sweep.rs`), so
//! a failing case points at the file of SQL to read; the helpers they share
//! are here.

#![allow(dead_code, unreachable_pub)]

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use ackbox_engine::store::{
    ChangeVisibilityOutcome, DeadLetterTarget, Deduplication, DeleteOutcome, FailureReport,
    InsertedMessage, LeaseRef, MessageChangeVisibilityParams, MessageDeleteParams,
    MessageExpireParams, MessageInsertParams, MessageNackParams, MessagePeekParams,
    MessageReceiveParams, MoveDestination, MoveFilter, MoveTaskCreateOutcome, MoveTaskCreateParams,
    MoveTaskFilter, MoveTaskStepParams, NewMessage, QueueCreateOutcome, QueueCreateParams,
    QueueDeleteParams, QueuePurgeOutcome, QueuePurgeParams, QueueStats, QueueStatsParams,
    QueueUpdateParams, ReceiveAttempt, ReceiveOutcome, Store, StoreError, StoreEvent,
    StoredMessage, VisibilityChange,
};

mod fifo;
mod message;
mod move_task;
mod queue;
mod receive;
mod sweep;

pub use fifo::*;
pub use message::*;
pub use move_task::*;
pub use queue::*;
pub use receive::*;
pub use sweep::*;

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
            a_peek_pages_after_a_sequence_number_and_leases_nothing,
            concurrent_sends_each_get_their_own_sequence_numbers,
            a_zero_lease_never_returns_a_message_twice_in_one_receive,
            a_zero_lease_beside_a_dead_letter_move_returns_each_message_once,
            expired_messages_are_dropped_not_delivered,
            a_receive_drops_at_most_its_budget_and_later_ones_do_the_rest,
            delete_is_idempotent_and_respects_newer_leases,
            visibility_changes_need_the_current_running_lease,
            purge_empties_once_per_cooldown,
            writes_to_a_deleted_queue_fail_cleanly,
            receive_moves_messages_past_the_limit_to_the_dead_letter_queue,
            a_dead_letter_move_reports_each_messages_last_failure_class,
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
