//! `ackbox bench`: a native load generator over the SQS HTTP API.
//!
//! - **W1 durable produce**: `-P` producers send `SendMessageBatch` of
//!   `--batch` bodies of `--body-size` bytes as fast as acknowledgements come.
//! - **W2 consume + delete**: `-C` consumers `ReceiveMessage` up to 10 and
//!   `DeleteMessageBatch` them until the backlog W1 left (or a prefill) is gone.
//! - **W3 latency at a fixed rate**: one scheduler sends single messages at
//!   `--rate` per second; latency is measured from each message's *scheduled*
//!   send time (so a stall is charged to every message it delays), both to the
//!   send acknowledgement and to its receipt by a consumer.
//!
//! With `--server-pid` the server's CPU time per message is reported too.
//! With `--fifo-groups N` every workload runs on a FIFO queue, its messages
//! spread round-robin over N message groups, each with a unique
//! deduplication id.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::api_client::{ApiClient, EndpointArgs};

/// Which workloads to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Workload {
    /// Durable produce.
    W1,
    /// Consume and delete.
    W2,
    /// Latency at a fixed rate.
    W3,
    /// W1, then W2 on W1's backlog, then W3.
    All,
    /// A message move task at `--redrive-rate`: does the measured rate hold the limit?
    Redrive,
}

/// Flags of `ackbox bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Workload to run.
    #[arg(long, value_enum, default_value_t = Workload::All)]
    workload: Workload,
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
    /// Messages per SendMessageBatch (1..=10).
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// W3 send rate, messages per second.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// Redrive workload: the move task's MaxNumberOfMessagesPerSecond.
    #[arg(long, default_value_t = 100)]
    redrive_rate: u64,
    /// Queue to use; a fresh `bench-<pid>-<time>` queue when absent.
    #[arg(long)]
    queue: Option<String>,
    /// The server's process id, to report its CPU time per message.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Use a FIFO queue with messages spread over this many message groups.
    #[arg(long)]
    fifo_groups: Option<u64>,
}

/// What the bench's messages look like: standard, or FIFO spread round-robin
/// over groups with a unique deduplication id each.
#[derive(Debug, Clone)]
struct Shape {
    fifo_groups: Option<u64>,
    /// The next message's number, shared by every sender so ids stay unique.
    next: Arc<AtomicU64>,
}

