//! What the log records about standard queues' messages, and its binary form.
//!
//! A send is the whole message; everything after it is a few dozen bytes
//! naming the message by `(queue, seq)`: a lease is ~30 bytes where SQLite
//! rewrites two pages. [`Record::Sent`] doubles as a snapshot: it carries the
//! message's receive count and visibility, so compaction can copy a live
//! message forward and drop the segment it was first written to.
//!
//! The form is little-endian fixed-width integers and length-prefixed UTF-8,
//! one tag byte first; an unknown tag or a short field is an error, never a
//! guess.

use crate::frame::Payload;

/// What a sender gave: the message itself, never changed after the send.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Content {
    /// The SQS message id.
    pub message_id: String,
    /// The body.
    pub body: String,
    /// Message attributes as a JSON object, when there are any.
    pub attributes: Option<String>,
    /// MD5 of the body, hex.
    pub md5_of_body: String,
    /// MD5 of the attributes, hex.
    pub md5_of_attributes: Option<String>,
    /// The AWS X-Ray trace header system attribute.
    pub trace_header: Option<String>,
    /// Who sent it.
    pub sender_id: String,
    /// `MessageGroupId`, which a standard queue keeps and returns.
    pub group_id: Option<String>,
}

/// What consumers reported about a message's failures (`AckBox.NackMessage`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Failures {
    /// How many were reported.
    pub count: u32,
    /// When the first was, epoch milliseconds.
    pub first_at: i64,
    /// When the latest was, epoch milliseconds.
    pub last_at: i64,
    /// The latest one's class (an error type name, say).
    pub last_class: String,
    /// The latest one's message.
    pub last_message: String,
}

impl Failures {
    /// These failures and one more, reported at `at`.
    pub fn and(failures: Option<&Self>, at: i64, class: &str, message: &str) -> Self {
        Self {
            count: failures.map_or(0, |f| f.count).saturating_add(1),
            first_at: failures.map_or(at, |f| f.first_at),
            last_at: at,
            last_class: class.to_owned(),
            last_message: message.to_owned(),
        }
    }
}

/// A message as it was sent, with its delivery state when this record was
/// written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SentMessage {
    /// The queue's id (the metadata store's).
    pub queue: u64,
    /// The store-wide sequence number: the receipt handle's anchor.
    pub seq: u64,
    /// Epoch milliseconds: retention counts from here.
    pub sent_at: i64,
    /// Epoch milliseconds before which it is not delivered (delay or lease).
    pub visible_at: i64,
    /// Deliveries so far.
    pub receive_count: u32,
    /// Epoch milliseconds of the first delivery.
    pub first_received_at: Option<i64>,
    /// Epoch milliseconds of the latest delivery.
    pub last_received_at: Option<i64>,
    /// The queue it was dead-lettered from (`DeadLetterQueueSourceArn`).
    pub dead_letter_source_arn: Option<String>,
    /// The failures reported so far.
    pub failures: Option<Failures>,
    /// The move task that last redrove it here, if one did.
    pub redriven_by_task: Option<String>,
    /// The message itself.
    pub content: Content,
}

/// One change to a standard queue's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A message was sent, moved in, or copied forward by compaction.
    Sent(SentMessage),
    /// A message was delivered: leased until `visible_at`.
    Leased {
        /// The queue's id.
        queue: u64,
        /// The message.
        seq: u64,
        /// The lease's deadline, epoch milliseconds.
        visible_at: i64,
        /// Deliveries, this one included.
        receive_count: u32,
        /// When this delivery happened, epoch milliseconds: the latest
        /// delivery's time, and the first's if there was none before.
        received_at: i64,
    },
    /// A lease's deadline moved (ChangeMessageVisibility, a nack).
    VisibilityChanged {
        /// The queue's id.
        queue: u64,
        /// The message.
        seq: u64,
        /// The new deadline, epoch milliseconds.
        visible_at: i64,
    },
    /// A message is gone: deleted, expired, or moved to another queue.
    Deleted {
        /// The queue's id.
        queue: u64,
        /// The message.
        seq: u64,
    },
    /// A consumer gave a message back with a failure: visible again at
    /// `visible_at`, the failure counted and the latest one's reason kept.
    Nacked {
        /// The queue's id.
        queue: u64,
        /// The message.
        seq: u64,
        /// When it may be delivered again, epoch milliseconds.
        visible_at: i64,
        /// When the failure was reported, epoch milliseconds.
        failed_at: i64,
        /// The failure's class.
        class: String,
        /// What went wrong.
        message: String,
    },
    /// A message left one queue for another under a new sequence number
    /// (a dead-letter move): one record, so a torn tail can never keep the
    /// removal and lose the copy.
    Moved {
        /// The queue it left.
        from_queue: u64,
        /// Its sequence number there.
        from_seq: u64,
        /// The message as it now is, in its new queue.
        to: SentMessage,
    },
    /// Every message of the queue numbered up to `through_seq` is gone.
    Purged {
        /// The queue's id.
        queue: u64,
        /// The last sequence number the purge took.
        through_seq: u64,
    },
}

