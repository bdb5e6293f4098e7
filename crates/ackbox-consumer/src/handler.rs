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

    /// Whether replayed messages (the `ackbox.replay` attribute) may run
    /// this handler. Handlers with irreversible side effects (charging a
    /// card, sending an email) must say no — the default; projections and
    /// other pure database effects can say yes.
    fn replay_safe(&self) -> bool {
        false
    }
}

/// A handler whose effect has a result worth handing back when the same
/// message arrives again (a payment reference, a created id): `handle`
/// returns it, the consumer stores it with the inbox record in the same
/// transaction, and a duplicate gets it in `replay` instead of a second
/// effect. Run it with [`Consumer::run_with_results`](crate::Consumer::run_with_results).
#[async_trait]
pub trait ResultHandler<DB: Database>: Send + Sync + 'static {
    /// Applies the effect; `Ok(Some(result))` stores `result` with the record.
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, DB>,
    ) -> Result<Option<String>, HandlerError>;

    /// The effect was applied before; `stored` is what the first run
    /// returned. The message is acknowledged once this returns `Ok`.
    async fn replay(&self, message: &Message, stored: Option<String>) -> Result<(), HandlerError>;

    /// As [`Handler::replay_safe`].
    fn replay_safe(&self) -> bool {
        false
    }
}

/// A [`Handler`] as a [`ResultHandler`] that stores nothing.
pub(crate) struct Plain<H>(pub(crate) H);

#[async_trait]
impl<DB: Database, H: Handler<DB>> ResultHandler<DB> for Plain<H> {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, DB>,
    ) -> Result<Option<String>, HandlerError> {
        self.0.handle(message, transaction).await.map(|()| None)
    }

    async fn replay(&self, _: &Message, _: Option<String>) -> Result<(), HandlerError> {
        Ok(())
    }

    fn replay_safe(&self) -> bool {
        self.0.replay_safe()
    }
}
