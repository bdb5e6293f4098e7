//! Projection: versioned events per aggregate, shuffled and partly sent
//! twice, folded into a read model through the SDK's version guard. Every
//! write the guard lets through is logged with the version the read model
//! held before it (read under lock in the same transaction), so a write
//! that moved an aggregate backwards is a row anyone can count.

use std::collections::BTreeMap;

use ackbox_consumer::effects::{EffectStore, PgEffectStore};
use ackbox_consumer::projection::{Projection, Verdict};
use ackbox_consumer::{Handler, HandlerError, Message, async_trait};
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres, Transaction};

use super::{Outgoing, Pace};
use crate::verdict::{Findings, examples};

/// The projection's name in the SDK's version table.
const PROJECTION: &str = "orders_view";

#[derive(Debug, Serialize, Deserialize)]
struct Event {
    aggregate_id: String,
    version: i64,
}

/// `aggregates` × `versions` events (versions from 1), `duplicates` of them
/// sent twice, all shuffled: one aggregate's events arrive out of order and
/// concurrently.
#[derive(Debug)]
pub(crate) struct Plan {
    aggregates: usize,
    versions: usize,
    duplicates: usize,
    pub(super) messages: Vec<Outgoing>,
}

impl Plan {
    pub(crate) fn new(
        rng: &mut StdRng,
        aggregates: usize,
        versions: usize,
        duplicates: usize,
    ) -> Self {
        let bodies: Vec<String> = (0..aggregates)
            .flat_map(|aggregate| {
                (1..=versions).map(move |version| {
                    serde_json::to_string(&Event {
                        aggregate_id: aggregate_id(aggregate),
                        version: version as i64,
                    })
                    .expect("an event serializes")
                })
            })
            .collect();
        let duplicates = duplicates.min(bodies.len());
        let mut messages: Vec<Outgoing> = bodies.iter().cloned().map(Outgoing::standard).collect();
        messages.extend(
            bodies
                .choose_multiple(rng, duplicates)
                .cloned()
                .map(Outgoing::standard),
        );
        messages.shuffle(rng);
        Self {
            aggregates,
            versions,
            duplicates,
            messages,
        }
    }

    pub(super) fn distinct_effects(&self) -> u64 {
        (self.aggregates * self.versions) as u64
    }

    pub(super) fn producer_duplicates(&self) -> u64 {
        self.duplicates as u64
    }

    /// No write lowered (or repeated) a version, and every aggregate ends
    /// at its newest version — in the read model and in the SDK's guard.
    pub(super) async fn verify(&self, pool: &PgPool) -> Result<Findings, sqlx::Error> {
        let writes: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM projection_writes")
            .fetch_one(pool)
            .await?;
        let lowered: Vec<(String, i64, i64, i32)> = sqlx::query_as(
            "SELECT aggregate_id, previous_version, new_version, process FROM projection_writes
             WHERE new_version <= previous_version ORDER BY id",
        )
        .fetch_all(pool)
        .await?;
        let view: BTreeMap<String, i64> =
            sqlx::query_as::<_, (String, i64)>("SELECT aggregate_id, version FROM orders_view")
                .fetch_all(pool)
                .await?
                .into_iter()
                .collect();
        let guard: BTreeMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
            "SELECT aggregate_id, version FROM ackbox_projection_versions WHERE projection = $1",
        )
        .bind(PROJECTION)
        .fetch_all(pool)
        .await?
        .into_iter()
        .collect();
        let mut findings = Findings::default();
        findings.figure(format!(
            "projection: {} messages ({} events + {} producer duplicates) -> {writes} read-model writes, {} lowered",
            self.messages.len(),
            self.aggregates * self.versions,
            self.duplicates,
            lowered.len()
        ));
        let described: Vec<String> = lowered
            .iter()
            .map(|(aggregate, previous, new, process)| {
                format!("{aggregate}: {previous} -> {new} (process {process})")
            })
            .collect();
        findings.check(lowered.is_empty(), || {
            format!(
                "projection: {} writes did not raise the version: {}",
                lowered.len(),
                examples(&described)
            )
        });
        let newest = self.versions as i64;
        let behind: Vec<String> = (0..self.aggregates)
            .map(aggregate_id)
            .filter_map(|aggregate| {
                let (read_model, guarded) = (view.get(&aggregate), guard.get(&aggregate));
                (read_model != Some(&newest) || guarded != Some(&newest))
                    .then(|| format!("{aggregate}: read model {read_model:?}, guard {guarded:?}"))
            })
            .collect();
        findings.check(behind.is_empty(), || {
            format!(
                "projection: {} aggregates did not end at version {newest}: {}",
                behind.len(),
                examples(&behind)
            )
        });
        Ok(findings)
    }
}

