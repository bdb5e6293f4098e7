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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Mutex;

use crate::api_client::EndpointArgs;
use target::{Consumer, Producer, Target};

mod ackbox;
#[cfg(feature = "bench-peers")]
mod nats;
mod postgres;
#[cfg(feature = "bench-peers")]
mod rabbitmq;
mod redrive;
mod target;

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

/// Latency percentiles in microseconds.
#[derive(Debug, Serialize)]
struct Latency {
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
}

impl Latency {
    fn of(histogram: &Histogram<u64>) -> Self {
        Self {
            p50_us: histogram.value_at_quantile(0.50),
            p99_us: histogram.value_at_quantile(0.99),
            p999_us: histogram.value_at_quantile(0.999),
            max_us: histogram.max(),
        }
    }
}

/// One workload's result.
#[derive(Debug, Serialize)]
struct Report {
    target: &'static str,
    round: usize,
    workload: &'static str,
    messages: u64,
    seconds: f64,
    messages_per_second: f64,
    /// Per request (W1, W2) or per message from its scheduled time to its acknowledgement (W3).
    request_latency: Latency,
    /// W3 only: scheduled send time to receipt by a consumer.
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery_latency: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_cpu_us_per_message: Option<f64>,
    /// The server's resident memory when the workload ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    server_rss_mib: Option<f64>,
    errors: u64,
    /// What the first failed call said, so a run with errors says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    first_error: Option<String>,
}

impl Report {
    fn print(&self) {
        println!(
            "{:<8} {:<3} {:>9} msgs in {:>6.2}s = {:>9.0} msg/s | p50 {:>6}µs p99 {:>6}µs max {:>7}µs{}{}{}{}",
            self.target,
            self.workload,
            self.messages,
            self.seconds,
            self.messages_per_second,
            self.request_latency.p50_us,
            self.request_latency.p99_us,
            self.request_latency.max_us,
            self.delivery_latency
                .as_ref()
                .map_or(String::new(), |delivery| format!(
                    " | delivery p50 {}µs p99 {}µs max {}µs",
                    delivery.p50_us, delivery.p99_us, delivery.max_us
                )),
            self.server_cpu_us_per_message
                .map_or(String::new(), |cpu| format!(
                    " | server {cpu:.1} µs CPU/msg"
                )),
            self.server_rss_mib
                .map_or(String::new(), |rss| format!(", RSS {rss:.0} MiB")),
            if self.errors > 0 {
                format!(
                    " | {} errors, first: {}",
                    self.errors,
                    self.first_error.as_deref().unwrap_or("?")
                )
            } else {
                String::new()
            },
        );
    }
}

/// Failed calls of a workload: how many, and what the first one said.
#[derive(Debug, Default)]
struct Errors {
    count: AtomicU64,
    first: std::sync::Mutex<Option<String>>,
}

