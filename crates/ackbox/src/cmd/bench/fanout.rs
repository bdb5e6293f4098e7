//! The fan-out workload: PublishBatch to a topic with 1, 5, 20 … raw
//! subscribed queues, beside SendMessageBatch to one queue in the same
//! shape (the same producers, batch and body), rounds interleaved, so each
//! publish rate reads as a ratio of the plain send's in the same run.
//!
//! A publish stores one copy per subscribed queue in one transaction, so
//! its rate falls as subscribers grow while the copies stored per second
//! (`deliveries`) rise; both are reported. SNS actions go over AWS JSON 1.0
//! (`SNS_20100331.PublishBatch`), which ackbox answers as it answers
//! SNS's query protocol. With `--archive` each count also runs with the
//! topic keeping an archive, which is one more copy per publish, and the
//! plain send also runs to a queue keeping one (`AckBoxArchivePolicy`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use super::report::{CpuMeter, Errors, Report, micros, new_histogram, report};
use crate::api_client::ApiClient;

/// The archive a measured topic or queue keeps.
const ONE_DAY_ARCHIVE: &str = r#"{"MessageRetentionPeriod":"1"}"#;

/// One fan-out run's settings.
#[derive(Debug, Clone)]
pub(super) struct Fanout {
    pub(super) subscribers: Vec<usize>,
    pub(super) archive: bool,
    pub(super) producers: usize,
    pub(super) batch: usize,
    pub(super) body_size: usize,
    pub(super) duration: Duration,
    pub(super) rounds: usize,
    pub(super) server_pid: Option<u32>,
    pub(super) name: String,
}

/// What one measurement runs: the plain send, or a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Send { archived: bool },
    Publish { subscribers: usize, archived: bool },
}

/// What one fan-out measurement gives beside its report.
struct Measured {
    report: Report,
    shape: Shape,
}

/// Runs every subscriber count and the plain send in every round, in
/// turns that start one later each round; prints each result.
pub(super) async fn fanout(client: &ApiClient, settings: &Fanout) -> anyhow::Result<()> {
    let mut results: Vec<Measured> = Vec::new();
    let archived: &[bool] = if settings.archive {
        &[false, true]
    } else {
        &[false]
    };
    let shapes: Vec<Shape> = archived
        .iter()
        .map(|&archived| Shape::Send { archived })
        .chain(settings.subscribers.iter().flat_map(|&subscribers| {
            archived.iter().map(move |&archived| Shape::Publish {
                subscribers,
                archived,
            })
        }))
        .collect();
    for round in 0..settings.rounds {
        for offset in 0..shapes.len() {
            let shape = shapes[(round + offset) % shapes.len()];
            let measured = match shape {
                Shape::Send { archived } => {
                    let label = format!(
                        "{}-r{round}-0{}",
                        settings.name,
                        if archived { "a" } else { "" }
                    );
                    send_round(client, settings, &label, archived).await?
                }
                Shape::Publish {
                    subscribers,
                    archived,
                } => {
                    let label = format!(
                        "{}-r{round}-{subscribers}{}",
                        settings.name,
                        if archived { "a" } else { "" }
                    );
                    publish_round(client, settings, &label, subscribers, archived).await?
                }
            };
            print(&measured, round);
            results.push(measured);
        }
    }
    summarize(&results);
    Ok(())
}

fn archive_note(archived: bool) -> &'static str {
    if archived { " + archive" } else { "" }
}

fn print(measured: &Measured, round: usize) {
    let what = match measured.shape {
        Shape::Send { archived } => {
            format!("SendMessageBatch to one queue{}", archive_note(archived))
        }
        Shape::Publish {
            subscribers,
            archived,
        } => format!(
            "PublishBatch to {subscribers} queue(s){} = {:.0} copies/s",
            archive_note(archived),
            measured.report.messages_per_second * subscribers as f64
        ),
    };
    println!("round {round}: {what}");
    measured.report.print();
}

/// Each subscriber count's median publish rate as a ratio of the median send rate.
fn summarize(results: &[Measured]) {
    let median = |shape: Shape| {
        let mut rates: Vec<f64> = results
            .iter()
            .filter(|result| result.shape == shape)
            .map(|result| result.report.messages_per_second)
            .collect();
        rates.sort_by(f64::total_cmp);
        rates.get(rates.len() / 2).copied().unwrap_or(0.0)
    };
    let send = median(Shape::Send { archived: false });
    let mut shapes: Vec<(usize, bool)> = results
        .iter()
        .filter_map(|result| match result.shape {
            Shape::Send { .. } => None,
            Shape::Publish {
                subscribers,
                archived,
            } => Some((subscribers, archived)),
        })
        .collect();
    shapes.sort_unstable();
    shapes.dedup();
    println!("median send {send:.0} msg/s");
    if results
        .iter()
        .any(|result| result.shape == Shape::Send { archived: true })
    {
        let archived = median(Shape::Send { archived: true });
        println!(
            "median send to a queue keeping an archive: {archived:.0} msg/s = {:.2}× send",
            if send > 0.0 { archived / send } else { 0.0 }
        );
    }
    for (subscribers, archived) in shapes {
        let publish = median(Shape::Publish {
            subscribers,
            archived,
        });
        println!(
            "median publish to {subscribers:>3} queue(s){:<10}: {publish:>7.0} msg/s = {:.2}× send, {:>8.0} copies/s",
            archive_note(archived),
            if send > 0.0 { publish / send } else { 0.0 },
            publish * subscribers as f64
        );
    }
}

async fn create_queue(client: &ApiClient, name: &str) -> anyhow::Result<String> {
    create_queue_with(client, name, &json!({})).await
}

