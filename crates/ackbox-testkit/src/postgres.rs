//! A throwaway PostgreSQL schema for tests of the shared store, from
//! `ACKBOX_TEST_POSTGRES_URL`.

use std::sync::atomic::{AtomicU64, Ordering};

static SCHEMAS: AtomicU64 = AtomicU64::new(0);

/// A fresh schema, dropped (with everything in it) when this is dropped.
#[derive(Debug)]
pub struct PostgresSchema {
    url: String,
    name: String,
}

impl PostgresSchema {
    /// A new schema name in the test database; `None` (and a "skipped" line
    /// naming `what`) when `ACKBOX_TEST_POSTGRES_URL` is not set. The schema
    /// itself is created by the first store that connects to it.
    pub fn new(what: &str) -> Option<Self> {
        let Ok(url) = std::env::var("ACKBOX_TEST_POSTGRES_URL") else {
            eprintln!("skipped: ACKBOX_TEST_POSTGRES_URL is not set, so {what} is not tested here");
            return None;
        };
        let name = format!(
            "test_{}_{}_{}",
            std::process::id(),
            SCHEMAS.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.subsec_micros())
        );
        Some(Self { url, name })
    }

    /// The database URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ackbox serve` arguments that put a node on this schema.
    pub fn serve_args(&self) -> [&str; 4] {
        ["--store", &self.url, "--store-schema", &self.name]
    }
}

impl Drop for PostgresSchema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop may run inside a test's runtime; a thread of its own may block.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let Ok(pool) = sqlx::PgPool::connect(&url).await else {
                    return;
                };
                // An in-process broker dropped mid-transaction (its runtime
                // blocked on this very drop) would hold its locks forever:
                // the test is over, so its sessions are ended first.
                let _ = sqlx::query(
                    "SELECT pg_terminate_backend(locks.pid)
                     FROM pg_locks AS locks
                     JOIN pg_class AS class ON class.oid = locks.relation
                     JOIN pg_namespace AS namespace ON namespace.oid = class.relnamespace
                     WHERE namespace.nspname = $1 AND locks.pid <> pg_backend_pid()",
                )
                .bind(&name)
                .execute(&pool)
                .await;
                let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS {name} CASCADE"
                )))
                .execute(&pool)
                .await;
                pool.close().await;
            });
        })
        .join();
    }
}
