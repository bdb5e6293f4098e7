//! Keeps this node's queue and topic caches and long pollers in step with
//! the other nodes sharing its store.
//!
//! A shared store ([`Store::events`](crate::store::Store::events)) reports
//! what any node changed. A changed queue is read again from the store (the
//! source of truth), never patched from the event; messages that became
//! receivable wake the queue's long pollers; when events may have been lost,
//! every queue is read again, every topic definition forgotten and every
//! poller woken.

use std::sync::Arc;

use tokio::sync::broadcast::{Receiver, error::RecvError};

use crate::engine::Engine;
use crate::queue::Queue;
use crate::store::StoreEvent;

/// Starts following `events` on the engine's task tracker until shutdown.
pub(crate) fn spawn(engine: &Engine, mut events: Receiver<StoreEvent>) {
    let engine = engine.clone();
    let shutdown = engine.inner.shutdown.clone();
    engine.inner.tasks.clone().spawn(async move {
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => break,
                event = events.recv() => event,
            };
            match event {
                Ok(StoreEvent::MessagesAvailable { queue_id }) => engine.wake_pollers(queue_id),
                Ok(StoreEvent::QueueChanged { name }) => engine.reload_queue(&name).await,
                Ok(StoreEvent::TopicChanged { key }) => engine.inner.definitions.forget(&key),
                Ok(StoreEvent::Missed) | Err(RecvError::Lagged(_)) => {
                    engine.inner.definitions.forget_all();
                    engine.reload_queues().await;
                }
                Err(RecvError::Closed) => break,
            }
        }
    });
}

impl Engine {
    /// Wakes the queue's long pollers. Waking only one per commit was
    /// measured worse (W3 delivery p99 1.1 s instead of 0.1 s on one node):
    /// a commit on another node may carry up to ten messages per poller.
    fn wake_pollers(&self, queue_id: i64) {
        if let Some(queue) = self
            .inner
            .registry
            .all()
            .into_iter()
            .find(|queue| queue.id == queue_id)
        {
            queue.arrivals.notify_waiters();
        }
    }

    /// Reads queue `name` again: created, changed or deleted elsewhere.
    async fn reload_queue(&self, name: &str) {
        let _admin = self.inner.admin.lock().await;
        let record = match self.inner.store.queue_get(name).await {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(queue = name, %error, "cannot reload a queue another node changed");
                return;
            }
        };
        let cached = self.inner.registry.get(name);
        match (record, cached) {
            (None, Some(gone)) => {
                self.inner.registry.remove(name);
                gone.mark_deleted();
            }
            (None, None) => {}
            (Some(record), cached) => {
                let fresh = match Queue::from_record(record) {
                    Ok(fresh) => fresh,
                    Err(error) => {
                        tracing::warn!(queue = name, %error, "cannot reload a queue another node changed");
                        return;
                    }
                };
                match cached {
                    Some(cached) if cached.id == fresh.id => {
                        cached.replace_snapshot((*fresh.snapshot()).clone());
                        // A changed delay or visibility may let pollers in.
                        cached.arrivals.notify_waiters();
                    }
                    Some(replaced) => {
                        // Deleted and created again elsewhere: a new queue.
                        replaced.mark_deleted();
                        self.inner.registry.insert(Arc::new(fresh));
                    }
                    None => self.inner.registry.insert(Arc::new(fresh)),
                }
            }
        }
    }

    /// Reads every queue again, after events may have been lost.
    async fn reload_queues(&self) {
        let mut names: std::collections::BTreeSet<String> = self
            .inner
            .registry
            .all()
            .iter()
            .map(|queue| queue.name.to_string())
            .collect();
        match self.inner.store.queue_list().await {
            Ok(records) => names.extend(records.into_iter().map(|record| record.name)),
            Err(error) => tracing::warn!(%error, "cannot list queues to resynchronise"),
        }
        for name in names {
            self.reload_queue(&name).await;
        }
    }
}
