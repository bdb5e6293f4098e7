//! Topics: their definitions, each write one durable statement that also
//! tells every node (`pg_notify`) to forget what it read of the topic.

use sqlx::PgExecutor;

use super::TOPICS_CHANNEL;
use super::database_error::postgres_error;
use crate::store::{StoreError, TopicRecord};

type TopicRow = (String, String, i64);

fn record((name, definition, revision): TopicRow) -> TopicRecord {
    TopicRecord {
        name,
        definition,
        revision,
    }
}

pub(super) async fn topic_list(
    executor: impl PgExecutor<'_>,
) -> Result<Vec<TopicRecord>, StoreError> {
    let rows: Vec<TopicRow> =
        sqlx::query_as("SELECT name, definition, revision FROM topics ORDER BY name")
            .fetch_all(executor)
            .await
            .map_err(postgres_error("topic_list"))?;
    Ok(rows.into_iter().map(record).collect())
}

pub(super) async fn topic_get(
    executor: impl PgExecutor<'_>,
    name: &str,
) -> Result<Option<TopicRecord>, StoreError> {
    let row: Option<TopicRow> =
        sqlx::query_as("SELECT name, definition, revision FROM topics WHERE name = $1")
            .bind(name)
            .fetch_optional(executor)
            .await
            .map_err(postgres_error("topic_get"))?;
    Ok(row.map(record))
}

/// Writes a definition and, in the same statement (so only when it was
/// written), tells every node to forget what it read of it.
pub(super) async fn topic_write(
    executor: impl PgExecutor<'_>,
    name: &str,
    definition: &str,
    revision: Option<i64>,
) -> Result<bool, StoreError> {
    let written: Option<(String,)> = match revision {
        None => sqlx::query_as(
            "WITH written AS (
                 INSERT INTO topics (name, definition, revision) VALUES ($1, $2, 1)
                 ON CONFLICT (name) DO NOTHING
                 RETURNING name
             )
             SELECT pg_notify($3, name)::text FROM written",
        )
        .bind(name)
        .bind(definition)
        .bind(TOPICS_CHANNEL)
        .fetch_optional(executor)
        .await
        .map_err(postgres_error("topic_write: create"))?,
        Some(revision) => sqlx::query_as(
            "WITH written AS (
                 UPDATE topics SET definition = $2, revision = revision + 1
                 WHERE name = $1 AND revision = $3
                 RETURNING name
             )
             SELECT pg_notify($4, name)::text FROM written",
        )
        .bind(name)
        .bind(definition)
        .bind(revision)
        .bind(TOPICS_CHANNEL)
        .fetch_optional(executor)
        .await
        .map_err(postgres_error("topic_write: update"))?,
    };
    Ok(written.is_some())
}

pub(super) async fn topic_delete(
    executor: impl PgExecutor<'_>,
    name: &str,
) -> Result<bool, StoreError> {
    let deleted: Option<(String,)> = sqlx::query_as(
        "WITH deleted AS (DELETE FROM topics WHERE name = $1 RETURNING name)
         SELECT pg_notify($2, name)::text FROM deleted",
    )
    .bind(name)
    .bind(TOPICS_CHANNEL)
    .fetch_optional(executor)
    .await
    .map_err(postgres_error("topic_delete"))?;
    Ok(deleted.is_some())
}