const SENT: u8 = 1;
const LEASED: u8 = 2;
const VISIBILITY_CHANGED: u8 = 3;
const DELETED: u8 = 4;
const PURGED: u8 = 5;
const MOVED: u8 = 6;
const NACKED: u8 = 7;

/// A payload that is not a record of this format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The first byte names no record kind.
    #[error("unknown record tag {0}")]
    UnknownTag(u8),
    /// The payload ended inside a field.
    #[error("the record ends inside its {0} field")]
    Truncated(&'static str),
    /// A string field is not UTF-8.
    #[error("the record's {0} field is not UTF-8")]
    NotUtf8(&'static str),
    /// Bytes are left after the last field.
    #[error("{0} bytes follow the record's last field")]
    Trailing(usize),
}

impl Record {
    /// The queue the record is about.
    pub fn queue(&self) -> u64 {
        match self {
            Self::Sent(message) | Self::Moved { to: message, .. } => message.queue,
            Self::Leased { queue, .. }
            | Self::Nacked { queue, .. }
            | Self::VisibilityChanged { queue, .. }
            | Self::Deleted { queue, .. }
            | Self::Purged { queue, .. } => *queue,
        }
    }

    /// The message a send or a move puts in place: what a live message's
    /// position in the ledger points at.
    pub fn into_message(self) -> Option<SentMessage> {
        match self {
            Self::Sent(message) | Self::Moved { to: message, .. } => Some(message),
            Self::Leased { .. }
            | Self::Nacked { .. }
            | Self::VisibilityChanged { .. }
            | Self::Deleted { .. }
            | Self::Purged { .. } => None,
        }
    }

    /// Appends the record's binary form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Sent(message) => {
                out.push(SENT);
                put_message(out, message);
            }
            Self::Moved {
                from_queue,
                from_seq,
                to,
            } => {
                out.push(MOVED);
                put_u64(out, *from_queue);
                put_u64(out, *from_seq);
                put_message(out, to);
            }
            Self::Leased {
                queue,
                seq,
                visible_at,
                receive_count,
                received_at,
            } => {
                out.push(LEASED);
                put_u64(out, *queue);
                put_u64(out, *seq);
                put_i64(out, *visible_at);
                put_u32(out, *receive_count);
                put_i64(out, *received_at);
            }
            Self::Nacked {
                queue,
                seq,
                visible_at,
                failed_at,
                class,
                message,
            } => {
                out.push(NACKED);
                put_u64(out, *queue);
                put_u64(out, *seq);
                put_i64(out, *visible_at);
                put_i64(out, *failed_at);
                put_str(out, class);
                put_str(out, message);
            }
            Self::VisibilityChanged {
                queue,
                seq,
                visible_at,
            } => {
                out.push(VISIBILITY_CHANGED);
                put_u64(out, *queue);
                put_u64(out, *seq);
                put_i64(out, *visible_at);
            }
            Self::Deleted { queue, seq } => {
                out.push(DELETED);
                put_u64(out, *queue);
                put_u64(out, *seq);
            }
            Self::Purged { queue, through_seq } => {
                out.push(PURGED);
                put_u64(out, *queue);
                put_u64(out, *through_seq);
            }
        }
    }

    /// The record's binary form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Reads a record from its binary form.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader { bytes };
        let record = match reader.u8("tag")? {
            SENT => Self::Sent(reader.message()?),
            MOVED => Self::Moved {
                from_queue: reader.u64("from_queue")?,
                from_seq: reader.u64("from_seq")?,
                to: reader.message()?,
            },
            LEASED => Self::Leased {
                queue: reader.u64("queue")?,
                seq: reader.u64("seq")?,
                visible_at: reader.i64("visible_at")?,
                receive_count: reader.u32("receive_count")?,
                received_at: reader.i64("received_at")?,
            },
            NACKED => Self::Nacked {
                queue: reader.u64("queue")?,
                seq: reader.u64("seq")?,
                visible_at: reader.i64("visible_at")?,
                failed_at: reader.i64("failed_at")?,
                class: reader.string("class")?,
                message: reader.string("message")?,
            },
            VISIBILITY_CHANGED => Self::VisibilityChanged {
                queue: reader.u64("queue")?,
                seq: reader.u64("seq")?,
                visible_at: reader.i64("visible_at")?,
            },
            DELETED => Self::Deleted {
                queue: reader.u64("queue")?,
                seq: reader.u64("seq")?,
            },
            PURGED => Self::Purged {
                queue: reader.u64("queue")?,
                through_seq: reader.u64("through_seq")?,
            },
            tag => return Err(DecodeError::UnknownTag(tag)),
        };
        match reader.bytes.len() {
            0 => Ok(record),
            left => Err(DecodeError::Trailing(left)),
        }
    }
}

