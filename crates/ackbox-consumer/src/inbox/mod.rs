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
