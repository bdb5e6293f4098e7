//! What one workload measured: throughput, latency percentiles, failed calls and, given the server's pid, its CPU time per message and resident memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency percentiles in microseconds.
#[derive(Debug, Serialize)]
pub(super) struct Latency {
    p50_us: u64,
    pub(super) p99_us: u64,
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
pub(super) struct Report {
    pub(super) target: &'static str,
    pub(super) round: usize,
    pub(super) workload: &'static str,
    pub(super) messages: u64,
    pub(super) seconds: f64,
    pub(super) messages_per_second: f64,
    /// Per request (W1, W2) or per message from its scheduled time to its acknowledgement (W3).
    pub(super) request_latency: Latency,
    /// W3 only: scheduled send time to receipt by a consumer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) delivery_latency: Option<Latency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) server_cpu_us_per_message: Option<f64>,
    /// The server's resident memory when the workload ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) server_rss_mib: Option<f64>,
    pub(super) errors: u64,
    /// What the first failed call said, so a run with errors says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) first_error: Option<String>,
}

impl Report {
    pub(super) fn print(&self) {
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
pub(super) struct Errors {
    count: AtomicU64,
    first: std::sync::Mutex<Option<String>>,
}

impl Errors {
    pub(super) fn record(&self, error: &anyhow::Error) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut first = self
            .first
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        first.get_or_insert_with(|| format!("{error:#}"));
    }

    /// Messages a call did not store, without an error of their own.
    pub(super) fn refused(&self, messages: u64) {
        if messages > 0 {
            self.record(&anyhow::anyhow!(
                "{messages} messages of a batch were refused"
            ));
        }
    }
}

pub(super) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("static histogram bounds are valid")
}

pub(super) fn micros(duration: Duration) -> u64 {
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

pub(super) struct CpuMeter {
    pid: Option<u32>,
    start_us: u64,
}

impl CpuMeter {
    pub(super) fn start(pid: Option<u32>) -> anyhow::Result<Self> {
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

pub(super) fn report(
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
