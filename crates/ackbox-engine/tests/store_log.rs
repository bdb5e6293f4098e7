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

// A directory two servers shared before the lock: messages of one standard
// queue in both stores, each store refusing it. Adoption moves the other
// store's messages over, losing none.

/// A data directory with `in_sqlite` messages of queue `shared` in SQLite
/// and `in_log` in the log beside it; the queue's id.
async fn written_by_both(dir: &std::path::Path, in_sqlite: usize, in_log: usize) -> i64 {
    let sqlite = SqliteStore::open(dir, Durability::Fsync).unwrap();
    let queue = create(&sqlite, "shared", T0).await;
    let messages = (0..in_sqlite)
        .map(|index| message(&format!("sqlite-{index}"), T0, T0))
        .collect();
    insert(&sqlite, queue, messages).await;
    sqlite.close().await.unwrap();
    let (log, _) = ackbox_log::queues::StandardQueues::open(
        &dir.join("log"),
        ackbox_log::log::LogOptions::default(),
        ackbox_log::group_commit::GroupCommitOptions::default(),
    )
    .unwrap();
    let outgoing = (0..in_log)
        .map(|index| ackbox_log::queues::Outgoing {
            content: ackbox_log::record::Content {
                message_id: format!("id-log-{index}"),
                body: format!("log-{index}"),
                md5_of_body: "md5".to_owned(),
                sender_id: "me".to_owned(),
                ..Default::default()
            },
            sent_at: T0,
            visible_at: T0,
        })
        .collect();
    let (_, lsn) = log.send(queue.unsigned_abs(), outgoing).unwrap();
    log.commit().wait_durable(lsn).unwrap();
    drop(log.close());
    queue
}

async fn bodies(store: &dyn Store, queue: i64) -> Vec<String> {
    let mut bodies: Vec<String> = store
        .message_peek(ackbox_engine::store::MessagePeekParams {
            queue_id: queue,
            limit: 10_000,
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_iter()
        .map(|message| message.body)
        .collect();
    bodies.sort_unstable();
    bodies
}

fn every_body(in_sqlite: usize, in_log: usize) -> Vec<String> {
    let mut all: Vec<String> = (0..in_sqlite)
        .map(|index| format!("sqlite-{index}"))
        .chain((0..in_log).map(|index| format!("log-{index}")))
        .collect();
    all.sort_unstable();
    all
}

#[tokio::test]
async fn the_log_store_adopts_what_sqlite_held_and_then_opens() {
    use ackbox_engine::store::adopt::{Adopted, Adopter, adopt};
    let dir = tempfile::tempdir().unwrap();
    let queue = written_by_both(dir.path(), 1_203, 2).await;
    assert!(LogStore::open(dir.path(), Durability::Fsync).await.is_err());
    let adopted = adopt(dir.path(), Adopter::Log).await.unwrap();
    assert_eq!(
        adopted,
        Adopted {
            messages: 1_203,
            queues: 1
        }
    );
    let store = LogStore::open(dir.path(), Durability::Fsync)
        .await
        .expect("the log store opens once it holds everything");
    let held = bodies(&store, queue).await;
    assert_eq!(held.len(), 1_205, "every message, once");
    assert!(held == every_body(1_203, 2), "the bodies changed");
    store.close().await.unwrap();
}

#[tokio::test]
async fn the_default_store_adopts_what_the_log_held_and_then_opens() {
    use ackbox_engine::store::adopt::{Adopted, Adopter, adopt};
    let dir = tempfile::tempdir().unwrap();
    let queue = written_by_both(dir.path(), 3, 2).await;
    assert!(LogStore::ensure_no_messages_left(dir.path()).await.is_err());
    let adopted = adopt(dir.path(), Adopter::Sqlite).await.unwrap();
    assert_eq!(
        adopted,
        Adopted {
            messages: 2,
            queues: 1
        }
    );
    LogStore::ensure_no_messages_left(dir.path())
        .await
        .expect("the log is set aside");
    let store = SqliteStore::open(dir.path(), Durability::Fsync).unwrap();
    assert_eq!(bodies(&store, queue).await, every_body(3, 2));
    store.close().await.unwrap();
    assert!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .any(|entry| entry
                .file_name()
                .to_string_lossy()
                .starts_with("log.adopted-")),
        "the log is kept aside for a person to remove"
    );
    // Adopting again finds nothing more to move.
    let again = adopt(dir.path(), Adopter::Sqlite).await.unwrap();
    assert_eq!(again, Adopted::default());
}
