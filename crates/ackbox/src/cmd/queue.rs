//! `ackbox queue create|list|stats|purge|delete`.

use std::collections::BTreeMap;
use std::io::Write as _;

use serde_json::{Value, json};

use crate::api_client::{EndpointArgs, parse_key_value};

/// Flags of `ackbox queue`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    endpoint: EndpointArgs,
    #[command(subcommand)]
    command: QueueCommand,
}

#[derive(Debug, clap::Subcommand)]
enum QueueCommand {
    /// Create a queue (idempotent with the same attributes); a name ending in
    /// `.fifo` creates a FIFO queue.
    Create {
        /// Queue name.
        name: String,
        /// Attribute, e.g. `--attribute VisibilityTimeout=60`.
        #[arg(long = "attribute", value_parser = parse_key_value)]
        attributes: Vec<(String, String)>,
        /// Tag, e.g. `--tag team=payments`.
        #[arg(long = "tag", value_parser = parse_key_value)]
        tags: Vec<(String, String)>,
        /// Also create this dead-letter queue (of the same kind) and send
        /// messages there after `--max-receive` receives.
        #[arg(long)]
        dlq: Option<String>,
        /// With `--dlq`: receives before a message is dead-lettered (1..=1000).
        #[arg(long, default_value_t = 5, requires = "dlq")]
        max_receive: u32,
    },
    /// List queues with their message counts.
    List {
        /// Only names starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Show a queue's attributes and message counts.
    Stats {
        /// Queue name.
        name: String,
    },
    /// Delete every message of a queue (it cannot be undone: needs `--yes`).
    Purge {
        /// Queue name.
        name: String,
        /// Yes, delete every message.
        #[arg(long)]
        yes: bool,
    },
    /// Delete a queue and its messages.
    Delete {
        /// Queue name.
        name: String,
    },
}

/// Runs `ackbox queue …`.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.endpoint.client()?;
    let json_output = args.endpoint.json;
    match args.command {
        QueueCommand::Create {
            name,
            attributes,
            tags,
            dlq,
            max_receive,
        } => {
            let mut attributes: BTreeMap<String, String> = attributes.into_iter().collect();
            // The name already says what the queue is; SQS wants both.
            let kind = if name.ends_with(".fifo") {
                json!({ "FifoQueue": "true" })
            } else {
                json!({})
            };
            if name.ends_with(".fifo") {
                attributes
                    .entry("FifoQueue".to_owned())
                    .or_insert_with(|| "true".to_owned());
            }
            if let Some(dlq) = dlq {
                let dlq_url = client
                    .call(
                        "CreateQueue",
                        &json!({ "QueueName": dlq, "Attributes": kind }),
                    )
                    .await?["QueueUrl"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let dlq_arn = client
                    .call(
                        "GetQueueAttributes",
                        &json!({ "QueueUrl": dlq_url, "AttributeNames": ["QueueArn"] }),
                    )
                    .await?["Attributes"]["QueueArn"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                attributes.insert(
                    "RedrivePolicy".to_owned(),
                    json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive })
                        .to_string(),
                );
            }
            let tags: BTreeMap<String, String> = tags.into_iter().collect();
            let reply = client
                .call(
                    "CreateQueue",
                    &json!({ "QueueName": name, "Attributes": attributes, "tags": tags }),
                )
                .await?;
            print(json_output, &reply, || {
                reply["QueueUrl"].as_str().unwrap_or_default().to_owned()
            })?;
        }
        QueueCommand::List { prefix } => {
            let mut urls = Vec::new();
            let mut next_token: Option<String> = None;
            loop {
                let mut request = json!({ "QueueNamePrefix": prefix, "MaxResults": 1000 });
                if let Some(token) = &next_token {
                    request["NextToken"] = json!(token);
                }
                let reply = client.call("ListQueues", &request).await?;
                urls.extend(
                    reply["QueueUrls"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(str::to_owned),
                );
                next_token = reply["NextToken"].as_str().map(str::to_owned);
                if next_token.is_none() {
                    break;
                }
            }
            let mut queues = Vec::with_capacity(urls.len());
            for url in &urls {
                let counts = client
                    .call(
                        "GetQueueAttributes",
                        &json!({ "QueueUrl": url, "AttributeNames": [
                            "ApproximateNumberOfMessages",
                            "ApproximateNumberOfMessagesNotVisible",
                            "ApproximateNumberOfMessagesDelayed",
                        ] }),
                    )
                    .await?;
                let mut queue = counts["Attributes"].clone();
                queue["QueueUrl"] = json!(url);
                queues.push(queue);
            }
            let reply = json!({ "QueueUrls": urls, "Queues": queues });
            print(json_output, &reply, || {
                queues
                    .iter()
                    .map(|queue| {
                        let count = |name: &str| queue[name].as_str().unwrap_or("?").to_owned();
                        let url = queue["QueueUrl"].as_str().unwrap_or_default();
                        format!(
                            "{:<40} {:>9} visible {:>9} in flight {:>7} delayed",
                            url.rsplit('/').next().unwrap_or(url),
                            count("ApproximateNumberOfMessages"),
                            count("ApproximateNumberOfMessagesNotVisible"),
                            count("ApproximateNumberOfMessagesDelayed"),
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })?;
        }
        QueueCommand::Stats { name } => {
            let url = client.queue_url(&name).await?;
            let reply = client
                .call(
                    "GetQueueAttributes",
                    &json!({ "QueueUrl": url, "AttributeNames": ["All"] }),
                )
                .await?;
            print(json_output, &reply["Attributes"], || {
                reply["Attributes"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(key, value)| format!("{key:<40} {}", value.as_str().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join("\n")
            })?;
        }
        QueueCommand::Purge { name, yes } => {
            if !yes {
                anyhow::bail!(
                    "purging deletes every message of {name} and cannot be undone; run it again \
                     with --yes"
                );
            }
            let url = client.queue_url(&name).await?;
            client
                .call("PurgeQueue", &json!({ "QueueUrl": url }))
                .await?;
            print(json_output, &json!({ "Purged": name }), || {
                format!("purged {name}")
            })?;
        }
        QueueCommand::Delete { name } => {
            let url = client.queue_url(&name).await?;
            client
                .call("DeleteQueue", &json!({ "QueueUrl": url }))
                .await?;
            print(json_output, &json!({ "Deleted": name }), || {
                format!("deleted {name}")
            })?;
        }
    }
    Ok(())
}

/// A timestamp of an answer (epoch milliseconds) as a person reads it:
/// RFC 3339 in UTC; `-` when absent.
pub(crate) fn shown_time(value: &Value) -> String {
    value
        .as_i64()
        .map_or_else(|| "-".to_owned(), ackbox_core::utc::rfc3339)
}

/// Prints `value` as JSON, or the human rendering. A reader gone early
/// (`| head -1`) is an error `main` treats as success; `println!` would panic.
pub(crate) fn print(
    json_output: bool,
    value: &Value,
    human: impl FnOnce() -> String,
) -> std::io::Result<()> {
    let text = if json_output {
        value.to_string()
    } else {
        human()
    };
    if text.is_empty() {
        return Ok(());
    }
    write_out(&format!("{text}\n"))
}

/// Writes a command's answer to stdout as it is, flushed: a reader gone
/// early shows here as a `BrokenPipe` error, not a panic.
pub(crate) fn write_out(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}
