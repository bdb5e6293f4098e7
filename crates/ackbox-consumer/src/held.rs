//! A delivery while the consumer holds it: from the receive that leased it
//! until it is settled — acknowledged, dead-lettered or handed back.
//!
//! Holding a delivery means three things. It takes one of the consumer's
//! concurrency permits, so a run never holds more messages than it may
//! handle at once. Its lease is kept by a heartbeat, whether its handler
//! runs or it waits behind its group, so a message waiting its turn is not
//! delivered to someone else meanwhile. And it is listed among the run's
//! unsettled deliveries, so a shutdown that has to abort its task still
//! knows to give it back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;

use crate::message::Delivery;

/// One held delivery. Settle it with [`Held::settle`] once it is finished
/// with; dropping it unsettled (an aborted task) leaves it listed for the
/// shutdown to give back.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) delivery: Delivery,
    /// Its entry in `unsettled`.
    id: u64,
    unsettled: Arc<Unsettled>,
    /// Extends the lease until the delivery is dropped.
    heartbeat: Option<JoinHandle<()>>,
    /// Set by the heartbeat when an extension fails: another consumer may
    /// hold the message now.
    lease_lost: Arc<AtomicBool>,
    _permit: OwnedSemaphorePermit,
}

impl Held {
    pub(crate) fn new(
        delivery: Delivery,
        permit: OwnedSemaphorePermit,
        unsettled: &Arc<Unsettled>,
        heartbeat: Option<JoinHandle<()>>,
        lease_lost: Arc<AtomicBool>,
    ) -> Self {
        Self {
            id: unsettled.insert(delivery.clone()),
            delivery,
            unsettled: Arc::clone(unsettled),
            heartbeat,
            lease_lost,
            _permit: permit,
        }
    }

    /// Whether the lease may have passed to another consumer.
    pub(crate) fn lease_lost(&self) -> bool {
        self.lease_lost.load(Ordering::Acquire)
    }

    /// The delivery is finished with: stop its heartbeat, free its permit.
    pub(crate) fn settle(self) {
        self.unsettled.remove(self.id);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.abort();
        }
    }
}

/// The deliveries of one run that are held and not yet settled. Written by
/// [`Held`] (in on receive, out on settle); read by the shutdown, which
/// gives back whatever an aborted task left here.
#[derive(Debug, Default)]
pub(crate) struct Unsettled {
    next_id: AtomicU64,
    deliveries: Mutex<HashMap<u64, Delivery>>,
}

impl Unsettled {
    fn insert(&self, delivery: Delivery) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, delivery);
        id
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Everything still unsettled, forgotten here.
    pub(crate) fn drain(&self) -> Vec<Delivery> {
        self.lock().drain().map(|(_, delivery)| delivery).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Delivery>> {
        self.deliveries.lock().expect("unsettled lock poisoned")
    }
}
