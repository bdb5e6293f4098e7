//! A [`Store`] that fails the calls a test chooses, around a real one:
//! before the call reaches the store (nothing applied) or after it returns
//! (applied, yet the engine hears an error, as when a connection drops
//! between a commit and its answer). Engine tests put it under an engine to
//! show that a failure in the middle of a receive, a move task or a purge
//! loses nothing and doubles nothing.
//!
//! The injected error is [`StoreError::Unavailable`], the one a store
//! answers while it cannot serve: clients hear `ServiceUnavailable` and
//! retry.

use std::sync::{Arc, Mutex, PoisonError};

use ackbox_core::clock::Timestamp;
use ackbox_engine::store::{
    ChangeVisibilityOutcome, DeleteOutcome, FailureClassCount, InsertedMessage,
    MessageChangeVisibilityParams, MessageDeleteParams, MessageExpireParams, MessageInsertParams,
    MessageNackParams, MessagePeekParams, MessageReceiveParams, MoveTaskCreateOutcome,
    MoveTaskCreateParams, MoveTaskFilter, MoveTaskRecord, MoveTaskStepOutcome, MoveTaskStepParams,
    NackOutcome, QueueCreateOutcome, QueueCreateParams, QueueDeleteParams, QueuePurgeOutcome,
    QueuePurgeParams, QueueRecord, QueueStats, QueueStatsParams, QueueUpdateParams, ReceiveOutcome,
    Store, StoreError, StoreEvent, StoredMessage, TopicRecord,
};
use async_trait::async_trait;

/// Where a fault strikes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// The call fails without reaching the store.
    Before,
    /// The store applies the call, and the caller hears an error instead of
    /// its answer.
    After,
}

/// The reason an injected failure carries.
pub const INJECTED: &str = "fault injected by FaultyStore";

#[derive(Debug)]
struct Armed {
    operation: &'static str,
    point: FaultPoint,
    left: u32,
}

/// A store whose chosen calls fail; see the module docs.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    armed: Mutex<Vec<Armed>>,
    fired: Mutex<Vec<(&'static str, FaultPoint)>>,
}

impl FaultyStore {
    /// Wraps `inner`, failing nothing until told to.
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            armed: Mutex::new(Vec::new()),
            fired: Mutex::new(Vec::new()),
        })
    }

    /// Fails the next `times` calls of `operation` (a [`Store`] method's
    /// name, such as `"message_receive"`) at `point`.
    pub fn fail(&self, operation: &'static str, point: FaultPoint, times: u32) {
        self.armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Armed {
                operation,
                point,
                left: times,
            });
    }

    /// The faults that struck so far, in order.
    pub fn fired(&self) -> Vec<(&'static str, FaultPoint)> {
        self.fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether a fault armed for `operation` at `point` strikes now.
    fn strikes(&self, operation: &'static str, point: FaultPoint) -> bool {
        let mut armed = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(fault) = armed
            .iter_mut()
            .find(|fault| fault.operation == operation && fault.point == point && fault.left > 0)
        else {
            return false;
        };
        fault.left -= 1;
        self.fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((operation, point));
        true
    }

    fn check(&self, operation: &'static str, point: FaultPoint) -> Result<(), StoreError> {
        if self.strikes(operation, point) {
            Err(StoreError::Unavailable { reason: INJECTED })
        } else {
            Ok(())
        }
    }
}

/// Implements [`Store`] by delegating each listed method to the inner
/// store, through the faults (the whole impl, so that `async_trait` sees
/// the methods expanded).
macro_rules! faulty_store {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        #[async_trait]
        impl Store for FaultyStore {
            $(
                async fn $name(&self, $($arg: $ty),*) -> Result<$out, StoreError> {
                    self.check(stringify!($name), FaultPoint::Before)?;
                    let answer = self.inner.$name($($arg),*).await?;
                    self.check(stringify!($name), FaultPoint::After)?;
                    Ok(answer)
                }
            )*

            fn disk_full(&self) -> bool {
                self.inner.disk_full()
            }

            fn events(&self) -> Option<tokio::sync::broadcast::Receiver<StoreEvent>> {
                self.inner.events()
            }
        }
    };
}

faulty_store! {
    queue_create(params: QueueCreateParams) -> QueueCreateOutcome;
    queue_list() -> Vec<QueueRecord>;
    queue_get(name: &str) -> Option<QueueRecord>;
    queue_update(params: QueueUpdateParams) -> ();
    queue_delete(params: QueueDeleteParams) -> bool;
    queue_purge(params: QueuePurgeParams) -> QueuePurgeOutcome;
    queue_stats(params: QueueStatsParams) -> QueueStats;
    message_insert_batch(params: MessageInsertParams) -> Vec<InsertedMessage>;
    message_insert_atomic(batches: Vec<MessageInsertParams>) -> Vec<Vec<InsertedMessage>>;
    message_receive(params: MessageReceiveParams) -> ReceiveOutcome;
    message_delete_batch(params: MessageDeleteParams) -> Vec<DeleteOutcome>;
    message_change_visibility_batch(params: MessageChangeVisibilityParams) -> Vec<ChangeVisibilityOutcome>;
    message_nack(params: MessageNackParams) -> NackOutcome;
    message_failure_classes(queue_id: i64, sent_before: Option<Timestamp>) -> Vec<FailureClassCount>;
    message_peek(params: MessagePeekParams) -> Vec<StoredMessage>;
    move_task_create(params: MoveTaskCreateParams) -> MoveTaskCreateOutcome;
    move_task_step(params: MoveTaskStepParams) -> MoveTaskStepOutcome;
    move_task_resume(handle: &str) -> Option<MoveTaskRecord>;
    move_task_cancel(handle: &str, now: Timestamp) -> Option<MoveTaskRecord>;
    move_task_list(filter: MoveTaskFilter, limit: u32) -> Vec<MoveTaskRecord>;
    message_expire(params: MessageExpireParams) -> u64;
    fifo_window_expire(before: Timestamp) -> u64;
    message_sweep_left_behind(limit: u32) -> u64;
    topic_list() -> Vec<TopicRecord>;
    topic_get(name: &str) -> Option<TopicRecord>;
    topic_write(name: &str, definition: String, revision: Option<i64>) -> bool;
    topic_delete(name: &str) -> bool;
    close() -> ();
}
