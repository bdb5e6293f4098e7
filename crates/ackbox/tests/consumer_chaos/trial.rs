//! One trial: a schema, a broker, the workloads sent, four consumer
//! processes, the chaos, the drain, and the verdict.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::broker::{Broker, Depth, LEASE};
use crate::chaos::{self, Schedule};
use crate::consumer_role::{ConsumerSpec, Counts};
use crate::database::TrialDatabase;
use crate::fleet::Fleet;
use crate::verdict::{Findings, examples};
use crate::workload::{Pace, Plan};

/// Overrides the random seed, to run a schedule and a workload again.
const SEED_VARIABLE: &str = "ACKBOX_CHAOS_SEED";
const PROCESSES: usize = 4;
/// The process whose consumers run without a heartbeat, so its overrunning
/// handlers lose their lease to another process while they still work.
const WITHOUT_HEARTBEAT: usize = 0;
/// Most of a trial's three minutes: the drain must be done by then.
const DRAIN_DEADLINE: Duration = Duration::from_secs(150);
/// How long the drained state must hold: a broker that cannot count what
/// its consumers hold unacknowledged (RabbitMQ) has let them settle it.
const QUIET: Duration = Duration::from_secs(2);
const STOP_DEADLINE: Duration = Duration::from_secs(25);
/// Past this, the trial fails whatever it waits for.
const TRIAL_LIMIT: Duration = Duration::from_secs(180);

/// What a trial runs; the broker comes from the caller.
pub(crate) struct Setup {
    /// The transport's name, for the report.
    pub(crate) transport: &'static str,
    /// The workloads, drawn from the trial's random source.
    pub(crate) plans: fn(&mut StdRng) -> Vec<Plan>,
    pub(crate) consumer_kills: usize,
}

/// Runs the trial over the broker `connect` gives; `Ok` with a "skipped"
/// line when PostgreSQL or the broker is not configured. A trial that hangs
/// somewhere the drain deadline does not watch fails at [`TRIAL_LIMIT`];
/// its processes and schema go with it.
pub(crate) async fn run<B: Broker>(
    setup: Setup,
    connect: impl AsyncFnOnce() -> Option<B>,
) -> Result<(), String> {
    let transport = setup.transport;
    tokio::time::timeout(TRIAL_LIMIT, run_within_limit(setup, connect))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the trial over {transport} did not finish within {TRIAL_LIMIT:?}"
            ))
        })
}

async fn run_within_limit<B: Broker>(
    setup: Setup,
    connect: impl AsyncFnOnce() -> Option<B>,
) -> Result<(), String> {
    let started = Instant::now();
    let seed = std::env::var(SEED_VARIABLE)
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let Some(database) = TrialDatabase::create("the consumer chaos trial").await else {
        return Ok(());
    };
    let Some(mut broker) = connect().await else {
        return Ok(());
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let plans = (setup.plans)(&mut rng);

    let mut queues = Vec::new();
    for plan in &plans {
        assert!(
            !plan.workload().fifo() || broker.keeps_group_order(),
            "{} has no ordered message groups for the {} workload",
            setup.transport,
            plan.workload().name()
        );
        plan.create_tables(database.pool())
            .await
            .expect("the workload's tables are created");
        let queue = broker.declare(plan.workload()).await;
        broker.publish(&queue, plan.messages()).await;
        queues.push(queue);
    }
    let sent_after = started.elapsed();

    let specs = (0..PROCESSES)
        .map(|process| ConsumerSpec {
            process,
            heartbeat: process != WITHOUT_HEARTBEAT,
            database: database.address().clone(),
            endpoint: broker.endpoint(),
            queues: queues.clone(),
            pace: Pace {
                process: i32::try_from(process).expect("a small process number"),
                ..PACE
            },
        })
        .collect();
    let mut fleet = Fleet::start(specs);
    let schedule = Schedule::random(
        &mut rng,
        fleet.len(),
        setup.consumer_kills,
        broker.can_crash(),
    );
    let chaos_started = Instant::now();
    let (tally, mut findings) = chaos::unleash(
        &schedule,
        plans.iter().map(Plan::distinct_effects).sum(),
        &mut fleet,
        &mut broker,
        &database,
    )
    .await;
    let chaos_took = chaos_started.elapsed();

    let drain_started = Instant::now();
    let drained = drain(
        &plans,
        &mut fleet,
        &broker,
        &database,
        started + DRAIN_DEADLINE,
    )
    .await;
    let drain_took = drain_started.elapsed();
    findings.merge(drained);
    let (fleet, stopped) = tokio::task::spawn_blocking(move || {
        let stopped = fleet.stop(STOP_DEADLINE);
        (fleet, stopped)
    })
    .await
    .expect("the consumer processes are stopped");
    for failure in stopped {
        findings.fail(failure);
    }
    // Read after the stop, so the final reports are in.
    let counts = fleet.counts();
    let incarnations = fleet.incarnations().to_vec();

    // With every consumer gone, whatever a broker still holds is visible.
    let depths = broker.depths().await;
    let left: Vec<String> = depths
        .iter()
        .filter(|depth| !depth.is_empty())
        .map(ToString::to_string)
        .collect();
    findings.check(left.is_empty(), || {
        format!(
            "queues not empty once the consumers stopped (a dead letter is a failure too): {}",
            examples(&left)
        )
    });
    let committed = database.effects_committed().await.unwrap_or_default();
    let mut outcome = Findings::default();
    for plan in &plans {
        outcome.merge(plan.verify(database.pool()).await);
    }
    outcome.merge(findings);

    print_report(&Report {
        transport: setup.transport,
        seed,
        took: started.elapsed(),
        sent_after,
        chaos_took,
        drain_took,
        tally: &tally,
        plans: &plans,
        counts: &counts,
        committed: &committed,
        incarnations: &incarnations,
        outcome: &outcome,
    });
    broker.remove().await;
    database.close().await;
    if outcome.failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} checks failed over {} (the same workload and schedule: {SEED_VARIABLE}={seed}):\n  - {}",
            outcome.failures.len(),
            setup.transport,
            outcome.failures.join("\n  - ")
        ))
    }
}