fn aggregate_id(index: usize) -> String {
    format!("aggregate-{index:02}")
}

/// The read model and its write log; the SDK's version table comes from
/// its own migration, run here once rather than by racing processes.
pub(super) async fn create_tables(pool: &PgPool) -> Result<(), sqlx::Error> {
    PgEffectStore::new(pool.clone()).migrate().await?;
    sqlx::raw_sql(
        "CREATE TABLE orders_view (
             aggregate_id TEXT   PRIMARY KEY,
             version      BIGINT NOT NULL
         );
         CREATE TABLE projection_writes (
             id               BIGSERIAL PRIMARY KEY,
             aggregate_id     TEXT   NOT NULL,
             previous_version BIGINT NOT NULL,
             new_version      BIGINT NOT NULL,
             process          INT    NOT NULL
         )",
    )
    .execute(pool)
    .await
    .map(drop)
}

pub(super) fn effect_key(message: &Message) -> String {
    message.json::<Event>().map_or_else(
        |_| message.id.clone(),
        |event| format!("{}:{}", event.aggregate_id, event.version),
    )
}

/// Folds events into `orders_view` behind the SDK's version guard.
pub(crate) struct Projector {
    projection: Projection<PgEffectStore>,
    pace: Pace,
}

impl Projector {
    pub(super) fn new(pool: PgPool, pace: Pace) -> Self {
        Self {
            projection: Projection::new(PgEffectStore::new(pool), PROJECTION),
            pace,
        }
    }
}

#[async_trait]
impl Handler<Postgres> for Projector {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, Postgres>,
    ) -> Result<(), HandlerError> {
        let event: Event = message.json()?;
        self.pace.work().await;
        let verdict = self
            .projection
            .apply_if_newer(transaction, &event.aggregate_id, event.version)
            .await?;
        if verdict != Verdict::Apply {
            return Ok(());
        }
        // The row exists before it is locked, so the first two writers of an
        // aggregate queue on the lock like every later pair.
        sqlx::query(
            "INSERT INTO orders_view (aggregate_id, version) VALUES ($1, 0)
             ON CONFLICT (aggregate_id) DO NOTHING",
        )
        .bind(&event.aggregate_id)
        .execute(&mut **transaction)
        .await?;
        let previous: i64 = sqlx::query_scalar(
            "SELECT version FROM orders_view WHERE aggregate_id = $1 FOR UPDATE",
        )
        .bind(&event.aggregate_id)
        .fetch_one(&mut **transaction)
        .await?;
        sqlx::query("UPDATE orders_view SET version = $2 WHERE aggregate_id = $1")
            .bind(&event.aggregate_id)
            .bind(event.version)
            .execute(&mut **transaction)
            .await?;
        sqlx::query(
            "INSERT INTO projection_writes (aggregate_id, previous_version, new_version, process)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(&event.aggregate_id)
        .bind(previous)
        .bind(event.version)
        .bind(self.pace.process)
        .execute(&mut **transaction)
        .await?;
        Ok(())
    }
}
