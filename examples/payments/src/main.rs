//! `cargo run -p ackbox-example-payments` — see the crate documentation.

use std::time::Duration;

use ackbox_example_payments::{Config, Sides, run};
use clap::{Parser, ValueEnum};

/// Runs the payments workload under injected faults twice — with
/// ackbox-consumer and with a naive consumer — and prints both tallies side
/// by side. Exits non-zero only if the run with ackbox-consumer charged an
/// order other than exactly once or projected it wrong; the naive run is
/// expected to overcharge.
#[derive(Debug, Parser)]
struct Args {
    /// Orders to place in each run.
    #[arg(long, default_value_t = 200)]
    orders: u64,
    /// Use this PostgreSQL database (a fresh schema in it per run, dropped
    /// when the run ends) instead of SQLite.
    #[arg(long)]
    postgres: Option<String>,
    /// Run without injected faults.
    #[arg(long)]
    no_faults: bool,
    /// Make only one of the two runs.
    #[arg(long, value_enum)]
    only: Option<Only>,
}

/// One of the two runs.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Only {
    /// The consumers built with ackbox-consumer.
    WithSdk,
    /// The naive consumers.
    WithoutSdk,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let report = run(Config {
        orders: args.orders,
        postgres: args.postgres,
        faults: !args.no_faults,
        deadline: Duration::from_secs(300),
        sides: match args.only {
            None => Sides::Both,
            Some(Only::WithSdk) => Sides::WithSdk,
            Some(Only::WithoutSdk) => Sides::WithoutSdk,
        },
    })
    .await?;
    println!("{report}");
    anyhow::ensure!(
        report.passed(),
        "the run with ackbox-consumer broke its guarantees"
    );
    Ok(())
}
