//! What the message being handled tells the code its handler calls, without
//! the handler passing it along: whether it is a replay (so effect records
//! make no external call) and its lineage (so events the handler writes to
//! the outbox carry its correlation id, and its event id as their cause).
//!
//! The consumer sets it around each handler call; it is visible to code
//! running in that call's task, not to tasks the handler spawns.

use std::future::Future;

use crate::message::Message;

tokio::task_local! {
    /// The message the current task's handler is handling.
    static HANDLING: Handling;
}

/// The message a handler is handling, as far as the code it calls needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handling {
    /// The message is a replay: no irreversible effect may run for it.
    pub(crate) replay: bool,
    /// The conversation the message belongs to: its correlation id, or its
    /// own event id when it starts one.
    pub(crate) correlation_id: String,
    /// The message's own event id (its message id without one): the cause
    /// of whatever the handler publishes.
    pub(crate) event_id: String,
}

impl Handling {
    pub(crate) fn of(message: &Message) -> Self {
        let event_id = message.event_id().to_owned();
        Self {
            replay: message.is_replay(),
            correlation_id: message
                .correlation_id()
                .map_or_else(|| event_id.clone(), str::to_owned),
            event_id,
        }
    }
}

/// Runs `future` with `handling` as the message being handled.
pub(crate) async fn handling<F: Future>(handling: Handling, future: F) -> F::Output {
    HANDLING.scope(handling, future).await
}

/// The message being handled by the current task, if any.
pub(crate) fn current() -> Option<Handling> {
    HANDLING.try_with(Clone::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(attributes: &[(&str, &str)]) -> Message {
        Message {
            id: "message-1".into(),
            body: String::new(),
            attributes: attributes
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            receive_count: 1,
            group_id: None,
        }
    }

    #[tokio::test]
    async fn the_handled_message_is_visible_inside_its_scope_only() {
        let handled = Handling::of(&message(&[
            ("ackbox.event_id", "event-7"),
            ("correlation_id", "conversation-1"),
            ("ackbox.replay", "true"),
        ]));
        assert_eq!(current(), None);
        let seen = handling(handled.clone(), async { current() }).await;
        assert_eq!(seen, Some(handled));
        assert_eq!(current(), None);
    }

    #[test]
    fn a_message_without_lineage_starts_its_own_conversation() {
        let handled = Handling::of(&message(&[]));
        assert_eq!(handled.event_id, "message-1");
        assert_eq!(handled.correlation_id, "message-1");
        assert!(!handled.replay);
    }
}
