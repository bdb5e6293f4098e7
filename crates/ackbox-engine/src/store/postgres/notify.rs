//! Telling every node, when the surrounding transaction commits, that a
//! queue or its messages changed (`pg_notify`).

use sqlx::PgConnection;

use super::MESSAGES_CHANNEL;
use super::database_error::postgres_error;
use crate::store::StoreError;

/// Tells every node (this one included) that something changed, when the
/// surrounding transaction commits.
pub(super) async fn announce(
    connection: &mut PgConnection,
    channel: &'static str,
    payload: &str,
) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(connection)
        .await
        .map(drop)
        .map_err(postgres_error("notify"))
}

pub(super) async fn announce_messages(
    connection: &mut PgConnection,
    queue_id: i64,
) -> Result<(), StoreError> {
    announce(connection, MESSAGES_CHANNEL, &queue_id.to_string()).await
}
