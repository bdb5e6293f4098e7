//! Leases kept by the transport itself, for brokers whose deliveries have
//! no lease of their own (RabbitMQ holds an unacknowledged message until its
//! channel closes) or whose lease the client cannot ask about (JetStream's
//! `AckWait` is the server's; a late acknowledgement would still be taken).
//!
//! The table answers one question safely: may this delivery still be
//! acknowledged, extended or given back? A delivery whose lease ran out is
//! forgotten here, so its holder learns it lost the message instead of
//! acknowledging what a newer holder may be working on.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::TransportError;

/// Deliveries held by this transport, by token, with their deadlines.
#[derive(Debug)]
pub(crate) struct Leases<T> {
    held: Mutex<HashMap<String, Held<T>>>,
}

#[derive(Debug)]
struct Held<T> {
    deadline: Instant,
    handle: T,
}

impl<T> Default for Leases<T> {
    fn default() -> Self {
        Self {
            held: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Leases<T> {
    /// A delivery received now, leased for `lease`.
    pub(crate) fn hold(&self, token: String, handle: T, lease: Duration) {
        let deadline = Instant::now() + lease;
        self.lock().insert(token, Held { deadline, handle });
    }

    /// Keeps the lease `lease` more from now, if it is still held.
    pub(crate) fn extend(
        &self,
        token: &str,
        lease: Duration,
        operation: &'static str,
    ) -> Result<T, TransportError> {
        let now = Instant::now();
        let mut held = self.lock();
        match held.get_mut(token) {
            Some(entry) if entry.deadline > now => {
                entry.deadline = now + lease;
                Ok(entry.handle.clone())
            }
            Some(_) => {
                held.remove(token);
                Err(lost(operation))
            }
            None => Err(lost(operation)),
        }
    }

    /// Ends the lease (acknowledge, retry, dead-letter, release), if it is
    /// still held: only one caller gets the handle.
    pub(crate) fn take(&self, token: &str, operation: &'static str) -> Result<T, TransportError> {
        let now = Instant::now();
        match self.lock().remove(token) {
            Some(entry) if entry.deadline > now => Ok(entry.handle),
            _ => Err(lost(operation)),
        }
    }

    /// Removes and returns the deliveries whose leases ran out.
    pub(crate) fn expired(&self) -> Vec<T> {
        let now = Instant::now();
        let mut expired = Vec::new();
        self.lock().retain(|_, entry| {
            if entry.deadline > now {
                true
            } else {
                expired.push(entry.handle.clone());
                false
            }
        });
        expired
    }

    /// Forgets every lease (the channel that held them closed, so the broker
    /// gave the messages back).
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held<T>>> {
        self.held.lock().expect("lease table poisoned")
    }
}

fn lost(operation: &'static str) -> TransportError {
    TransportError::new(
        operation,
        "the lease ran out or the delivery was already settled; another holder may have the message",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_settled_once() {
        let leases = Leases::default();
        leases.hold("t".into(), 7u64, Duration::from_secs(60));
        assert_eq!(leases.take("t", "ack").unwrap(), 7);
        assert!(
            leases.take("t", "ack").is_err(),
            "a second settlement fails"
        );
        assert!(
            leases
                .extend("t", Duration::from_secs(1), "extend")
                .is_err()
        );
    }

    #[test]
    fn an_expired_lease_cannot_be_settled_or_extended() {
        let leases = Leases::default();
        leases.hold("gone".into(), 1u64, Duration::ZERO);
        leases.hold("kept".into(), 2u64, Duration::from_secs(60));
        assert!(
            leases
                .extend("gone", Duration::from_secs(60), "extend")
                .is_err()
        );
        assert!(leases.take("gone", "ack").is_err());
        assert_eq!(leases.expired(), Vec::<u64>::new(), "already forgotten");
        leases.hold("late".into(), 3u64, Duration::ZERO);
        assert_eq!(leases.expired(), [3]);
        assert_eq!(leases.extend("kept", Duration::ZERO, "extend").unwrap(), 2);
        assert_eq!(leases.expired(), [2], "an extension to zero ends it");
    }
}
