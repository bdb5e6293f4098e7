//! The writer against a real SQLite file: groups, rollbacks, panics,
//! cancellation and which thread commits.

use super::*;
use crate::store::sqlite::database_error::database_error;

fn open_writer(dir: &tempfile::TempDir, durability: Durability) -> Writer {
    open_writer_with(dir, durability, "")
}

fn open_writer_with(dir: &tempfile::TempDir, durability: Durability, pragmas: &str) -> Writer {
    let path = dir.path().join("db.sqlite");
    let connection = Connection::open(&path).unwrap();
    connection
        .execute_batch(&format!(
            "{pragmas} PRAGMA journal_mode=WAL; CREATE TABLE t (v INTEGER NOT NULL);"
        ))
        .unwrap();
    Writer::start(
        connection,
        dir.path().join("db.sqlite-wal"),
        durability,
        Arc::new(DiskReserve::new(dir.path())),
    )
    .unwrap()
}

/// (free pages, all pages) of the file.
fn pages(dir: &tempfile::TempDir) -> (i64, i64) {
    let connection = Connection::open(dir.path().join("db.sqlite")).unwrap();
    let count = |pragma: &str| connection.query_row(pragma, [], |row| row.get(0)).unwrap();
    (count("PRAGMA freelist_count"), count("PRAGMA page_count"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_writer_returns_the_pages_a_drain_freed() {
    let dir = tempfile::tempdir().unwrap();
    let writer = open_writer_with(&dir, Durability::Fsync, "PRAGMA auto_vacuum = INCREMENTAL;");
    // 6,000 rows of 4,000 bytes: a page each.
    writer
        .submit(Commit::Durable, |connection| {
            connection
                .execute_batch(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 6000)
                     INSERT INTO t (v) SELECT zeroblob(4000) FROM n;",
                )
                .unwrap();
            Ok(())
        })
        .await
        .unwrap();
    let (_, filled) = pages(&dir);
    assert!(filled >= 6_000, "the fill took {filled} pages");
    writer
        .submit(Commit::Durable, |connection| {
            connection.execute("DELETE FROM t", []).unwrap();
            Ok(())
        })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut free, mut total) = pages(&dir);
    while free >= RECLAIM_MIN_FREE_PAGES && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        (free, total) = pages(&dir);
    }
    writer.close();
    assert!(
        free < RECLAIM_MIN_FREE_PAGES && total < filled / 4,
        "{free} free pages of {total} are left of the {filled} the fill took"
    );
}

fn insert_value(connection: &Connection, value: i64) -> Result<(), StoreError> {
    connection
        .execute("INSERT INTO t (v) VALUES (?1)", [value])
        .map(|_| ())
        .map_err(|source| StoreError::Database {
            operation: "insert",
            source,
        })
}

