//! Power loss under the real binary (invariant 1, ARCHITECTURE.md: no
//! acknowledged send is lost — against the disk as POSIX promises it, not
//! as the page cache keeps it): `ackbox serve` runs on a filesystem in userspace that
//! keeps only what was synced (file data up to its last sync, directory
//! entries up to their directory's last sync, unsynced writes lost or torn
//! at any byte), mounted by the test. Concurrent senders, singly and in
//! batches, to standard and FIFO queues, and a consumer receiving and
//! deleting, run until the power is cut at a random moment; then the server
//! starts again on what the cut left and must hold every acknowledged send
//! (unless deleted), everything found after earlier cuts, nothing never
//! sent, and each FIFO group in order. The first cut of each lineage falls
//! in the life of the server that created the data directory.
//!
//! `ACKBOX_SERVE_POWER_CUTS` sets how many cuts each store gets (default
//! 150 for the default store, 80 for the log store: two to three minutes
//! together on a 2-core machine); `ACKBOX_SERVE_POWER_CUT_SEED` replays one
//! lineage. A third test runs `--durability relaxed`, which answers before
//! its fsync, and must see acknowledged sends lost: the check can fail.
//!
//! Two more tests take many cuts from one run each (`sampled.rs`): the
//! disk keeps itself as a cut just before each of a sample of the server's
//! syncs would leave it, and the server must start on each and answer to
//! the ledger of that instant. `ACKBOX_SERVE_SYNC_CUTS` sets how many
//! per store (default 1,000 on the default store, whose I/O only these
//! tests reach, and 500 on the log store, whose own model-disk tests cut
//! 2,000 times), 40 from each run.
//!
//! Mounting needs root and `/dev/fuse` (`.ci/run` has both), and no
//! package: the filesystem mounts itself with mount(2), without libfuse or
//! fusermount. Elsewhere the tests say they are skipped. Print the figures
//! with `cargo nextest run -p ackbox --test power_loss --no-capture`.

#[path = "power_loss/disk.rs"]
mod disk;
#[path = "power_loss/filesystem.rs"]
mod filesystem;
#[path = "power_loss/ledger.rs"]
mod ledger;
#[path = "power_loss/lineage.rs"]
mod lineage;
#[path = "power_loss/sampled.rs"]
mod sampled;
#[path = "power_loss/server.rs"]
mod server;
#[path = "power_loss/sqs.rs"]
mod sqs;
#[path = "power_loss/workload.rs"]
mod workload;

use std::time::Instant;

use lineage::Figures;

fn cuts_wanted(default: usize) -> usize {
    std::env::var("ACKBOX_SERVE_POWER_CUTS")
        .ok()
        .and_then(|cuts| cuts.parse().ok())
        .unwrap_or(default)
}

fn replayed_seed() -> Option<u64> {
    std::env::var("ACKBOX_SERVE_POWER_CUT_SEED")
        .ok()
        .map(|seed| seed.parse().expect("a numeric seed"))
}

/// Lineages from seed 0 on until `cuts` cuts (or the replayed one alone).
async fn cut_power(server_args: &[&str], cuts: usize, stop_at_first_loss: bool) -> Figures {
    let server_args: Vec<String> = server_args.iter().map(|&arg| arg.to_owned()).collect();
    let mut figures = Figures::default();
    let seeds: Box<dyn Iterator<Item = u64>> = match replayed_seed() {
        Some(seed) => Box::new(std::iter::once(seed)),
        None => Box::new(0..),
    };
    for seed in seeds {
        lineage::run(seed, &server_args, &mut figures).await;
        if figures.cuts >= cuts || (stop_at_first_loss && figures.lost > 0) {
            break;
        }
    }
    figures
}

fn summary(store: &str, figures: &Figures, started: Instant) -> String {
    format!(
        "--store {store}: {} power cuts in {} lineages ({} while the server started, {} while \
         it stopped, {} in the life of the server that created the data directory, {} after a \
         clean restart), {} acknowledged sends checked ({} found in place over every check, \
         {} lost, {} FIFO sends sent again to try the deduplication window), {} deletes, {} \
         syncs ({} of the database file), in {:.0?}",
        figures.cuts,
        figures.lineages,
        figures.cuts_during_start,
        figures.cuts_during_stop,
        figures.cuts_after_first_start,
        figures.clean_restarts,
        figures.acknowledged,
        figures.confirmed,
        figures.lost,
        figures.sent_again,
        figures.deletes,
        figures.syncs,
        figures.database_syncs,
        started.elapsed()
    )
}

