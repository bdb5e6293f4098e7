//! Topics: their definitions, each write one durable statement.

use sqlx::PgExecutor;

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

pub(super) async fn topic_write(
    executor: impl PgExecutor<'_>,
    name: &str,
    definition: &str,
    revision: Option<i64>,
) -> Result<bool, StoreError> {
    let written = match revision {
        None => sqlx::query(
            "INSERT INTO topics (name, definition, revision) VALUES ($1, $2, 1)
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(definition)
        .execute(executor)
        .await
        .map_err(postgres_error("topic_write: create"))?,
        Some(revision) => sqlx::query(
            "UPDATE topics SET definition = $2, revision = revision + 1
             WHERE name = $1 AND revision = $3",
        )
        .bind(name)
        .bind(definition)
        .bind(revision)
        .execute(executor)
        .await
        .map_err(postgres_error("topic_write: update"))?,
    };
    Ok(written.rows_affected() == 1)
}

pub(super) async fn topic_delete(
    executor: impl PgExecutor<'_>,
    name: &str,
) -> Result<bool, StoreError> {
    sqlx::query("DELETE FROM topics WHERE name = $1")
        .bind(name)
        .execute(executor)
        .await
        .map(|done| done.rows_affected() == 1)
        .map_err(postgres_error("topic_delete"))
}