fn count(dir: &tempfile::TempDir) -> i64 {
    let connection = Connection::open(dir.path().join("db.sqlite")).unwrap();
    connection
        .query_row("SELECT COUNT(*) FROM t", [], |row| row.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_jobs_all_commit_and_a_failed_job_rolls_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Arc::new(open_writer(&dir, Durability::Fsync));
    let mut tasks = Vec::new();
    for value in 0..64i64 {
        let writer = Arc::clone(&writer);
        tasks.push(tokio::spawn(async move {
            writer
                .submit(Commit::Durable, move |connection| {
                    insert_value(connection, value)?;
                    if value == 13 {
                        return Err(StoreError::Corrupt {
                            detail: "unlucky".into(),
                        });
                    }
                    Ok(value)
                })
                .await
        }));
    }
    let mut failures = 0;
    for task in tasks {
        if task.await.unwrap().is_err() {
            failures += 1;
        }
    }
    writer.close();
    assert_eq!(failures, 1);
    assert_eq!(count(&dir), 63);
}

#[tokio::test]
async fn a_job_failing_alone_in_its_group_leaves_nothing_and_hears_its_own_error() {
    let dir = tempfile::tempdir().unwrap();
    let writer = open_writer(&dir, Durability::Fsync);
    let failed = writer
        .submit(Commit::Durable, |connection| {
            insert_value(connection, 1)?;
            Err::<(), _>(StoreError::Corrupt {
                detail: "refused after writing".into(),
            })
        })
        .await;
    assert!(
        matches!(&failed, Err(StoreError::Corrupt { detail }) if detail == "refused after writing"),
        "{failed:?}"
    );
    writer
        .submit(Commit::Durable, |connection| insert_value(connection, 2))
        .await
        .unwrap();
    writer.close();
    assert_eq!(count(&dir), 1, "the failed job's row was rolled back");
}

fn values(dir: &tempfile::TempDir) -> Vec<i64> {
    let connection = Connection::open(dir.path().join("db.sqlite")).unwrap();
    let mut select = connection.prepare("SELECT v FROM t ORDER BY v").unwrap();
    select
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Where a job refuses, relative to its write.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    BeforeWriting,
    AfterWriting,
}

/// A job that inserts `value`, counting its runs, and fails with
/// "refused VALUE" where `refusal` says.
fn counted_insert(
    runs: &Arc<std::sync::atomic::AtomicUsize>,
    value: i64,
    refusal: Option<Refusal>,
) -> impl FnMut(&Connection) -> Result<i64, StoreError> + Send + 'static {
    let runs = Arc::clone(runs);
    move |connection| {
        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let refused = || StoreError::Corrupt {
            detail: format!("refused {value}"),
        };
        if let Some(Refusal::BeforeWriting) = refusal {
            return Err(refused());
        }
        insert_value(connection, value)?;
        if let Some(Refusal::AfterWriting) = refusal {
            return Err(refused());
        }
        Ok(value)
    }
}

/// Commits one group of three inserts (1, 2, 3) whose middle one is
/// refused where `refusal` says, and checks that each caller heard its
/// own outcome. One task submits all three, so they form one group: the
/// first takes the committer role and yields, the others queue behind
/// it. Returns the values stored and how many times the jobs ran.
async fn group_with_a_refused_middle(refusal: Refusal) -> (Vec<i64>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let writer = open_writer(&dir, Durability::Fsync);
    let runs = Arc::default();
    let (first, refused, last) = tokio::join!(
        writer.submit(Commit::Durable, counted_insert(&runs, 1, None)),
        writer.submit(Commit::Durable, counted_insert(&runs, 2, Some(refusal))),
        writer.submit(Commit::Lazy, counted_insert(&runs, 3, None)),
    );
    writer.close();
    assert_eq!((first.unwrap(), last.unwrap()), (1, 3));
    assert!(
        matches!(&refused, Err(StoreError::Corrupt { detail }) if detail == "refused 2"),
        "{refused:?}"
    );
    (values(&dir), runs.load(std::sync::atomic::Ordering::SeqCst))
}

#[tokio::test]
async fn a_job_failing_after_writing_is_undone_alone_and_its_group_mates_commit() {
    // Two ran before the failure was seen, then all three in savepoints.
    assert_eq!(
        group_with_a_refused_middle(Refusal::AfterWriting).await,
        (vec![1, 3], 5)
    );
}

