//! Topics: their definitions, written by the writer inside a group commit
//! (see `queue.rs` for the rules a job follows).

use rusqlite::{Connection, OptionalExtension, params};

use super::database_error::database_error;
use crate::store::{StoreError, TopicRecord};

pub(crate) const TOPIC_COLUMNS: &str = "name, definition, revision";

pub(crate) fn topic_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TopicRecord> {
    Ok(TopicRecord {
        name: row.get(0)?,
        definition: row.get(1)?,
        revision: row.get(2)?,
    })
}

pub(crate) fn topic_list(connection: &Connection) -> Result<Vec<TopicRecord>, StoreError> {
    let mut select = connection
        .prepare_cached(&format!("SELECT {TOPIC_COLUMNS} FROM topics ORDER BY name"))
        .map_err(database_error("topic_list: prepare"))?;
    select
        .query_map([], topic_from_row)
        .map_err(database_error("topic_list: select"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(database_error("topic_list: read row"))
}

pub(crate) fn topic_get(
    connection: &Connection,
    name: &str,
) -> Result<Option<TopicRecord>, StoreError> {
    connection
        .query_row(
            &format!("SELECT {TOPIC_COLUMNS} FROM topics WHERE name = ?1"),
            [name],
            topic_from_row,
        )
        .optional()
        .map_err(database_error("topic_get"))
}

pub(crate) fn topic_write(
    connection: &Connection,
    name: &str,
    definition: &str,
    revision: Option<i64>,
) -> Result<bool, StoreError> {
    let written = match revision {
        None => connection
            .execute(
                "INSERT INTO topics (name, definition, revision) VALUES (?1, ?2, 1)
                 ON CONFLICT (name) DO NOTHING",
                params![name, definition],
            )
            .map_err(database_error("topic_write: create"))?,
        Some(revision) => connection
            .execute(
                "UPDATE topics SET definition = ?2, revision = revision + 1
                 WHERE name = ?1 AND revision = ?3",
                params![name, definition, revision],
            )
            .map_err(database_error("topic_write: update"))?,
    };
    Ok(written == 1)
}

pub(crate) fn topic_delete(connection: &Connection, name: &str) -> Result<bool, StoreError> {
    connection
        .execute("DELETE FROM topics WHERE name = ?1", [name])
        .map(|deleted| deleted == 1)
        .map_err(database_error("topic_delete"))
}
