//! ReceiveMessage: leases, long polling and the attributes a consumer asked for.
//!
//! A long poll waits on the queue's [`Notify`](tokio::sync::Notify), which
//! senders signal after their commit, and on a timer set to the moment the
//! next delayed or leased message becomes visible (with a fallback re-check),
//! never on a sleep loop. The waiter registers before it looks, so a send that
//! lands between the look and the wait is not missed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ackbox_core::attributes::QueueAttributes;
use ackbox_core::clock::Timestamp;
use ackbox_core::digest::md5_of_attributes;
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::limits::{
    MAX_RECEIVE_MESSAGES, MAX_VISIBILITY_TIMEOUT_SECONDS, MAX_WAIT_TIME_SECONDS,
    RECEIVE_ATTEMPT_WINDOW_SECONDS,
};
use ackbox_core::message::MessageAttributes;
use ackbox_core::queue_name::QueueName;
use ackbox_core::receipt::ReceiptClaims;
use tokio::time::Instant;

use crate::counters;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::queue::Queue;
use crate::send::{TRACE_HEADER_ATTRIBUTE, sequence_number, validate_fifo_token};
use crate::store::{
    DeadLetterTarget, FailureClassCount, MessagePeekParams, MessageReceiveParams, ReceiveAttempt,
    StoredMessage,
};

/// Longest a waiting poller goes without looking again, in case a wake-up was
/// lost (for example a message made visible by another node).
const FALLBACK_RECHECK: Duration = Duration::from_secs(1);

/// ackbox's failure metadata, as system attributes (recorded by NackMessage).
const FAILURE_CLASS: &str = "AckBoxFailureClass";
const FAILURE_MESSAGE: &str = "AckBoxFailureMessage";
const FAILURE_COUNT: &str = "AckBoxFailureCount";
const FIRST_FAILURE_TIMESTAMP: &str = "AckBoxFirstFailureTimestamp";
const LAST_FAILURE_TIMESTAMP: &str = "AckBoxLastFailureTimestamp";
const LAST_RECEIVE_TIMESTAMP: &str = "AckBoxLastReceiveTimestamp";

/// The system attributes AWS defines, which `All` returns (the
/// `MessageSystemAttributeName` enumeration of the SQS API reference).
const AWS_SYSTEM_ATTRIBUTE_NAMES: [&str; 9] = [
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageDeduplicationId",
    "MessageGroupId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
];

/// ackbox's own system attributes: returned only when asked for by name,
/// so that `All` answers what it answers on AWS.
pub const ACKBOX_SYSTEM_ATTRIBUTE_NAMES: [&str; 6] = [
    FAILURE_CLASS,
    FAILURE_MESSAGE,
    FAILURE_COUNT,
    FIRST_FAILURE_TIMESTAMP,
    LAST_FAILURE_TIMESTAMP,
    LAST_RECEIVE_TIMESTAMP,
];

/// A ReceiveMessage request, protocol-neutral.
#[derive(Debug, Clone, Default)]
pub struct ReceiveRequest {
    /// 1..=10; 1 when absent.
    pub max_number_of_messages: Option<i32>,
    /// Lease length in seconds; the queue's `VisibilityTimeout` when absent.
    pub visibility_timeout: Option<i32>,
    /// Long-poll wait in seconds; the queue's `ReceiveMessageWaitTimeSeconds` when absent.
    pub wait_time_seconds: Option<i32>,
    /// System attributes to return (`AttributeNames` and `MessageSystemAttributeNames`).
    pub system_attribute_names: Vec<String>,
    /// Message attributes to return: names, `prefix.*`, `All` or `.*`.
    pub message_attribute_names: Vec<String>,
    /// FIFO queues: a retry token; a retried receive within five minutes
    /// returns the same messages and handles. Standard queues ignore it.
    pub receive_request_attempt_id: Option<String>,
}

/// Most messages one PeekMessages call returns.
pub const MAX_PEEK_MESSAGES: i32 = 100;

