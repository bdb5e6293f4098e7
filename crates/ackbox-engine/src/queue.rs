//! The queue registry: an in-memory cache of queue metadata over the store.
//!
//! The store is the source of truth; the registry is filled from it at start
//! and on a cache miss, and updated only after the store has committed a
//! change. Each queue carries the [`Notify`] that wakes its long pollers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use ackbox_core::attributes::QueueAttributes;
use ackbox_core::clock::Timestamp;
use ackbox_core::error::SqsError;
use ackbox_core::queue_name::QueueName;
use tokio::sync::Notify;

use crate::error::EngineError;
use crate::store::{QueueRecord, StoreError};

/// A snapshot of a queue's metadata; replaced whole when it changes.
#[derive(Debug, Clone)]
pub struct QueueSnapshot {
    /// Settable attributes.
    pub attributes: QueueAttributes,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last attribute change.
    pub last_modified_at: Timestamp,
}

/// One live queue.
#[derive(Debug)]
pub struct Queue {
    /// Store id; receipt handles carry it.
    pub id: i64,
    /// The name.
    pub name: QueueName,
    /// Metadata; written by admin operations after the store commits, read by every request.
    snapshot: RwLock<Arc<QueueSnapshot>>,
    /// Signalled when messages may have become receivable; long pollers wait on it.
    pub arrivals: Notify,
    /// Set once by DeleteQueue; long pollers holding this queue then stop.
    deleted: AtomicBool,
}

impl Queue {
    pub(crate) fn from_record(record: QueueRecord) -> Result<Self, EngineError> {
        let name = record
            .name
            .parse()
            .map_err(|_: SqsError| StoreError::Corrupt {
                detail: format!("stored queue name {:?} is invalid", record.name),
            })?;
        let attributes =
            QueueAttributes::from_map(&record.attributes).map_err(|error| StoreError::Corrupt {
                detail: format!(
                    "stored attributes of queue {}: {}",
                    record.name, error.message
                ),
            })?;
        Ok(Self {
            id: record.id,
            name,
            snapshot: RwLock::new(Arc::new(QueueSnapshot {
                attributes,
                tags: record.tags,
                created_at: record.created_at,
                last_modified_at: record.last_modified_at,
            })),
            arrivals: Notify::new(),
            deleted: AtomicBool::new(false),
        })
    }

    /// The current metadata.
    pub fn snapshot(&self) -> Arc<QueueSnapshot> {
        Arc::clone(&self.snapshot.read().expect("queue snapshot lock poisoned"))
    }

    /// Whether DeleteQueue removed this queue.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    pub(crate) fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
        self.arrivals.notify_waiters();
    }

    pub(crate) fn replace_snapshot(&self, snapshot: QueueSnapshot) {
        *self.snapshot.write().expect("queue snapshot lock poisoned") = Arc::new(snapshot);
    }
}

/// All known queues by name.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// Written by admin operations (create, delete, cache fill), read by every request.
    queues: RwLock<BTreeMap<String, Arc<Queue>>>,
}

impl Registry {
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Queue>> {
        self.queues
            .read()
            .expect("registry lock poisoned")
            .get(name)
            .cloned()
    }

    pub(crate) fn insert(&self, queue: Arc<Queue>) {
        crate::counters::queue_known(&queue.name);
        self.queues
            .write()
            .expect("registry lock poisoned")
            .insert(queue.name.to_string(), queue);
    }

    /// Inserts `queue` unless its name is already cached; returns the cached
    /// one, so every request shares one notifier per queue.
    pub(crate) fn insert_if_absent(&self, queue: Arc<Queue>) -> Arc<Queue> {
        crate::counters::queue_known(&queue.name);
        let mut queues = self.queues.write().expect("registry lock poisoned");
        Arc::clone(queues.entry(queue.name.to_string()).or_insert(queue))
    }

    pub(crate) fn remove(&self, name: &str) -> Option<Arc<Queue>> {
        self.queues
            .write()
            .expect("registry lock poisoned")
            .remove(name)
    }

    /// Names of the queues `wanted` accepts, in name order.
    pub(crate) fn matching(&self, wanted: impl Fn(&Queue) -> bool) -> Vec<QueueName> {
        let queues = self.queues.read().expect("registry lock poisoned");
        queues
            .values()
            .filter(|queue| wanted(queue))
            .map(|queue| queue.name.clone())
            .collect()
    }

    pub(crate) fn all(&self) -> Vec<Arc<Queue>> {
        self.queues
            .read()
            .expect("registry lock poisoned")
            .values()
            .cloned()
            .collect()
    }
}