impl Errors {
    fn record(&self, error: &anyhow::Error) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut first = self
            .first
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        first.get_or_insert_with(|| format!("{error:#}"));
    }

    /// Messages a call did not store, without an error of their own.
    fn refused(&self, messages: u64) {
        if messages > 0 {
            self.record(&anyhow::anyhow!(
                "{messages} messages of a batch were refused"
            ));
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

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("static histogram bounds are valid")
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Server CPU time (user + system) in microseconds, from `/proc`.
fn process_cpu_us(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are at 11 and 12 after the name.
    let ticks: u64 = fields
        .get(11..13)
        .unwrap_or_default()
        .iter()
        .filter_map(|field| field.parse::<u64>().ok())
        .sum();
    // USER_HZ is 100 on every Linux ABI that matters here.
    Ok(ticks * 10_000)
}

struct CpuMeter {
    pid: Option<u32>,
    start_us: u64,
}

impl CpuMeter {
    fn start(pid: Option<u32>) -> anyhow::Result<Self> {
        let start_us = pid.map(process_cpu_us).transpose()?.unwrap_or(0);
        Ok(Self { pid, start_us })
    }

    fn per_message(&self, messages: u64) -> anyhow::Result<Option<f64>> {
        let Some(pid) = self.pid else { return Ok(None) };
        let used = process_cpu_us(pid)?.saturating_sub(self.start_us);
        Ok((messages > 0).then(|| used as f64 / messages as f64))
    }

    /// The server's resident set now, from `/proc/<pid>/status`.
    fn rss_mib(&self) -> anyhow::Result<Option<f64>> {
        let Some(pid) = self.pid else { return Ok(None) };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| {
                value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
        Ok(Some(kib / 1_024.0))
    }
}

fn progress(hidden: bool, label: &str, length: Option<u64>) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = length.map_or_else(ProgressBar::new_spinner, ProgressBar::new);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>4} {spinner} {elapsed:>4} {pos:>10} msgs {per_sec:>14} {wide_bar}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(label.to_owned());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
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

/// Sends `count` messages with 16 batches of 10 in flight.
async fn prefill<T: Target>(target: &T, body_size: usize, count: u64) -> anyhow::Result<()> {
    let producer = target.producer().await?;
    let bodies: Arc<[Bytes]> = vec![Bytes::from("x".repeat(body_size)); 10].into();
    let bar = progress(false, "fill", Some(count));
    let mut sent = 0;
    while sent < count {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let (producer, bodies) = (producer.clone(), Arc::clone(&bodies));
            calls.spawn(async move { producer.send(&bodies).await });
        }
        while let Some(result) = calls.join_next().await {
            sent += result??;
        }
        bar.set_position(sent);
    }
    bar.finish_and_clear();
    Ok(())
}

fn report(
    workload: &'static str,
    messages: u64,
    seconds: f64,
    request_latency: &Histogram<u64>,
    delivery_latency: Option<&Histogram<u64>>,
    server: &CpuMeter,
    errors: &Errors,
) -> anyhow::Result<Report> {
    Ok(Report {
        target: "",
        round: 0,
        workload,
        messages,
        seconds,
        messages_per_second: messages as f64 / seconds,
        request_latency: Latency::of(request_latency),
        delivery_latency: delivery_latency.map(Latency::of),
        server_cpu_us_per_message: server.per_message(messages)?,
        server_rss_mib: server.rss_mib()?,
        errors: errors.count.load(Ordering::Relaxed),
        first_error: errors
            .first
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone(),
    })
}

async fn produce<T: Target>(
    target: &T,
    settings: &Settings,
    server_pid: Option<u32>,
) -> anyhow::Result<Report> {
    let deadline = Instant::now() + settings.duration;
    let bar = progress(settings.quiet, "W1", None);
    let sent = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let bodies: Arc<[Bytes]> =
        vec![Bytes::from("x".repeat(settings.body_size)); settings.batch].into();
    let mut producers = Vec::with_capacity(settings.producers);
    for _ in 0..settings.producers {
        producers.push(target.producer().await?);
    }
    let cpu = CpuMeter::start(server_pid)?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for producer in producers {
        let (bodies, sent, errors, bar) = (
            Arc::clone(&bodies),
            Arc::clone(&sent),
            Arc::clone(&errors),
            bar.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut histogram = new_histogram();
            while Instant::now() < deadline {
                let began = Instant::now();
                match producer.send(&bodies).await {
                    Ok(stored) => {
                        errors.refused(bodies.len() as u64 - stored);
                        sent.fetch_add(stored, Ordering::Relaxed);
                        bar.inc(stored);
                        histogram.record(micros(began.elapsed())).ok();
                    }
                    Err(error) => errors.record(&error),
                }
            }
            histogram
        }));
    }
    finish_throughput("W1", tasks, started, &sent, &bar, &cpu, &errors).await
}

async fn consume<T: Target>(
    target: &T,
    settings: &Settings,
    backlog: u64,
    server_pid: Option<u32>,
) -> anyhow::Result<Report> {
    let bar = progress(settings.quiet, "W2", Some(backlog));
    let consumed = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let mut consumers = Vec::with_capacity(settings.consumers);
    for _ in 0..settings.consumers {
        consumers.push(target.consumer().await?);
    }
    let cpu = CpuMeter::start(server_pid)?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mut consumer in consumers {
        let (consumed, errors, bar) = (Arc::clone(&consumed), Arc::clone(&errors), bar.clone());
        tasks.push(tokio::spawn(async move {
            let mut histogram = new_histogram();
            while consumed.load(Ordering::Relaxed) < backlog {
                let began = Instant::now();
                match consumer.receive(Duration::from_secs(1)).await {
                    Ok(bodies) if bodies.is_empty() => break,
                    Ok(bodies) => {
                        let count = bodies.len() as u64;
                        consumed.fetch_add(count, Ordering::Relaxed);
                        bar.inc(count);
                        histogram.record(micros(began.elapsed())).ok();
                    }
                    Err(error) => errors.record(&error),
                }
            }
            histogram
        }));
    }
    finish_throughput("W2", tasks, started, &consumed, &bar, &cpu, &errors).await
}

