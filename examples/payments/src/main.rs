//! `cargo run -p ackbox-example-payments` — see the crate documentation.

use std::time::Duration;

use ackbox_example_payments::{Config, run};
use clap::Parser;

/// Runs the payments example under injected faults and prints its report.
#[derive(Debug, Parser)]
struct Args {
    /// Orders to place.
    #[arg(long, default_value_t = 200)]
    orders: u64,
    /// Use this PostgreSQL database (a fresh schema in it, dropped when the
    /// run ends) instead of SQLite.
    #[arg(long)]
    postgres: Option<String>,
    /// Run without injected faults.
    #[arg(long)]
    no_faults: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let report = run(Config {
        orders: args.orders,
        postgres: args.postgres,
        faults: !args.no_faults,
        deadline: Duration::from_secs(300),
    })
    .await?;
    println!("{report}");
    anyhow::ensure!(report.passed(), "the report shows a failure");
    Ok(())
}
