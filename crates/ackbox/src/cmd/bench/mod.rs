//! `ackbox bench`: a native load generator for ackbox and its peers.
//!
//! - **W1 durable produce**: `-P` producers send batches of `--batch`
//!   bodies of `--body-size` bytes as fast as acknowledgements come.
//! - **W2 consume + acknowledge**: `-C` consumers receive up to 10 and
//!   acknowledge them until the backlog W1 left (or a prefill) is gone.
//! - **W3 latency at a fixed rate**: one scheduler sends single messages at
//!   `--rate` per second; latency is measured from each message's *scheduled*
//!   send time (so a stall is charged to every message it delays), both to the
//!   send acknowledgement and to its receipt by a consumer.
//!
//! `--target ackbox,rabbitmq,nats,postgres` runs the same workloads against
//! each, alternating within every one of `--rounds` rounds, and prints the
//! medians and ackbox's ratio to each peer (`--markdown` for README). The
//! peers are driven natively (lapin, async-nats, sqlx) at their strongest
//! durability short of changing server settings; each states what it is.
//!
//! With `--server-pid` ackbox's CPU time per message and resident memory are
//! reported too. With `--fifo-groups N` ackbox's workloads run on a FIFO
//! queue, its messages spread round-robin over N message groups, each with a
//! unique deduplication id.
//!
//! With `--backlog N` (ackbox only) a queue is filled with N messages before
//! the first round; W1 then sends to it and W2 takes as many from its head as
//! W1 added, so it stays N deep, and W3 runs on a fresh queue of the same
//! store. Compared with a run without, this shows whether cost grows with
//! what is stored.

use std::time::Duration;

use anyhow::bail;
use serde_json::json;

use crate::api_client::EndpointArgs;
use report::Report;
use summary::print_summary;
use target::Target;
use workload::{consume, latency, prefill, produce};

mod ackbox;
mod fanout;
#[cfg(feature = "bench-peers")]
mod nats;
mod postgres;
#[cfg(feature = "bench-peers")]
mod rabbitmq;
mod redrive;
mod report;
mod summary;
mod target;
mod workload;

/// Which workloads to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Workload {
    /// Durable produce.
    W1,
    /// Consume and acknowledge.
    W2,
    /// Latency at a fixed rate.
    W3,
    /// W1, then W2 on W1's backlog, then W3.
    All,
    /// A message move task at `--redrive-rate` (ackbox only): does the
    /// measured rate hold the limit?
    Redrive,
    /// PublishBatch to a topic with each of `--subscribers` raw subscribed
    /// queues, beside SendMessageBatch to one queue (ackbox only).
    Fanout,
}

/// A broker to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum TargetKind {
    /// ackbox (or any SQS-API endpoint) at `--endpoint`.
    Ackbox,
    /// RabbitMQ at `--amqp-url`.
    Rabbitmq,
    /// NATS JetStream at `--nats-url`.
    Nats,
    /// A PostgreSQL queue table at `--postgres-url`.
    Postgres,
}

impl TargetKind {
    fn name(self) -> &'static str {
        match self {
            Self::Ackbox => "ackbox",
            Self::Rabbitmq => "rabbitmq",
            Self::Nats => "nats",
            Self::Postgres => "postgres",
        }
    }
}

/// Flags of `ackbox bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// More nodes of the same installation (`ackbox serve --store
    /// postgres://…`), comma-separated: producers and consumers are spread
    /// over `--endpoint` and these.
    #[arg(long, value_delimiter = ',')]
    also_endpoint: Vec<String>,
    /// Workload to run.
    #[arg(long, value_enum, default_value_t = Workload::All)]
    workload: Workload,
    /// Brokers to measure, comma-separated; several alternate in each round.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ackbox")]
    target: Vec<TargetKind>,
    /// Rounds; with several, medians are reported.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Print the summary as a Markdown table.
    #[arg(long)]
    markdown: bool,
    /// RabbitMQ for `--target rabbitmq`.
    #[arg(
        long,
        env = "ACKBOX_BENCH_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    amqp_url: String,
    /// NATS for `--target nats`.
    #[arg(
        long,
        env = "ACKBOX_BENCH_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    nats_url: String,
    /// PostgreSQL for `--target postgres`.
    #[arg(
        long,
        env = "ACKBOX_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    postgres_url: String,
    /// Producers (W1).
    #[arg(short = 'P', long, default_value_t = 4)]
    producers: usize,
    /// Consumers (W2, W3).
    #[arg(short = 'C', long, default_value_t = 4)]
    consumers: usize,
    /// How long W1 and W3 run, seconds.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Messages to prefill when W2 runs without W1.
    #[arg(long, default_value_t = 100_000)]
    prefill: u64,
    /// Message body size, bytes.
    #[arg(long, default_value_t = 256)]
    body_size: usize,
    /// Messages per batch (1..=10).
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// W3 send rate, messages per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Fan-out workload: how many queues subscribe to the topic, one
    /// measurement per count, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,5,20")]
    subscribers: Vec<usize>,
    /// Fan-out workload: also run each count with the topic keeping an
    /// archive (`ArchivePolicy`), interleaved with the rest.
    #[arg(long)]
    archive: bool,
    /// Redrive workload: the move task's MaxNumberOfMessagesPerSecond.
    #[arg(long, default_value_t = 100)]
    redrive_rate: u64,
    /// ackbox queue to use; a fresh `bench-<pid>-<time>` queue when absent.
    #[arg(long)]
    queue: Option<String>,
    /// ackbox's process id, to report its CPU time per message.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Use a FIFO queue on ackbox with messages spread over this many message groups.
    #[arg(long)]
    fifo_groups: Option<u64>,
    /// Messages queued before the first round (ackbox only); W1 and W2 run on
    /// that deep queue, W3 beside it.
    #[arg(long, default_value_t = 0)]
    backlog: u64,
}

