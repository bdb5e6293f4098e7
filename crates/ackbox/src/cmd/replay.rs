//! `ackbox replay start|list|cancel`: deliver a topic's archived publishes
//! (into a queue or to one of its subscriptions) or a queue's archived
//! sends (into a queue) again.

use std::time::Duration;

use ackbox_core::clock::{Clock, SystemClock};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::api_client::{ApiClient, EndpointArgs};
use crate::cmd::queue::{print, shown_time};
use crate::cmd::redrive::{ended_well, queue_arn};

/// Flags of `ackbox replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    endpoint: EndpointArgs,
    #[command(subcommand)]
    command: ReplayCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ReplayCommand {
    /// Deliver a topic's or a queue's archived messages from a time range again.
    Start {
        #[command(flatten)]
        source: Source,
        /// Into this queue (name)…
        #[arg(
            long,
            conflicts_with = "subscription",
            required_unless_present = "subscription"
        )]
        to: Option<String>,
        /// …or to this subscription of the topic (ARN), as it takes publishes.
        #[arg(long)]
        subscription: Option<String>,
        /// From: an RFC 3339 time, or an age (`90s`, `30m`, `2h`, `1d` ago).
        #[arg(long, value_parser = parse_point)]
        from: Point,
        /// Until: as --from; now when absent.
        #[arg(long, value_parser = parse_point)]
        until: Option<Point>,
        /// Only publishes whose attributes this SNS filter policy (JSON) lets through.
        #[arg(long, conflicts_with = "subscription")]
        filter: Option<String>,
        /// Deliver the messages alone, not in SNS's envelope.
        #[arg(long, conflicts_with = "subscription")]
        raw: bool,
        /// Messages per second (1..=500).
        #[arg(long)]
        rate: Option<i64>,
        /// Return once the replay has started instead of following it.
        #[arg(long)]
        detach: bool,
    },
    /// The replay audit log: running replays and the latest ended ones.
    List {
        /// Only the replays of this topic's archive (name or ARN)…
        #[arg(long, conflicts_with = "queue")]
        topic: Option<String>,
        /// …or of this queue's.
        #[arg(long)]
        queue: Option<String>,
    },
    /// Stop a running replay; what it delivered stays delivered.
    Cancel {
        #[command(flatten)]
        source: Source,
        /// The handle `replay start` printed.
        handle: String,
    },
}

/// The archive a replay reads: a topic's or a queue's.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
struct Source {
    /// A topic (name or ARN) with an ArchivePolicy.
    #[arg(long)]
    topic: Option<String>,
    /// A queue (name) with an AckBoxArchivePolicy.
    #[arg(long)]
    queue: Option<String>,
}

impl Source {
    async fn arn(&self, client: &ApiClient) -> anyhow::Result<String> {
        match (&self.topic, &self.queue) {
            (Some(topic), _) => topic_arn(client, topic).await,
            (None, Some(queue)) => queue_arn(client, queue).await,
            (None, None) => anyhow::bail!("name a topic (--topic) or a queue (--queue)"),
        }
    }
}

/// A time given on the command line: absolute, or an age before now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    At(i64),
    Ago(u32),
}

impl Point {
    fn epoch_millis(self, now: i64) -> i64 {
        match self {
            Self::At(millis) => millis,
            Self::Ago(seconds) => now - i64::from(seconds) * 1_000,
        }
    }
}

fn parse_point(text: &str) -> Result<Point, String> {
    if let Some(millis) = ackbox_core::utc::parse_rfc3339(text) {
        return Ok(Point::At(millis));
    }
    ackbox_core::utc::parse_age(text)
        .map(Point::Ago)
        .map_err(|_| {
            format!(
                "expected an RFC 3339 time (2026-12-07T10:00:00Z) or an age (30m, 2h); got {text:?}"
            )
        })
}

