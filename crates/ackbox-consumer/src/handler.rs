//! The user's code: one message, one transaction of the application's database.

use async_trait::async_trait;
use sqlx::{Database, Transaction};

use crate::error::HandlerError;
use crate::message::Message;

/// Applies one message's effect inside `transaction`, which the consumer
/// opened on the application's database, claimed the message's effect key
/// in, and commits when this returns `Ok` — before the message is
/// acknowledged. Return [`HandlerError::Transient`] to retry later and
/// [`HandlerError::Permanent`] to dead-letter now; either way the
/// transaction rolls back.
#[async_trait]
pub trait Handler<DB: Database>: Send + Sync + 'static {
    /// Handles one message.
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, DB>,
    ) -> Result<(), HandlerError>;
}
