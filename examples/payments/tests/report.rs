//! The example's report under injected faults: every order charged exactly
//! once, the projection right — on SQLite, and on PostgreSQL when
//! `ACKBOX_TEST_POSTGRES_URL` is set.

use std::time::Duration;

use ackbox_example_payments::{Config, POSTGRES_SCHEMA_PREFIX, run};

fn config(postgres: Option<String>) -> Config {
    Config {
        orders: 60,
        postgres,
        faults: true,
        deadline: Duration::from_secs(120),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_injected_faults_every_order_is_charged_exactly_once_on_sqlite() {
    let report = run(config(None)).await.unwrap();
    println!("{report}");
    assert!(report.passed(), "{report}");
    assert!(
        report.duplicates_absorbed > 0 && report.worker_crashes + report.relay_crashes > 0,
        "faults were injected: {report}"
    );
    // Ten replayed messages; injected duplicates may deliver some twice.
    assert!(report.replays_skipped >= 10, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_injected_faults_every_order_is_charged_exactly_once_on_postgres() {
    let Ok(url) = std::env::var("ACKBOX_TEST_POSTGRES_URL") else {
        eprintln!("skipped: ACKBOX_TEST_POSTGRES_URL is not set");
        return;
    };
    let report = run(config(Some(url.clone()))).await.unwrap();
    println!("{report}");
    assert!(report.passed(), "{report}");
    // The run dropped the schema it made.
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let left: Vec<String> = sqlx::query_scalar(
        "SELECT schema_name::text FROM information_schema.schemata WHERE schema_name LIKE $1",
    )
    .bind(format!(
        "{POSTGRES_SCHEMA_PREFIX}{}\\_%",
        std::process::id()
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(left, Vec::<String>::new(), "schemas the run left behind");
}