/// A message as a consumer or operator sees it: body, digests and the
/// attributes asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageView {
    /// The store's sequence number: where a peek goes on from
    /// ([`Engine::peek_messages`]'s `after_seq`).
    pub seq: i64,
    /// The message id.
    pub message_id: String,
    /// The body.
    pub body: String,
    /// `MD5OfBody`.
    pub md5_of_body: String,
    /// The requested message attributes.
    pub message_attributes: MessageAttributes,
    /// `MD5OfMessageAttributes` of the returned attributes.
    pub md5_of_message_attributes: Option<String>,
    /// The requested system attributes.
    pub attributes: BTreeMap<String, String>,
}

impl MessageView {
    fn new(message: StoredMessage, request: &ReceiveRequest) -> Self {
        let all_attributes_returned = message
            .attributes
            .keys()
            .all(|name| request.wants_message_attribute(name));
        let message_attributes: MessageAttributes = message
            .attributes
            .into_iter()
            .filter(|(name, _)| request.wants_message_attribute(name))
            .collect();
        let md5_of_message_attributes = if all_attributes_returned {
            message.md5_of_attributes
        } else {
            md5_of_attributes(&message_attributes)
        };
        let timestamp = |at: Timestamp| at.to_string();
        let failures = message.failures;
        let failed = failures.count > 0;
        // Only FIFO messages carry a deduplication id, and only they have a
        // SequenceNumber.
        let fifo_sequence = message
            .deduplication_id
            .is_some()
            .then(|| sequence_number(message.seq));
        // Most receives ask for no system attribute: formatting each one's
        // value first would cost an allocation apiece for nothing.
        let attributes = if request.system_attribute_names.is_empty() {
            BTreeMap::new()
        } else {
            let system: [(&str, Option<String>); 15] = [
                ("SenderId", Some(message.sender_id)),
                ("SentTimestamp", Some(timestamp(message.sent_at))),
                (
                    "ApproximateReceiveCount",
                    Some(message.receive_count.to_string()),
                ),
                (
                    "ApproximateFirstReceiveTimestamp",
                    message.first_received_at.map(timestamp),
                ),
                ("MessageGroupId", message.group_id),
                ("SequenceNumber", fifo_sequence),
                ("MessageDeduplicationId", message.deduplication_id),
                ("DeadLetterQueueSourceArn", message.dead_letter_source_arn),
                (TRACE_HEADER_ATTRIBUTE, message.trace_header),
                (FAILURE_COUNT, failed.then(|| failures.count.to_string())),
                (FAILURE_CLASS, failures.last_class),
                (FAILURE_MESSAGE, failures.last_message),
                (FIRST_FAILURE_TIMESTAMP, failures.first_at.map(timestamp)),
                (LAST_FAILURE_TIMESTAMP, failures.last_at.map(timestamp)),
                (
                    LAST_RECEIVE_TIMESTAMP,
                    message.last_received_at.map(timestamp),
                ),
            ];
            system
                .into_iter()
                .filter(|(name, _)| request.wants_system(name))
                .filter_map(|(name, value)| value.map(|value| (name.to_owned(), value)))
                .collect()
        };
        Self {
            seq: message.seq,
            message_id: message.message_id,
            body: message.body,
            md5_of_body: message.md5_of_body,
            message_attributes,
            md5_of_message_attributes,
            attributes,
        }
    }
}

/// One received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The message id.
    pub message_id: String,
    /// The handle of this lease.
    pub receipt_handle: String,
    /// The body.
    pub body: String,
    /// `MD5OfBody`.
    pub md5_of_body: String,
    /// The requested message attributes.
    pub message_attributes: MessageAttributes,
    /// `MD5OfMessageAttributes` of the returned attributes.
    pub md5_of_message_attributes: Option<String>,
    /// The requested system attributes.
    pub attributes: BTreeMap<String, String>,
}

fn check_range(
    parameter: &str,
    value: Option<i32>,
    min: i64,
    max: i64,
    reason: &str,
) -> Result<(), SqsError> {
    match value {
        Some(value) if !(min..=max).contains(&i64::from(value)) => {
            Err(SqsError::invalid_parameter(parameter, value, reason))
        }
        _ => Ok(()),
    }
}

