//! One lineage: a fresh disk, mounted, on which the server starts for the
//! first time (its data directory does not exist yet), then a few cycles
//! of start, check, traffic and power cut, each on what the previous cut
//! left, and a last start and check.
//!
//! A cut takes the disk away first (nothing is synced after it), then kills
//! the server, unmounts (the kernel's cache of the mount goes with it) and
//! mounts what the cut left. It comes while the server starts, while the
//! traffic runs (after a random delay or a random number of acknowledged
//! sends), or while the server stops after a SIGTERM in the middle of the
//! traffic. Before some cycles' traffic the server is stopped cleanly and
//! started again, which checkpoints and removes the WAL, so that traffic
//! runs on a WAL created after the data directory was.
//!
//! Everything random comes from the lineage's seed: the cycles, the
//! traffic, which cut and what it leaves. The moment of a cut against the
//! server's own threads is not: a seed replays the same kind of run, not
//! the same interleaving.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::disk::{Disk, SplitMix};
use super::filesystem::MountedDisk;
use super::ledger::Ledger;
use super::server::Server;
use super::workload::{self, Plan, Running, SharedLedger};

/// SQLite's database file in the data directory.
const DATABASE_FILE: &str = "ackbox.sqlite";

/// What the lineages so far did and found.
#[derive(Debug, Default)]
pub(crate) struct Figures {
    pub(crate) lineages: usize,
    pub(crate) cuts: usize,
    pub(crate) cuts_during_start: usize,
    /// Cuts while the server stopped after SIGTERM.
    pub(crate) cuts_during_stop: usize,
    /// Cuts in the life of the server that created the data directory.
    pub(crate) cuts_after_first_start: usize,
    pub(crate) clean_restarts: usize,
    /// Sends acknowledged (and so checked after every later cut).
    pub(crate) acknowledged: usize,
    /// Acknowledged or recovered messages found where they must be, over
    /// every check.
    pub(crate) confirmed: usize,
    pub(crate) lost: usize,
    /// Acknowledged FIFO sends sent again after a cut, and deduplicated.
    pub(crate) sent_again: usize,
    pub(crate) deletes: usize,
    pub(crate) syncs: u64,
    /// Syncs of SQLite's database file: its checkpoints, mostly.
    pub(crate) database_syncs: u64,
    pub(crate) failures: Vec<String>,
}

impl Figures {
    /// Adds what another set of lineages did and found.
    pub(crate) fn absorb(&mut self, other: Self) {
        self.lineages += other.lineages;
        self.cuts += other.cuts;
        self.cuts_during_start += other.cuts_during_start;
        self.cuts_during_stop += other.cuts_during_stop;
        self.cuts_after_first_start += other.cuts_after_first_start;
        self.clean_restarts += other.clean_restarts;
        self.acknowledged += other.acknowledged;
        self.confirmed += other.confirmed;
        self.lost += other.lost;
        self.sent_again += other.sent_again;
        self.deletes += other.deletes;
        self.syncs += other.syncs;
        self.database_syncs += other.database_syncs;
        self.failures.extend(other.failures);
    }
}

/// When in a cycle the power is cut.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// This long after the server was started, healthy or not.
    WhileStarting(Duration),
    /// This long into the traffic.
    AfterDelay(Duration),
    /// Once this many sends of the cycle are acknowledged.
    AfterAcknowledged(usize),
    /// This long into the traffic the server is told to stop (SIGTERM),
    /// and the cut comes this long into its stopping.
    WhileStopping(Duration, Duration),
}

impl Moment {
    fn draw(rng: &mut SplitMix, first: bool, plan: &Plan, heavy: bool) -> Self {
        // A first start creates the database: it takes longer.
        let starting = if first { 400 } else { 200 };
        let longest = if heavy { 3_000 } else { 1_500 };
        match rng.up_to(15) {
            0 | 1 => Self::WhileStarting(Duration::from_millis(rng.up_to(starting))),
            2 | 3 => Self::WhileStopping(
                Duration::from_millis(rng.up_to(longest)),
                Duration::from_millis(rng.up_to(300)),
            ),
            4..=9 => Self::AfterDelay(Duration::from_millis(rng.up_to(longest))),
            _ => Self::AfterAcknowledged(rng.up_to(plan.messages() as u64) as usize),
        }
    }

