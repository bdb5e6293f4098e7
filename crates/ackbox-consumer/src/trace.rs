//! W3C trace context across the broker, so one order can be followed from
//! its producer through the queue to the consumer's commit.
//!
//! A message carries its producer's span as the message attributes
//! `traceparent` (and `tracestate`), as the W3C Trace Context
//! recommendation writes them; the broker keeps message attributes, so a
//! topic's copies and a redriven message carry them too. The consumer
//! runs each attempt — claim, handler, commit, acknowledgement or dead
//! letter — in an OpenTelemetry consumer span whose parent is that
//! remote span, current while the handler runs; an event the handler
//! writes to the outbox takes the current span as its `traceparent`, and
//! the relay publishes it with the event.
//!
//! The spans go wherever the process's OpenTelemetry tracer provider sends
//! them (with the feature `otlp`, `otlp::install` sets one that exports
//! over OTLP/HTTP). With none installed, the trace still passes through:
//! the handler's context, and the events it writes, carry the incoming
//! trace and span.

use std::collections::BTreeMap;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue, global};

use crate::decision::Decision;
use crate::error::Failure;
use crate::message::Message;

/// The message attribute with the W3C `traceparent` of the span that
/// produced the message.
pub const TRACEPARENT_ATTRIBUTE: &str = "traceparent";
/// The message attribute with the W3C `tracestate` that goes with it.
pub const TRACESTATE_ATTRIBUTE: &str = "tracestate";
/// The name of the tracer the consumer's spans come from.
const TRACER: &str = "ackbox-consumer";
/// The only version of `traceparent` there is; a later version's first
/// four fields read the same way.
const VERSION: &str = "00";