impl Payload for Record {
    fn encode_into(&self, out: &mut Vec<u8>) {
        self.encode(out);
    }
}

fn put_message(out: &mut Vec<u8>, message: &SentMessage) {
    put_u64(out, message.queue);
    put_u64(out, message.seq);
    put_i64(out, message.sent_at);
    put_i64(out, message.visible_at);
    put_u32(out, message.receive_count);
    put_optional_i64(out, message.first_received_at);
    put_optional_i64(out, message.last_received_at);
    put_optional_str(out, message.dead_letter_source_arn.as_deref());
    match &message.failures {
        Some(failures) => {
            out.push(1);
            put_u32(out, failures.count);
            put_i64(out, failures.first_at);
            put_i64(out, failures.last_at);
            put_str(out, &failures.last_class);
            put_str(out, &failures.last_message);
        }
        None => out.push(0),
    }
    put_optional_str(out, message.redriven_by_task.as_deref());
    let content = &message.content;
    put_str(out, &content.message_id);
    put_str(out, &content.body);
    put_optional_str(out, content.attributes.as_deref());
    put_str(out, &content.md5_of_body);
    put_optional_str(out, content.md5_of_attributes.as_deref());
    put_optional_str(out, content.trace_header.as_deref());
    put_str(out, &content.sender_id);
    put_optional_str(out, content.group_id.as_deref());
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_optional_i64(out: &mut Vec<u8>, value: Option<i64>) {
    match value {
        Some(value) => {
            out.push(1);
            put_i64(out, value);
        }
        None => out.push(0),
    }
}

fn put_str(out: &mut Vec<u8>, value: &str) {
    // Frames cap a record at 4 MiB, so a field's length always fits.
    put_u32(out, u32::try_from(value.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(value.as_bytes());
}

fn put_optional_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => {
            out.push(1);
            put_str(out, value);
        }
        None => out.push(0),
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated(field));
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let taken = self.take(N, field)?;
        taken.try_into().map_err(|_| DecodeError::Truncated(field))
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    fn present(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        Ok(self.u8(field)? != 0)
    }

    fn optional_i64(&mut self, field: &'static str) -> Result<Option<i64>, DecodeError> {
        Ok(if self.present(field)? {
            Some(self.i64(field)?)
        } else {
            None
        })
    }

    fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let len = self.u32(field)? as usize;
        let bytes = self.take(len, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::NotUtf8(field))
    }

    fn message(&mut self) -> Result<SentMessage, DecodeError> {
        Ok(SentMessage {
            queue: self.u64("queue")?,
            seq: self.u64("seq")?,
            sent_at: self.i64("sent_at")?,
            visible_at: self.i64("visible_at")?,
            receive_count: self.u32("receive_count")?,
            first_received_at: self.optional_i64("first_received_at")?,
            last_received_at: self.optional_i64("last_received_at")?,
            dead_letter_source_arn: self.optional_string("dead_letter_source_arn")?,
            failures: if self.present("failures")? {
                Some(Failures {
                    count: self.u32("failure_count")?,
                    first_at: self.i64("first_failure_at")?,
                    last_at: self.i64("last_failure_at")?,
                    last_class: self.string("last_failure_class")?,
                    last_message: self.string("last_failure_message")?,
                })
            } else {
                None
            },
            redriven_by_task: self.optional_string("redriven_by_task")?,
            content: Content {
                message_id: self.string("message_id")?,
                body: self.string("body")?,
                attributes: self.optional_string("attributes")?,
                md5_of_body: self.string("md5_of_body")?,
                md5_of_attributes: self.optional_string("md5_of_attributes")?,
                trace_header: self.optional_string("trace_header")?,
                sender_id: self.string("sender_id")?,
                group_id: self.optional_string("group_id")?,
            },
        })
    }

    fn optional_string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        Ok(if self.present(field)? {
            Some(self.string(field)?)
        } else {
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::option;
    use proptest::prelude::*;

    fn sent_message() -> impl Strategy<Value = SentMessage> {
        (
            (any::<u64>(), any::<u64>(), any::<i64>(), any::<i64>()),
            (
                any::<u32>(),
                option::of(any::<i64>()),
                option::of(any::<i64>()),
                option::of(".*"),
                option::of((any::<u32>(), any::<i64>(), any::<i64>(), ".*", ".*")),
                option::of(".*"),
            ),
            (".*", ".*", option::of(".*"), "[0-9a-f]{32}"),
            (
                option::of("[0-9a-f]{32}"),
                option::of(".*"),
                ".*",
                option::of(".*"),
            ),
        )
            .prop_map(
                |(
                    (queue, seq, sent_at, visible_at),
                    (
                        receive_count,
                        first_received_at,
                        last_received_at,
                        dead_letter_source_arn,
                        failures,
                        redriven_by_task,
                    ),
                    (message_id, body, attributes, md5_of_body),
                    (md5_of_attributes, trace_header, sender_id, group_id),
                )| SentMessage {
                    queue,
                    seq,
                    sent_at,
                    visible_at,
                    receive_count,
                    first_received_at,
                    last_received_at,
                    dead_letter_source_arn,
                    redriven_by_task,
                    failures: failures.map(
                        |(count, first_at, last_at, last_class, last_message)| Failures {
                            count,
                            first_at,
                            last_at,
                            last_class,
                            last_message,
                        },
                    ),
                    content: Content {
                        message_id,
                        body,
                        attributes,
                        md5_of_body,
                        md5_of_attributes,
                        trace_header,
                        sender_id,
                        group_id,
                    },
                },
            )
    }

    fn record() -> impl Strategy<Value = Record> {
        prop_oneof![
            sent_message().prop_map(Record::Sent),
            (any::<u64>(), any::<u64>(), sent_message()).prop_map(|(from_queue, from_seq, to)| {
                Record::Moved {
                    from_queue,
                    from_seq,
                    to,
                }
            }),
            (
                any::<u64>(),
                any::<u64>(),
                any::<i64>(),
                any::<u32>(),
                any::<i64>()
            )
                .prop_map(|(queue, seq, visible_at, receive_count, received_at)| {
                    Record::Leased {
                        queue,
                        seq,
                        visible_at,
                        receive_count,
                        received_at,
                    }
                }),
            (
                any::<u64>(),
                any::<u64>(),
                any::<i64>(),
                any::<i64>(),
                ".*",
                ".*"
            )
                .prop_map(|(queue, seq, visible_at, failed_at, class, message)| {
                    Record::Nacked {
                        queue,
                        seq,
                        visible_at,
                        failed_at,
                        class,
                        message,
                    }
                }),
            (any::<u64>(), any::<u64>(), any::<i64>()).prop_map(|(queue, seq, visible_at)| {
                Record::VisibilityChanged {
                    queue,
                    seq,
                    visible_at,
                }
            }),
            (any::<u64>(), any::<u64>()).prop_map(|(queue, seq)| Record::Deleted { queue, seq }),
            (any::<u64>(), any::<u64>())
                .prop_map(|(queue, through_seq)| Record::Purged { queue, through_seq }),
        ]
    }

    proptest! {
        #[test]
        fn every_record_reads_back_as_written(record in record()) {
            prop_assert_eq!(Record::decode(&record.to_bytes()), Ok(record));
        }

        /// A record cut short anywhere is refused, never misread.
        #[test]
        fn a_cut_record_is_refused(record in record(), cut in 0usize..10_000) {
            let bytes = record.to_bytes();
            let cut = cut % bytes.len();
            prop_assert!(Record::decode(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn a_lease_is_a_few_dozen_bytes() {
        let lease = Record::Leased {
            queue: 1,
            seq: 2,
            visible_at: 3,
            receive_count: 4,
            received_at: 5,
        };
        assert_eq!(lease.to_bytes().len(), 37);
    }

    #[test]
    fn an_unknown_tag_and_trailing_bytes_are_named() {
        assert_eq!(Record::decode(&[9]), Err(DecodeError::UnknownTag(9)));
        let mut bytes = Record::Deleted { queue: 1, seq: 2 }.to_bytes();
        bytes.push(0);
        assert_eq!(Record::decode(&bytes), Err(DecodeError::Trailing(1)));
    }
}
