//! The chaos schedule: consumer processes SIGKILLed at random moments and
//! restarted, the broker `kill -9`ed once (when the trial owns it), and
//! the consumers' database sessions terminated once — all drawn from the
//! trial's seed, so a failing schedule can be run again.
//!
//! The kills come on a clock. The one-off strikes come on progress instead
//! (at a drawn share of the effects committed), because a one-off strike
//! that lands after the work is done proves nothing, and how fast the work
//! goes depends on the machine.

use std::time::{Duration, Instant};

use rand::Rng;
use rand::rngs::StdRng;

use crate::broker::Broker;
use crate::database::TrialDatabase;
use crate::fleet::Fleet;
use crate::verdict::Findings;

/// Something the schedule breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strike {
    /// SIGKILL consumer process `n`, then start it again.
    KillConsumer(usize),
    /// `kill -9` the broker, then start it again on its port and data.
    CrashBroker,
    /// `pg_terminate_backend` every session of the consumer processes.
    TerminateConnections,
}

impl Strike {
    fn kind(self) -> &'static str {
        match self {
            Self::KillConsumer(_) => "consumer kill",
            Self::CrashBroker => "broker kill",
            Self::TerminateConnections => "connection termination",
        }
    }
}

/// Consumer kills on a clock, one-off strikes on progress.
#[derive(Debug)]
pub(crate) struct Schedule {
    /// Each kill after its pause.
    kills: Vec<(Duration, usize)>,
    /// Each one-off strike once this share (per mille) of the effects is
    /// committed, or when the kills are over, whichever comes first.
    one_offs: Vec<(u64, Strike)>,
}

impl Schedule {
    /// `kills` consumer kills a few hundred milliseconds to two seconds
    /// apart, over `processes` processes; one database termination around
    /// the middle of the work and, when `crash_broker`, one broker crash
    /// before it.
    pub(crate) fn random(
        rng: &mut StdRng,
        processes: usize,
        kills: usize,
        crash_broker: bool,
    ) -> Self {
        let kills = (0..kills)
            .map(|_| {
                (
                    Duration::from_millis(rng.random_range(300..=2_000)),
                    rng.random_range(0..processes),
                )
            })
            .collect();
        let mut one_offs = Vec::new();
        if crash_broker {
            one_offs.push((rng.random_range(200..=400), Strike::CrashBroker));
        }
        one_offs.push((rng.random_range(400..=600), Strike::TerminateConnections));
        Self { kills, one_offs }
    }
}

/// What the chaos did.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) consumer_kills: u32,
    pub(crate) broker_crashes: u32,
    pub(crate) terminations: u32,
    pub(crate) connections_terminated: u64,
    /// Effects committed when each kind of strike last landed.
    pub(crate) landed: Vec<(&'static str, u64)>,
    /// The longest stretch without a new commit while work remained, as
    /// seen at the strikes: the consumers stalling, not merely slow.
    pub(crate) longest_stall: Duration,
    /// Looks at the consumers' sessions before each kill: the most found
    /// waiting on a lock, and how often one of them was DDL (a starting
    /// consumer's migration, which queues every claim behind it).
    pub(crate) lock_samples: u32,
    pub(crate) most_lock_waits: u64,
    pub(crate) samples_with_ddl_waiting: u32,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            formatter,
            "chaos: {} consumer kills (SIGKILL), {} broker kills (kill -9), \
             {} database connections terminated in {} sweep(s)",
            self.consumer_kills,
            self.broker_crashes,
            self.connections_terminated,
            self.terminations
        )?;
        let landed: Vec<String> = self
            .landed
            .iter()
            .map(|(strike, committed)| format!("the last {strike} at {committed} effects"))
            .collect();
        writeln!(
            formatter,
            "landed (effects committed then): {}",
            landed.join(", ")
        )?;
        write!(
            formatter,
            "stalls: longest stretch without a commit while work remained {:.1} s; \
             up to {} consumer sessions waiting on a lock, a starting consumer's \
             migration DDL among them at {} of {} looks",
            self.longest_stall.as_secs_f64(),
            self.most_lock_waits,
            self.samples_with_ddl_waiting,
            self.lock_samples
        )
    }
}

/// Runs `schedule` against the trial, whose work is `effects` effects in
/// all; a process that dies on its own on the way is a finding (and is
/// restarted).
pub(crate) async fn unleash<B: Broker>(
    schedule: &Schedule,
    effects: u64,
    fleet: &mut Fleet,
    broker: &mut B,
    database: &TrialDatabase,
) -> (Tally, Findings) {
    let mut tally = Tally::default();
    let mut findings = Findings::default();
    let mut one_offs = schedule.one_offs.clone();
    let mut last_commit = (Instant::now(), 0);
    for (index, &(pause, process)) in schedule.kills.iter().enumerate() {
        tokio::time::sleep(pause).await;
        for exit in fleet.restart_exited() {
            findings.fail(exit);
        }
        let committed = committed(database).await;
        if committed > last_commit.1 || committed >= effects {
            last_commit = (Instant::now(), committed);
        } else {
            tally.longest_stall = tally.longest_stall.max(last_commit.0.elapsed());
        }
        if let Ok(waits) = database.lock_waits().await {
            tally.lock_samples += 1;
            tally.most_lock_waits = tally.most_lock_waits.max(waits.waiting);
            tally.samples_with_ddl_waiting += u32::from(waits.ddl > 0);
        }
        let last = index + 1 == schedule.kills.len();
        let mut due = Vec::new();
        one_offs.retain(|&(per_mille, strike)| {
            let now = last || committed * 1_000 >= effects * per_mille;
            if now {
                due.push(strike);
            }
            !now
        });
        for strike in due {
            strike_once(strike, fleet, broker, database, &mut tally, &mut findings).await;
        }
        strike_once(
            Strike::KillConsumer(process),
            fleet,
            broker,
            database,
            &mut tally,
            &mut findings,
        )
        .await;
    }
    (tally, findings)
}

async fn strike_once<B: Broker>(
    strike: Strike,
    fleet: &mut Fleet,
    broker: &mut B,
    database: &TrialDatabase,
    tally: &mut Tally,
    findings: &mut Findings,
) {
    let committed = committed(database).await;
    tally.landed.retain(|(landed, _)| *landed != strike.kind());
    tally.landed.push((strike.kind(), committed));
    match strike {
        Strike::KillConsumer(process) => {
            fleet.kill_and_restart(process);
            tally.consumer_kills += 1;
        }
        Strike::CrashBroker => {
            broker.crash_and_restart().await;
            tally.broker_crashes += 1;
        }
        Strike::TerminateConnections => match database.terminate_consumer_connections().await {
            Ok(ended) => {
                tally.terminations += 1;
                tally.connections_terminated += ended;
            }
            Err(error) => findings.fail(format!(
                "the consumers' database sessions could not be terminated: {error}"
            )),
        },
    }
}

async fn committed(database: &TrialDatabase) -> u64 {
    database
        .effects_committed()
        .await
        .map_or(0, |committed| committed.values().sum())
}
