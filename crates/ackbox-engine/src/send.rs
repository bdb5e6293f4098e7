//! SendMessage and SendMessageBatch: validation, digests and durable insert.
//!
//! A batch is validated entry by entry; the valid entries are stored in one
//! store call (one group commit) and the sender is answered only after that
//! commit, so a success response always means the message is durable.

use ackbox_core::attributes::{DeduplicationScope, FifoSettings};
use ackbox_core::digest::{content_deduplication_id, md5_of_attributes, md5_of_body};
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::limits::{
    FIFO_DEDUPLICATION_WINDOW_SECONDS, MAX_BATCH_PAYLOAD, MAX_DELAY_SECONDS, MAX_FIFO_TOKEN_LEN,
};
use ackbox_core::message::{
    MessageAttributeValue, MessageAttributes, message_size, validate_body,
    validate_message_attributes,
};
use ackbox_core::queue_name::QueueName;

use crate::counters;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::queue::Queue;
use crate::store::{Deduplication, MessageInsertParams, NewMessage};

/// The system attribute a sender may set.
pub const TRACE_HEADER_ATTRIBUTE: &str = "AWSTraceHeader";

/// One message to send.
#[derive(Debug, Clone, Default)]
pub struct SendEntry {
    /// The body.
    pub body: String,
    /// Per-message delay in seconds; the queue's `DelaySeconds` when absent.
    pub delay_seconds: Option<i32>,
    /// User message attributes.
    pub attributes: MessageAttributes,
    /// The `AWSTraceHeader` system attribute.
    pub trace_header: Option<String>,
    /// `MessageGroupId`; on standard queues it is kept and echoed.
    pub group_id: Option<String>,
    /// `MessageDeduplicationId`; only FIFO queues accept it.
    pub deduplication_id: Option<String>,
}

/// What a successful send returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    /// The new message's id.
    pub message_id: String,
    /// `MD5OfMessageBody`.
    pub md5_of_body: String,
    /// `MD5OfMessageAttributes`, when attributes were sent.
    pub md5_of_attributes: Option<String>,
    /// `MD5OfMessageSystemAttributes`, when a trace header was sent.
    pub md5_of_system_attributes: Option<String>,
    /// On a FIFO queue: the message's `SequenceNumber` (its first send's, for
    /// a duplicate).
    pub sequence_number: Option<String>,
}

/// A FIFO message's `SequenceNumber`: its store sequence number, which only
/// grows, as 20 digits so that strings sort like the numbers.
pub(crate) fn sequence_number(seq: i64) -> String {
    format!("{seq:020}")
}

/// Whether `value` may be a `MessageGroupId`, `MessageDeduplicationId` or
/// `ReceiveRequestAttemptId`: 1 to 128 printable ASCII characters (SQS's
/// rule, which SNS's FIFO topics share).
pub(crate) fn is_fifo_token(value: &str) -> bool {
    (1..=MAX_FIFO_TOKEN_LEN).contains(&value.len())
        && value.bytes().all(|byte| byte.is_ascii_graphic())
}

/// Checks a FIFO token ([`is_fifo_token`]), refusing it in SQS's words.
pub(crate) fn validate_fifo_token(parameter: &str, value: &str) -> Result<(), SqsError> {
    if is_fifo_token(value) {
        Ok(())
    } else {
        Err(SqsError::invalid_parameter(
            parameter,
            value,
            &format!(
                "{parameter} can only include alphanumeric and punctuation characters. 1 to {MAX_FIFO_TOKEN_LEN} in length."
            ),
        ))
    }
}

/// The system attributes of a message as a digestible map.
pub(crate) fn system_attributes(trace_header: Option<&str>) -> MessageAttributes {
    trace_header
        .map(|header| {
            (
                TRACE_HEADER_ATTRIBUTE.to_owned(),
                MessageAttributeValue::string(header),
            )
        })
        .into_iter()
        .collect()
}

/// What AWS says to a send to a FIFO queue without a group.
const MISSING_GROUP: &str = "The request must contain the parameter MessageGroupId.";
/// … and without a deduplication id, where the queue does not derive one.
const MISSING_DEDUPLICATION_ID: &str = "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly";

impl Engine {
    /// SendMessage: one message, answered once it is durable.
    pub async fn send_message(
        &self,
        queue_name: &QueueName,
        entry: SendEntry,
        sender_id: &str,
    ) -> Result<SentMessage, EngineError> {
        let queue = self.queue(queue_name).await?;
        let message = self.prepare(&queue, entry, sender_id)?;
        let sent = self.insert(&queue, vec![message]).await?;
        Ok(sent
            .into_iter()
            .next()
            .expect("one message in, one message out"))
    }

