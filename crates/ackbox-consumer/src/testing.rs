//! A fault kit, so applications can exercise their handlers the way they
//! will fail in production: "idempotency that has never been exercised is a
//! hypothesis".
//!
//! [`Faults`] makes the consumer stop dead at a chosen point, as if the
//! process had crashed there: no commit, no acknowledgement, no release; the
//! broker delivers the message again when its lease ends. Combine it with
//! [`UnreliableTransport`], which delivers some messages twice and batches
//! out of order.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;

use crate::error::{Failure, TransportError};
use crate::message::Delivery;
use crate::transport::{QueueSettings, Transport};

/// Where a simulated crash happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashPoint {
    /// While the handler runs: its transaction rolls back.
    DuringHandler,
    /// After the handler succeeded, before the commit: it rolls back.
    BeforeCommit,
    /// After the commit, before the acknowledgement: the effect is durable
    /// and the message comes back.
    AfterCommitBeforeAck,
    /// An outbox relay published an event and died before marking it: the
    /// event is published again.
    AfterPublishBeforeMark,
}

/// Simulated crashes: a point fires for chosen message ids, or at random.
#[derive(Debug, Default)]
pub struct Faults {
    planned: Mutex<Vec<(CrashPoint, String)>>,
    random: Mutex<Vec<(CrashPoint, f64)>>,
    crashes: AtomicU64,
}

impl Faults {
    /// No faults yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Crash once at `point` while processing the message with id `message_id`.
    pub fn crash_once(&self, point: CrashPoint, message_id: impl Into<String>) -> &Self {
        self.planned
            .lock()
            .expect("faults lock poisoned")
            .push((point, message_id.into()));
        self
    }

    /// Crash at `point` with probability `probability` on every message.
    pub fn crash_randomly(&self, point: CrashPoint, probability: f64) -> &Self {
        self.random
            .lock()
            .expect("faults lock poisoned")
            .push((point, probability));
        self
    }

    /// How many crashes were simulated.
    pub fn crashes(&self) -> u64 {
        self.crashes.load(Ordering::Relaxed)
    }

    /// Whether the consumer crashes at `point` for `message_id` now.
    pub(crate) fn fires(&self, point: CrashPoint, message_id: &str) -> bool {
        let planned = {
            let mut planned = self.planned.lock().expect("faults lock poisoned");
            match planned
                .iter()
                .position(|(at, id)| *at == point && id == message_id)
            {
                Some(position) => {
                    planned.remove(position);
                    true
                }
                None => false,
            }
        };
        let fired = planned
            || self
                .random
                .lock()
                .expect("faults lock poisoned")
                .iter()
                .any(|(at, probability)| *at == point && rand::rng().random_bool(*probability));
        if fired {
            self.crashes.fetch_add(1, Ordering::Relaxed);
        }
        fired
    }
}

/// Wraps a transport and makes it misbehave the way brokers legitimately
/// do: deliver a share of the messages twice in one receive (same token),
/// hand batches over out of order, and lose leases (every extension fails).
/// It counts acknowledgements, so a test can tell that none was sent twice.
#[derive(Debug)]
pub struct UnreliableTransport<T> {
    inner: T,
    duplicate_probability: f64,
    reorder: bool,
    lose_leases: bool,
    duplicated: AtomicU64,
    acks: AtomicU64,
}

impl<T> UnreliableTransport<T> {
    /// `inner`, behaving well until told otherwise.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            duplicate_probability: 0.0,
            reorder: false,
            lose_leases: false,
            duplicated: AtomicU64::new(0),
            acks: AtomicU64::new(0),
        }
    }

    /// Fails every lease extension, as when another consumer took the message.
    pub fn losing_leases(mut self) -> Self {
        self.lose_leases = true;
        self
    }

    /// Acknowledgements sent through this transport.
    pub fn acks(&self) -> u64 {
        self.acks.load(Ordering::Relaxed)
    }

    /// Delivers each message a second time with `probability`.
    pub fn duplicating(mut self, probability: f64) -> Self {
        self.duplicate_probability = probability;
        self
    }

    /// Hands every batch over in reverse order.
    pub fn reordering(mut self) -> Self {
        self.reorder = true;
        self
    }

    /// How many duplicates were injected.
    pub fn duplicated(&self) -> u64 {
        self.duplicated.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl<T: Transport> Transport for UnreliableTransport<T> {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, TransportError> {
        let deliveries = self.inner.receive(max, wait).await?;
        let mut out = Vec::with_capacity(deliveries.len() * 2);
        for delivery in deliveries {
            if self.duplicate_probability > 0.0
                && rand::rng().random_bool(self.duplicate_probability)
            {
                self.duplicated.fetch_add(1, Ordering::Relaxed);
                out.push(delivery.clone());
            }
            out.push(delivery);
        }
        if self.reorder {
            out.reverse();
        }
        Ok(out)
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), TransportError> {
        self.acks.fetch_add(1, Ordering::Relaxed);
        self.inner.ack(delivery).await
    }

    async fn extend(&self, delivery: &Delivery, lease: Duration) -> Result<(), TransportError> {
        if self.lose_leases {
            return Err(TransportError::new(
                "extend",
                "the lease was lost (simulated)",
            ));
        }
        self.inner.extend(delivery, lease).await
    }

    async fn retry(
        &self,
        delivery: &Delivery,
        delay: Duration,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        self.inner.retry(delivery, delay, failure).await
    }

    async fn dead_letter(
        &self,
        delivery: &Delivery,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        self.inner.dead_letter(delivery, failure).await
    }

    async fn release(&self, delivery: &Delivery) -> Result<(), TransportError> {
        self.inner.release(delivery).await
    }

    async fn settings(&self) -> Result<QueueSettings, TransportError> {
        self.inner.settings().await
    }

    fn carries_groups(&self) -> bool {
        self.inner.carries_groups()
    }
}
