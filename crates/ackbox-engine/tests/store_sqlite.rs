//! The store conformance suite on the embedded SQLite store, each case on its
//! own temporary database file.

mod conformance;

use std::sync::Arc;

use ackbox_engine::store::sqlite::{Durability, SqliteStore};
use conformance::Fixture;

async fn sqlite() -> Option<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), Durability::Fsync).unwrap();
    Some(Fixture {
        store: Arc::new(store),
        _guard: Box::new(dir),
    })
}

store_conformance!(sqlite);
