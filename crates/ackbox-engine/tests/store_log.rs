//! The store conformance suite on the log store (standard queues in the
//! log, the rest in SQLite), each case on its own temporary directory.

mod conformance;

use std::sync::Arc;

use ackbox_engine::store::log::LogStore;
use ackbox_engine::store::sqlite::Durability;
use conformance::Fixture;

async fn log() -> Option<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path(), Durability::Fsync).await.unwrap();
    Some(Fixture {
        store: Arc::new(store),
        _guard: Box::new(dir),
    })
}

store_conformance!(log);
