//! An archive keeps what it holds for its policy's retention — up to
//! SNS's 365 days — where any other queue keeps a message 14 days at
//! most; the retention sweep goes by each (manual clock, both embedded
//! stores).

use std::collections::BTreeMap;
use std::path::Path;

use ackbox_core::clock::ManualClock;
use ackbox_core::queue_name::QueueName;
use ackbox_engine::Engine;
use ackbox_engine::send::SendEntry;
use support::{start_engine, start_engine_on_the_log};

mod support;

const START: i64 = 1_700_000_000_000;
const DAY_SECONDS: i64 = 86_400;

async fn held(engine: &Engine, queue: &QueueName) -> u64 {
    engine.queue_depth(queue).await.unwrap().stats.visible
}

async fn a_years_archive_outlives_its_queue_and_goes_after_a_year(
    start: impl AsyncFn(&Path, &ManualClock) -> Engine,
) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START);
    let engine = start(dir.path(), &clock).await;
    let attributes = BTreeMap::from([
        (
            "MessageRetentionPeriod".to_owned(),
            (14 * DAY_SECONDS).to_string(),
        ),
        (
            "AckBoxArchivePolicy".to_owned(),
            r#"{"MessageRetentionPeriod":"365"}"#.to_owned(),
        ),
    ]);
    let orders = engine
        .create_queue("orders", &attributes, &BTreeMap::new())
        .await
        .unwrap();
    let archive = engine.queue_archive(&orders).await.unwrap().unwrap();
    assert_eq!(archive.retention_days, 365);
    let entry = SendEntry {
        body: "order 7 placed".to_owned(),
        ..SendEntry::default()
    };
    engine.send_message(&orders, entry, "tester").await.unwrap();

    clock.advance_secs(15 * DAY_SECONDS);
    engine.sweep_expired().await;
    assert_eq!(held(&engine, &orders).await, 0, "the queue keeps 14 days");
    assert_eq!(
        held(&engine, &archive.queue).await,
        1,
        "the archive, a year"
    );

    // The archive's retention is kept with its queue, across a restart.
    engine.shutdown().await.unwrap();
    drop(engine);
    let engine = start(dir.path(), &clock).await;
    clock.advance_secs(349 * DAY_SECONDS);
    engine.sweep_expired().await;
    assert_eq!(held(&engine, &archive.queue).await, 1, "364 days on");

    clock.advance_secs(2 * DAY_SECONDS);
    engine.sweep_expired().await;
    assert_eq!(held(&engine, &archive.queue).await, 0, "366 days on");
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_years_archive_outlives_its_queue_on_sqlite() {
    a_years_archive_outlives_its_queue_and_goes_after_a_year(start_engine).await;
}

#[tokio::test]
async fn a_years_archive_outlives_its_queue_on_the_log() {
    a_years_archive_outlives_its_queue_and_goes_after_a_year(start_engine_on_the_log).await;
}