/// The remote span a message's `traceparent` names; `None` when it has
/// none, or one that is not valid (then the attempt starts a new trace).
pub(crate) fn producer_of(attributes: &BTreeMap<String, String>) -> Option<SpanContext> {
    let (trace_id, span_id, flags) = parse_traceparent(attributes.get(TRACEPARENT_ATTRIBUTE)?)?;
    let state = attributes
        .get(TRACESTATE_ATTRIBUTE)
        .and_then(|state| state.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// `traceparent`: version, trace id, parent span id, flags; `None` unless
/// each is well formed and neither id is all zeros.
fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let mut fields = value.trim().split('-');
    let (version, trace_id, span_id, flags) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let lowercase_hex = |field: &str, length: usize| {
        field.len() == length
            && field
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
    };
    let known_layout = version == VERSION && fields.next().is_none();
    let later_version = version != VERSION && version != "ff" && lowercase_hex(version, 2);
    if !(known_layout || later_version)
        || !lowercase_hex(trace_id, 32)
        || !lowercase_hex(span_id, 16)
        || !lowercase_hex(flags, 2)
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    (trace_id != TraceId::INVALID && span_id != SpanId::INVALID).then(|| {
        (
            trace_id,
            span_id,
            TraceFlags::new(flags) & TraceFlags::SAMPLED,
        )
    })
}

fn format_traceparent(span: &SpanContext) -> String {
    format!(
        "{VERSION}-{}-{}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    )
}

/// Adds the current span (OpenTelemetry's current context) to `attributes`
/// as the message's producer, unless there is none or they name one.
pub(crate) fn stamp_current_span(attributes: &mut BTreeMap<String, String>) {
    let context = Context::current();
    let span = context.span();
    let span = span.span_context();
    if !span.is_valid() || attributes.contains_key(TRACEPARENT_ATTRIBUTE) {
        return;
    }
    attributes.insert(TRACEPARENT_ATTRIBUTE.to_owned(), format_traceparent(span));
    let state = span.trace_state().header();
    if !state.is_empty() {
        attributes.insert(TRACESTATE_ATTRIBUTE.to_owned(), state);
    }
}

/// The span of one attempt at one message: a consumer span named
/// `process <queue>`, child of the message's producer.
pub(crate) struct AttemptSpan {
    context: Context,
}

impl AttemptSpan {
    pub(crate) fn start(consumer: &str, queue: &str, message: &Message, attempt: u32) -> Self {
        let parent = producer_of(&message.attributes).map_or_else(Context::new, |producer| {
            Context::new().with_remote_span_context(producer)
        });
        let mut attributes = vec![
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.destination.name", queue.to_owned()),
            KeyValue::new("messaging.consumer.group.name", consumer.to_owned()),
            KeyValue::new("messaging.message.id", message.id.clone()),
            KeyValue::new("ackbox.event_id", message.event_id().to_owned()),
            KeyValue::new("ackbox.attempt", i64::from(attempt)),
        ];
        if let Some(group) = &message.group_id {
            attributes.push(KeyValue::new("messaging.message.group.id", group.clone()));
        }
        let tracer = global::tracer(TRACER);
        let span = tracer
            .span_builder(format!("process {queue}"))
            .with_kind(SpanKind::Consumer)
            .with_attributes(attributes)
            .start_with_context(&tracer, &parent);
        Self {
            context: parent.with_span(span),
        }
    }

    /// The context the attempt runs in: its span is the current one.
    pub(crate) fn context(&self) -> Context {
        self.context.clone()
    }

    /// The trace the attempt belongs to, as logs name it.
    pub(crate) fn trace_id(&self) -> Option<String> {
        let span = self.context.span();
        let span = span.span_context();
        span.is_valid().then(|| span.trace_id().to_string())
    }

    /// Ends the span with the attempt's decision, and its failure as the
    /// span's error.
    pub(crate) fn end(self, decision: Decision, failure: Option<&Failure>) {
        let span = self.context.span();
        span.set_attribute(KeyValue::new("ackbox.decision", decision.as_str()));
        match failure {
            Some(failure) => span.set_status(Status::error(format!(
                "{}: {}",
                failure.class, failure.message
            ))),
            None if decision.settles() => span.set_status(Status::Ok),
            None => {}
        }
        span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn carrying(traceparent: &str, tracestate: Option<&str>) -> BTreeMap<String, String> {
        let mut attributes =
            BTreeMap::from([(TRACEPARENT_ATTRIBUTE.to_owned(), traceparent.to_owned())]);
        if let Some(state) = tracestate {
            attributes.insert(TRACESTATE_ATTRIBUTE.to_owned(), state.to_owned());
        }
        attributes
    }

    #[test]
    fn a_traceparent_names_its_trace_span_and_sampling_and_writes_back_the_same() {
        let producer = producer_of(&carrying(TRACEPARENT, Some("vendor=opaque"))).unwrap();
        assert_eq!(
            producer.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(producer.span_id().to_string(), "00f067aa0ba902b7");
        assert!(producer.is_sampled());
        assert!(producer.is_remote());
        assert_eq!(producer.trace_state().header(), "vendor=opaque");
        assert_eq!(format_traceparent(&producer), TRACEPARENT);
    }

    #[test]
    fn a_later_version_is_read_by_its_first_fields_and_a_malformed_one_not_at_all() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-more";
        let read = producer_of(&carrying(later, None)).unwrap();
        assert!(read.is_sampled(), "flags other than sampled are dropped");
        assert_eq!(format_traceparent(&read), TRACEPARENT);
        for malformed in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        ] {
            assert_eq!(
                producer_of(&carrying(malformed, None)),
                None,
                "{malformed:?}"
            );
        }
        assert_eq!(producer_of(&BTreeMap::new()), None);
    }

    #[test]
    fn the_current_span_is_stamped_on_what_names_no_producer_of_its_own() {
        let producer = producer_of(&carrying(TRACEPARENT, Some("vendor=opaque"))).unwrap();
        let _current = Context::new().with_remote_span_context(producer).attach();
        let mut stamped = BTreeMap::new();
        stamp_current_span(&mut stamped);
        assert_eq!(stamped, carrying(TRACEPARENT, Some("vendor=opaque")));
        let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        let mut kept = carrying(own, None);
        stamp_current_span(&mut kept);
        assert_eq!(kept, carrying(own, None));
    }

    #[test]
    fn without_a_current_span_nothing_is_stamped() {
        let mut attributes = BTreeMap::new();
        stamp_current_span(&mut attributes);
        assert!(attributes.is_empty());
    }
}
