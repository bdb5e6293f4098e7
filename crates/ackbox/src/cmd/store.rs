//! `ackbox store check`: what an embedded store's files hold, read without
//! changing anything, for when a server refuses to start over damage (or
//! before trusting a restored backup). Exits non-zero when anything is
//! damaged; a torn tail, which the next start cuts, is reported but sound.
//!
//! `ackbox store adopt --into log|sqlite`: for a data directory whose
//! standard-queue messages are split between the two embedded stores (two
//! servers shared it before it was locked to one), moves the other store's
//! messages into the one named, losing none.

use std::path::PathBuf;

use ackbox_engine::store::adopt::{Adopter, adopt};
use ackbox_engine::store::check::{StoreCheck, check};
use ackbox_log::log::SegmentState;

use crate::cmd::queue::write_out;

/// Flags of `ackbox store`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: StoreCommand,
}

#[derive(Debug, clap::Subcommand)]
enum StoreCommand {
    /// Read the database and every log segment and report what is readable
    /// and where damage starts (the server must be stopped).
    Check {
        /// Directory of the embedded store [default: `$STATE_DIRECTORY`
        /// under systemd, else ./ackbox-data, never `/`].
        #[arg(long, env = "ACKBOX_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Move the other embedded store's standard-queue messages into this
    /// one, when both hold some (the server must be stopped).
    Adopt {
        /// Directory of the embedded store [default: `$STATE_DIRECTORY`
        /// under systemd, else ./ackbox-data, never `/`].
        #[arg(long, env = "ACKBOX_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// The store that keeps the directory: `log` or `sqlite`.
        #[arg(long, value_enum)]
        into: Into,
    },
}

/// The store that adopts the other's messages.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Into {
    /// `--store log` takes SQLite's standard-queue messages.
    Log,
    /// The default store takes the log's messages; the log is set aside.
    Sqlite,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        StoreCommand::Check { data_dir } => {
            let data_dir = crate::data_dir::resolve(data_dir)?;
            let report = tokio::task::spawn_blocking(move || check(&data_dir)).await??;
            write_out(&describe(&report))?;
            anyhow::ensure!(report.is_sound(), "the store is damaged; see above");
        }
        StoreCommand::Adopt { data_dir, into } => {
            let data_dir = crate::data_dir::resolve(data_dir)?;
            let (adopter, store) = match into {
                Into::Log => (Adopter::Log, "log"),
                Into::Sqlite => (Adopter::Sqlite, "sqlite"),
            };
            let adopted = adopt(&data_dir, adopter).await?;
            write_out(&format!(
                "moved {} message(s) of {} standard queue(s); serve it with --store {store}\n",
                adopted.messages, adopted.queues
            ))?;
        }
    }
    Ok(())
}

fn describe(report: &StoreCheck) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    match &report.database {
        Some((path, problems)) if problems.is_empty() => {
            let _ = writeln!(out, "{}: ok", path.display());
        }
        Some((path, problems)) => {
            let _ = writeln!(out, "{}: damaged", path.display());
            for problem in problems {
                let _ = writeln!(out, "  {problem}");
            }
        }
        None => out.push_str("no database\n"),
    }
    if let Some((dir, segments)) = &report.log {
        let _ = writeln!(out, "{}: {} segment(s)", dir.display(), segments.len());
        for segment in segments {
            let state = match &segment.state {
                SegmentState::Whole => "whole".to_owned(),
                SegmentState::TornTail { at, reason } => {
                    format!("torn tail at byte {at} ({reason}); the next start cuts it there")
                }
                SegmentState::Damaged { offset, reason } => {
                    format!("DAMAGED at byte {offset}: {reason}")
                }
            };
            let _ = writeln!(
                out,
                "  segment {:020}: {} record(s) readable, {} bytes, {state}",
                segment.segment, segment.records, segment.bytes
            );
        }
    }
    out
}
