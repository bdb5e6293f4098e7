//! `ackbox dlq peek|summary`: look into a dead-letter queue without
//! disturbing it (through `AckBox.PeekMessages`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api_client::{ApiClient, EndpointArgs};
use crate::cmd::queue::print;

/// Flags of `ackbox dlq`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    endpoint: EndpointArgs,
    #[command(subcommand)]
    command: DlqCommand,
}

#[derive(Debug, clap::Subcommand)]
enum DlqCommand {
    /// Show the oldest messages with their failure reasons.
    Peek {
        /// Queue name.
        queue: String,
        /// How many (1..=100).
        #[arg(short = 'n', long, default_value_t = 10)]
        count: i32,
    },
    /// Count messages by failure class, with the oldest and newest of each.
    Summary {
        /// Queue name.
        queue: String,
    },
}

async fn peek(client: &ApiClient, queue_url: &str, count: i32) -> anyhow::Result<Vec<Value>> {
    let reply = client
        .call(
            "AckBox.PeekMessages",
            &json!({
                "QueueUrl": queue_url,
                "MaxNumberOfMessages": count,
                "MessageSystemAttributeNames": ["All"],
                "MessageAttributeNames": ["All"],
            }),
        )
        .await?;
    Ok(reply["Messages"].as_array().cloned().unwrap_or_default())
}

fn attribute<'a>(message: &'a Value, name: &str) -> &'a str {
    message["Attributes"][name].as_str().unwrap_or("")
}

/// One class's line of the summary.
#[derive(Debug, Default, serde::Serialize)]
struct ClassSummary {
    count: u64,
    oldest_sent: Option<i64>,
    newest_sent: Option<i64>,
    example: String,
}

/// Runs `ackbox dlq …`.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.endpoint.client()?;
    let json_output = args.endpoint.json;
    match args.command {
        DlqCommand::Peek { queue, count } => {
            let url = client.queue_url(&queue).await?;
            let messages = peek(&client, &url, count).await?;
            let reply = json!({ "Messages": messages });
            print(json_output, &reply, || {
                messages
                    .iter()
                    .map(|message| {
                        format!(
                            "{}  receives={} failures={} class={} from={}\n    reason: {}\n    body:   {}",
                            message["MessageId"].as_str().unwrap_or_default(),
                            attribute(message, "ApproximateReceiveCount"),
                            attribute(message, "AckBoxFailureCount"),
                            attribute(message, "AckBoxFailureClass"),
                            attribute(message, "DeadLetterQueueSourceArn"),
                            attribute(message, "AckBoxFailureMessage"),
                            message["Body"].as_str().unwrap_or_default(),
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        DlqCommand::Summary { queue } => {
            let url = client.queue_url(&queue).await?;
            let depth: u64 = client
                .call("GetQueueAttributes", &json!({ "QueueUrl": url, "AttributeNames": ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"] }))
                .await?["Attributes"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, value)| value.as_str()?.parse::<u64>().ok())
                .sum();
            let messages = peek(&client, &url, 100).await?;
            let mut classes: BTreeMap<String, ClassSummary> = BTreeMap::new();
            for message in &messages {
                let class = match attribute(message, "AckBoxFailureClass") {
                    "" => "(no reason given)".to_owned(),
                    class => class.to_owned(),
                };
                let sent = attribute(message, "SentTimestamp").parse::<i64>().ok();
                let entry = classes.entry(class).or_default();
                entry.count += 1;
                entry.oldest_sent = entry.oldest_sent.min(sent).or(sent);
                entry.newest_sent = entry.newest_sent.max(sent);
                if entry.example.is_empty() {
                    entry.example = attribute(message, "AckBoxFailureMessage").to_owned();
                }
            }
            let sampled = messages.len();
            let reply =
                json!({ "Queue": queue, "Depth": depth, "Sampled": sampled, "Classes": classes });
            print(json_output, &reply, || {
                let mut lines = vec![format!(
                    "{queue}: {depth} messages (classes from the oldest {sampled})"
                )];
                for (class, summary) in &classes {
                    lines.push(format!(
                        "  {class:<32} {:>6}  oldest sent {}  newest sent {}  e.g. {}",
                        summary.count,
                        summary
                            .oldest_sent
                            .map_or("-".to_owned(), |at| at.to_string()),
                        summary
                            .newest_sent
                            .map_or("-".to_owned(), |at| at.to_string()),
                        summary.example
                    ));
                }
                lines.join("\n")
            });
        }
    }
    Ok(())
}