#[tokio::test]
async fn a_job_refused_before_writing_does_not_make_its_group_run_again() {
    assert_eq!(
        group_with_a_refused_middle(Refusal::BeforeWriting).await,
        (vec![1, 3], 3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_job_commits_nothing_of_its_group_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Arc::new(open_writer(&dir, Durability::Fsync));
    let insert = |value: i64| {
        move |connection: &Connection| {
            insert_value(connection, value)?;
            if value < 0 {
                panic!("a bug in a job");
            }
            Ok(())
        }
    };
    let panicking = writer.submit(Commit::Durable, insert(-1)).await;
    assert!(
        matches!(panicking, Err(StoreError::Unavailable { .. })),
        "{panicking:?}"
    );
    writer.submit(Commit::Durable, insert(1)).await.unwrap();
    writer.close();
    assert_eq!(count(&dir), 1, "the panicking job's row was rolled back");
}

fn committing_thread(_: &Connection) -> Result<Option<String>, StoreError> {
    Ok(std::thread::current().name().map(str::to_owned))
}

#[tokio::test]
async fn requests_commit_on_their_own_thread_and_background_work_on_the_writers() {
    let dir = tempfile::tempdir().unwrap();
    let writer = open_writer(&dir, Durability::Fsync);
    let here = std::thread::current().name().map(str::to_owned);
    let request = writer
        .submit(Commit::Durable, committing_thread)
        .await
        .unwrap();
    assert_eq!(request, here, "an uncontended job skips the hand-over");
    let background = writer
        .submit_in_background(Commit::Lazy, committing_thread)
        .await
        .unwrap();
    assert_eq!(background.as_deref(), Some("ackbox-sqlite-writer"));
    writer.close();
}

#[tokio::test]
async fn a_submitter_cancelled_before_it_commits_leaves_its_group_to_the_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let writer = open_writer(&dir, Durability::Fsync);
    let mut cancelled =
        Box::pin(writer.submit(Commit::Durable, |connection| insert_value(connection, 1)));
    // The first poll queues the job, takes the committer role and yields.
    let first_poll =
        std::future::poll_fn(|context| std::task::Poll::Ready(cancelled.as_mut().poll(context)))
            .await;
    assert!(first_poll.is_pending(), "{first_poll:?}");
    drop(cancelled);
    tokio::time::timeout(
        Duration::from_secs(10),
        writer.submit(Commit::Durable, |connection| insert_value(connection, 2)),
    )
    .await
    .expect("a job queued after the cancelled committer must still commit")
    .unwrap();
    writer.close();
    assert_eq!(count(&dir), 2, "the cancelled request's write stands");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaxed_commits_are_fsynced_by_the_writer_thread_within_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough that the check right after the answer sees the commit
    // still unsynced even on a loaded machine.
    let interval = Duration::from_millis(500);
    let writer = open_writer(
        &dir,
        Durability::Relaxed {
            sync_interval: interval,
        },
    );
    writer
        .submit(Commit::Durable, |connection| insert_value(connection, 1))
        .await
        .unwrap();
    let unsynced = || {
        writer
            .shared
            .committer
            .lock()
            .unwrap()
            .unsynced_since
            .is_some()
    };
    assert!(unsynced(), "a relaxed commit is answered before its fsync");
    let deadline = Instant::now() + Duration::from_secs(10);
    while unsynced() && Instant::now() < deadline {
        tokio::time::sleep(interval).await;
    }
    assert!(!unsynced(), "no fsync followed the relaxed commit");
    writer.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_thread_checkpoints_a_long_wal_so_that_it_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    // Small pages keep the backstop's 8,192 frames to 4 MiB of WAL.
    let page_bytes = 512;
    let writer = open_writer_with(
        &dir,
        Durability::Fsync,
        &format!("PRAGMA page_size = {page_bytes}; CREATE TABLE b (x BLOB NOT NULL);"),
    );
    // Each commit writes ~200 overflow pages; 100 of them write the
    // backstop's frames about 2.4 times over.
    for _ in 0..100 {
        writer
            .submit(Commit::Durable, |connection| {
                connection
                    .execute("INSERT INTO b VALUES (zeroblob(100000))", [])
                    .map(|_| ())
                    .map_err(database_error("insert a blob"))
            })
            .await
            .unwrap();
    }
    // SQLite never shrinks the WAL file: its size is the longest the
    // WAL got. Without the backstop it would hold every frame written.
    let wal_bytes = std::fs::metadata(dir.path().join("db.sqlite-wal"))
        .unwrap()
        .len();
    let frame_bytes = u64::try_from(page_bytes + 24).unwrap();
    let backstop_bytes = u64::try_from(BACKSTOP_CHECKPOINT_FRAMES).unwrap() * frame_bytes;
    assert!(
        wal_bytes < backstop_bytes * 3 / 2,
        "the WAL grew to {wal_bytes} bytes; the backstop checkpoint is at {backstop_bytes}"
    );
    writer.close();
}

#[tokio::test]
async fn submit_after_close_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let writer = open_writer(
        &dir,
        Durability::Relaxed {
            sync_interval: Duration::from_millis(5),
        },
    );
    writer.submit(Commit::Lazy, |_| Ok(())).await.unwrap();
    writer.close();
    writer.close();
    let error = writer
        .submit(Commit::Durable, |_| Ok(()))
        .await
        .unwrap_err();
    assert!(error.is_retryable());
}