impl Shape {
    fn new(fifo_groups: Option<u64>) -> Self {
        Self {
            fifo_groups,
            next: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Adds a FIFO message's group and deduplication id to `entry`.
    fn mark(&self, entry: &mut Value) {
        if let Some(groups) = self.fifo_groups {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            entry["MessageGroupId"] = json!(format!("g{}", index % groups));
            entry["MessageDeduplicationId"] = json!(format!("m{index}"));
        }
    }

    /// A SendMessageBatch body. Standard messages never change, so callers
    /// may reuse one; FIFO ones need fresh deduplication ids every time.
    fn send_batch_body(&self, queue_url: &str, batch: usize, body: &str) -> Bytes {
        let entries: Vec<Value> = (0..batch)
            .map(|index| {
                let mut entry = json!({ "Id": index.to_string(), "MessageBody": body });
                self.mark(&mut entry);
                entry
            })
            .collect();
        Bytes::from(json!({ "QueueUrl": queue_url, "Entries": entries }).to_string())
    }

    /// A request for each call: the same one for standard queues.
    fn batch_requests(
        &self,
        queue_url: &str,
        batch: usize,
        body: &str,
    ) -> impl FnMut() -> Bytes + Send + 'static {
        let fixed = self
            .fifo_groups
            .is_none()
            .then(|| self.send_batch_body(queue_url, batch, body));
        let (shape, queue_url, body) = (self.clone(), queue_url.to_owned(), body.to_owned());
        move || {
            fixed
                .clone()
                .unwrap_or_else(|| shape.send_batch_body(&queue_url, batch, &body))
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
    errors: u64,
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

fn failed_entries(reply: &[u8]) -> u64 {
    serde_json::from_slice::<Value>(reply)
        .ok()
        .and_then(|value| value["Failed"].as_array().map(|failed| failed.len() as u64))
        .unwrap_or(0)
}

/// Runs the chosen workloads and prints their reports.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    if !(1..=10).contains(&args.batch) {
        bail!("--batch must be 1..=10; got {}", args.batch);
    }
    if args.producers == 0 || args.consumers == 0 || args.rate == 0 {
        bail!("-P, -C and --rate must be at least 1");
    }
    if args.fifo_groups == Some(0) {
        bail!("--fifo-groups must be at least 1");
    }
    if args.fifo_groups.is_some() && args.workload == Workload::Redrive {
        bail!("the redrive workload runs on standard queues; drop --fifo-groups");
    }
    let client = args.endpoint.client()?;
    let shape = Shape::new(args.fifo_groups);
    let queue = args.queue.clone().unwrap_or_else(|| {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or(0);
        let suffix = if args.fifo_groups.is_some() {
            ".fifo"
        } else {
            ""
        };
        format!("bench-{}-{stamp}{suffix}", std::process::id())
    });
    let mut attributes = json!({ "VisibilityTimeout": "60" });
    if args.fifo_groups.is_some() {
        attributes["FifoQueue"] = json!("true");
    }
    let reply = client
        .call(
            "CreateQueue",
            &json!({ "QueueName": queue, "Attributes": attributes }),
        )
        .await?;
    let queue_url = reply["QueueUrl"]
        .as_str()
        .context("CreateQueue returned no QueueUrl")?
        .to_owned();
    let body = "x".repeat(args.body_size);
    let mut reports = Vec::new();

    let runs_w1 = matches!(args.workload, Workload::W1 | Workload::All);
    if runs_w1 {
        reports.push(produce(&client, &args, &shape, &queue_url, &body).await?);
    }
    if matches!(args.workload, Workload::W2 | Workload::All) {
        let backlog = if runs_w1 {
            reports[0].messages
        } else {
            prefill(&client, &shape, &queue_url, &body, args.prefill).await?;
            args.prefill
        };
        reports.push(consume(&client, &args, &queue_url, backlog).await?);
    }
    if matches!(args.workload, Workload::W3 | Workload::All) {
        reports.push(latency(&client, &args, &shape, &queue_url).await?);
    }
    if args.workload == Workload::Redrive {
        redrive(&client, &args, &queue).await?;
        return Ok(());
    }

    if args.endpoint.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "queue": queue, "reports": reports }))?
        );
    } else {
        for report in &reports {
            println!(
                "{:<3} {:>9} msgs in {:>6.2}s = {:>9.0} msg/s | p50 {:>6}µs p99 {:>6}µs max {:>7}µs{}{}{}",
                report.workload,
                report.messages,
                report.seconds,
                report.messages_per_second,
                report.request_latency.p50_us,
                report.request_latency.p99_us,
                report.request_latency.max_us,
                report
                    .delivery_latency
                    .as_ref()
                    .map_or(String::new(), |delivery| format!(
                        " | delivery p50 {}µs p99 {}µs max {}µs",
                        delivery.p50_us, delivery.p99_us, delivery.max_us
                    )),
                report
                    .server_cpu_us_per_message
                    .map_or(String::new(), |cpu| format!(
                        " | server {cpu:.1} µs CPU/msg"
                    )),
                if report.errors > 0 {
                    format!(" | {} errors", report.errors)
                } else {
                    String::new()
                },
            );
        }
    }
    Ok(())
}

async fn prefill(
    client: &ApiClient,
    shape: &Shape,
    queue_url: &str,
    body: &str,
    count: u64,
) -> anyhow::Result<()> {
    let mut requests = shape.batch_requests(queue_url, 10, body);
    let bar = progress(false, "fill", Some(count));
    let mut sent = 0;
    while sent < count {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let (client, request) = (client.clone(), requests());
            calls.spawn(async move { client.call_raw("SendMessageBatch", request).await });
        }
        while let Some(result) = calls.join_next().await {
            let (status, _) = result??;
            if !status.is_success() {
                bail!("prefill SendMessageBatch answered {status}");
            }
            sent += 10;
        }
        bar.set_position(sent);
    }
    bar.finish_and_clear();
    Ok(())
}

