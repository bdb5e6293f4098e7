//! Orders: each order's effect is one `ledger` row. The ledger has no
//! unique constraint on purpose — only the inbox stands between a
//! redelivery (or an order the producer sent twice) and a second row.

use std::collections::BTreeMap;

use ackbox_consumer::{Handler, HandlerError, Message, async_trait};
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres, Transaction};

use super::{Outgoing, Pace};
use crate::verdict::{Findings, examples};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    order_id: String,
    cents: i64,
}

/// `orders` distinct orders, `duplicates` of them sent a second time as
/// messages of their own, all in random order.
#[derive(Debug)]
pub(crate) struct Plan {
    orders: usize,
    duplicates: usize,
    pub(super) messages: Vec<Outgoing>,
}

impl Plan {
    pub(crate) fn new(rng: &mut StdRng, orders: usize, duplicates: usize) -> Self {
        let bodies: Vec<String> = (0..orders)
            .map(|index| {
                serde_json::to_string(&Order {
                    order_id: order_id(index),
                    cents: rng.random_range(100..100_000),
                })
                .expect("an order serializes")
            })
            .collect();
        let mut messages: Vec<Outgoing> = bodies.iter().cloned().map(Outgoing::standard).collect();
        messages.extend(
            bodies
                .choose_multiple(rng, duplicates.min(orders))
                .cloned()
                .map(Outgoing::standard),
        );
        messages.shuffle(rng);
        Self {
            orders,
            duplicates: duplicates.min(orders),
            messages,
        }
    }

    pub(super) fn distinct_effects(&self) -> u64 {
        self.orders as u64
    }

    pub(super) fn producer_duplicates(&self) -> u64 {
        self.duplicates as u64
    }

    /// Every order applied exactly once: one ledger row each, none missing,
    /// none unknown.
    pub(super) async fn verify(&self, pool: &PgPool) -> Result<Findings, sqlx::Error> {
        let rows: Vec<(String, i64, Vec<i32>)> = sqlx::query_as(
            "SELECT order_id, COUNT(*), ARRAY_AGG(process) FROM ledger GROUP BY order_id",
        )
        .fetch_all(pool)
        .await?;
        let effects: BTreeMap<String, (i64, Vec<i32>)> = rows
            .into_iter()
            .map(|(order, count, processes)| (order, (count, processes)))
            .collect();
        let total: i64 = effects.values().map(|(count, _)| count).sum();
        let mut findings = Findings::default();
        findings.figure(format!(
            "orders: {} messages ({} orders + {} producer duplicates) -> {total} ledger rows for {} orders",
            self.messages.len(),
            self.orders,
            self.duplicates,
            effects.len()
        ));
        let doubled: Vec<String> = effects
            .iter()
            .filter(|(_, (count, _))| *count > 1)
            .map(|(order, (count, processes))| {
                format!("{order} ×{count} (by processes {processes:?})")
            })
            .collect();
        findings.check(doubled.is_empty(), || {
            format!(
                "orders: {} orders applied more than once: {}",
                doubled.len(),
                examples(&doubled)
            )
        });
        let missing: Vec<String> = (0..self.orders)
            .map(order_id)
            .filter(|order| !effects.contains_key(order))
            .collect();
        findings.check(missing.is_empty(), || {
            format!(
                "orders: {} orders never applied: {}",
                missing.len(),
                examples(&missing)
            )
        });
        let unknown: Vec<String> = effects
            .keys()
            .filter(|order| order_index(order).is_none_or(|index| index >= self.orders))
            .cloned()
            .collect();
        findings.check(unknown.is_empty(), || {
            format!(
                "orders: ledger rows for orders never sent: {}",
                examples(&unknown)
            )
        });
        Ok(findings)
    }
}

fn order_id(index: usize) -> String {
    format!("order-{index:06}")
}

fn order_index(order_id: &str) -> Option<usize> {
    order_id.strip_prefix("order-")?.parse().ok()
}

pub(super) async fn create_tables(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "CREATE TABLE ledger (
             id       BIGSERIAL PRIMARY KEY,
             order_id TEXT   NOT NULL,   -- deliberately not unique
             cents    BIGINT NOT NULL,
             process  INT    NOT NULL
         )",
    )
    .execute(pool)
    .await
    .map(drop)
}

pub(super) fn effect_key(message: &Message) -> String {
    message
        .json::<Order>()
        .map_or_else(|_| message.id.clone(), |order| order.order_id)
}

/// Books an order in the ledger.
pub(crate) struct Ledger {
    pub(super) pace: Pace,
}

#[async_trait]
impl Handler<Postgres> for Ledger {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, Postgres>,
    ) -> Result<(), HandlerError> {
        let order: Order = message.json()?;
        self.pace.work().await;
        sqlx::query("INSERT INTO ledger (order_id, cents, process) VALUES ($1, $2, $3)")
            .bind(&order.order_id)
            .bind(order.cents)
            .bind(self.pace.process)
            .execute(&mut **transaction)
            .await?;
        Ok(())
    }
}
