//! The store conformance suite on the log store (standard queues in the
//! log, the rest in SQLite), each case on its own temporary directory.

mod conformance;

use std::sync::Arc;

use ackbox_engine::store::log::LogStore;
use ackbox_engine::store::sqlite::{Durability, SqliteStore};
use ackbox_engine::store::{QueuePurgeParams, Store, StoreError};
use conformance::{Fixture, T0, create, insert, message};

async fn log() -> Option<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path(), Durability::Fsync).await.unwrap();
    Some(Fixture {
        store: Arc::new(store),
        _guard: Box::new(dir),
    })
}

store_conformance!(log);

// Switching embedded stores on one data directory must not hide messages:
// each store refuses a directory where the other left some.

#[tokio::test]
async fn the_log_store_refuses_a_directory_where_sqlite_holds_standard_messages() {
    let dir = tempfile::tempdir().unwrap();
    {
        let sqlite = SqliteStore::open(dir.path(), Durability::Fsync).unwrap();
        let queue = create(&sqlite, "written-by-sqlite", T0).await;
        insert(&sqlite, queue, vec![message("kept", T0, T0)]).await;
    }
    let refused = LogStore::open(dir.path(), Durability::Fsync).await.err();
    assert!(
        matches!(
            refused,
            Some(StoreError::WrittenByOtherStore {
                messages: 1,
                written_by: "sqlite",
                ..
            })
        ),
        "{refused:?}"
    );
}

#[tokio::test]
async fn the_sqlite_store_is_refused_a_directory_whose_log_holds_messages_until_drained() {
    let dir = tempfile::tempdir().unwrap();
    LogStore::ensure_no_messages_left(dir.path()).await.unwrap();
    let queue = {
        let store = LogStore::open(dir.path(), Durability::Fsync).await.unwrap();
        let queue = create(&store, "written-by-the-log", T0).await;
        insert(&store, queue, vec![message("kept", T0, T0)]).await;
        queue
    };
    let refused = LogStore::ensure_no_messages_left(dir.path()).await.err();
    assert!(
        matches!(
            refused,
            Some(StoreError::WrittenByOtherStore {
                messages: 1,
                written_by: "log",
                ..
            })
        ),
        "{refused:?}"
    );
    {
        let store = LogStore::open(dir.path(), Durability::Fsync).await.unwrap();
        store
            .queue_purge(QueuePurgeParams {
                queue_id: queue,
                now: T0 + 1,
                purged_after: T0 - 60_000,
                delete_at_once: 100,
            })
            .await
            .unwrap();
    }
    LogStore::ensure_no_messages_left(dir.path()).await.unwrap();
}

// A log lost from under its database (its directory gone) must be said,
// not served as empty queues.

#[tokio::test]
async fn a_log_gone_from_under_its_database_is_refused_not_served_empty() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = LogStore::open(dir.path(), Durability::Fsync).await.unwrap();
        let queue = create(&store, "acknowledged", T0).await;
        insert(&store, queue, vec![message("kept", T0, T0)]).await;
        store.close().await.unwrap();
    }
    std::fs::remove_dir_all(dir.path().join("log")).unwrap();
    let refused = LogStore::open(dir.path(), Durability::Fsync).await.err();
    let Some(error @ StoreError::LogLost { .. }) = refused else {
        panic!("served an empty log: {refused:?}");
    };
    assert!(
        error.to_string().contains("DELETE FROM log_written"),
        "{error}"
    );
}

#[tokio::test]
async fn a_log_that_never_took_a_message_may_start_empty() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = LogStore::open(dir.path(), Durability::Fsync).await.unwrap();
        create(&store, "created-but-never-sent-to", T0).await;
        store.close().await.unwrap();
    }
    std::fs::remove_dir_all(dir.path().join("log")).unwrap();
    let store = LogStore::open(dir.path(), Durability::Fsync).await.unwrap();
    store.close().await.unwrap();
}