/// Which workloads run on one queue.
#[derive(Debug, Clone, Copy)]
struct Plan {
    w1: bool,
    w2: bool,
    w3: bool,
    /// W2 without W1 takes `--prefill` messages already queued rather than
    /// sending them first.
    queued: bool,
}

impl Workload {
    fn plan(self) -> Plan {
        Plan {
            w1: matches!(self, Self::W1 | Self::All),
            w2: matches!(self, Self::W2 | Self::All),
            w3: matches!(self, Self::W3 | Self::All),
            queued: false,
        }
    }
}

/// How every workload of a run is shaped.
#[derive(Debug, Clone)]
struct Settings {
    producers: usize,
    consumers: usize,
    duration: Duration,
    body_size: usize,
    batch: usize,
    rate: u64,
    prefill: u64,
    quiet: bool,
}

/// Runs the chosen workloads against every target and prints their reports.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    if !(1..=10).contains(&args.batch) {
        bail!("--batch must be 1..=10; got {}", args.batch);
    }
    if args.producers == 0 || args.consumers == 0 || args.rate == 0 || args.rounds == 0 {
        bail!("-P, -C, --rate and --rounds must be at least 1");
    }
    if args.fifo_groups == Some(0) {
        bail!("--fifo-groups must be at least 1");
    }
    let mut targets = args.target.clone();
    targets.dedup();
    if args.backlog > 0
        && (targets != [TargetKind::Ackbox] || args.fifo_groups.is_some() || args.queue.is_some())
    {
        bail!(
            "--backlog runs on ackbox's standard queues; drop --target, --fifo-groups and --queue"
        );
    }
    if args.workload == Workload::Redrive {
        if args.fifo_groups.is_some() || targets != [TargetKind::Ackbox] {
            bail!(
                "the redrive workload runs on ackbox's standard queues; drop --fifo-groups and --target"
            );
        }
        let client = args.endpoint.client()?;
        let queue = args.queue.clone().unwrap_or_else(|| fresh_name("bench", 0));
        return redrive::redrive(
            &client,
            args.redrive_rate,
            args.body_size,
            args.endpoint.json,
            &queue,
        )
        .await;
    }
    if args.workload == Workload::Fanout {
        if args.fifo_groups.is_some() || targets != [TargetKind::Ackbox] {
            bail!(
                "the fan-out workload runs on ackbox's standard topics; drop --fifo-groups and --target"
            );
        }
        if args.subscribers.is_empty() || args.subscribers.contains(&0) {
            bail!("--subscribers must list counts of at least 1, e.g. 1,5,20");
        }
        let client = args.endpoint.client()?;
        return fanout::fanout(
            &client,
            &fanout::Fanout {
                subscribers: args.subscribers.clone(),
                archive: args.archive,
                producers: args.producers,
                batch: args.batch,
                body_size: args.body_size,
                duration: Duration::from_secs(args.duration),
                rounds: args.rounds,
                server_pid: args.server_pid,
                name: args
                    .queue
                    .clone()
                    .unwrap_or_else(|| fresh_name("fanout", 0)),
            },
        )
        .await;
    }
    let settings = Settings {
        producers: args.producers,
        consumers: args.consumers,
        duration: Duration::from_secs(args.duration),
        body_size: args.body_size,
        batch: args.batch,
        rate: args.rate,
        prefill: args.prefill,
        quiet: args.endpoint.json,
    };
    let deep = if args.backlog > 0 {
        let deep = ackbox_target(&args, &fresh_name("backlog", 0)).await?;
        prefill(&deep, settings.body_size, args.backlog).await?;
        Some(deep)
    } else {
        None
    };
    let mut reports = Vec::new();
    for round in 0..args.rounds {
        // Each round starts with another target, so none always runs first
        // (on a fresh page cache) or last (after the others' compactions).
        for offset in 0..targets.len() {
            let kind = targets[(round + offset) % targets.len()];
            let done = run_target(kind, &args, &settings, round, deep.as_ref()).await?;
            if !args.endpoint.json {
                done.iter().for_each(Report::print);
            }
            reports.extend(done);
        }
    }
    if let Some(deep) = &deep {
        remove(deep, TargetKind::Ackbox).await;
    }
    if args.endpoint.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "reports": reports }))?
        );
    } else if args.rounds > 1 || targets.len() > 1 || args.markdown {
        print_summary(&targets, &reports, args.rounds, args.backlog, args.markdown);
    }
    Ok(())
}