/// Waits for a throughput workload's workers, merges their latency
/// histograms and reports the messages `done` counted since `started`.
async fn finish_throughput(
    workload: &'static str,
    workers: Vec<tokio::task::JoinHandle<Histogram<u64>>>,
    started: Instant,
    done: &AtomicU64,
    bar: &ProgressBar,
    cpu: &CpuMeter,
    errors: &Errors,
) -> anyhow::Result<Report> {
    let mut histogram = new_histogram();
    for worker in workers {
        histogram.add(worker.await?)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let messages = done.load(Ordering::Relaxed);
    report(workload, messages, seconds, &histogram, None, cpu, errors)
}

async fn latency<T: Target>(
    target: &T,
    settings: &Settings,
    server_pid: Option<u32>,
) -> anyhow::Result<Report> {
    let total = settings.rate * settings.duration.as_secs().max(1);
    let interval = Duration::from_secs_f64(1.0 / settings.rate as f64);
    let bar = progress(settings.quiet, "W3", Some(total));
    let errors = Arc::new(Errors::default());
    let acknowledged = Arc::new(Mutex::new(new_histogram()));
    let delivered = Arc::new(Mutex::new(new_histogram()));
    let received = Arc::new(AtomicU64::new(0));
    let sending_done = Arc::new(AtomicBool::new(false));
    let producer = target.producer().await?;
    let mut consumers = Vec::with_capacity(settings.consumers);
    for _ in 0..settings.consumers {
        consumers.push(target.consumer().await?);
    }
    let cpu = CpuMeter::start(server_pid)?;
    let origin = Instant::now();

    let mut consuming = Vec::new();
    for mut consumer in consumers {
        let (delivered, received, sending_done, errors) = (
            Arc::clone(&delivered),
            Arc::clone(&received),
            Arc::clone(&sending_done),
            Arc::clone(&errors),
        );
        consuming.push(tokio::spawn(async move {
            while received.load(Ordering::Relaxed) < total {
                match consumer.receive(Duration::from_secs(1)).await {
                    Ok(bodies) if bodies.is_empty() && sending_done.load(Ordering::Relaxed) => {
                        break;
                    }
                    Ok(bodies) => {
                        let now = origin.elapsed();
                        let mut histogram = delivered.lock().await;
                        for body in bodies {
                            if let Some(scheduled_us) = std::str::from_utf8(&body)
                                .ok()
                                .and_then(|text| text.split(':').next())
                                .and_then(|text| text.parse::<u64>().ok())
                            {
                                histogram
                                    .record(micros(now).saturating_sub(scheduled_us).max(1))
                                    .ok();
                                received.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Err(error) => errors.record(&error),
                }
            }
        }));
    }

    let padding = "x".repeat(settings.body_size.saturating_sub(21));
    // tokio's timer ticks in whole milliseconds, which would charge up to a
    // millisecond of client lateness to every message; an OS thread sleeping
    // with nanosleep keeps the schedule to tens of microseconds.
    let (ticks, mut due) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let scheduler = std::thread::spawn(move || {
        for index in 0..total {
            let scheduled = origin + interval * u32::try_from(index).unwrap_or(u32::MAX);
            let wait = scheduled.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
            if ticks.send(scheduled).is_err() {
                break;
            }
        }
    });
    let mut senders = tokio::task::JoinSet::new();
    while let Some(scheduled) = due.recv().await {
        let (producer, errors, acknowledged, bar) = (
            producer.clone(),
            Arc::clone(&errors),
            Arc::clone(&acknowledged),
            bar.clone(),
        );
        let body = Bytes::from(format!("{}:{padding}", micros(scheduled - origin)));
        senders.spawn(async move {
            match producer.send(&[body]).await {
                Ok(1) => {
                    acknowledged
                        .lock()
                        .await
                        .record(micros(scheduled.elapsed()))
                        .ok();
                    bar.inc(1);
                }
                Ok(_) => errors.refused(1),
                Err(error) => errors.record(&error),
            }
        });
    }
    if scheduler.join().is_err() {
        bail!("the W3 scheduler thread panicked");
    }
    while senders.join_next().await.is_some() {}
    sending_done.store(true, Ordering::Relaxed);
    for consumer in consuming {
        consumer.await?;
    }
    let seconds = origin.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let acknowledged = acknowledged.lock().await;
    let delivered = delivered.lock().await;
    report(
        "W3",
        acknowledged.len(),
        seconds,
        &acknowledged,
        Some(&delivered),
        &cpu,
        &errors,
    )
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

/// Medians per target: W1 and W2 throughput, W3 acknowledgement and
/// delivery p99.
#[derive(Debug, Default)]
struct Summary {
    w1: Option<f64>,
    w2: Option<f64>,
    w3_ack_p99_ms: Option<f64>,
    w3_delivery_p99_ms: Option<f64>,
}

fn summarize(reports: &[Report], target: &str) -> Summary {
    let of = |workload: &'static str| {
        reports
            .iter()
            .filter(move |r| r.target == target && r.workload == workload)
    };
    Summary {
        w1: median(of("W1").map(|r| r.messages_per_second).collect()),
        w2: median(of("W2").map(|r| r.messages_per_second).collect()),
        w3_ack_p99_ms: median(
            of("W3")
                .map(|r| r.request_latency.p99_us as f64 / 1_000.0)
                .collect(),
        ),
        w3_delivery_p99_ms: median(
            of("W3")
                .filter_map(|r| r.delivery_latency.as_ref())
                .map(|latency| latency.p99_us as f64 / 1_000.0)
                .collect(),
        ),
    }
}

fn durability(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Ackbox => {
            "as the server's --durability: fsync (group commit) before the acknowledgement by default"
        }
        #[cfg(feature = "bench-peers")]
        TargetKind::Rabbitmq => rabbitmq::DURABILITY,
        #[cfg(feature = "bench-peers")]
        TargetKind::Nats => nats::DURABILITY,
        #[cfg(not(feature = "bench-peers"))]
        TargetKind::Rabbitmq | TargetKind::Nats => "not measured: this build has no client for it",
        TargetKind::Postgres => postgres::DURABILITY,
    }
}

fn print_summary(
    targets: &[TargetKind],
    reports: &[Report],
    rounds: usize,
    backlog: u64,
    markdown: bool,
) {
    let summaries: BTreeMap<TargetKind, Summary> = targets
        .iter()
        .map(|&kind| (kind, summarize(reports, kind.name())))
        .collect();
    let ackbox = summaries.get(&TargetKind::Ackbox);
    let ratio = |ours: Option<f64>, theirs: Option<f64>| match (ours, theirs) {
        (Some(ours), Some(theirs)) if theirs > 0.0 => format!("{:.2}×", ours / theirs),
        _ => "–".to_owned(),
    };
    let rate = |value: Option<f64>| value.map_or("–".to_owned(), |value| format!("{value:.0}"));
    let millis =
        |value: Option<f64>| value.map_or("–".to_owned(), |value| format!("{value:.2} ms"));
    let header = [
        "target",
        "W1 msg/s",
        "W2 msg/s",
        "W3 ack p99",
        "W3 delivery p99",
        "ackbox ÷ W1",
        "ackbox ÷ W2",
        "durability",
    ];
    let rows: Vec<[String; 8]> = summaries
        .iter()
        .map(|(kind, summary)| {
            [
                kind.name().to_owned(),
                rate(summary.w1),
                rate(summary.w2),
                millis(summary.w3_ack_p99_ms),
                millis(summary.w3_delivery_p99_ms),
                ratio(ackbox.and_then(|a| a.w1), summary.w1),
                ratio(ackbox.and_then(|a| a.w2), summary.w2),
                durability(*kind).to_owned(),
            ]
        })
        .collect();
    if backlog > 0 {
        println!("\nmedians of {rounds} round(s), {backlog} messages queued beforehand:");
    } else {
        println!("\nmedians of {rounds} round(s):");
    }
    if markdown {
        println!("| {} |", header.join(" | "));
        println!("|{}", "---|".repeat(header.len()));
        for row in rows {
            println!("| {} |", row.join(" | "));
        }
    } else {
        println!(
            "{:<9} {:>10} {:>10} {:>11} {:>16} {:>12} {:>12}  {}",
            header[0], header[1], header[2], header[3], header[4], header[5], header[6], header[7]
        );
        for row in rows {
            println!(
                "{:<9} {:>10} {:>10} {:>11} {:>16} {:>12} {:>12}  {}",
                row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7]
            );
        }
    }
}
