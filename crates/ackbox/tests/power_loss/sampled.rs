//! Many cuts from one run. The server starts on an empty disk (creating
//! its data directory), takes a cycle's traffic and stops cleanly, while
//! the disk keeps a sample of its syncs, uniform over the run: at each
//! sampled sync, the disk as a power cut just before that sync would leave
//! it, and the ledger as it stood at that instant. Afterwards the server
//! starts on each kept disk and must answer to its ledger.
//!
//! A sync is where the server counts on the disk to hold what it wrote, so
//! a cut just before one is where a missing sync shows; and a cut there
//! may keep any part of what was written since the one before (the model
//! chooses), which covers the cuts between the two. The ledger is read
//! under the disk's lock, so a send it holds as acknowledged was answered
//! before the cut, after its own sync.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{StreamExt, stream};

use super::disk::{Disk, SplitMix};
use super::filesystem::MountedDisk;
use super::ledger::Ledger;
use super::lineage::{self, Figures};
use super::server::Server;
use super::workload::{self, Plan, SharedLedger};

/// Cuts checked side by side.
const CHECKS_AT_ONCE: usize = 2;

/// How long the traffic may run before the run is reported stuck.
const TRAFFIC_LIMIT: Duration = Duration::from_secs(60);

/// One kept cut.
struct Cut {
    /// Which sync of the run it came just before (the first is 1).
    sync: u64,
    disk: Disk,
    ledger: Ledger,
}

/// A uniform sample of a run's cuts, `capacity` at most (reservoir
/// sampling: the n-th sync replaces a kept cut with probability
/// capacity / n).
struct Reservoir {
    rng: SplitMix,
    seen: u64,
    capacity: usize,
    kept: Vec<Cut>,
}

impl Reservoir {
    fn offer(&mut self, disk: &Disk, ledger: &SharedLedger) {
        self.seen += 1;
        let slot = if self.kept.len() < self.capacity {
            None
        } else {
            match usize::try_from(self.rng.up_to(self.seen - 1)) {
                Ok(slot) if slot < self.capacity => Some(slot),
                _ => return,
            }
        };
        let cut = Cut {
            sync: self.seen,
            disk: disk.power_cut(self.rng.next_u64()),
            ledger: ledger
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        };
        match slot {
            Some(slot) => self.kept[slot] = cut,
            None => self.kept.push(cut),
        }
    }
}

/// Runs `seed`'s traffic with `server_args`, keeping up to `cuts` cuts,
/// then checks each; adds what it did and found to `figures`.
pub(crate) async fn run(seed: u64, server_args: &[String], cuts: usize, figures: &mut Figures) {
    let mut rng = SplitMix(seed ^ 0x5A3B_1ED0);
    let plan = Plan::draw(&mut rng, format!("r{seed}"), false);
    let ledger: SharedLedger = Arc::default();
    let reservoir = Arc::new(Mutex::new(Reservoir {
        rng: SplitMix(rng.next_u64()),
        seen: 0,
        capacity: cuts,
        kept: Vec::new(),
    }));
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let mount_point = scratch.path().join("disk");
    std::fs::create_dir(&mount_point).expect("a mount point");
    let before_sync = {
        let (reservoir, ledger) = (Arc::clone(&reservoir), Arc::clone(&ledger));
        Box::new(move |disk: &Disk| {
            reservoir
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .offer(disk, &ledger);
        })
    };
    let mounted = MountedDisk::mount_watched(Disk::default(), &mount_point, Some(before_sync))
        .expect("the disk mounts");
    let context = format!("seed {seed}");
    if let Err(why) = serve_traffic(
        &lineage::data_dir(&mount_point),
        server_args,
        &scratch.path().join("server.log"),
        &plan,
        &ledger,
    )
    .await
    {
        figures.failures.push(format!("{context}: {why}"));
    }
    if let Some(syncs) = mounted.inspect(Disk::syncs) {
        figures.syncs += syncs;
    }
    mounted.unmount();
    let mut kept = std::mem::take(
        &mut reservoir
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kept,
    );
    kept.sort_by_key(|cut| cut.sync);
    // Two at a time: a check waits mostly on a process starting and
    // stopping, and the filesystem each one is served by runs here.
    let checked: Vec<Figures> = stream::iter(kept)
        .map(|cut| {
            let context = format!("{context}, a cut before sync {}", cut.sync);
            async move {
                let mut figures = Figures::default();
                lineage::check_cut(&context, cut.disk, cut.ledger, server_args, &mut figures).await;
                figures
            }
        })
        .buffer_unordered(CHECKS_AT_ONCE)
        .collect()
        .await;
    for one in checked {
        figures.absorb(one);
    }
}

/// Starts the server on a new data directory, runs `plan` against it to
/// the end and stops the server cleanly.
async fn serve_traffic(
    data_dir: &Path,
    server_args: &[String],
    log: &Path,
    plan: &Plan,
    ledger: &SharedLedger,
) -> Result<(), String> {
    let server = Server::start(data_dir, server_args, log)
        .await
        .map_err(|why| format!("the first start failed: {why}"))?;
    let running = workload::start(&server.endpoint(), plan, ledger);
    let started = tokio::time::Instant::now();
    while !running.senders_done() && started.elapsed() < TRAFFIC_LIMIT {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let finished = running.senders_done();
    let stopped = server.terminate().await;
    let refusals = running.join().await;
    if !finished {
        return Err(format!("the traffic did not end in {TRAFFIC_LIMIT:?}"));
    }
    stopped.map_err(|why| format!("a clean stop failed: {why}"))?;
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(format!("refused: {}", refusals.join("; ")))
    }
}
