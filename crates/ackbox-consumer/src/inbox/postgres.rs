//! The inbox on PostgreSQL.

use async_trait::async_trait;
use sqlx::{PgPool, Postgres, Transaction};

use super::{Claim, ClaimRequest, Inbox, judge};

/// An inbox in the application's PostgreSQL database (table `ackbox_inbox`).
#[derive(Debug, Clone)]
pub struct PgInbox {
    pool: PgPool,
}

impl PgInbox {
    /// An inbox on `pool`, the pool the application's handlers write with.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// The application's pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Inbox for PgInbox {
    type Database = Postgres;

    async fn migrate(&self) -> Result<(), sqlx::Error> {
        // Concurrent CREATE TABLE IF NOT EXISTS can collide in the catalog;
        // consumers starting together take turns.
        let mut transaction = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('ackbox_inbox'))")
            .execute(&mut *transaction)
            .await?;
        sqlx::raw_sql(include_str!("../../migrations/postgres/0001_inbox.sql"))
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await
    }

    async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.pool.begin().await
    }

    async fn claim(
        &self,
        transaction: &mut Transaction<'static, Postgres>,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, sqlx::Error> {
        // Waits on a concurrent uncommitted claim of the same key, then
        // inserts (it rolled back) or does nothing (it committed).
        let inserted = sqlx::query(
            "INSERT INTO ackbox_inbox
                 (consumer, effect_key, fingerprint, message_id, processed_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6)
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
            "SELECT fingerprint, result FROM ackbox_inbox WHERE consumer = $1 AND effect_key = $2",
        )
        .bind(request.consumer)
        .bind(request.effect_key)
        .fetch_optional(&mut **transaction)
        .await?;
        Ok(judge(stored, &request))
    }

    async fn store_result(
        &self,
        transaction: &mut Transaction<'static, Postgres>,
        consumer: &str,
        effect_key: &str,
        result: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE ackbox_inbox SET result = $3 WHERE consumer = $1 AND effect_key = $2")
            .bind(consumer)
            .bind(effect_key)
            .bind(result)
            .execute(&mut **transaction)
            .await
            .map(drop)
    }

    async fn purge_expired(&self, now_ms: i64) -> Result<u64, sqlx::Error> {
        Ok(sqlx::query(
            "DELETE FROM ackbox_inbox WHERE ctid IN (
                 SELECT ctid FROM ackbox_inbox WHERE expires_at <= $1 LIMIT 10000)",
        )
        .bind(now_ms)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}
