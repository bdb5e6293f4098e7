//! What the consumer decided about each delivery, and the counts of those
//! decisions since the consumer was built.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the consumer decided about one delivery (one attempt of it, when a
/// message of an ordered group is retried in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The effect committed and the message was acknowledged.
    Applied,
    /// The effect had been applied before; the message was acknowledged.
    Duplicate,
    /// The handler failed transiently; the message comes back after a backoff.
    Failed,
    /// The message went to the dead-letter queue with its reason.
    Quarantined,
    /// A simulated crash stopped the work ([`Faults`](crate::testing::Faults)).
    Crashed,
    /// Given back unfinished: the shutdown deadline cut its handler off, or
    /// its lease was lost while it waited behind its group.
    Released,
    /// A replayed message for a handler that skips replays: acknowledged
    /// without running it.
    Skipped,
}

impl Decision {
    /// The decision as logs and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Duplicate => "duplicate",
            Self::Failed => "failed",
            Self::Quarantined => "quarantined",
            Self::Crashed => "crashed",
            Self::Released => "released",
            Self::Skipped => "skipped",
        }
    }

    /// Whether the message is finished with: acknowledged or dead-lettered.
    /// The next message of its group may run only after such a decision.
    pub(crate) fn settles(self) -> bool {
        matches!(
            self,
            Self::Applied | Self::Duplicate | Self::Quarantined | Self::Skipped
        )
    }
}

/// Counts of decisions since the consumer was built.
#[derive(Debug, Default)]
pub struct ConsumerStats {
    applied: AtomicU64,
    duplicates: AtomicU64,
    failed: AtomicU64,
    quarantined: AtomicU64,
    crashed: AtomicU64,
    released: AtomicU64,
    skipped: AtomicU64,
    extensions: AtomicU64,
    timeouts: AtomicU64,
}

impl ConsumerStats {
    pub(crate) fn count(&self, decision: Decision) {
        let counter = match decision {
            Decision::Applied => &self.applied,
            Decision::Duplicate => &self.duplicates,
            Decision::Failed => &self.failed,
            Decision::Quarantined => &self.quarantined,
            Decision::Crashed => &self.crashed,
            Decision::Released => &self.released,
            Decision::Skipped => &self.skipped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_extension(&self) {
        self.extensions.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Effects committed and acknowledged.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Deliveries found in the inbox and acknowledged without a handler call.
    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    /// Transient failures, each retried later (by the broker, or in place
    /// for a message its group waits on).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Messages sent to the dead-letter queue.
    pub fn quarantined(&self) -> u64 {
        self.quarantined.load(Ordering::Relaxed)
    }

    /// Simulated crashes.
    pub fn crashed(&self) -> u64 {
        self.crashed.load(Ordering::Relaxed)
    }

    /// Messages given back unfinished (shutdown deadline, lost lease).
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }

    /// Replayed messages skipped because their handler skips replays.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Lease extensions made by heartbeats.
    pub fn extensions(&self) -> u64 {
        self.extensions.load(Ordering::Relaxed)
    }

    /// Handler calls cut off by the handler timeout (each also counted as failed).
    pub fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }
}