/// A name no earlier run used: queues, streams and tables alike accept it.
fn fresh_name(prefix: &str, round: usize) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    format!("{prefix}_{}_{stamp}_{round}", std::process::id())
}

/// Queue `name` on ackbox, its producers and consumers spread over every node.
async fn ackbox_target(args: &Args, name: &str) -> anyhow::Result<ackbox::AckboxTarget> {
    let client = args.endpoint.client()?;
    let mut nodes = vec![client.clone()];
    for endpoint in &args.also_endpoint {
        nodes.push(args.endpoint.client_for(endpoint)?);
    }
    Ok(ackbox::AckboxTarget::create(client, name, args.fifo_groups)
        .await?
        .spread_over(nodes))
}

async fn run_target(
    kind: TargetKind,
    args: &Args,
    settings: &Settings,
    round: usize,
    deep: Option<&ackbox::AckboxTarget>,
) -> anyhow::Result<Vec<Report>> {
    let name = fresh_name("bench", round);
    let plan = args.workload.plan();
    match kind {
        TargetKind::Ackbox => {
            let queue = args.queue.as_deref().unwrap_or(&name);
            let target = ackbox_target(args, queue).await?;
            let pid = args.server_pid;
            let reports = match deep {
                Some(deep) => {
                    let on_deep = Plan {
                        w3: false,
                        queued: true,
                        ..plan
                    };
                    let beside = Plan {
                        w1: false,
                        w2: false,
                        ..plan
                    };
                    let mut reports =
                        run_workloads(deep, kind, round, on_deep, settings, pid).await?;
                    reports
                        .extend(run_workloads(&target, kind, round, beside, settings, pid).await?);
                    Ok(reports)
                }
                None => run_workloads(&target, kind, round, plan, settings, pid).await,
            };
            if args.queue.is_none() {
                remove(&target, kind).await;
            }
            reports
        }
        #[cfg(feature = "bench-peers")]
        TargetKind::Rabbitmq => {
            let target = rabbitmq::RabbitMqTarget::create(&args.amqp_url, &name).await?;
            let reports = run_workloads(&target, kind, round, plan, settings, None).await;
            remove(&target, kind).await;
            reports
        }
        #[cfg(feature = "bench-peers")]
        TargetKind::Nats => {
            let target = nats::NatsTarget::create(&args.nats_url, &name).await?;
            let reports = run_workloads(&target, kind, round, plan, settings, None).await;
            remove(&target, kind).await;
            reports
        }
        #[cfg(not(feature = "bench-peers"))]
        TargetKind::Rabbitmq | TargetKind::Nats => Err(without_peer_clients(kind)),
        TargetKind::Postgres => {
            let workers = u32::try_from(settings.producers.max(settings.consumers)).unwrap_or(64);
            let target =
                postgres::PostgresTarget::create(&args.postgres_url, &name, workers).await?;
            let reports = run_workloads(&target, kind, round, plan, settings, None).await;
            remove(&target, kind).await;
            reports
        }
    }
}

/// Why `kind` cannot be measured by a build without the peers' clients.
#[cfg(not(feature = "bench-peers"))]
fn without_peer_clients(kind: TargetKind) -> anyhow::Error {
    anyhow::anyhow!(
        "--target {}: this build of ackbox has no {} client; build it with \
         `cargo build --release -p ackbox --features bench-peers` to measure it",
        kind.name(),
        kind.name()
    )
}

async fn remove<T: Target>(target: &T, kind: TargetKind) {
    if let Err(error) = target.remove().await {
        eprintln!(
            "warning: could not remove the {} queue of this run: {error:#}",
            kind.name()
        );
    }
}

async fn run_workloads<T: Target>(
    target: &T,
    kind: TargetKind,
    round: usize,
    plan: Plan,
    settings: &Settings,
    server_pid: Option<u32>,
) -> anyhow::Result<Vec<Report>> {
    let mut reports = Vec::new();
    let label = |report: Report| Report {
        target: kind.name(),
        round,
        ..report
    };
    if plan.w1 {
        reports.push(label(produce(target, settings, server_pid).await?));
    }
    if plan.w2 {
        let backlog = if plan.w1 {
            reports[0].messages
        } else {
            if !plan.queued {
                prefill(target, settings.body_size, settings.prefill).await?;
            }
            settings.prefill
        };
        reports.push(label(consume(target, settings, backlog, server_pid).await?));
    }
    if plan.w3 {
        reports.push(label(latency(target, settings, server_pid).await?));
    }
    Ok(reports)
}
