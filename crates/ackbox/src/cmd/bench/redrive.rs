//! The redrive workload: does a message move task hold its rate limit?

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use super::ackbox::AckboxTarget;
use crate::api_client::ApiClient;

/// Fills a dead-letter queue with `5 s × rate` messages, redrives it at the
/// rate and reports the rate measured between the first and last progress
/// seen, and its ratio to the limit.
pub(super) async fn redrive(
    client: &ApiClient,
    rate: u64,
    body_size: usize,
    json_output: bool,
    queue: &str,
) -> anyhow::Result<()> {
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
    let source = AckboxTarget::open(client.clone(), source_url.clone());
    super::prefill(&source, body_size, total).await?;
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
    if json_output {
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