impl ReceiveRequest {
    fn validate(&self) -> Result<(), SqsError> {
        check_range(
            "MaxNumberOfMessages",
            self.max_number_of_messages,
            1,
            i64::from(MAX_RECEIVE_MESSAGES),
            &format!("Must be between 1 and {MAX_RECEIVE_MESSAGES}, if provided."),
        )?;
        check_range(
            "WaitTimeSeconds",
            self.wait_time_seconds,
            0,
            i64::from(MAX_WAIT_TIME_SECONDS),
            &format!("Must be >= 0 and <= {MAX_WAIT_TIME_SECONDS}, if provided."),
        )?;
        check_range(
            "VisibilityTimeout",
            self.visibility_timeout,
            0,
            MAX_VISIBILITY_TIMEOUT_SECONDS,
            &format!("Must be >= 0 and <= {MAX_VISIBILITY_TIMEOUT_SECONDS}, if provided."),
        )?;
        if let Some(attempt_id) = &self.receive_request_attempt_id {
            validate_fifo_token("ReceiveRequestAttemptId", attempt_id)?;
        }
        if let Some(unknown) = self.system_attribute_names.iter().find(|name| {
            name.as_str() != "All"
                && !AWS_SYSTEM_ATTRIBUTE_NAMES.contains(&name.as_str())
                && !ACKBOX_SYSTEM_ATTRIBUTE_NAMES.contains(&name.as_str())
        }) {
            return Err(SqsError::new(
                ErrorCode::InvalidAttributeName,
                format!("Unknown Attribute {unknown}."),
            ));
        }
        Ok(())
    }

    fn wants_system(&self, name: &str) -> bool {
        self.system_attribute_names.iter().any(|wanted| {
            wanted == name || (wanted == "All" && AWS_SYSTEM_ATTRIBUTE_NAMES.contains(&name))
        })
    }

    /// `All`, a name, or a prefix followed by `.*`: AWS matches the prefix
    /// as text, so `Hel.*` takes `Hello` and `Help.Me` (LocalStack's
    /// AWS-recorded `test_receive_message_message_attribute_names_filters`).
    fn wants_message_attribute(&self, name: &str) -> bool {
        self.message_attribute_names.iter().any(|wanted| {
            wanted == "All"
                || wanted == name
                || wanted
                    .strip_suffix(".*")
                    .is_some_and(|prefix| name.starts_with(prefix))
        })
    }
}

