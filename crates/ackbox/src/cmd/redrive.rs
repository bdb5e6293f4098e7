//! `ackbox redrive start|status|cancel`: message move tasks from the shell,
//! with a progress bar.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use ackbox_core::utc::parse_age;

use crate::api_client::{ApiClient, EndpointArgs};
use crate::cmd::queue::{print, shown_time};

/// Flags of `ackbox redrive`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    endpoint: EndpointArgs,
    #[command(subcommand)]
    command: RedriveCommand,
}

#[derive(Debug, clap::Subcommand)]
enum RedriveCommand {
    /// Move a dead-letter queue's messages back home (or to --destination).
    Start {
        /// The dead-letter queue's name.
        #[arg(long)]
        source: String,
        /// Destination queue name; each message's original source when absent.
        #[arg(long)]
        destination: Option<String>,
        /// Messages per second (1..=500).
        #[arg(long)]
        rate: Option<i32>,
        /// Return once the task has started instead of following it.
        #[arg(long)]
        detach: bool,
        /// Move nothing: print what would move, by failure class and age.
        #[arg(long)]
        dry_run: bool,
        /// Only messages whose last failure class is this.
        #[arg(long)]
        class: Option<String>,
        /// Only messages older than this (`90s`, `30m`, `2h`, `1d`).
        #[arg(long, value_parser = parse_age)]
        older_than: Option<u32>,
        /// Stop after moving this many.
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..))]
        max_messages: Option<i64>,
        /// Pause after moving this many, for review; `ackbox redrive resume` continues.
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..))]
        sample: Option<i64>,
    },
    /// Show the newest move tasks of a dead-letter queue.
    Status {
        /// The dead-letter queue's name.
        #[arg(long)]
        source: String,
        /// How many tasks (1..=10).
        #[arg(short = 'n', long, default_value_t = 5)]
        count: i32,
    },
    /// The audit log: every move task ever started, who started it and how it ended.
    History {
        /// Only the tasks of this dead-letter queue.
        #[arg(long)]
        source: Option<String>,
        /// How many, newest first (1..=1000).
        #[arg(short = 'n', long, default_value_t = 20)]
        count: i32,
    },
    /// Continue a task paused after its sample.
    Resume {
        /// The handle `redrive start` printed.
        handle: String,
    },
    /// Cancel a running or paused task.
    Cancel {
        /// The handle `redrive start` printed.
        handle: String,
    },
}

pub(crate) async fn queue_arn(client: &ApiClient, name: &str) -> anyhow::Result<String> {
    let url = client.queue_url(name).await?;
    let reply = client
        .call(
            "GetQueueAttributes",
            &json!({ "QueueUrl": url, "AttributeNames": ["QueueArn"] }),
        )
        .await?;
    reply["Attributes"]["QueueArn"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("GetQueueAttributes answered without a QueueArn"))
}

async fn newest_task(client: &ApiClient, source_arn: &str) -> anyhow::Result<Value> {
    let reply = client
        .call(
            "ListMessageMoveTasks",
            &json!({ "SourceArn": source_arn, "MaxResults": 1 }),
        )
        .await?;
    Ok(reply["Results"][0].clone())
}

fn describe(task: &Value) -> String {
    format!(
        "{:<10} moved {}/{}  started {}{}{}",
        task["Status"].as_str().unwrap_or("?"),
        task["ApproximateNumberOfMessagesMoved"],
        task["ApproximateNumberOfMessagesToMove"],
        shown_time(&task["StartedTimestamp"]),
        task["TaskHandle"]
            .as_str()
            .map_or(String::new(), |handle| format!("  handle {handle}")),
        task["FailureReason"]
            .as_str()
            .map_or(String::new(), |reason| format!("\n    failure: {reason}")),
    )
}

