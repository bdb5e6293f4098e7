//! The store conformance suite on PostgreSQL, each case in its own schema,
//! when `ACKBOX_TEST_POSTGRES_URL` names a database (`.ci/run` sets it).

mod conformance;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ackbox_engine::store::postgres::{PostgresOptions, PostgresStore};
use conformance::Fixture;

static SCHEMAS: AtomicU64 = AtomicU64::new(0);

/// Drops the case's schema when the case ends, pass or fail.
struct Schema {
    url: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop may run inside the test's runtime; a thread of its own can block.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(pool) = sqlx::PgPool::connect(&url).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP SCHEMA IF EXISTS {name} CASCADE"
                    )))
                    .execute(&pool)
                    .await;
                    pool.close().await;
                }
            });
        })
        .join();
    }
}

async fn postgres() -> Option<Fixture> {
    let Ok(url) = std::env::var("ACKBOX_TEST_POSTGRES_URL") else {
        eprintln!(
            "skipped: ACKBOX_TEST_POSTGRES_URL is not set, so the PostgreSQL store is not tested here"
        );
        return None;
    };
    let name = format!(
        "store_{}_{}",
        std::process::id(),
        SCHEMAS.fetch_add(1, Ordering::Relaxed)
    );
    let mut options = PostgresOptions::new(url.clone());
    options.schema = Some(name.clone());
    options.max_connections = 4;
    let store = PostgresStore::connect(&options)
        .await
        .expect("PostgreSQL is reachable");
    Some(Fixture {
        store: Arc::new(store),
        _guard: Box::new(Schema { url, name }),
    })
}

store_conformance!(postgres);
// Only a store shared by several nodes tells the others what changed.
store_conformance!(@cases postgres; a_move_task_step_announces_where_its_messages_arrived);
