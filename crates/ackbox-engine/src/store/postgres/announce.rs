//! Tells the other nodes about arrivals after the sends commit, not inside
//! them.
//!
//! PostgreSQL serialises the commits of transactions that `NOTIFY`: each
//! holds one database-wide lock from just before its commit until its WAL
//! flush has finished, so with a `NOTIFY` in every send, sends fsync one at a
//! time and group commit is lost. Measured on one node (2-core VM): 1,000
//! single-message sends a second fell behind (694 a second, p50 latency
//! 1.9 s) as soon as the fsyncs slowed after a checkpoint. Here sends and
//! move-task steps (the durable commits that bring messages) only mark
//! their queues; one task announces every marked queue in a single
//! statement on the lease pool (no fsync under the lock), so announcements
//! also coalesce under load.

use std::collections::BTreeSet;
use std::mem;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::MESSAGES_CHANNEL;

/// The least time between two announcements.
const COALESCING_PAUSE: Duration = Duration::from_millis(1);
/// How long a failed announcement waits before it is tried again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Queues that received messages since the last announcement.
#[derive(Debug, Default)]
pub(super) struct Announcer {
    pending: Mutex<BTreeSet<i64>>,
    marked: Notify,
}

impl Announcer {
    /// Marks `queue_id` as having new messages; called after the commit, so
    /// a node woken by the announcement finds them.
    pub(super) fn announce(&self, queue_id: i64) {
        self.pending
            .lock()
            .expect("announcer poisoned")
            .insert(queue_id);
        // Stores a permit when the task is busy announcing: it comes back.
        self.marked.notify_one();
    }

    fn take(&self) -> Vec<i64> {
        mem::take(&mut *self.pending.lock().expect("announcer poisoned"))
            .into_iter()
            .collect()
    }

    /// Announces marked queues until `stop`. A failed announcement is
    /// tried again a second later; meanwhile other nodes' pollers still find
    /// the messages at their periodic recheck.
    pub(super) async fn run(&self, pool: PgPool, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.marked.notified() => {}
            }
            let queues = self.take();
            if queues.is_empty() {
                continue;
            }
            let announced = sqlx::query(
                "SELECT pg_notify($1, queue_id::text) FROM UNNEST($2::bigint[]) AS queue_id",
            )
            .bind(MESSAGES_CHANNEL)
            .bind(&queues)
            .execute(&pool)
            .await;
            // A pause between announcements lets a busy node's sends share
            // one: each costs a statement here and a wake-up on every node.
            let pause = if let Err(error) = announced {
                tracing::warn!(%error, "cannot announce arrivals to the other nodes; retrying");
                for queue_id in queues {
                    self.announce(queue_id);
                }
                RETRY_PAUSE
            } else {
                COALESCING_PAUSE
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}
