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

    /// What the replayed `message` (it carries the `ackbox.replay`
    /// attribute) does with this handler: see [`OnReplay`]. Skipped by
    /// default.
    fn on_replay(&self, _message: &Message) -> OnReplay {
        OnReplay::Skip
    }
}

/// What a consumer does with a replayed message (one carrying the
/// `ackbox.replay` attribute, set by replay and redrive tools).
///
/// Whichever is chosen, no irreversible effect runs for a replayed message:
/// [`Effects::run`](crate::effects::Effects::run) called from its handler
/// makes no external call (it returns what an earlier call recorded, or
/// [`EffectError::SuppressedInReplay`](crate::effects::EffectError::SuppressedInReplay)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnReplay {
    /// Acknowledge it without running the handler: for handlers whose
    /// effects must not happen again (charging a card, sending an email).
    #[default]
    Skip,
    /// Run it through the inbox like any message: applied if it never was,
    /// skipped as a duplicate if it was. For consumers catching up on
    /// messages they missed.
    ApplyOnce,
    /// Run it even if the inbox says it was applied: for rebuilding a read
    /// model from history (clear the model and its versions, then replay
    /// the events). Only for handlers whose effect is the database write
    /// itself and idempotent under a version guard, such as a
    /// [`Projection`](crate::projection::Projection).
    Rebuild,
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

    /// As [`Handler::on_replay`].
    fn on_replay(&self, _message: &Message) -> OnReplay {
        OnReplay::Skip
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

    fn on_replay(&self, message: &Message) -> OnReplay {
        self.0.on_replay(message)
    }
}