    /// SendMessageBatch: each entry succeeds or fails on its own; the valid
    /// ones are stored in one commit.
    pub async fn send_message_batch(
        &self,
        queue_name: &QueueName,
        entries: Vec<SendEntry>,
        sender_id: &str,
    ) -> Result<Vec<Result<SentMessage, SqsError>>, EngineError> {
        let queue = self.queue(queue_name).await?;
        let total: usize = entries
            .iter()
            .map(|entry| message_size(&entry.body, &entry.attributes))
            .sum();
        if let Some(fifo) = &queue.snapshot().attributes.fifo {
            refuse_fifo_batch_without_keys(fifo, &entries)?;
        }
        if total > MAX_BATCH_PAYLOAD {
            return Err(SqsError::new(
                ErrorCode::BatchRequestTooLong,
                format!("Batch requests cannot be longer than {MAX_BATCH_PAYLOAD} bytes. You have sent {total} bytes."),
            )
            .into());
        }
        let prepared: Vec<Result<NewMessage, SqsError>> = entries
            .into_iter()
            .map(|entry| self.prepare(&queue, entry, sender_id))
            .collect();
        let valid: Vec<NewMessage> = prepared
            .iter()
            .filter_map(|entry| entry.as_ref().ok().cloned())
            .collect();
        let mut sent = self.insert(&queue, valid).await?.into_iter();
        Ok(prepared
            .into_iter()
            .map(|entry| entry.map(|_| sent.next().expect("one result per valid entry")))
            .collect())
    }

    pub(crate) fn prepare(
        &self,
        queue: &Queue,
        entry: SendEntry,
        sender_id: &str,
    ) -> Result<NewMessage, SqsError> {
        let attributes = queue.snapshot().attributes.clone();
        validate_body(&entry.body)?;
        validate_message_attributes(&entry.attributes)?;
        let size = message_size(&entry.body, &entry.attributes);
        if size as i64 > attributes.maximum_message_size {
            return Err(SqsError::invalid_value(format!(
                "One or more parameters are invalid. Reason: Message must be shorter than {} bytes.",
                attributes.maximum_message_size
            )));
        }
        let delay = match entry.delay_seconds {
            Some(delay) if !(0..=MAX_DELAY_SECONDS).contains(&delay) => {
                return Err(SqsError::invalid_parameter(
                    "DelaySeconds",
                    delay,
                    &format!("DelaySeconds must be >= 0 and <= {MAX_DELAY_SECONDS}."),
                ));
            }
            Some(delay) => i64::from(delay),
            None => attributes.delay_seconds,
        };
        let (delay, deduplication) = match &attributes.fifo {
            Some(fifo) => (
                // A FIFO queue delays by its own DelaySeconds only.
                attributes.delay_seconds,
                Some(fifo_deduplication(fifo, &entry)?),
            ),
            None => {
                if let Some(deduplication_id) = &entry.deduplication_id {
                    return Err(SqsError::invalid_parameter(
                        "MessageDeduplicationId",
                        deduplication_id,
                        "The request includes a parameter that is not valid for this queue type.",
                    ));
                }
                (delay, None)
            }
        };
        if let Some(group_id) = &entry.group_id {
            validate_fifo_token("MessageGroupId", group_id)?;
        }
        if let Some(trace_header) = &entry.trace_header {
            validate_message_attributes(&system_attributes(Some(trace_header)))?;
        }
        let now = self.now();
        Ok(NewMessage {
            message_id: uuid::Uuid::new_v4().to_string(),
            md5_of_body: md5_of_body(&entry.body),
            md5_of_attributes: md5_of_attributes(&entry.attributes),
            body: entry.body,
            attributes: entry.attributes,
            trace_header: entry.trace_header,
            group_id: entry.group_id,
            sender_id: sender_id.to_owned(),
            sent_at: now,
            visible_at: now + delay * 1_000,
            deduplication,
        })
    }