    /// Whether the traffic has run long enough for this moment.
    fn reached(self, running: &Running, elapsed: Duration) -> bool {
        match self {
            Self::WhileStarting(_) => true,
            Self::AfterDelay(delay) | Self::WhileStopping(delay, _) => elapsed >= delay,
            Self::AfterAcknowledged(target) => running.acknowledged() >= target,
        }
    }
}

/// What one cycle does, drawn from the lineage's generator.
struct Cycle {
    /// The seed and cycle, for failures.
    context: String,
    /// The cycle in which the data directory is created.
    first: bool,
    plan: Plan,
    moment: Moment,
    /// The server is stopped cleanly and started again before the traffic.
    restart_first: bool,
    /// Chooses what the cut leaves.
    cut_seed: u64,
}

impl Cycle {
    fn draw(rng: &mut SplitMix, seed: u64, number: u64, heavy: bool) -> Self {
        let first = number == 0;
        let plan = Plan::draw(rng, format!("s{seed}c{number}"), heavy);
        let moment = Moment::draw(rng, first, &plan, heavy);
        Self {
            context: format!("seed {seed}, cycle {number}"),
            first,
            restart_first: !first && rng.one_in(4),
            cut_seed: rng.next_u64(),
            plan,
            moment,
        }
    }
}

/// Runs lineage `seed` with `server_args`; adds what it did and found to
/// `figures`.
pub(crate) async fn run(seed: u64, server_args: &[String], figures: &mut Figures) {
    let mut rng = SplitMix(seed ^ 0x00AC_CB0C);
    // A heavy lineage sends enough to bring the WAL to the server's
    // checkpoint threshold (32 MiB) in a cycle or two, so that cuts land in
    // and after checkpoints.
    let heavy = rng.one_in(10);
    let cuts = if heavy {
        4 + rng.up_to(1)
    } else {
        1 + rng.up_to(3)
    };
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let mut lineage = Lineage::on(
        seed,
        Disk::default(),
        Ledger::default(),
        server_args,
        scratch.path(),
        figures,
    );
    for number in 0..cuts {
        let cycle = Cycle::draw(&mut rng, seed, number, heavy);
        if !lineage.cycle(&cycle).await {
            return;
        }
    }
    lineage
        .finish(&format!("seed {seed}, after the last cut"))
        .await;
}

/// Starts the server on `disk`, as a cut left it, checks it against
/// `ledger` (what was done up to the cut) and stops it cleanly: a lineage's
/// last step alone. Counted as a lineage of one cut.
pub(crate) async fn check_cut(
    context: &str,
    disk: Disk,
    ledger: Ledger,
    server_args: &[String],
    figures: &mut Figures,
) {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let mut lineage = Lineage::on(0, disk, ledger, server_args, scratch.path(), figures);
    lineage.figures.cuts += 1;
    lineage.finish(context).await;
}

/// Where a lineage's server keeps its data on the mounted disk: two levels
/// down, so that the server creates directories whose entries a cut can
/// take.
pub(crate) fn data_dir(mount_point: &Path) -> PathBuf {
    mount_point.join("ackbox").join("data")
}

struct Lineage<'a> {
    seed: u64,
    data_dir: PathBuf,
    server_args: Vec<String>,
    /// The servers' standard error, all of the lineage's starts in order.
    log: PathBuf,
    mount_point: PathBuf,
    /// `None` only while a cut swaps the disk.
    mounted: Option<MountedDisk>,
    ledger: SharedLedger,
    figures: &'a mut Figures,
}

impl<'a> Lineage<'a> {
    /// A lineage whose disk, mounted under `scratch`, starts as `disk`.
    fn on(
        seed: u64,
        disk: Disk,
        ledger: Ledger,
        server_args: &[String],
        scratch: &Path,
        figures: &'a mut Figures,
    ) -> Self {
        let mount_point = scratch.join("disk");
        std::fs::create_dir(&mount_point).expect("a mount point");
        Self {
            seed,
            data_dir: data_dir(&mount_point),
            server_args: server_args.to_vec(),
            log: scratch.join("server.log"),
            mounted: Some(MountedDisk::mount(disk, &mount_point).expect("the disk mounts")),
            mount_point,
            ledger: Arc::new(Mutex::new(ledger)),
            figures,
        }
    }

    /// The last start, check and clean stop.
    async fn finish(&mut self, context: &str) {
        if let Some(server) = self.start(context).await
            && let Err(why) = server.terminate().await
        {
            self.fail(format!("{context}: a clean stop failed: {why}"));
        }
        if let Some(mounted) = self.mounted.take() {
            self.tally(&mounted);
            mounted.unmount();
        }
    }
}