/// Fails with the first failures (a `what` is replayed by its seed) unless
/// there were none, and unless the cuts checked something.
fn found_nothing(store: &str, figures: &Figures, what: &str) {
    let shown = figures.failures.len().min(40);
    assert!(
        figures.failures.is_empty(),
        "--store {store}: {} failures (replay a {what} with ACKBOX_SERVE_POWER_CUT_SEED), the \
         first {shown}:\n{}",
        figures.failures.len(),
        figures.failures[..shown].join("\n")
    );
    assert!(
        figures.cuts > 0 && figures.acknowledged > 0 && figures.confirmed > 0,
        "the cuts tested nothing"
    );
}

async fn no_acknowledged_send_is_lost(store: &str, default_cuts: usize) {
    if let Some(why) = lineage::cannot_mount() {
        println!("skipped: {why}");
        return;
    }
    let started = Instant::now();
    let figures = cut_power(&["--store", store], cuts_wanted(default_cuts), false).await;
    println!("{}", summary(store, &figures, started));
    found_nothing(store, &figures, "lineage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_send_is_lost_to_a_power_cut_on_the_default_store() {
    no_acknowledged_send_is_lost("sqlite", 150).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_send_is_lost_to_a_power_cut_on_the_log_store() {
    no_acknowledged_send_is_lost("log", 80).await;
}

/// Cuts just before sampled syncs of whole runs, `cuts` in all.
async fn no_acknowledged_send_is_lost_before_a_sync(store: &str, default_cuts: usize) {
    const PER_RUN: usize = 40;
    if let Some(why) = lineage::cannot_mount() {
        println!("skipped: {why}");
        return;
    }
    let started = Instant::now();
    let cuts = std::env::var("ACKBOX_SERVE_SYNC_CUTS")
        .ok()
        .and_then(|cuts| cuts.parse().ok())
        .unwrap_or(default_cuts);
    let server_args = vec!["--store".to_owned(), store.to_owned()];
    let mut figures = Figures::default();
    let mut runs = 0;
    let mut seed = replayed_seed().unwrap_or(0);
    while figures.cuts < cuts && runs < cuts {
        sampled::run(
            seed,
            &server_args,
            PER_RUN.min(cuts - figures.cuts),
            &mut figures,
        )
        .await;
        runs += 1;
        seed += 1;
        if replayed_seed().is_some() {
            break;
        }
    }
    println!(
        "--store {store}: {} cuts before sampled syncs of {runs} runs ({} syncs in all), {} \
         acknowledged sends checked over the cuts ({} found in place, {} lost), in {:.0?}",
        figures.cuts,
        figures.syncs,
        figures.acknowledged,
        figures.confirmed,
        figures.lost,
        started.elapsed()
    );
    found_nothing(store, &figures, "run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_send_is_lost_to_a_cut_before_a_sync_on_the_default_store() {
    no_acknowledged_send_is_lost_before_a_sync("sqlite", 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_send_is_lost_to_a_cut_before_a_sync_on_the_log_store() {
    no_acknowledged_send_is_lost_before_a_sync("log", 500).await;
}

/// The check can fail: `--durability relaxed` answers before the fsync, so
/// a cut loses what was acknowledged in the last interval, and the check
/// must say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaxed_durability_loses_acknowledged_sends_and_the_check_finds_them() {
    if let Some(why) = lineage::cannot_mount() {
        println!("skipped: {why}");
        return;
    }
    let started = Instant::now();
    let figures = cut_power(
        &["--durability", "relaxed", "--fsync-interval-ms", "1000"],
        12,
        true,
    )
    .await;
    println!(
        "{}",
        summary("sqlite --durability relaxed", &figures, started)
    );
    assert!(
        figures.lost > 0,
        "no acknowledged send lost in {} cuts of relaxed durability: the test cannot see a loss",
        figures.cuts
    );
}
