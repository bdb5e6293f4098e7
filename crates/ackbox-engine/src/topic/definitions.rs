//! Topic definitions (and queues' archive records) as this node last read
//! them, so that a publish does not read and decode its topic from the
//! store every time.
//!
//! Every write and delete of a definition goes through here and forgets
//! what it changed once the store has it, so this node reads its own
//! changes at once. Another node's changes arrive as
//! [`StoreEvent::TopicChanged`](crate::store::StoreEvent) and are
//! forgotten when heard (a lost event forgets everything); until then this
//! node publishes by what it read before, as SNS does for a moment after a
//! subscription changes. A change itself never trusts the cache: it reads
//! the store and writes over the revision it read.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::TopicDefinition;
use crate::engine::Engine;
use crate::error::EngineError;

/// What this node read, and how many times it forgot something: a read
/// that began before a forget must not fill the cache with what it read.
#[derive(Debug, Default)]
pub(crate) struct DefinitionCache {
    state: Mutex<CacheState>,
}

#[derive(Debug, Default)]
struct CacheState {
    entries: HashMap<String, (TopicDefinition, i64)>,
    forgets: u64,
}

impl DefinitionCache {
    fn state(&self) -> MutexGuard<'_, CacheState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets the definition under `key`.
    pub(crate) fn forget(&self, key: &str) {
        let mut state = self.state();
        state.entries.remove(key);
        state.forgets += 1;
    }

    /// Forgets every definition (events from other nodes may be lost).
    pub(crate) fn forget_all(&self) {
        let mut state = self.state();
        state.entries.clear();
        state.forgets += 1;
    }
}

impl Engine {
    /// The definition stored under `key` (a topic's name, or a queue's
    /// archive record) and its revision, from this node's cache.
    pub(super) async fn definition(
        &self,
        key: &str,
    ) -> Result<Option<(TopicDefinition, i64)>, EngineError> {
        let cache = &self.inner.definitions;
        let forgets = {
            let state = cache.state();
            if let Some(cached) = state.entries.get(key) {
                return Ok(Some(cached.clone()));
            }
            state.forgets
        };
        let read = self.stored_definition(key).await?;
        if let Some(read) = &read {
            let mut state = cache.state();
            if state.forgets == forgets {
                state.entries.insert(key.to_owned(), read.clone());
            }
        }
        Ok(read)
    }

    /// The definition under `key` as the store has it now: what a change
    /// starts from.
    pub(super) async fn stored_definition(
        &self,
        key: &str,
    ) -> Result<Option<(TopicDefinition, i64)>, EngineError> {
        let Some(record) = self.inner.store.topic_get(key).await? else {
            return Ok(None);
        };
        Ok(Some((TopicDefinition::decode(&record)?, record.revision)))
    }

    /// Stores `definition` under `key`: new when `revision` is `None`, else
    /// over that revision. `false` when the key exists (new) or another
    /// change came first.
    pub(super) async fn write_definition(
        &self,
        key: &str,
        definition: &TopicDefinition,
        revision: Option<i64>,
    ) -> Result<bool, EngineError> {
        let written = self
            .inner
            .store
            .topic_write(key, definition.encode(), revision)
            .await;
        self.inner.definitions.forget(key);
        Ok(written?)
    }

    /// Deletes the definition under `key`; `false` when there was none.
    pub(super) async fn delete_definition(&self, key: &str) -> Result<bool, EngineError> {
        let deleted = self.inner.store.topic_delete(key).await;
        self.inner.definitions.forget(key);
        Ok(deleted?)
    }
}
