//! Reading rows: the columns of queues and messages, decoded, and what
//! kind a queue is.

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::database_error::postgres_error;
use crate::store::{FailureRecord, QueueRecord, StoreError, StoredMessage, from_json};

macro_rules! queue_columns {
    () => {
        "id, name, attributes, tags, created_at, last_modified_at"
    };
}
pub(super) use queue_columns;

pub(super) fn queue_record(row: &PgRow) -> Result<QueueRecord, StoreError> {
    let decode = |error| postgres_error("decode queue")(error);
    let attributes: String = row.try_get(2).map_err(decode)?;
    let tags: String = row.try_get(3).map_err(decode)?;
    Ok(QueueRecord {
        id: row.try_get(0).map_err(decode)?,
        name: row.try_get(1).map_err(decode)?,
        attributes: from_json(&attributes, "queue attributes")?,
        tags: from_json(&tags, "queue tags")?,
        created_at: row.try_get(4).map_err(decode)?,
        last_modified_at: row.try_get(5).map_err(decode)?,
    })
}

/// Whether a queue is FIFO; `None` when it does not exist.
pub(super) async fn queue_kind(
    connection: &mut PgConnection,
    queue_id: i64,
) -> Result<Option<bool>, StoreError> {
    sqlx::query_scalar("SELECT fifo FROM queues WHERE id = $1")
        .bind(queue_id)
        .fetch_optional(connection)
        .await
        .map_err(postgres_error("queue kind"))
}

/// [`queue_kind`] for a transaction that adds messages to the queue: the
/// key-share lock makes a concurrent DeleteQueue wait until it commits.
pub(super) async fn queue_kind_for_arrival(
    connection: &mut PgConnection,
    queue_id: i64,
) -> Result<Option<bool>, StoreError> {
    sqlx::query_scalar("SELECT fifo FROM queues WHERE id = $1 FOR KEY SHARE")
        .bind(queue_id)
        .fetch_optional(connection)
        .await
        .map_err(postgres_error("queue kind"))
}

pub(super) async fn queue_exists(
    connection: &mut PgConnection,
    queue_id: i64,
) -> Result<bool, StoreError> {
    Ok(queue_kind(connection, queue_id).await?.is_some())
}

/// Columns [`message_from_row`] decodes, in its order.
macro_rules! message_columns {
    () => {
        "seq, message_id, body, attributes, md5_of_body, md5_of_attributes,
         trace_header, group_id, sender_id, sent_at, receive_count, first_received_at,
         dead_letter_source_arn, failure_count, first_failure_at, last_failure_at,
         last_failure_class, last_failure_message, last_received_at, dedup_id, visible_at"
    };
}
pub(super) use message_columns;

/// A message row with its current deadline (column 20).
pub(super) struct MessageRow {
    pub(super) message: StoredMessage,
    pub(super) visible_at: i64,
}

pub(super) fn message_from_row(row: &PgRow) -> Result<MessageRow, StoreError> {
    let decode = |error| postgres_error("decode message")(error);
    let attributes: Option<String> = row.try_get(3).map_err(decode)?;
    Ok(MessageRow {
        visible_at: row.try_get(20).map_err(decode)?,
        message: StoredMessage {
            seq: row.try_get(0).map_err(decode)?,
            message_id: row.try_get(1).map_err(decode)?,
            body: row.try_get(2).map_err(decode)?,
            attributes: attributes
                .map(|json| from_json(&json, "message attributes"))
                .transpose()?
                .unwrap_or_default(),
            md5_of_body: row.try_get(4).map_err(decode)?,
            md5_of_attributes: row.try_get(5).map_err(decode)?,
            trace_header: row.try_get(6).map_err(decode)?,
            group_id: row.try_get(7).map_err(decode)?,
            sender_id: row.try_get(8).map_err(decode)?,
            sent_at: row.try_get(9).map_err(decode)?,
            receive_count: row.try_get(10).map_err(decode)?,
            first_received_at: row.try_get(11).map_err(decode)?,
            dead_letter_source_arn: row.try_get(12).map_err(decode)?,
            failures: FailureRecord {
                count: row.try_get(13).map_err(decode)?,
                first_at: row.try_get(14).map_err(decode)?,
                last_at: row.try_get(15).map_err(decode)?,
                last_class: row.try_get(16).map_err(decode)?,
                last_message: row.try_get(17).map_err(decode)?,
            },
            last_received_at: row.try_get(18).map_err(decode)?,
            deduplication_id: row.try_get(19).map_err(decode)?,
        },
    })
}
