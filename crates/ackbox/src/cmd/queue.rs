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
    },
    /// List queues.
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
    /// Delete every message of a queue.
    Purge {
        /// Queue name.
        name: String,
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
        } => {
            let mut attributes: BTreeMap<String, String> = attributes.into_iter().collect();
            // The name already says what the queue is; SQS wants both.
            if name.ends_with(".fifo") {
                attributes
                    .entry("FifoQueue".to_owned())
                    .or_insert_with(|| "true".to_owned());
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
            let reply = json!({ "QueueUrls": urls });
            print(json_output, &reply, || urls.join("\n"))?;
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
        QueueCommand::Purge { name } => {
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
