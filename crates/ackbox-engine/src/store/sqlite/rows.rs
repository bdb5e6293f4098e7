//! Reading rows: the columns of queues and messages, decoded, and whether
//! a queue exists.

use rusqlite::{Connection, Row};

use super::database_error::database_error;
use crate::store::{FailureRecord, QueueRecord, StoreError, StoredMessage, from_json};

pub(crate) const QUEUE_COLUMNS: &str = "id, name, attributes, tags, created_at, last_modified_at";

/// Decodes a row selected with [`QUEUE_COLUMNS`].
pub(crate) fn queue_from_row(
    row: &Row<'_>,
) -> rusqlite::Result<(i64, String, String, String, i64, i64)> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
}

pub(crate) fn queue_record(
    (id, name, attributes, tags, created_at, last_modified_at): (
        i64,
        String,
        String,
        String,
        i64,
        i64,
    ),
) -> Result<QueueRecord, StoreError> {
    Ok(QueueRecord {
        id,
        attributes: from_json(&attributes, "queue attributes")?,
        tags: from_json(&tags, "queue tags")?,
        name,
        created_at,
        last_modified_at,
    })
}

/// Fails with `QueueNotFound` when the queue was deleted after the engine
/// looked it up, so no write lands in a queue that no longer exists.
pub(super) fn ensure_queue_exists(
    connection: &Connection,
    queue_id: i64,
) -> Result<(), StoreError> {
    if queue_exists(connection, queue_id)? {
        Ok(())
    } else {
        Err(StoreError::QueueNotFound { queue_id })
    }
}

pub(super) fn queue_exists(connection: &Connection, queue_id: i64) -> Result<bool, StoreError> {
    connection
        .prepare_cached("SELECT 1 FROM queues WHERE id = ?1")
        .and_then(|mut select| select.exists([queue_id]))
        .map_err(database_error("queue exists"))
}

/// Columns [`message_row`] decodes, in its order.
pub(crate) const MESSAGE_COLUMNS: &str =
    "seq, message_id, body, attributes, md5_of_body, md5_of_attributes,
     trace_header, group_id, sender_id, sent_at, receive_count, first_received_at,
     dead_letter_source_arn, failure_count, first_failure_at, last_failure_at,
     last_failure_class, last_failure_message, last_received_at, dedup_id";

pub(crate) struct MessageRow {
    pub(super) message: StoredMessage,
    attributes_json: Option<String>,
}

pub(crate) fn message_row(row: &Row<'_>) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow {
        attributes_json: row.get(3)?,
        message: StoredMessage {
            seq: row.get(0)?,
            message_id: row.get(1)?,
            body: row.get(2)?,
            attributes: Default::default(),
            md5_of_body: row.get(4)?,
            md5_of_attributes: row.get(5)?,
            trace_header: row.get(6)?,
            group_id: row.get(7)?,
            sender_id: row.get(8)?,
            sent_at: row.get(9)?,
            receive_count: row.get(10)?,
            first_received_at: row.get(11)?,
            dead_letter_source_arn: row.get(12)?,
            failures: FailureRecord {
                count: row.get(13)?,
                first_at: row.get(14)?,
                last_at: row.get(15)?,
                last_class: row.get(16)?,
                last_message: row.get(17)?,
            },
            last_received_at: row.get(18)?,
            deduplication_id: row.get(19)?,
        },
    })
}

impl MessageRow {
    pub(crate) fn seq(&self) -> i64 {
        self.message.seq
    }

    pub(crate) fn receive_count(&self) -> i64 {
        self.message.receive_count
    }
}

/// The stored message of a row, with its attributes decoded.
pub(crate) fn decode_attributes(row: MessageRow) -> Result<StoredMessage, StoreError> {
    let MessageRow {
        mut message,
        attributes_json,
    } = row;
    if let Some(json) = attributes_json {
        message.attributes = from_json(&json, "message attributes")?;
    }
    Ok(message)
}
