//! `ackbox receive QUEUE`: receive, print and (unless `--keep`) delete.

use serde_json::{Value, json};

use crate::api_client::EndpointArgs;
use crate::cmd::queue::print;

/// Flags of `ackbox receive`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Queue name.
    queue: String,
    /// Most messages to receive (1..=10).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=10))]
    max: i32,
    /// Long-poll wait, seconds (0..=20).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..=20))]
    wait: i32,
    /// Lease length, seconds; the queue's default when absent.
    #[arg(long)]
    visibility: Option<i32>,
    /// Leave the messages in the queue (they reappear after the lease).
    #[arg(long)]
    keep: bool,
}

/// Runs `ackbox receive`.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.endpoint.client()?;
    let url = client.queue_url(&args.queue).await?;
    let mut request = json!({
        "QueueUrl": url,
        "MaxNumberOfMessages": args.max,
        "WaitTimeSeconds": args.wait,
        "MessageSystemAttributeNames": ["All"],
        "MessageAttributeNames": ["All"],
    });
    if let Some(visibility) = args.visibility {
        request["VisibilityTimeout"] = json!(visibility);
    }
    let reply = client.call("ReceiveMessage", &request).await?;
    let messages: Vec<Value> = reply["Messages"].as_array().cloned().unwrap_or_default();
    if !args.keep {
        for message in &messages {
            client
                .call(
                    "DeleteMessage",
                    &json!({ "QueueUrl": url, "ReceiptHandle": message["ReceiptHandle"] }),
                )
                .await?;
        }
    }
    let reply = json!({ "Messages": messages });
    print(args.endpoint.json, &reply, || {
        messages
            .iter()
            .map(|message| {
                let attributes: String = message["MessageAttributes"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, value)| {
                        let shown = value["StringValue"].as_str().unwrap_or("(binary)");
                        format!("\t{name}={shown}")
                    })
                    .collect();
                format!(
                    "{}\treceives={}{attributes}\t{}",
                    message["MessageId"].as_str().unwrap_or_default(),
                    message["Attributes"]["ApproximateReceiveCount"]
                        .as_str()
                        .unwrap_or("?"),
                    message["Body"].as_str().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    Ok(())
}