async fn create_queue_with(
    client: &ApiClient,
    name: &str,
    attributes: &Value,
) -> anyhow::Result<String> {
    client
        .call(
            "CreateQueue",
            &json!({ "QueueName": name, "Attributes": attributes }),
        )
        .await?["QueueUrl"]
        .as_str()
        .map(str::to_owned)
        .context("CreateQueue returned no QueueUrl")
}

async fn delete_queue(client: &ApiClient, url: &str) {
    // Best effort: a bench leaves nothing behind when it can.
    let _ = client
        .call("DeleteQueue", &json!({ "QueueUrl": url }))
        .await;
}

fn body(size: usize, index: usize) -> String {
    let mut body = format!("{index:08}-");
    body.extend(std::iter::repeat_n('x', size.saturating_sub(body.len())));
    body
}

/// The plain send: SendMessageBatch to one queue, the fan-out's baseline
/// (to a queue keeping an archive if `archived`).
async fn send_round(
    client: &ApiClient,
    settings: &Fanout,
    label: &str,
    archived: bool,
) -> anyhow::Result<Measured> {
    let attributes = if archived {
        json!({ "AckBoxArchivePolicy": ONE_DAY_ARCHIVE })
    } else {
        json!({})
    };
    let url = create_queue_with(client, label, &attributes).await?;
    let (batch, size, queue_url) = (settings.batch, settings.body_size, url.clone());
    let measured = drive(settings, Shape::Send { archived }, move |index| {
        let entries: Vec<Value> = (0..batch)
            .map(|entry| json!({ "Id": entry.to_string(), "MessageBody": body(size, index + entry) }))
            .collect();
        (
            "SendMessageBatch",
            json!({ "QueueUrl": queue_url, "Entries": entries }),
        )
    }, client)
    .await;
    delete_queue(client, &url).await;
    measured
}

/// PublishBatch to a topic with `subscribers` raw subscribed queues,
/// keeping an archive if `archived`.
async fn publish_round(
    client: &ApiClient,
    settings: &Fanout,
    label: &str,
    subscribers: usize,
    archived: bool,
) -> anyhow::Result<Measured> {
    let mut create = json!({ "Name": label });
    if archived {
        create["Attributes"] = json!({ "ArchivePolicy": ONE_DAY_ARCHIVE });
    }
    let topic = client.call("SNS_20100331.CreateTopic", &create).await?["TopicArn"]
        .as_str()
        .context("CreateTopic returned no TopicArn")?
        .to_owned();
    let realm = topic
        .strip_prefix("arn:aws:sns:")
        .and_then(|rest| rest.rsplit_once(':'))
        .map(|(realm, _)| realm.to_owned())
        .context("a topic ARN names its region and account")?;
    let mut urls = Vec::with_capacity(subscribers);
    for index in 0..subscribers {
        let queue = format!("{label}-{index}");
        urls.push(create_queue(client, &queue).await?);
        client
            .call(
                "SNS_20100331.Subscribe",
                &json!({
                    "TopicArn": topic,
                    "Protocol": "sqs",
                    "Endpoint": format!("arn:aws:sqs:{realm}:{queue}"),
                    "Attributes": { "RawMessageDelivery": "true" },
                }),
            )
            .await?;
    }
    let (batch, size, topic_arn) = (settings.batch, settings.body_size, topic.clone());
    let measured = drive(
        settings,
        Shape::Publish {
            subscribers,
            archived,
        },
        move |index| {
            let entries: Vec<Value> = (0..batch)
            .map(|entry| json!({ "Id": entry.to_string(), "Message": body(size, index + entry) }))
            .collect();
            (
                "SNS_20100331.PublishBatch",
                json!({ "TopicArn": topic_arn, "PublishBatchRequestEntries": entries }),
            )
        },
        client,
    )
    .await;
    let _ = client
        .call("SNS_20100331.DeleteTopic", &json!({ "TopicArn": topic }))
        .await;
    for url in &urls {
        delete_queue(client, url).await;
    }
    measured
}

/// `settings.producers` loops of `request` for the duration.
async fn drive(
    settings: &Fanout,
    shape: Shape,
    request: impl Fn(usize) -> (&'static str, Value) + Send + Sync + 'static,
    client: &ApiClient,
) -> anyhow::Result<Measured> {
    let request = Arc::new(request);
    let stored = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let cpu = CpuMeter::start(settings.server_pid)?;
    let started = Instant::now();
    let deadline = started + settings.duration;
    let mut producers = Vec::with_capacity(settings.producers);
    for producer in 0..settings.producers {
        let (client, request, stored, errors) = (
            client.clone(),
            Arc::clone(&request),
            Arc::clone(&stored),
            Arc::clone(&errors),
        );
        let batch = settings.batch;
        producers.push(tokio::spawn(async move {
            let mut latency = new_histogram();
            let mut index = producer * 1_000_000_000;
            while Instant::now() < deadline {
                let (action, body) = request(index);
                index += batch;
                let sent = Instant::now();
                match client.call(action, &body).await {
                    Ok(reply) => {
                        let _ = latency.record(micros(sent.elapsed()));
                        let done = reply["Successful"].as_array().map_or(0, Vec::len);
                        stored.fetch_add(done as u64, Ordering::Relaxed);
                    }
                    Err(error) => errors.record(&error),
                }
            }
            latency
        }));
    }
    let mut latency = new_histogram();
    for producer in producers {
        latency.add(producer.await?)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut report = report(
        if matches!(shape, Shape::Send { .. }) {
            "send"
        } else {
            "publish"
        },
        stored.load(Ordering::Relaxed),
        seconds,
        &latency,
        None,
        &cpu,
        &errors,
    )?;
    report.target = "ackbox";
    Ok(Measured { report, shape })
}
