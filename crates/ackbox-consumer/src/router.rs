//! One consumer, several event types: a handler per type, chosen by a
//! message attribute, and a message of a type nobody handles dead-lettered
//! with its type named rather than retried or silently acknowledged.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sqlx::{Database, Transaction};

use crate::error::HandlerError;
use crate::handler::{Handler, OnReplay};
use crate::message::{EVENT_TYPE_ATTRIBUTE, Message};

/// A [`Handler`] that hands each message to the handler routed for its
/// event type (the `event_type` attribute unless told another).
///
/// A message without the attribute fails for good with class
/// `MissingEventType`, one whose type has no route with class
/// `UnknownEventType`: no retry can give either a handler, so both go to
/// the dead-letter queue at once, with the reason naming the type and the
/// types this consumer handles, and the messages behind them in their
/// group go on.
///
/// ```
/// # use ackbox_consumer::{Handler, HandlerError, Message, Router, async_trait};
/// # use sqlx::{Sqlite, Transaction};
/// struct Paid;
/// #[async_trait]
/// impl Handler<Sqlite> for Paid {
///     async fn handle(&self, _: &Message, _: &mut Transaction<'static, Sqlite>) -> Result<(), HandlerError> {
///         Ok(())
///     }
/// }
/// let router = Router::<Sqlite>::new().route("OrderPaid", Paid);
/// assert_eq!(router.event_types().collect::<Vec<_>>(), ["OrderPaid"]);
/// ```
pub struct Router<DB: Database> {
    attribute: String,
    routes: BTreeMap<String, Box<dyn Handler<DB>>>,
}

impl<DB: Database> Default for Router<DB> {
    fn default() -> Self {
        Self::new()
    }
}

impl<DB: Database> Router<DB> {
    /// A router on the `event_type` attribute, with no routes yet.
    pub fn new() -> Self {
        Self::by_attribute(EVENT_TYPE_ATTRIBUTE)
    }

    /// A router on the message attribute `attribute`.
    pub fn by_attribute(attribute: impl Into<String>) -> Self {
        Self {
            attribute: attribute.into(),
            routes: BTreeMap::new(),
        }
    }

    /// Routes messages of `event_type` to `handler`; a second route for the
    /// same type replaces the first.
    pub fn route(mut self, event_type: impl Into<String>, handler: impl Handler<DB>) -> Self {
        self.routes.insert(event_type.into(), Box::new(handler));
        self
    }

    /// The event types routed, in order.
    pub fn event_types(&self) -> impl Iterator<Item = &str> {
        self.routes.keys().map(String::as_str)
    }

    /// The handler for `message`, or why there is none.
    fn handler_for(&self, message: &Message) -> Result<&dyn Handler<DB>, HandlerError> {
        let known = || self.event_types().collect::<Vec<_>>().join(", ");
        let Some(event_type) = message.attribute(&self.attribute) else {
            return Err(HandlerError::permanent(
                "MissingEventType",
                format!(
                    "the message has no `{}` attribute to route on; this consumer handles: {}",
                    self.attribute,
                    known()
                ),
            ));
        };
        self.routes.get(event_type).map(Box::as_ref).ok_or_else(|| {
            HandlerError::permanent(
                "UnknownEventType",
                format!(
                    "no handler for event type `{event_type}` (attribute `{}`); this \
                         consumer handles: {}",
                    self.attribute,
                    known()
                ),
            )
        })
    }
}

#[async_trait]
impl<DB: Database> Handler<DB> for Router<DB> {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, DB>,
    ) -> Result<(), HandlerError> {
        self.handler_for(message)?
            .handle(message, transaction)
            .await
    }

    /// The routed handler's choice; a replayed message nobody handles runs
    /// (to be dead-lettered with its reason) rather than vanish as skipped.
    fn on_replay(&self, message: &Message) -> OnReplay {
        self.handler_for(message)
            .map_or(OnReplay::ApplyOnce, |handler| handler.on_replay(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Replays(OnReplay);

    #[async_trait]
    impl Handler<sqlx::Sqlite> for Replays {
        async fn handle(
            &self,
            _: &Message,
            _: &mut Transaction<'static, sqlx::Sqlite>,
        ) -> Result<(), HandlerError> {
            Ok(())
        }

        fn on_replay(&self, _: &Message) -> OnReplay {
            self.0
        }
    }

    fn typed(event_type: Option<&str>) -> Message {
        Message {
            id: "m-1".into(),
            body: "{}".into(),
            attributes: event_type
                .map(|value| (EVENT_TYPE_ATTRIBUTE.to_owned(), value.to_owned()))
                .into_iter()
                .collect(),
            receive_count: 1,
            group_id: None,
        }
    }

    fn router() -> Router<sqlx::Sqlite> {
        Router::new()
            .route("OrderPaid", Replays(OnReplay::Rebuild))
            .route("OrderPlaced", Replays(OnReplay::Skip))
    }

    #[test]
    fn an_unknown_type_fails_for_good_naming_it_and_the_known_ones() {
        let Err(HandlerError::Permanent { class, message }) =
            router().handler_for(&typed(Some("OrderShipped")))
        else {
            panic!("an unknown type was routed");
        };
        assert_eq!(class, "UnknownEventType");
        assert!(message.contains("`OrderShipped`"), "{message}");
        assert!(message.contains("OrderPaid, OrderPlaced"), "{message}");
    }

    #[test]
    fn a_message_without_the_attribute_fails_for_good_naming_it() {
        let Err(HandlerError::Permanent { class, message }) = router().handler_for(&typed(None))
        else {
            panic!("a message without a type was routed");
        };
        assert_eq!(class, "MissingEventType");
        assert!(message.contains("`event_type`"), "{message}");
    }

    #[test]
    fn a_replay_follows_its_route_and_an_unroutable_one_runs_to_fail() {
        let router = router();
        assert_eq!(
            router.on_replay(&typed(Some("OrderPaid"))),
            OnReplay::Rebuild
        );
        assert_eq!(
            router.on_replay(&typed(Some("OrderPlaced"))),
            OnReplay::Skip
        );
        assert_eq!(
            router.on_replay(&typed(Some("OrderShipped"))),
            OnReplay::ApplyOnce
        );
    }
}