/// Handlers work up to 20 ms in each transaction, and one call in a
/// hundred overruns the lease by half.
const PACE: Pace = Pace {
    work_ms: 20,
    slow_per_mille: 10,
    slow_ms: LEASE.as_millis() as u64 * 3 / 2,
    process: 0,
};

/// Waits until every effect is committed and every queue is empty, or the
/// deadline passes (a failure naming what is not done). Processes that die
/// on their own meanwhile are restarted and reported.
async fn drain<B: Broker>(
    plans: &[Plan],
    fleet: &mut Fleet,
    broker: &B,
    database: &TrialDatabase,
    deadline: Instant,
) -> Findings {
    let mut findings = Findings::default();
    let mut quiet_since: Option<Instant> = None;
    loop {
        for exit in fleet.restart_exited() {
            findings.fail(exit);
        }
        let committed = database.effects_committed().await.unwrap_or_default();
        let behind: Vec<String> = plans
            .iter()
            .filter_map(|plan| {
                let name = plan.workload().name();
                let done = committed.get(name).copied().unwrap_or(0);
                (done < plan.distinct_effects()).then(|| {
                    format!(
                        "{name}: {done} of {} effects committed",
                        plan.distinct_effects()
                    )
                })
            })
            .collect();
        let depths = broker.depths().await;
        let busy: Vec<&Depth> = depths.iter().filter(|depth| !depth.is_empty()).collect();
        if behind.is_empty() && busy.is_empty() {
            let since = *quiet_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= QUIET {
                return findings;
            }
        } else {
            quiet_since = None;
        }
        if Instant::now() >= deadline {
            let mut not_done = behind;
            not_done.extend(busy.iter().map(ToString::to_string));
            findings.fail(format!(
                "not drained by the deadline ({DRAIN_DEADLINE:?} into the trial): {}",
                not_done.join("; ")
            ));
            return findings;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Everything the figures are made of.
struct Report<'a> {
    transport: &'static str,
    seed: u64,
    took: Duration,
    sent_after: Duration,
    chaos_took: Duration,
    drain_took: Duration,
    tally: &'a chaos::Tally,
    plans: &'a [Plan],
    counts: &'a BTreeMap<String, Counts>,
    committed: &'a BTreeMap<String, u64>,
    incarnations: &'a [u32],
    outcome: &'a Findings,
}

fn print_report(report: &Report<'_>) {
    let Report {
        transport,
        seed,
        took,
        sent_after,
        chaos_took,
        drain_took,
        tally,
        plans,
        counts,
        committed,
        incarnations,
        outcome,
    } = report;
    println!(
        "\n== consumer chaos over {transport}: seed {seed}, {:.1} s (sent by {:.1} s, chaos {:.1} s, drain {:.1} s)",
        took.as_secs_f64(),
        sent_after.as_secs_f64(),
        chaos_took.as_secs_f64(),
        drain_took.as_secs_f64()
    );
    println!("{tally}");
    println!("consumer process incarnations: {incarnations:?}");
    for figure in &outcome.figures {
        println!("{figure}");
    }
    let mut total = Counts::default();
    for plan in plans.iter() {
        let name = plan.workload().name();
        let counts = counts.get(name).copied().unwrap_or_default();
        total.add(&counts);
        println!(
            "{name}: effects {} of {} distinct (inbox records); {} producer duplicates sent; decisions: {counts}",
            committed.get(name).copied().unwrap_or(0),
            plan.distinct_effects(),
            plan.producer_duplicates(),
        );
    }
    let producer_duplicates: u64 = plans.iter().map(Plan::producer_duplicates).sum();
    println!(
        "duplicates absorbed by the inbox: {} (from the consumers' own counts, summed over each process's last report; \
         a SIGKILLed process's last 250 ms are missing, so a lower bound); producer duplicates alone: {producer_duplicates}",
        total.duplicates
    );
    println!(
        "{}",
        if outcome.failures.is_empty() {
            "verdict: every check passed".to_owned()
        } else {
            format!("verdict: {} checks failed", outcome.failures.len())
        }
    );
}