async fn produce(
    client: &ApiClient,
    args: &Args,
    shape: &Shape,
    queue_url: &str,
    body: &str,
) -> anyhow::Result<Report> {
    let deadline = Instant::now() + Duration::from_secs(args.duration);
    let bar = progress(args.endpoint.json, "W1", None);
    let sent = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let cpu = CpuMeter::start(args.server_pid)?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.producers {
        let (client, mut requests, sent, errors, bar) = (
            client.clone(),
            shape.batch_requests(queue_url, args.batch, body),
            Arc::clone(&sent),
            Arc::clone(&errors),
            bar.clone(),
        );
        let batch = args.batch as u64;
        tasks.push(tokio::spawn(async move {
            let mut histogram = new_histogram();
            while Instant::now() < deadline {
                let began = Instant::now();
                match client.call_raw("SendMessageBatch", requests()).await {
                    Ok((status, reply)) if status.is_success() => {
                        let failed = failed_entries(&reply);
                        errors.fetch_add(failed, Ordering::Relaxed);
                        sent.fetch_add(batch - failed, Ordering::Relaxed);
                        bar.inc(batch - failed);
                        histogram.record(micros(began.elapsed())).ok();
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            histogram
        }));
    }
    let mut histogram = new_histogram();
    for task in tasks {
        histogram.add(task.await?)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let messages = sent.load(Ordering::Relaxed);
    Ok(Report {
        workload: "W1",
        messages,
        seconds,
        messages_per_second: messages as f64 / seconds,
        request_latency: Latency::of(&histogram),
        delivery_latency: None,
        server_cpu_us_per_message: cpu.per_message(messages)?,
        errors: errors.load(Ordering::Relaxed),
    })
}

/// Receives up to 10 and deletes them; returns how many were deleted.
async fn receive_and_delete(
    client: &ApiClient,
    queue_url: &str,
    wait_seconds: u32,
) -> anyhow::Result<(u64, Vec<String>)> {
    let request = json!({ "QueueUrl": queue_url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": wait_seconds });
    let (status, reply) = client
        .call_raw("ReceiveMessage", Bytes::from(request.to_string()))
        .await?;
    if !status.is_success() {
        bail!("ReceiveMessage answered {status}");
    }
    let reply: Value = serde_json::from_slice(&reply)?;
    let messages = reply["Messages"].as_array().cloned().unwrap_or_default();
    if messages.is_empty() {
        return Ok((0, Vec::new()));
    }
    let entries: Vec<Value> = messages
        .iter()
        .enumerate()
        .map(|(index, message)| json!({ "Id": index.to_string(), "ReceiptHandle": message["ReceiptHandle"] }))
        .collect();
    let bodies = messages
        .iter()
        .filter_map(|message| message["Body"].as_str().map(str::to_owned))
        .collect();
    let request = json!({ "QueueUrl": queue_url, "Entries": entries });
    let (status, reply) = client
        .call_raw("DeleteMessageBatch", Bytes::from(request.to_string()))
        .await?;
    if !status.is_success() {
        bail!("DeleteMessageBatch answered {status}");
    }
    Ok((entries.len() as u64 - failed_entries(&reply), bodies))
}

async fn consume(
    client: &ApiClient,
    args: &Args,
    queue_url: &str,
    backlog: u64,
) -> anyhow::Result<Report> {
    let bar = progress(args.endpoint.json, "W2", Some(backlog));
    let consumed = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let cpu = CpuMeter::start(args.server_pid)?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.consumers {
        let (client, queue_url, consumed, errors, bar) = (
            client.clone(),
            queue_url.to_owned(),
            Arc::clone(&consumed),
            Arc::clone(&errors),
            bar.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut histogram = new_histogram();
            while consumed.load(Ordering::Relaxed) < backlog {
                let began = Instant::now();
                match receive_and_delete(&client, &queue_url, 1).await {
                    Ok((0, _)) => break,
                    Ok((deleted, _)) => {
                        consumed.fetch_add(deleted, Ordering::Relaxed);
                        bar.inc(deleted);
                        histogram.record(micros(began.elapsed())).ok();
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            histogram
        }));
    }
    let mut histogram = new_histogram();
    for task in tasks {
        histogram.add(task.await?)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let messages = consumed.load(Ordering::Relaxed);
    Ok(Report {
        workload: "W2",
        messages,
        seconds,
        messages_per_second: messages as f64 / seconds,
        request_latency: Latency::of(&histogram),
        delivery_latency: None,
        server_cpu_us_per_message: cpu.per_message(messages)?,
        errors: errors.load(Ordering::Relaxed),
    })
}

async fn latency(
    client: &ApiClient,
    args: &Args,
    shape: &Shape,
    queue_url: &str,
) -> anyhow::Result<Report> {
    let total = args.rate * args.duration;
    let interval = Duration::from_secs_f64(1.0 / args.rate as f64);
    let bar = progress(args.endpoint.json, "W3", Some(total));
    let errors = Arc::new(AtomicU64::new(0));
    let acknowledged = Arc::new(Mutex::new(new_histogram()));
    let delivered = Arc::new(Mutex::new(new_histogram()));
    let received = Arc::new(AtomicU64::new(0));
    let sending_done = Arc::new(AtomicBool::new(false));
    let cpu = CpuMeter::start(args.server_pid)?;
    let origin = Instant::now();

    let mut consumers = Vec::new();
    for _ in 0..args.consumers {
        let (client, queue_url, delivered, received, sending_done, errors) = (
            client.clone(),
            queue_url.to_owned(),
            Arc::clone(&delivered),
            Arc::clone(&received),
            Arc::clone(&sending_done),
            Arc::clone(&errors),
        );
        consumers.push(tokio::spawn(async move {
            while received.load(Ordering::Relaxed) < total {
                match receive_and_delete(&client, &queue_url, 1).await {
                    Ok((0, _)) if sending_done.load(Ordering::Relaxed) => break,
                    Ok((_, bodies)) => {
                        let now = origin.elapsed();
                        let mut histogram = delivered.lock().await;
                        for body in bodies {
                            if let Some(scheduled_us) = body
                                .split(':')
                                .next()
                                .and_then(|text| text.parse::<u64>().ok())
                            {
                                histogram
                                    .record(micros(now).saturating_sub(scheduled_us).max(1))
                                    .ok();
                                received.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    let padding = "x".repeat(args.body_size.saturating_sub(21));
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
        let (client, errors, acknowledged, bar) = (
            client.clone(),
            Arc::clone(&errors),
            Arc::clone(&acknowledged),
            bar.clone(),
        );
        let body = format!("{}:{padding}", micros(scheduled - origin));
        let mut request = json!({ "QueueUrl": queue_url, "MessageBody": body });
        shape.mark(&mut request);
        let request = Bytes::from(request.to_string());
        senders.spawn(async move {
            match client.call_raw("SendMessage", request).await {
                Ok((status, _)) if status.is_success() => {
                    acknowledged
                        .lock()
                        .await
                        .record(micros(scheduled.elapsed()))
                        .ok();
                    bar.inc(1);
                }
                _ => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    if scheduler.join().is_err() {
        bail!("the W3 scheduler thread panicked");
    }
    while senders.join_next().await.is_some() {}
    sending_done.store(true, Ordering::Relaxed);
    for consumer in consumers {
        consumer.await?;
    }
    let seconds = origin.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let acknowledged = acknowledged.lock().await;
    let delivered = delivered.lock().await;
    let messages = acknowledged.len();
    Ok(Report {
        workload: "W3",
        messages,
        seconds,
        messages_per_second: messages as f64 / seconds,
        request_latency: Latency::of(&acknowledged),
        delivery_latency: Some(Latency::of(&delivered)),
        server_cpu_us_per_message: cpu.per_message(messages)?,
        errors: errors.load(Ordering::Relaxed),
    })
}

/// Fills a dead-letter queue with `5 s × rate` messages, redrives it at the
/// rate and reports the rate measured between the first and last progress
/// seen, and its ratio to the limit.
async fn redrive(client: &ApiClient, args: &Args, queue: &str) -> anyhow::Result<()> {
    let rate = args.redrive_rate;
    if !(1..=500).contains(&rate) {
        bail!("--redrive-rate must be 1..=500; got {rate}");
    }
    let total = rate * 5;
    let dlq_name = format!("{queue}-dlq");
    let dlq_url = client
        .call("CreateQueue", &json!({ "QueueName": dlq_name }))
        .await?["QueueUrl"]
        .as_str()
        .context("CreateQueue returned no QueueUrl")?
        .to_owned();
    let dlq_arn = client
        .call(
            "GetQueueAttributes",
            &json!({ "QueueUrl": dlq_url, "AttributeNames": ["QueueArn"] }),
        )
        .await?["Attributes"]["QueueArn"]
        .as_str()
        .context("no QueueArn")?
        .to_owned();
    let source_url = client
        .call(
            "CreateQueue",
            &json!({ "QueueName": format!("{queue}-src"), "Attributes": {
                "RedrivePolicy": json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1 }).to_string()
            } }),
        )
        .await?["QueueUrl"]
        .as_str()
        .context("CreateQueue returned no QueueUrl")?
        .to_owned();
    prefill(
        client,
        &Shape::new(None),
        &source_url,
        &"x".repeat(args.body_size),
        total,
    )
    .await?;
    // The first receive uses the one allowed receive (lease 0 s); the next moves.
    loop {
        let depth: u64 = client
            .call(
                "GetQueueAttributes",
                &json!({ "QueueUrl": dlq_url, "AttributeNames": ["ApproximateNumberOfMessages"] }),
            )
            .await?["Attributes"]["ApproximateNumberOfMessages"]
            .as_str()
            .and_then(|count| count.parse().ok())
            .unwrap_or(0);
        if depth >= total {
            break;
        }
        client
            .call("ReceiveMessage", &json!({ "QueueUrl": source_url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 0 }))
            .await?;
    }
    client
        .call(
            "StartMessageMoveTask",
            &json!({ "SourceArn": dlq_arn, "MaxNumberOfMessagesPerSecond": rate }),
        )
        .await?;
    let started = Instant::now();
    let mut first: Option<(Instant, i64)> = None;
    let mut last = (started, 0i64);
    let deadline = started + Duration::from_secs(60);
    let status = loop {
        let task = client
            .call("ListMessageMoveTasks", &json!({ "SourceArn": dlq_arn }))
            .await?["Results"][0]
            .clone();
        let moved = task["ApproximateNumberOfMessagesMoved"]
            .as_i64()
            .unwrap_or(0);
        let now = Instant::now();
        if moved > 0 && first.is_none() {
            first = Some((now, moved));
        }
        if moved > last.1 {
            last = (now, moved);
        }
        let status = task["Status"].as_str().unwrap_or("?").to_owned();
        if status != "RUNNING" || now > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (first_at, first_moved) = first.unwrap_or((started, 0));
    let seconds = last.0.duration_since(first_at).as_secs_f64();
    let measured = if seconds > 0.0 {
        (last.1 - first_moved) as f64 / seconds
    } else {
        0.0
    };
    let ratio = measured / rate as f64;
    let report = json!({
        "workload": "redrive",
        "status": status,
        "messages": last.1,
        "limit_per_second": rate,
        "measured_per_second": measured,
        "ratio": ratio,
        "within_20_percent": (0.8..=1.2).contains(&ratio),
    });
    if args.endpoint.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "redrive {} msgs {status}: limit {rate}/s, measured {measured:.1}/s (ratio {ratio:.2}{})",
            last.1,
            if (0.8..=1.2).contains(&ratio) {
                ", within ±20%"
            } else {
                ", OUTSIDE ±20%"
            }
        );
    }
    Ok(())
}
