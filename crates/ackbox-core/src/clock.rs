//! Time as an input.
//!
//! The engine reads [`Clock::now`] once per request and passes the instant down
//! to the store, so tests can move time instead of sleeping through visibility
//! timeouts and retention periods.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, the unit SQS uses in its timestamps.
pub type Timestamp = i64;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current time in epoch milliseconds.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| {
                i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
            })
    }
}

/// A clock that moves only when told to; clones share the same time.
///
/// ```
/// use ackbox_core::clock::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance_secs(30);
/// assert_eq!(clock.now(), 31_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `start` epoch milliseconds.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(start)),
        }
    }

    /// Moves the clock forward by `millis`.
    pub fn advance_millis(&self, millis: i64) {
        self.now.fetch_add(millis, Ordering::SeqCst);
    }

    /// Moves the clock forward by `secs`.
    pub fn advance_secs(&self, secs: i64) {
        self.advance_millis(secs * 1_000);
    }

    /// Sets the clock to `at`.
    pub fn set(&self, at: Timestamp) {
        self.now.store(at, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.now.load(Ordering::SeqCst)
    }
}
