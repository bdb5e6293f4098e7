//! What a consumer tells operators about each attempt at a message: one log
//! line with the decision and everything needed to find the message and its
//! business object again, and metrics labelled by consumer and event type.
//!
//! | metric | labels |
//! |---|---|
//! | `consumer_success_total` | `consumer`, `event_type` |
//! | `consumer_duplicate_total` | `consumer`, `event_type` |
//! | `consumer_skipped_total` | `consumer`, `event_type` |
//! | `consumer_failure_total` | `consumer`, `event_type`, `reason` (the failure class) |
//! | `consumer_timeout_total` | `consumer`, `event_type` |
//! | `consumer_processing_seconds` (histogram) | `consumer`, `event_type`, `decision` |
//! | `consumer_visibility_extension_total` | `consumer` |
//!
//! The event type comes from a message attribute the consumer is told
//! (`event_type` by default). Its values label metrics, so they are capped:
//! past [`MOST_EVENT_TYPES`] distinct values, the rest share `other`.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use crate::decision::Decision;
use crate::error::Failure;
use crate::message::{AGGREGATE_ID_ATTRIBUTE, AGGREGATE_VERSION_ATTRIBUTE, Message};

/// Most distinct event types one consumer labels its metrics with: a
/// producer that puts ids in the event type must not make every message a
/// new time series.
pub const MOST_EVENT_TYPES: usize = 64;
/// The label of event types past the cap.
const OTHER_EVENT_TYPE: &str = "other";
/// The label of messages without an event type.
const NO_EVENT_TYPE: &str = "none";

/// The event types a consumer has labelled metrics with.
#[derive(Debug)]
pub(crate) struct EventTypes {
    /// The message attribute that holds the event type.
    attribute: String,
    /// Values seen so far, at most [`MOST_EVENT_TYPES`]; only grows.
    seen: Mutex<HashSet<String>>,
}

impl EventTypes {
    pub(crate) fn new(attribute: String) -> Self {
        Self {
            attribute,
            seen: Mutex::default(),
        }
    }

    /// The event type label of `message`.
    pub(crate) fn label(&self, message: &Message) -> String {
        let Some(event_type) = message.attribute(&self.attribute) else {
            return NO_EVENT_TYPE.to_owned();
        };
        let mut seen = self.seen.lock().expect("event types lock poisoned");
        if seen.contains(event_type) {
            return event_type.to_owned();
        }
        if seen.len() < MOST_EVENT_TYPES {
            seen.insert(event_type.to_owned());
            return event_type.to_owned();
        }
        OTHER_EVENT_TYPE.to_owned()
    }
}

/// One attempt at one message, as logs and metrics name it.
#[derive(Debug)]
pub(crate) struct Attempt<'a> {
    pub(crate) consumer: &'a str,
    pub(crate) queue: &'a str,
    pub(crate) message: &'a Message,
    pub(crate) effect_key: &'a str,
    pub(crate) event_type: &'a str,
    /// 1 on the first delivery; counts retries in place too.
    pub(crate) number: u32,
    /// The trace the attempt's span belongs to ([`crate::trace`]).
    pub(crate) trace_id: Option<&'a str>,
}

impl Attempt<'_> {
    /// The span the attempt runs in, so the handler's own logs carry the
    /// message's identity too — and the trace it belongs to, to find it
    /// among the traces.
    pub(crate) fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "ackbox.consume",
            consumer = self.consumer,
            message_id = %self.message.id,
            event_id = self.message.event_id(),
            effect_key = self.effect_key,
            attempt = self.number,
            trace_id = self.trace_id,
        )
    }

    /// Logs the decision and counts it.
    pub(crate) fn record(&self, decision: Decision, elapsed: Duration, failure: Option<&Failure>) {
        self.log(decision, failure);
        let consumer = self.consumer.to_owned();
        let event_type = self.event_type.to_owned();
        let labels = [("consumer", consumer), ("event_type", event_type)];
        match decision {
            Decision::Applied => metrics::counter!("consumer_success_total", &labels).increment(1),
            Decision::Duplicate => {
                metrics::counter!("consumer_duplicate_total", &labels).increment(1);
            }
            Decision::Skipped => metrics::counter!("consumer_skipped_total", &labels).increment(1),
            Decision::Failed | Decision::Quarantined | Decision::Crashed | Decision::Released => {}
        }
        if let Some(failure) = failure {
            let [consumer, event_type] = labels.clone();
            metrics::counter!(
                "consumer_failure_total",
                &[consumer, event_type, ("reason", failure.class.clone())]
            )
            .increment(1);
        }
        let [consumer, event_type] = labels;
        metrics::histogram!(
            "consumer_processing_seconds",
            &[
                consumer,
                event_type,
                ("decision", decision.as_str().to_owned())
            ]
        )
        .record(elapsed.as_secs_f64());
    }

    /// Counts a handler cut off by the handler timeout.
    pub(crate) fn record_timeout(&self) {
        metrics::counter!(
            "consumer_timeout_total",
            "consumer" => self.consumer.to_owned(),
            "event_type" => self.event_type.to_owned()
        )
        .increment(1);
    }

    fn log(&self, decision: Decision, failure: Option<&Failure>) {
        let message = self.message;
        let failure_reason =
            failure.map(|failure| format!("{}: {}", failure.class, failure.message));
        macro_rules! decision_event {
            ($level:expr, $text:literal) => {
                tracing::event!(
                    $level,
                    consumer = self.consumer,
                    queue = self.queue,
                    message_id = %message.id,
                    event_id = message.event_id(),
                    effect_key = self.effect_key,
                    event_type = self.event_type,
                    aggregate_id = message.attribute(AGGREGATE_ID_ATTRIBUTE),
                    aggregate_version = message.attribute(AGGREGATE_VERSION_ATTRIBUTE),
                    correlation_id = message.correlation_id(),
                    causation_id = message.causation_id(),
                    group_id = message.group_id.as_deref(),
                    attempt = self.number,
                    trace_id = self.trace_id,
                    decision = decision.as_str(),
                    failure_reason = failure_reason.as_deref(),
                    $text
                )
            };
        }
        match decision {
            Decision::Applied | Decision::Duplicate | Decision::Skipped => {
                decision_event!(tracing::Level::INFO, "message handled");
            }
            Decision::Failed | Decision::Crashed | Decision::Released => {
                decision_event!(tracing::Level::WARN, "message not handled; it comes back");
            }
            Decision::Quarantined => {
                decision_event!(tracing::Level::ERROR, "message dead-lettered");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(event_type: Option<&str>) -> Message {
        Message {
            id: "m".into(),
            body: String::new(),
            attributes: event_type
                .map(|value| ("kind".to_owned(), value.to_owned()))
                .into_iter()
                .collect(),
            receive_count: 1,
            group_id: None,
        }
    }

    #[test]
    fn event_types_label_metrics_up_to_the_cap_and_the_rest_share_other() {
        let types = EventTypes::new("kind".into());
        assert_eq!(types.label(&typed(None)), "none");
        for index in 0..MOST_EVENT_TYPES {
            let name = format!("Type{index}");
            assert_eq!(types.label(&typed(Some(&name))), name);
        }
        assert_eq!(types.label(&typed(Some("OneTooMany"))), "other");
        assert_eq!(
            types.label(&typed(Some("Type0"))),
            "Type0",
            "a type seen before keeps its label"
        );
    }
}
