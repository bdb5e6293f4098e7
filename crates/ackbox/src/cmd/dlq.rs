//! `ackbox dlq peek|summary`: look into a dead-letter queue without
//! disturbing it (through `AckBox.PeekMessages`).

use ackbox_engine::receive::ACKBOX_SYSTEM_ATTRIBUTE_NAMES;
use serde_json::{Value, json};

use crate::api_client::{ApiClient, EndpointArgs};
use crate::cmd::queue::{print, shown_time};

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
                "MessageSystemAttributeNames": std::iter::once("All")
                    .chain(ACKBOX_SYSTEM_ATTRIBUTE_NAMES)
                    .collect::<Vec<_>>(),
                "MessageAttributeNames": ["All"],
            }),
        )
        .await?;
    Ok(reply["Messages"].as_array().cloned().unwrap_or_default())
}

fn attribute<'a>(message: &'a Value, name: &str) -> &'a str {
    message["Attributes"][name].as_str().unwrap_or("")
}

/// A timestamp system attribute (epoch milliseconds, as a string) as a
/// person reads it.
fn attribute_time(message: &Value, name: &str) -> String {
    shown_time(
        &attribute(message, name)
            .parse::<i64>()
            .map_or(Value::Null, Value::from),
    )
}

/// The queue counted by failure class (`AckBox.SummarizeQueue`): only
/// `class`, and only messages older than `older_than` seconds, when given.
pub(crate) async fn summarize(
    client: &ApiClient,
    queue_url: &str,
    class: Option<&str>,
    older_than: Option<u32>,
) -> anyhow::Result<Value> {
    let mut request = json!({ "QueueUrl": queue_url });
    if let Some(class) = class {
        request["AckBoxFailureClass"] = json!(class);
    }
    if let Some(seconds) = older_than {
        request["AckBoxOlderThanSeconds"] = json!(seconds);
    }
    client.call("AckBox.SummarizeQueue", &request).await
}

/// The human rendering of a summary.
pub(crate) fn render_summary(queue: &str, summary: &Value) -> String {
    let mut lines = vec![format!("{queue}: {} messages", summary["Total"])];
    for class in summary["Classes"].as_array().into_iter().flatten() {
        let name = match class["Class"].as_str().unwrap_or_default() {
            "" => "(no reason given)",
            name => name,
        };
        lines.push(format!(
            "  {name:<32} {:>8}  sent {} .. {}  e.g. {}",
            class["Count"],
            shown_time(&class["OldestSentTimestamp"]),
            shown_time(&class["NewestSentTimestamp"]),
            class["ExampleMessage"].as_str().unwrap_or("-"),
        ));
    }
    lines.join("\n")
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
                            "{}  receives={} failures={} class={} from={}\n    sent {}, last failed {}\n    reason: {}\n    body:   {}",
                            message["MessageId"].as_str().unwrap_or_default(),
                            attribute(message, "ApproximateReceiveCount"),
                            attribute(message, "AckBoxFailureCount"),
                            attribute(message, "AckBoxFailureClass"),
                            attribute(message, "DeadLetterQueueSourceArn"),
                            attribute_time(message, "SentTimestamp"),
                            attribute_time(message, "AckBoxLastFailureTimestamp"),
                            attribute(message, "AckBoxFailureMessage"),
                            message["Body"].as_str().unwrap_or_default(),
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })?;
        }
        DlqCommand::Summary { queue } => {
            let url = client.queue_url(&queue).await?;
            let reply = summarize(&client, &url, None, None).await?;
            print(json_output, &reply, || render_summary(&queue, &reply))?;
        }
    }
    Ok(())
}
