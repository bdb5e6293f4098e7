//! The inbox on SQLite.

use async_trait::async_trait;
use sqlx::{Sqlite, SqlitePool, Transaction};

use super::{Claim, ClaimRequest, Inbox, judge};

/// An inbox in the application's SQLite database (table `ackbox_inbox`).
///
/// SQLite has one writer at a time: the claim takes the write lock, so
/// concurrent handlers on one database run their transactions one by one.
#[derive(Debug, Clone)]
pub struct SqliteInbox {
    pool: SqlitePool,
}

impl SqliteInbox {
    /// An inbox on `pool`, the pool the application's handlers write with.
    pub fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }

    /// The application's pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

#[async_trait]
impl Inbox for SqliteInbox {
    type Database = Sqlite;

    async fn migrate(&self) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(include_str!("../../migrations/sqlite/0001_inbox.sql"))
            .execute(&self.pool)
            .await
            .map(drop)
    }

    async fn begin(&self) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        self.pool.begin().await
    }

    async fn claim(
        &self,
        transaction: &mut Transaction<'static, Sqlite>,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, sqlx::Error> {
        let inserted = sqlx::query(
            "INSERT INTO ackbox_inbox
                 (consumer, effect_key, fingerprint, message_id, processed_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (consumer, effect_key) DO NOTHING",
        )
        .bind(request.consumer)
        .bind(request.effect_key)
        .bind(request.fingerprint)
        .bind(request.message_id)
        .bind(request.now_ms)
        .bind(request.expires_at_ms)
        .execute(&mut **transaction)
        .await?
        .rows_affected();
        if inserted == 1 {
            return Ok(Claim::Fresh);
        }
        let stored: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT fingerprint, result FROM ackbox_inbox WHERE consumer = ?1 AND effect_key = ?2",
        )
        .bind(request.consumer)
        .bind(request.effect_key)
        .fetch_optional(&mut **transaction)
        .await?;
        Ok(judge(stored, &request))
    }

    async fn store_result(
        &self,
        transaction: &mut Transaction<'static, Sqlite>,
        consumer: &str,
        effect_key: &str,
        result: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE ackbox_inbox SET result = ?3 WHERE consumer = ?1 AND effect_key = ?2")
            .bind(consumer)
            .bind(effect_key)
            .bind(result)
            .execute(&mut **transaction)
            .await
            .map(drop)
    }

    async fn purge_expired(&self, now_ms: i64) -> Result<u64, sqlx::Error> {
        Ok(sqlx::query(
            "DELETE FROM ackbox_inbox WHERE rowid IN (
                 SELECT rowid FROM ackbox_inbox WHERE expires_at <= ?1 LIMIT 10000)",
        )
        .bind(now_ms)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}