/// Follows the newest task of `source_arn` with a progress bar until it
/// stops; a completed or paused (sampled) task is success, any other end is not.
async fn follow(client: &ApiClient, source_arn: &str, json_output: bool) -> anyhow::Result<()> {
    let bar = if json_output {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed:>4} {pos:>8}/{len:8} moved {wide_bar}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let task = loop {
        let task = newest_task(client, source_arn).await?;
        bar.set_length(
            task["ApproximateNumberOfMessagesToMove"]
                .as_u64()
                .unwrap_or(0),
        );
        bar.set_position(
            task["ApproximateNumberOfMessagesMoved"]
                .as_u64()
                .unwrap_or(0),
        );
        if task["Status"] != "RUNNING" {
            break task;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    bar.finish_and_clear();
    print(json_output, &task, || {
        let mut text = describe(&task);
        if task["Status"] == "PAUSED" {
            text.push_str(&format!(
                "\n    review the moved messages, then: ackbox redrive resume {}",
                task["TaskHandle"].as_str().unwrap_or("<handle>")
            ));
        }
        text
    })?;
    ended_well(&task, "move task", &["COMPLETED", "PAUSED"])
}

/// Success when a followed task (`what`) ended in one of `successes`; an
/// error naming how it ended otherwise, so a script sees the exit code.
pub(crate) fn ended_well(task: &Value, what: &str, successes: &[&str]) -> anyhow::Result<()> {
    match task["Status"].as_str() {
        Some(status) if successes.contains(&status) => Ok(()),
        other => anyhow::bail!(
            "the {what} ended {}",
            other.unwrap_or("in an unknown state")
        ),
    }
}

/// Runs `ackbox redrive …`.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.endpoint.client()?;
    let json_output = args.endpoint.json;
    match args.command {
        RedriveCommand::Start {
            source,
            destination,
            rate,
            detach,
            dry_run,
            class,
            older_than,
            max_messages,
            sample,
        } => {
            if dry_run {
                let url = client.queue_url(&source).await?;
                // The same filters the task would take, counted by the server.
                let summary =
                    crate::cmd::dlq::summarize(&client, &url, class.as_deref(), older_than).await?;
                let matching = summary["Total"].as_i64().unwrap_or(0);
                let limit = [max_messages, sample].into_iter().flatten().min();
                let moves = limit.map_or(matching, |limit| matching.min(limit));
                let target = destination
                    .as_deref()
                    .unwrap_or("each message's original source queue");
                let reply = json!({
                    "DryRun": true,
                    "Destination": target,
                    "ApproximateNumberOfMessagesToMove": moves,
                    "WouldMove": summary,
                });
                print(json_output, &reply, || {
                    let paused = sample
                        .filter(|sample| *sample <= max_messages.unwrap_or(i64::MAX))
                        .map_or(String::new(), |_| ", then pause for review".to_owned());
                    format!(
                        "dry run: nothing moved; would move {moves} of these to {target}{paused}:\n{}",
                        crate::cmd::dlq::render_summary(&source, &summary)
                    )
                })?;
                return Ok(());
            }
            let source_arn = queue_arn(&client, &source).await?;
            let mut request = json!({ "SourceArn": source_arn });
            if let Some(destination) = destination {
                request["DestinationArn"] = json!(queue_arn(&client, &destination).await?);
            }
            if let Some(rate) = rate {
                request["MaxNumberOfMessagesPerSecond"] = json!(rate);
            }
            // ackbox's filters travel as extension members of the SQS call.
            if let Some(class) = class {
                request["AckBoxFailureClass"] = json!(class);
            }
            if let Some(seconds) = older_than {
                request["AckBoxOlderThanSeconds"] = json!(seconds);
            }
            if let Some(max) = max_messages {
                request["AckBoxMaxMessages"] = json!(max);
            }
            if let Some(sample) = sample {
                request["AckBoxSample"] = json!(sample);
            }
            let started = client.call("StartMessageMoveTask", &request).await?;
            let handle = started["TaskHandle"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if detach {
                print(json_output, &started, || handle.clone())?;
                return Ok(());
            }
            follow(&client, &source_arn, json_output).await?;
        }
        RedriveCommand::Status { source, count } => {
            let source_arn = queue_arn(&client, &source).await?;
            let reply = client
                .call(
                    "ListMessageMoveTasks",
                    &json!({ "SourceArn": source_arn, "MaxResults": count }),
                )
                .await?;
            print(json_output, &reply, || {
                let tasks = reply["Results"].as_array().cloned().unwrap_or_default();
                if tasks.is_empty() {
                    return format!("no move tasks for {source}");
                }
                tasks.iter().map(describe).collect::<Vec<_>>().join("\n")
            })?;
        }
        RedriveCommand::History { source, count } => {
            let mut request = json!({ "MaxResults": count });
            if let Some(source) = &source {
                request["SourceArn"] = json!(queue_arn(&client, source).await?);
            }
            let reply = client.call("AckBox.ListMoveTaskHistory", &request).await?;
            print(json_output, &reply, || {
                let tasks = reply["Tasks"].as_array().cloned().unwrap_or_default();
                if tasks.is_empty() {
                    return "no move tasks yet".to_owned();
                }
                tasks
                    .iter()
                    .map(|task| {
                        format!(
                            "{} by {}  {} -> {}  rate {}  ended {}\n    {}",
                            shown_time(&task["StartedTimestamp"]),
                            task["RequestedBy"].as_str().unwrap_or("?"),
                            task["SourceArn"].as_str().unwrap_or("?"),
                            task["DestinationArn"]
                                .as_str()
                                .unwrap_or("(original sources)"),
                            task["MaxNumberOfMessagesPerSecond"]
                                .as_i64()
                                .map_or("default".to_owned(), |rate| format!("{rate}/s")),
                            shown_time(&task["FinishedTimestamp"]),
                            describe(task),
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })?;
        }
        RedriveCommand::Resume { handle } => {
            let resumed = client
                .call(
                    "AckBox.ResumeMessageMoveTask",
                    &json!({ "TaskHandle": handle }),
                )
                .await?;
            let source_arn = resumed["SourceArn"].as_str().unwrap_or_default().to_owned();
            follow(&client, &source_arn, json_output).await?;
        }
        RedriveCommand::Cancel { handle } => {
            let reply = client
                .call("CancelMessageMoveTask", &json!({ "TaskHandle": handle }))
                .await?;
            print(json_output, &reply, || {
                format!(
                    "cancelled after moving {}",
                    reply["ApproximateNumberOfMessagesMoved"]
                )
            })?;
        }
    }
    Ok(())
}
