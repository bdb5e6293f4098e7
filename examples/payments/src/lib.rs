//! A payments system on ackbox, run twice under the faults that production
//! brings — once with ackbox-consumer and once without — to show what the
//! SDK changes.
//!
//! Orders are placed through the transactional outbox; a payments consumer
//! charges a fake HTTP gateway and records the payment; a status consumer
//! keeps each order's status from events that arrive late, twice and out of
//! order. Each run crashes consumers and the outbox relay, duplicates
//! deliveries, makes the gateway answer too late, and replays history.
//!
//! - **With ackbox-consumer** the payments consumer claims every message in
//!   an inbox, charges through a side-effect record (late answers are
//!   reconciled, not retried blindly), skips replays, and the status
//!   consumer's projection is version-guarded.
//! - **Without** ([`Sides::WithoutSdk`] runs only this one), the consumers do
//!   what most code does first: receive, call the gateway (a new idempotency key
//!   per call, retried on a timeout), write, delete.
//!
//! The gateway counts every charge call, so the report shows, side by side,
//! one charge per order against the doubled ones.

use std::time::{Duration, Instant};

pub mod app;
pub mod faults;
pub mod gateway;
mod naive;
pub mod report;
mod stage;
mod with_sdk;

pub use app::{AppDb, AppSql, POSTGRES_SCHEMA_PREFIX, PostgresApp, SqliteApp};
pub use faults::FaultPlan;
pub use report::{Charges, ConsumerKind, Report, Tally};

/// Which runs to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sides {
    /// Both, one after the other, for the side-by-side report.
    #[default]
    Both,
    /// Only the run with ackbox-consumer.
    WithSdk,
    /// Only the run with the naive consumer.
    WithoutSdk,
}

impl Sides {
    fn with_sdk(self) -> bool {
        self != Self::WithoutSdk
    }

    fn without_sdk(self) -> bool {
        self != Self::WithSdk
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Orders to place in each run.
    pub orders: u64,
    /// PostgreSQL instead of SQLite (each run uses a fresh schema, dropped
    /// when the run ends).
    pub postgres: Option<String>,
    /// Inject [`FaultPlan::injected`]; without, [`FaultPlan::none`].
    pub faults: bool,
    /// Give each run up after this long.
    pub deadline: Duration,
    /// Which runs to make.
    pub sides: Sides,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            orders: 200,
            postgres: None,
            faults: true,
            deadline: Duration::from_secs(180),
            sides: Sides::Both,
        }
    }
}

/// Runs the example as `config` says: the run with ackbox-consumer, then
/// the naive one, each in a world of its own (broker, gateway, database)
/// under the same fault plan.
pub async fn run(config: Config) -> anyhow::Result<Report> {
    let plan = if config.faults {
        FaultPlan::injected()
    } else {
        FaultPlan::none()
    };
    let database = match config.postgres {
        Some(_) => PostgresApp::NAME,
        None => SqliteApp::NAME,
    };
    let mut report = Report {
        database,
        orders: config.orders,
        faults: config.faults,
        with_sdk: None,
        without_sdk: None,
    };
    if config.sides.with_sdk() {
        report.with_sdk = Some(run_side(&config, &plan, ConsumerKind::WithSdk).await?);
    }
    if config.sides.without_sdk() {
        report.without_sdk = Some(run_side(&config, &plan, ConsumerKind::Naive).await?);
    }
    Ok(report)
}

async fn run_side(
    config: &Config,
    plan: &FaultPlan,
    consumer: ConsumerKind,
) -> anyhow::Result<Tally> {
    match &config.postgres {
        Some(url) => {
            let (app, schema) = PostgresApp::open(url).await?;
            // The run's tables are its own: a run leaves the database as it
            // found it, whatever the outcome.
            let tally = run_on(app, config, plan, consumer).await;
            let dropped = PostgresApp::drop_schema(url, &schema).await;
            let tally = tally?;
            dropped?;
            Ok(tally)
        }
        None => run_on(SqliteApp::open().await?, config, plan, consumer).await,
    }
}

async fn run_on<A: AppDb>(
    app: A,
    config: &Config,
    plan: &FaultPlan,
    consumer: ConsumerKind,
) -> anyhow::Result<Tally> {
    let started = Instant::now();
    let stage = stage::Stage::open(app, plan.clone(), config.orders).await?;
    let mut tally = match consumer {
        ConsumerKind::WithSdk => with_sdk::run(stage, config.orders, config.deadline).await?,
        ConsumerKind::Naive => naive::run(stage, config.orders, config.deadline).await?,
    };
    // Placing the orders is part of the run.
    tally.seconds = started.elapsed().as_secs_f64();
    Ok(tally)
}
