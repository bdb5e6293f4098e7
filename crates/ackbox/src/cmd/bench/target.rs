//! What the load generator drives: a queue it can produce to and consume
//! from, whatever the broker. One fresh queue per target and round.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

/// A queue under test. Workers get their own producer or consumer so that
/// each may hold its own connection, channel or lease state.
pub(super) trait Target: Send + Sync + 'static {
    /// Sends messages.
    type Producer: Producer;
    /// Receives and acknowledges messages.
    type Consumer: Consumer;

    /// A producer on the queue.
    fn producer(&self) -> impl Future<Output = anyhow::Result<Self::Producer>> + Send;

    /// A consumer on the queue.
    fn consumer(&self) -> impl Future<Output = anyhow::Result<Self::Consumer>> + Send;

    /// Deletes the queue and what is left in it.
    fn remove(&self) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Sends batches; clones share the producer's connection.
pub(super) trait Producer: Clone + Send + Sync + 'static {
    /// Sends `bodies` and returns once the broker acknowledged each as
    /// stored (as durably as the target promises); how many it stored.
    fn send(&self, bodies: &[Bytes]) -> impl Future<Output = anyhow::Result<u64>> + Send;
}

/// Receives and acknowledges.
pub(super) trait Consumer: Send + 'static {
    /// Receives up to 10 messages, waiting at most `wait` for the first,
    /// and acknowledges them (delete, ack); their bodies.
    fn receive(
        &mut self,
        wait: Duration,
    ) -> impl Future<Output = anyhow::Result<Vec<Bytes>>> + Send;
}
