//! The faults a run injects. Both runs — with ackbox-consumer and without —
//! get the same plan, so the difference in their tallies is the consumers'.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ackbox_consumer::testing::{CrashPoint, Faults};
use rand::Rng;

/// The consumers' crash points: before the work, after the work and before
/// its commit, after the commit and before the acknowledgement.
pub const CONSUMER_CRASH_POINTS: [CrashPoint; 3] = [
    CrashPoint::DuringHandler,
    CrashPoint::BeforeCommit,
    CrashPoint::AfterCommitBeforeAck,
];

/// How often each fault strikes.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    /// Chance that a consumer dies at each of [`CONSUMER_CRASH_POINTS`], per
    /// delivery: it neither commits nor acknowledges past that point, and
    /// the broker delivers the message again when its lease ends.
    pub crash_probability: f64,
    /// Chance that a delivery is handed to the consumer twice at once.
    pub duplicate_probability: f64,
    /// Whether status events are handed over in reverse order in each batch.
    pub reorder_status_events: bool,
    /// Chance that the gateway charges and then answers too late for the
    /// client, which sees a timeout.
    pub slow_answer_probability: f64,
    /// How late a slow answer comes.
    pub slow_answer_by: Duration,
    /// Chance that the outbox relay dies after publishing a batch and before
    /// marking it published, so the batch is published again.
    pub relay_crash_probability: f64,
    /// Orders whose events are replayed from history once the run settles.
    pub replayed_orders: u64,
}

impl FaultPlan {
    /// The faults the example injects by default. The rates are high enough
    /// that a consumer without an inbox and effect records charges some
    /// orders twice at any order count the example is run with (the chance
    /// that 60 orders escape every duplicate, late answer, crash and relay
    /// republication is far below one in a million).
    pub fn injected() -> Self {
        Self {
            crash_probability: 0.05,
            duplicate_probability: 0.1,
            reorder_status_events: true,
            slow_answer_probability: 0.1,
            slow_answer_by: Duration::from_secs(1),
            relay_crash_probability: 0.2,
            replayed_orders: 10,
        }
    }

    /// Nothing goes wrong.
    pub fn none() -> Self {
        Self {
            crash_probability: 0.0,
            duplicate_probability: 0.0,
            reorder_status_events: false,
            slow_answer_probability: 0.0,
            slow_answer_by: Duration::ZERO,
            relay_crash_probability: 0.0,
            replayed_orders: 0,
        }
    }

    /// Crashes for a consumer built with ackbox-consumer.
    pub(crate) fn consumer_faults(&self) -> Arc<Faults> {
        let faults = Faults::new();
        if self.crash_probability > 0.0 {
            for point in CONSUMER_CRASH_POINTS {
                faults.crash_randomly(point, self.crash_probability);
            }
        }
        Arc::new(faults)
    }

    /// Crashes for the outbox relay.
    pub(crate) fn relay_faults(&self) -> Arc<Faults> {
        let faults = Faults::new();
        if self.relay_crash_probability > 0.0 {
            faults.crash_randomly(
                CrashPoint::AfterPublishBeforeMark,
                self.relay_crash_probability,
            );
        }
        Arc::new(faults)
    }

    /// The same crashes for a consumer that does without ackbox-consumer
    /// (whose [`Faults`] only the SDK's consumer can fire).
    pub(crate) fn naive_crashes(&self) -> Arc<Crashes> {
        Arc::new(Crashes {
            probability: self.crash_probability,
            crashes: AtomicU64::new(0),
        })
    }
}

/// Random crashes at [`CONSUMER_CRASH_POINTS`], for the naive consumers.
#[derive(Debug)]
pub(crate) struct Crashes {
    probability: f64,
    crashes: AtomicU64,
}

impl Crashes {
    /// Whether the consumer dies at `point` now.
    pub(crate) fn fire(&self, point: CrashPoint) -> bool {
        let fired = CONSUMER_CRASH_POINTS.contains(&point)
            && self.probability > 0.0
            && rand::rng().random_bool(self.probability);
        if fired {
            self.crashes.fetch_add(1, Ordering::Relaxed);
        }
        fired
    }

    /// Crashes so far.
    pub(crate) fn count(&self) -> u64 {
        self.crashes.load(Ordering::Relaxed)
    }
}
