//! The workloads themselves: W1 durable produce, W2 consume and acknowledge, W3 latency at a fixed rate, and the prefill W2 can start from.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use bytes::Bytes;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use tokio::sync::Mutex;

use super::Settings;
use super::report::{CpuMeter, Errors, Report, micros, new_histogram, report};
use super::target::{Consumer, Producer, Target};

pub(super) fn progress(hidden: bool, label: &str, length: Option<u64>) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = length.map_or_else(ProgressBar::new_spinner, ProgressBar::new);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>4} {spinner} {elapsed:>4} {pos:>10} msgs {rate:>12} {wide_bar}",
        )
        .map(|style| {
            // indicatif's own `per_sec` prints every digit of a fraction.
            style.with_key(
                "rate",
                |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                    let _ = std::fmt::Write::write_fmt(
                        out,
                        format_args!("{:.0} msg/s", state.per_sec()),
                    );
                },
            )
        })
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(label.to_owned());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Sends `count` messages with 16 batches of 10 in flight.
pub(super) async fn prefill<T: Target>(
    target: &T,
    body_size: usize,
    count: u64,
) -> anyhow::Result<()> {
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

pub(super) async fn produce<T: Target>(
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

pub(super) async fn consume<T: Target>(
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
pub(super) async fn finish_throughput(
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

pub(super) async fn latency<T: Target>(
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
    // The rate is the sends' own: the consumers' last long polls, which
    // end up to a second later, are not part of it.
    let seconds = origin.elapsed().as_secs_f64();
    sending_done.store(true, Ordering::Relaxed);
    for consumer in consuming {
        consumer.await?;
    }
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
