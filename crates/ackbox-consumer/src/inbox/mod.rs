//! The inbox: the record that an effect was applied, claimed by the first
//! statement of the handler's transaction.
//!
//! The claim inserts `(consumer, effect_key)`. If the row exists, the message
//! is a duplicate and the handler is not called. A concurrent duplicate (a
//! lease that ran out, two consumers) blocks on the uncommitted row until the
//! first transaction ends: if it commits, the second sees a duplicate; if it
//! rolls back, the second applies the effect. Never two effects.

use async_trait::async_trait;
use sqlx::{Database, Transaction};

mod postgres;
mod sqlite;

pub use postgres::PgInbox;
pub use sqlite::SqliteInbox;

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// First time: apply the effect in this transaction.
    Fresh,
    /// Already applied (and committed): do nothing, acknowledge.
    Duplicate {
        /// What the first run stored with the record, if anything.
        result: Option<String>,
    },
    /// The key was applied with a different payload: a producer bug that no
    /// retry fixes.
    PayloadMismatch,
}

/// One claim of an effect key.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The consumer's name; consumers keep separate inboxes in one table.
    pub consumer: &'a str,
    /// The effect key, derived from the message.
    pub effect_key: &'a str,
    /// SHA-256 of the body.
    pub fingerprint: &'a str,
    /// The message id, for people reading the table.
    pub message_id: &'a str,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
    /// When the record may be forgotten, epoch milliseconds.
    pub expires_at_ms: i64,
}

/// An inbox table in the application's database.
#[async_trait]
pub trait Inbox: Send + Sync + 'static {
    /// The application's database.
    type Database: Database;

    /// Creates the inbox table if it does not exist (idempotent).
    async fn migrate(&self) -> Result<(), sqlx::Error>;

    /// Begins a transaction on the application's pool.
    async fn begin(&self) -> Result<Transaction<'static, Self::Database>, sqlx::Error>;

    /// Claims an effect key in `transaction`; must be its first statement.
    async fn claim(
        &self,
        transaction: &mut Transaction<'static, Self::Database>,
        request: ClaimRequest<'_>,
    ) -> Result<Claim, sqlx::Error>;

    /// Stores a result with a claim made in `transaction`, to be handed to
    /// the handler again when a duplicate arrives.
    async fn store_result(
        &self,
        transaction: &mut Transaction<'static, Self::Database>,
        consumer: &str,
        effect_key: &str,
        result: &str,
    ) -> Result<(), sqlx::Error>;

    /// Forgets records that expired at or before `now_ms`; returns how many.
    async fn purge_expired(&self, now_ms: i64) -> Result<u64, sqlx::Error>;
}

/// Judges a conflicting claim by the stored fingerprint.
pub(crate) fn judge(stored: Option<(String, Option<String>)>, request: &ClaimRequest<'_>) -> Claim {
    match stored {
        Some((fingerprint, result)) if fingerprint == request.fingerprint => {
            Claim::Duplicate { result }
        }
        Some(_) => Claim::PayloadMismatch,
        // The row vanished between the insert and the look (purged): the
        // effect was applied long ago; treat it as done.
        None => Claim::Duplicate { result: None },
    }
}

/// Implements [`Inbox`] for one database. The SQL is the same text on
/// both (`$n` parameters in order of first use, `ON CONFLICT`); what
/// differs — creating the table, and how a purge names rows — comes from
/// the invoking module's `migrate` and `PURGE_EXPIRED`.
macro_rules! sql_inbox {
    ($inbox:ident, $database:ty, $pool:ty, $name:literal, $note:literal) => {
        #[doc = concat!("An inbox in the application's ", $name, " database (table `ackbox_inbox`).", $note)]
        #[derive(Debug, Clone)]
        pub struct $inbox {
            pool: $pool,
        }

        impl $inbox {
            /// An inbox on `pool`, the pool the application's handlers write with.
            pub fn new(pool: $pool) -> Self {
                Self { pool }
            }

            /// The application's pool.
            pub fn pool(&self) -> &$pool {
                &self.pool
            }
        }

        #[async_trait::async_trait]
        impl $crate::inbox::Inbox for $inbox {
            type Database = $database;

            async fn migrate(&self) -> Result<(), sqlx::Error> {
                migrate(&self.pool).await
            }

            async fn begin(&self) -> Result<sqlx::Transaction<'static, $database>, sqlx::Error> {
                self.pool.begin().await
            }

            async fn claim(
                &self,
                transaction: &mut sqlx::Transaction<'static, $database>,
                request: $crate::inbox::ClaimRequest<'_>,
            ) -> Result<$crate::inbox::Claim, sqlx::Error> {
                // Waits on a concurrent uncommitted claim of the same key,
                // then inserts (it rolled back) or does nothing (it committed).
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
                    return Ok($crate::inbox::Claim::Fresh);
                }
                let stored: Option<(String, Option<String>)> = sqlx::query_as(
                    "SELECT fingerprint, result FROM ackbox_inbox WHERE consumer = $1 AND effect_key = $2",
                )
                .bind(request.consumer)
                .bind(request.effect_key)
                .fetch_optional(&mut **transaction)
                .await?;
                Ok($crate::inbox::judge(stored, &request))
            }

            async fn store_result(
                &self,
                transaction: &mut sqlx::Transaction<'static, $database>,
                consumer: &str,
                effect_key: &str,
                result: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "UPDATE ackbox_inbox SET result = $1 WHERE consumer = $2 AND effect_key = $3",
                )
                .bind(result)
                .bind(consumer)
                .bind(effect_key)
                .execute(&mut **transaction)
                .await
                .map(drop)
            }

            async fn purge_expired(&self, now_ms: i64) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(PURGE_EXPIRED)
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?
                    .rows_affected())
            }
        }
    };
}

use sql_inbox;
