//! The sweeper: drops messages that outlived their queue's
//! `MessageRetentionPeriod`, and the messages that deleted queues and purges
//! of deep queues left behind.
//!
//! Receives already skip and drop expired messages they meet; the sweeper
//! keeps the counters honest for queues nobody reads. It deletes in bounded
//! chunks so one huge expiry or deleted queue never holds the writer for long.

use ackbox_core::limits::{FIFO_DEDUPLICATION_WINDOW_SECONDS, RECEIVE_ATTEMPT_WINDOW_SECONDS};

use crate::counters;
use crate::engine::Engine;
use crate::store::MessageExpireParams;

/// Most messages one sweep step deletes per queue.
const SWEEP_CHUNK: u32 = 10_000;
/// Messages of deleted or purged queues dropped per store call; each call is
/// its own writer job, so other work goes on between them.
const LEFT_BEHIND_CHUNK: u32 = 1_000;
/// Calls per sweep: at most 100,000 messages a second, and the other sweeps
/// are not kept waiting behind a deep deleted queue.
const LEFT_BEHIND_CHUNKS_PER_SWEEP: usize = 100;

/// Starts the sweeper on the engine's task tracker; it stops at shutdown.
pub(crate) fn spawn(engine: &Engine) {
    let engine = engine.clone();
    let interval = engine.inner.config.retention_sweep_interval;
    let shutdown = engine.inner.shutdown.clone();
    engine.inner.tasks.clone().spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(interval) => {}
            }
            engine.sweep_expired().await;
            engine.sweep_left_behind().await;
            engine.sweep_fifo_windows().await;
            // Only another node can start a task this one does not run.
            if engine.inner.shared_store {
                if let Err(error) = engine.adopt_move_tasks().await {
                    tracing::warn!(%error, "cannot look for move tasks to run; will retry");
                }
                if let Err(error) = engine.adopt_replays(false).await {
                    tracing::warn!(%error, "cannot look for replays to run; will retry");
                }
            }
        }
    });
}

impl Engine {
    /// Deletes expired messages of every queue, one bounded chunk per
    /// queue; the reaper calls it every `retention_sweep_interval`.
    pub async fn sweep_expired(&self) -> u64 {
        let mut total = 0;
        for queue in self.inner.registry.all() {
            let retention_ms = queue.snapshot().attributes.retention_seconds() * 1_000;
            let params = MessageExpireParams {
                queue_id: queue.id,
                expired_at_or_before: self.now() - retention_ms,
                limit: SWEEP_CHUNK,
            };
            match self.inner.store.message_expire(params).await {
                Ok(expired) => {
                    counters::expired(&queue.name, expired);
                    if expired > 0 {
                        tracing::debug!(queue = %queue.name, expired, "dropped messages past retention");
                    }
                    total += expired;
                }
                Err(error) => {
                    tracing::warn!(queue = %queue.name, %error, "retention sweep failed; will retry");
                }
            }
        }
        total
    }

    /// Drops messages that deleted queues and purges of deep queues left
    /// behind (and the deduplication ids a FIFO queue's purge voided), a
    /// bounded number of chunks per sweep; returns how many rows.
    pub(crate) async fn sweep_left_behind(&self) -> u64 {
        let mut total = 0;
        for _ in 0..LEFT_BEHIND_CHUNKS_PER_SWEEP {
            let started = tokio::time::Instant::now();
            match self
                .inner
                .store
                .message_sweep_left_behind(LEFT_BEHIND_CHUNK)
                .await
            {
                Ok(0) => break,
                Ok(dropped) => {
                    total += dropped;
                    // Leaves the store at least half its time. Measured on a
                    // purge of 1.9M: flat out, others' p99 went from 8 to
                    // 166 ms; paced, to 133 ms (the deletes' I/O remains).
                    tokio::time::sleep(started.elapsed()).await;
                }
                Err(error) => {
                    tracing::warn!(%error, "sweep of deleted and purged queues failed; will retry");
                    break;
                }
            }
        }
        if total > 0 {
            tracing::debug!(
                dropped = total,
                "dropped messages of deleted and purged queues"
            );
        }
        total
    }

    /// Forgets FIFO deduplication ids and receive attempts past their window.
    /// Lookups check the age themselves, so this only bounds the tables.
    pub(crate) async fn sweep_fifo_windows(&self) {
        let window_ms =
            FIFO_DEDUPLICATION_WINDOW_SECONDS.max(RECEIVE_ATTEMPT_WINDOW_SECONDS) * 1_000;
        if let Err(error) = self
            .inner
            .store
            .fifo_window_expire(self.now() - window_ms)
            .await
        {
            tracing::warn!(%error, "FIFO window sweep failed; will retry");
        }
    }
}