impl Engine {
    /// ReceiveMessage: leases up to `MaxNumberOfMessages`, waiting up to the
    /// wait time for the first to arrive. Returns early, empty, at shutdown.
    pub async fn receive_messages(
        &self,
        queue_name: &QueueName,
        request: &ReceiveRequest,
    ) -> Result<Vec<ReceivedMessage>, EngineError> {
        request.validate()?;
        if crate::topic::is_archive_queue(queue_name) {
            // A receive would lease, and its delete erase, what every later
            // replay needs; replays read the archive without leasing.
            return Err(SqsError::invalid_parameter(
                "QueueUrl",
                queue_name,
                "This queue is a topic's archive: nothing receives from it; replay it with \
                 AckBox.StartReplay (or `ackbox replay start`), or read it with \
                 AckBox.PeekMessages.",
            )
            .into());
        }
        let queue = self.queue(queue_name).await?;
        let attributes = queue.snapshot().attributes.clone();
        let wait_seconds = request
            .wait_time_seconds
            .map_or(attributes.receive_message_wait_time_seconds, i64::from);
        let deadline = Instant::now() + Duration::from_secs(wait_seconds.unsigned_abs());
        let visibility_ms = request
            .visibility_timeout
            .map_or(attributes.visibility_timeout, i64::from)
            * 1_000;
        let max_messages = request.max_number_of_messages.unwrap_or(1).unsigned_abs();

        loop {
            let arrival = queue.arrivals.notified();
            tokio::pin!(arrival);
            arrival.as_mut().enable();

            let now = self.now();
            let snapshot = queue.snapshot();
            let retention_ms = snapshot.attributes.retention_seconds() * 1_000;
            let dead_letter_queue = self.dead_letter_queue(&snapshot.attributes).await;
            let dead_letter =
                dead_letter_queue
                    .as_ref()
                    .map(|(dlq, max_receive_count)| DeadLetterTarget {
                        queue_id: dlq.id,
                        max_receive_count: i64::from(*max_receive_count),
                        source_arn: self.realm().queue_arn(&queue.name),
                    });
            let outcome = self
                .inner
                .store
                .message_receive(MessageReceiveParams {
                    queue_id: queue.id,
                    now,
                    max_messages,
                    visible_at: now + visibility_ms,
                    expired_at_or_before: now - retention_ms,
                    dead_letter,
                    attempt: self.receive_attempt(&snapshot.attributes, request, now),
                })
                .await?;
            if !outcome.dead_lettered.is_empty()
                && let Some((dlq, _)) = &dead_letter_queue
            {
                tracing::info!(queue = %queue.name, dead_letter_queue = %dlq.name, moved = outcome.dead_lettered.len(), "moved messages past maxReceiveCount");
                for _ in 0..outcome.dead_lettered.len() {
                    dlq.arrivals.notify_one();
                }
            }
            counters::expired(&queue.name, outcome.expired);
            counters::dead_lettered(&queue.name, &outcome.dead_lettered);
            let redelivered = outcome
                .messages
                .iter()
                .filter(|message| message.receive_count > 1)
                .count();
            counters::received(
                &queue.name,
                outcome.messages.len() as u64,
                redelivered as u64,
            );
            if !outcome.messages.is_empty() {
                return Ok(outcome
                    .messages
                    .into_iter()
                    .map(|message| self.received(queue.id, &queue.name, message, request))
                    .collect());
            }
            if queue.is_deleted() {
                return Err(SqsError::queue_does_not_exist().into());
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() || self.inner.shutdown.is_cancelled() {
                return Ok(Vec::new());
            }
            let until_visible = outcome.next_visible_at.map_or(FALLBACK_RECHECK, |at| {
                Duration::from_millis((at - now).max(0).unsigned_abs())
            });
            let nap = remaining.min(until_visible).min(FALLBACK_RECHECK);
            tokio::select! {
                () = &mut arrival => {}
                () = tokio::time::sleep(nap) => {}
                () = self.inner.shutdown.cancelled() => return Ok(Vec::new()),
            }
        }
    }

    fn receive_attempt(
        &self,
        attributes: &QueueAttributes,
        request: &ReceiveRequest,
        now: Timestamp,
    ) -> Option<ReceiveAttempt> {
        let id = request
            .receive_request_attempt_id
            .clone()
            .filter(|_| attributes.is_fifo())?;
        Some(ReceiveAttempt {
            id,
            valid_after: now - RECEIVE_ATTEMPT_WINDOW_SECONDS * 1_000,
        })
    }

    /// The live dead-letter queue of a queue with a redrive policy, and its
    /// receive limit. A policy whose target is gone moves nothing.
    pub(crate) async fn dead_letter_queue(
        &self,
        attributes: &QueueAttributes,
    ) -> Option<(Arc<Queue>, u32)> {
        let policy = attributes.redrive_policy.as_ref()?;
        let name = self
            .realm()
            .queue_name_from_arn(&policy.dead_letter_target_arn)?;
        match self.queue(&name).await {
            Ok(queue) => Some((queue, policy.max_receive_count)),
            Err(_) => {
                // Every poll meets this, so it stays out of the warning log.
                tracing::debug!(target = %policy.dead_letter_target_arn, "dead-letter queue is gone; messages stay in their queue");
                None
            }
        }
    }

    fn received(
        &self,
        queue_id: i64,
        queue_name: &QueueName,
        message: StoredMessage,
        request: &ReceiveRequest,
    ) -> ReceivedMessage {
        let receipt_handle = self.inner.config.receipt_key.seal(ReceiptClaims {
            queue_id,
            seq: message.seq,
            lease: message.receive_count,
            leased_at: message.last_received_at,
        });
        tracing::trace!(queue = %queue_name, message_id = %message.message_id, receive_count = message.receive_count, "leased");
        let view = MessageView::new(message, request);
        ReceivedMessage {
            message_id: view.message_id,
            receipt_handle,
            body: view.body,
            md5_of_body: view.md5_of_body,
            message_attributes: view.message_attributes,
            md5_of_message_attributes: view.md5_of_message_attributes,
            attributes: view.attributes,
        }
    }

    /// SummarizeQueue (ackbox extension): the queue's messages counted by
    /// last failure class, largest first, without touching them — those of
    /// `class` only, and with `sent_before` those sent at or before it, as
    /// a move task with the same filter would take them.
    pub async fn failure_classes(
        &self,
        queue_name: &QueueName,
        class: Option<&str>,
        sent_before: Option<Timestamp>,
    ) -> Result<Vec<FailureClassCount>, EngineError> {
        let queue = self.queue(queue_name).await?;
        let mut classes = self
            .inner
            .store
            .message_failure_classes(queue.id, sent_before)
            .await?;
        if let Some(class) = class {
            classes.retain(|counted| counted.class == class);
        }
        Ok(classes)
    }

    /// PeekMessages (ackbox extension): up to `max` messages of a queue
    /// stored after `after_seq` (0: from the start), oldest first, whatever
    /// their state, without leasing them. Meant for operators looking into
    /// a queue, page by page.
    pub async fn peek_messages(
        &self,
        queue_name: &QueueName,
        max: Option<i32>,
        after_seq: i64,
        request: &ReceiveRequest,
    ) -> Result<Vec<MessageView>, EngineError> {
        request.validate()?;
        let limit = match max {
            None => 10,
            Some(max) if (1..=MAX_PEEK_MESSAGES).contains(&max) => max.unsigned_abs(),
            Some(max) => {
                return Err(SqsError::invalid_parameter(
                    "MaxNumberOfMessages",
                    max,
                    &format!("Must be between 1 and {MAX_PEEK_MESSAGES}, if provided."),
                )
                .into());
            }
        };
        let queue = self.queue(queue_name).await?;
        let messages = self
            .inner
            .store
            .message_peek(MessagePeekParams {
                queue_id: queue.id,
                limit,
                after_seq,
            })
            .await?;
        Ok(messages
            .into_iter()
            .map(|message| MessageView::new(message, request))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_attribute_filters_match_names_prefixes_and_all() {
        let request = ReceiveRequest {
            message_attribute_names: vec!["exact".into(), "Hel.*".into()],
            ..ReceiveRequest::default()
        };
        assert!(request.wants_message_attribute("exact"));
        assert!(request.wants_message_attribute("Hello"));
        assert!(request.wants_message_attribute("Help.Me"));
        assert!(!request.wants_message_attribute("General"));
        assert!(!request.wants_message_attribute("exactly"));
        let all = ReceiveRequest {
            message_attribute_names: vec![".*".into()],
            ..ReceiveRequest::default()
        };
        assert!(all.wants_message_attribute("anything"));
    }

    #[test]
    fn out_of_range_parameters_use_aws_wording() {
        let request = ReceiveRequest {
            max_number_of_messages: Some(11),
            ..ReceiveRequest::default()
        };
        assert_eq!(
            request.validate().unwrap_err().message,
            "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."
        );
        let request = ReceiveRequest {
            wait_time_seconds: Some(21),
            ..ReceiveRequest::default()
        };
        assert_eq!(
            request.validate().unwrap_err().message,
            "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
        );
        let request = ReceiveRequest {
            system_attribute_names: vec!["Colour".into()],
            ..ReceiveRequest::default()
        };
        assert_eq!(
            request.validate().unwrap_err().code,
            ErrorCode::InvalidAttributeName
        );
    }
}
