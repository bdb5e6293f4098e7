//! The example's report under injected faults, on SQLite, and on PostgreSQL
//! when `ACKBOX_TEST_POSTGRES_URL` is set: with ackbox-consumer every order
//! is charged exactly once — by the gateway's count of calls, not only of
//! charges — and projected PAID; a naive consumer under the same faults
//! charges some orders more than once.

use std::time::Duration;

use ackbox_example_payments::{Config, POSTGRES_SCHEMA_PREFIX, Report, Sides, run};

const ORDERS: u64 = 60;

fn config(postgres: Option<String>) -> Config {
    Config {
        orders: ORDERS,
        postgres,
        faults: true,
        deadline: Duration::from_secs(120),
        sides: Sides::Both,
    }
}

fn assert_the_sdk_makes_the_difference(report: &Report) {
    let sdk = report
        .with_sdk
        .as_ref()
        .expect("the run with ackbox-consumer");
    let naive = report.without_sdk.as_ref().expect("the naive run");

    // Faults were injected into the run with ackbox-consumer, and it absorbed them.
    assert!(
        sdk.duplicates_absorbed > 0 && sdk.worker_crashes + sdk.relay_crashes > 0,
        "faults were injected: {report}"
    );
    // Ten replayed messages; injected duplicates may deliver some twice.
    assert!(sdk.replays_skipped >= 10, "{report}");

    // Every order charged exactly once, by the gateway's own ledger.
    assert!(sdk.guarantees_hold(), "{report}");
    assert_eq!(sdk.charges.charged_once, ORDERS, "{report}");
    assert_eq!(sdk.charges.charges_made, ORDERS, "{report}");
    assert_eq!(sdk.payment_rows, ORDERS, "{report}");
    assert_eq!(sdk.projected_paid, ORDERS, "{report}");
    // And by its count of calls: one per order. The one legitimate second
    // call is a charge re-made after reconciliation asked the gateway and
    // found no trace of the first call (which can still arrive late); it
    // carries the same idempotency key, so the gateway answers it with the
    // first charge. Only such calls may exceed one per order.
    if sdk.charges.calls == ORDERS {
        assert_eq!(sdk.charges.repeated_key_calls, 0, "{report}");
        assert_eq!(sdk.charges.called_more_than_once, 0, "{report}");
    } else {
        let extra = sdk.charges.calls - ORDERS;
        assert!(sdk.charges.calls > ORDERS, "{report}");
        assert!(extra <= sdk.recalls_after_not_found, "{report}");
        assert_eq!(sdk.charges.repeated_key_calls, extra, "{report}");
        eprintln!(
            "note: {extra} charge call(s) beyond one per order, each a re-call with the same \
             idempotency key after reconciliation found no charge; distinct charges == orders"
        );
    }

    // The same faults, without inbox and effect records: some orders are
    // charged more than once, and not only the replayed ones.
    assert!(naive.charges.charged_more_than_once > 0, "{report}");
    assert!(naive.charges.charges_made > ORDERS, "{report}");
    assert!(naive.extra_calls_not_from_replays() > 0, "{report}");
    assert!(naive.payment_rows > ORDERS, "{report}");
    assert!(
        report.passed(),
        "passed() judges the run with ackbox-consumer only: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_ackbox_consumer_every_order_is_charged_once_and_without_some_twice_on_sqlite() {
    let report = run(config(None)).await.unwrap();
    println!("{report}");
    assert_the_sdk_makes_the_difference(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_ackbox_consumer_every_order_is_charged_once_and_without_some_twice_on_postgres() {
    let Ok(url) = std::env::var("ACKBOX_TEST_POSTGRES_URL") else {
        eprintln!("skipped: ACKBOX_TEST_POSTGRES_URL is not set");
        return;
    };
    let report = run(config(Some(url.clone()))).await.unwrap();
    println!("{report}");
    assert_the_sdk_makes_the_difference(&report);
    // The runs dropped the schemas they made.
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
    assert_eq!(left, Vec::<String>::new(), "schemas the runs left behind");
}