impl Lineage<'_> {
    fn tally(&mut self, mounted: &MountedDisk) {
        if let Some((syncs, database_syncs)) =
            mounted.inspect(|disk| (disk.syncs(), disk.syncs_of(DATABASE_FILE)))
        {
            self.figures.syncs += syncs;
            self.figures.database_syncs += database_syncs;
        }
    }

    fn fail(&mut self, failure: String) {
        self.figures.failures.push(failure);
    }

    /// One cycle: a start and a check, maybe a clean restart, traffic and
    /// a cut at `moment`; false (and a failure) when the server would not
    /// start or stop.
    async fn cycle(&mut self, cycle: &Cycle) -> bool {
        let context = cycle.context.as_str();
        if let Moment::WhileStarting(delay) = cycle.moment {
            let server = self.spawn();
            tokio::time::sleep(delay).await;
            self.cut(server, None, cycle.cut_seed, cycle.first).await;
            self.figures.cuts_during_start += 1;
            return true;
        }
        let Some(mut server) = self.start(context).await else {
            return false;
        };
        if cycle.restart_first {
            if let Err(why) = server.terminate().await {
                self.fail(format!("{context}: a clean stop failed: {why}"));
                return false;
            }
            self.figures.clean_restarts += 1;
            let Some(restarted) = self.start(context).await else {
                return false;
            };
            server = restarted;
        }
        let running = workload::start(&server.endpoint(), &cycle.plan, &self.ledger);
        let started = tokio::time::Instant::now();
        while !cycle.moment.reached(&running, started.elapsed()) && !running.senders_done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if let Moment::WhileStopping(_, into_stop) = cycle.moment {
            if let Err(why) = server.signal_stop() {
                self.fail(format!("{context}: {why}"));
            }
            tokio::time::sleep(into_stop).await;
            self.figures.cuts_during_stop += 1;
        }
        self.cut(server, Some(running), cycle.cut_seed, cycle.first)
            .await;
        true
    }

    fn spawn(&self) -> Server {
        Server::spawn(&self.data_dir, &self.server_args, &self.log)
    }

    /// Starts the server and checks it against the ledger; `None` (and a
    /// failure) when it does not come up.
    async fn start(&mut self, context: &str) -> Option<Server> {
        let server = match Server::start(&self.data_dir, &self.server_args, &self.log).await {
            Ok(server) => server,
            Err(why) => {
                self.fail(format!(
                    "{context}: the server did not start on what the cut left: {why}"
                ));
                return None;
            }
        };
        // Out of its lock while the check awaits: no task uses it between
        // a cut and the next traffic.
        let mut ledger = std::mem::take(
            &mut *self
                .ledger
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let verdict = ledger.check(&server.endpoint()).await;
        *self
            .ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = ledger;
        self.figures.confirmed += verdict.confirmed;
        self.figures.lost += verdict.lost;
        self.figures.sent_again += verdict.sent_again;
        for failure in verdict.failures {
            self.fail(format!("{context}: {failure}"));
        }
        Some(server)
    }

    /// Cuts the power (what survives chosen by `seed`), kills the server,
    /// and mounts what the cut left.
    async fn cut(&mut self, server: Server, running: Option<Running>, seed: u64, first: bool) {
        let mounted = self.mounted.take().expect("a mounted disk");
        self.tally(&mounted);
        let survived = mounted.cut_power(seed);
        server.kill9();
        if let Some(running) = running {
            for refusal in running.join().await {
                self.fail(format!("seed {}: refused: {refusal}", self.seed));
            }
        }
        mounted.unmount();
        self.mounted =
            Some(MountedDisk::mount(survived, &self.mount_point).expect("the disk mounts again"));
        self.figures.cuts += 1;
        self.figures.cuts_after_first_start += usize::from(first);
    }
}

/// Counts the lineage however it ended.
impl Drop for Lineage<'_> {
    fn drop(&mut self) {
        self.figures.lineages += 1;
        let ledger = self
            .ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.figures.acknowledged += ledger.acknowledged_sends();
        self.figures.deletes += ledger.deletes();
    }
}

/// Whether this process can mount a filesystem in userspace; why not
/// otherwise.
pub(crate) fn cannot_mount() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".to_owned());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective_uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    (effective_uid != Some("0"))
        .then(|| "mounting a filesystem in userspace without fusermount needs root".to_owned())
}