    async fn insert(
        &self,
        queue: &Queue,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<SentMessage>, EngineError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let fifo = queue.snapshot().attributes.is_fifo();
        // The digests describe what this request sent, duplicate or not, so
        // that clients checking them against their own message agree.
        let digests: Vec<_> = messages
            .iter()
            .map(|message| {
                (
                    message.md5_of_body.clone(),
                    message.md5_of_attributes.clone(),
                    md5_of_attributes(&system_attributes(message.trace_header.as_deref())),
                )
            })
            .collect();
        let deduplication_window_start = self.now() - FIFO_DEDUPLICATION_WINDOW_SECONDS * 1_000;
        let archive = self.archive_copies(queue, &messages).await?;
        let sent = MessageInsertParams {
            queue_id: queue.id,
            messages,
            deduplication_window_start,
        };
        let inserted = match archive {
            None => self.inner.store.message_insert_batch(sent).await?,
            Some((archive, copies)) => {
                // One transaction: the archive holds a send if and only if
                // it was acknowledged.
                let archived = MessageInsertParams {
                    queue_id: archive.id,
                    messages: copies,
                    deduplication_window_start,
                };
                let mut inserted = self
                    .inner
                    .store
                    .message_insert_atomic(vec![sent, archived])
                    .await?;
                inserted.swap_remove(0)
            }
        };
        // One poller per message is enough (a poller takes up to ten), and
        // waking every poller on every send costs a store round trip each.
        // Delayed messages wake a poller too: it learns when the next message
        // becomes visible and sleeps exactly until then.
        let duplicates = inserted.iter().filter(|message| message.duplicate).count();
        counters::sent(
            &queue.name,
            (inserted.len() - duplicates) as u64,
            duplicates as u64,
        );
        for _ in inserted.iter().filter(|message| !message.duplicate) {
            queue.arrivals.notify_one();
        }
        Ok(inserted
            .into_iter()
            .zip(digests)
            .map(
                |(message, (md5_of_body, md5_of_attributes, md5_of_system_attributes))| {
                    SentMessage {
                        message_id: message.message_id,
                        md5_of_body,
                        md5_of_attributes,
                        md5_of_system_attributes,
                        sequence_number: fifo.then(|| sequence_number(message.seq)),
                    }
                },
            )
            .collect())
    }
}

/// A FIFO batch in which an entry lacks its group, or its deduplication id
/// where the queue does not derive one, is refused as a whole, as AWS does
/// (LocalStack's AWS-validated `test_send_batch_missing_message_group_id_for_fifo_queue`
/// and `test_send_batch_missing_deduplication_id_for_fifo_queue`).
fn refuse_fifo_batch_without_keys(
    fifo: &FifoSettings,
    entries: &[SendEntry],
) -> Result<(), SqsError> {
    if entries.iter().any(|entry| entry.group_id.is_none()) {
        return Err(SqsError::invalid_value(MISSING_GROUP));
    }
    if !fifo.content_based_deduplication
        && entries.iter().any(|entry| entry.deduplication_id.is_none())
    {
        return Err(SqsError::invalid_value(MISSING_DEDUPLICATION_ID));
    }
    Ok(())
}

/// The deduplication key of a send to a FIFO queue, after the checks only
/// FIFO queues make: a group is required, a per-message delay is not allowed,
/// and a deduplication id must be given unless the queue derives it.
fn fifo_deduplication(fifo: &FifoSettings, entry: &SendEntry) -> Result<Deduplication, SqsError> {
    if let Some(delay) = entry.delay_seconds.filter(|delay| *delay != 0) {
        // SQS's own wording, grammar included.
        return Err(SqsError::invalid_parameter(
            "DelaySeconds",
            delay,
            "The request include parameter that is not valid for this queue type.",
        ));
    }
    let Some(group_id) = &entry.group_id else {
        return Err(SqsError::new(ErrorCode::MissingParameter, MISSING_GROUP));
    };
    let id = match &entry.deduplication_id {
        Some(id) => {
            validate_fifo_token("MessageDeduplicationId", id)?;
            id.clone()
        }
        None if fifo.content_based_deduplication => content_deduplication_id(&entry.body),
        None => return Err(SqsError::invalid_value(MISSING_DEDUPLICATION_ID)),
    };
    let scope = match fifo.deduplication_scope {
        DeduplicationScope::Queue => String::new(),
        DeduplicationScope::MessageGroup => group_id.clone(),
    };
    Ok(Deduplication { scope, id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ids_are_printable_ascii_up_to_128() {
        assert!(validate_fifo_token("MessageGroupId", "order-1:eu/x").is_ok());
        for bad in ["", "has space", &"g".repeat(129), "ü"] {
            assert!(validate_fifo_token("MessageGroupId", bad).is_err(), "{bad}");
        }
    }
}