/// The ARN of topic `topic` (a name, or already an ARN).
async fn topic_arn(client: &ApiClient, topic: &str) -> anyhow::Result<String> {
    if topic.starts_with("arn:") {
        return Ok(topic.to_owned());
    }
    let suffix = format!(":{topic}");
    let mut next_token: Option<String> = None;
    loop {
        let mut request = json!({});
        if let Some(token) = &next_token {
            request["NextToken"] = json!(token);
        }
        let reply = client.call("SNS_20100331.ListTopics", &request).await?;
        if let Some(arn) = reply["Topics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| entry["TopicArn"].as_str())
            .find(|arn| arn.ends_with(&suffix))
        {
            return Ok(arn.to_owned());
        }
        match reply["NextToken"].as_str() {
            Some(token) => next_token = Some(token.to_owned()),
            None => anyhow::bail!("no topic is named {topic:?}"),
        }
    }
}

fn describe(replay: &Value) -> String {
    format!(
        "{:<10} replayed {} (skipped {})  {} .. {} -> {}  started {} by {}{}{}",
        replay["Status"].as_str().unwrap_or("?"),
        replay["ApproximateNumberOfMessagesReplayed"],
        replay["ApproximateNumberOfMessagesSkipped"],
        shown_time(&replay["StartTimestamp"]),
        shown_time(&replay["EndTimestamp"]),
        replay["DestinationArn"].as_str().unwrap_or("?"),
        shown_time(&replay["StartedTimestamp"]),
        replay["RequestedBy"].as_str().unwrap_or("?"),
        if replay["Status"] == "RUNNING" {
            format!(
                "  handle {}",
                replay["TaskHandle"].as_str().unwrap_or_default()
            )
        } else {
            String::new()
        },
        replay["FailureReason"]
            .as_str()
            .map_or(String::new(), |reason| format!("\n    failure: {reason}")),
    )
}

/// Follows replay `handle` until it ends; completed is success.
async fn follow(
    client: &ApiClient,
    source_arn: &str,
    handle: &str,
    json_output: bool,
) -> anyhow::Result<()> {
    let bar = if json_output {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed:>4} {pos:>8} replayed")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let replay = loop {
        let reply = client
            .call("AckBox.ListReplays", &json!({ "SourceArn": source_arn }))
            .await?;
        let replay = reply["Replays"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|replay| replay["TaskHandle"] == handle)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("replay {handle} is no longer listed"))?;
        bar.set_position(
            replay["ApproximateNumberOfMessagesReplayed"]
                .as_u64()
                .unwrap_or(0),
        );
        if replay["Status"] != "RUNNING" {
            break replay;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    bar.finish_and_clear();
    print(json_output, &replay, || describe(&replay))?;
    ended_well(&replay, "replay", &["COMPLETED"])
}

/// Runs `ackbox replay …`.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.endpoint.client()?;
    let json_output = args.endpoint.json;
    match args.command {
        ReplayCommand::Start {
            source,
            to,
            subscription,
            from,
            until,
            filter,
            raw,
            rate,
            detach,
        } => {
            let source_arn = source.arn(&client).await?;
            let destination = match (to, subscription) {
                (Some(queue), _) => queue_arn(&client, &queue).await?,
                (None, Some(subscription)) => subscription,
                (None, None) => anyhow::bail!("name a queue (--to) or a subscription"),
            };
            let now = SystemClock.now();
            let mut request = json!({
                "SourceArn": source_arn,
                "DestinationArn": destination,
                "StartTimestamp": from.epoch_millis(now),
                "RawMessageDelivery": raw,
            });
            if let Some(until) = until {
                request["EndTimestamp"] = json!(until.epoch_millis(now));
            }
            if let Some(filter) = filter {
                request["FilterPolicy"] = json!(filter);
            }
            if let Some(rate) = rate {
                request["MaxNumberOfMessagesPerSecond"] = json!(rate);
            }
            let started = client.call("AckBox.StartReplay", &request).await?;
            let handle = started["Replay"]["TaskHandle"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if detach {
                print(json_output, &started, || handle.clone())?;
                return Ok(());
            }
            follow(&client, &source_arn, &handle, json_output).await?;
        }
        ReplayCommand::List { topic, queue } => {
            let mut request = json!({});
            if topic.is_some() || queue.is_some() {
                request["SourceArn"] = json!(Source { topic, queue }.arn(&client).await?);
            }
            let reply = client.call("AckBox.ListReplays", &request).await?;
            print(json_output, &reply, || {
                let replays = reply["Replays"].as_array().cloned().unwrap_or_default();
                if replays.is_empty() {
                    return "no replays yet".to_owned();
                }
                replays.iter().map(describe).collect::<Vec<_>>().join("\n")
            })?;
        }
        ReplayCommand::Cancel { source, handle } => {
            let source_arn = source.arn(&client).await?;
            let reply = client
                .call(
                    "AckBox.CancelReplay",
                    &json!({ "SourceArn": source_arn, "TaskHandle": handle }),
                )
                .await?;
            print(json_output, &reply, || {
                format!(
                    "cancelled after replaying {}",
                    reply["Replay"]["ApproximateNumberOfMessagesReplayed"]
                )
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_is_a_time_or_an_age() {
        assert_eq!(
            parse_point("2023-11-14T22:13:20Z"),
            Ok(Point::At(1_700_000_000_000))
        );
        assert_eq!(parse_point("2h"), Ok(Point::Ago(7_200)));
        assert_eq!(Point::Ago(60).epoch_millis(100_000), 40_000);
        assert!(parse_point("last tuesday").is_err());
    }
}
