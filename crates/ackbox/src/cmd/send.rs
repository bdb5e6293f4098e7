//! `ackbox send QUEUE BODY`.

use std::collections::BTreeMap;
use std::io::Read;

use serde_json::{Value, json};

use crate::api_client::{EndpointArgs, parse_key_value};
use crate::cmd::queue::print;

/// Flags of `ackbox send`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Queue name.
    queue: String,
    /// Message body; `-` reads it from standard input.
    body: String,
    /// Delay before the message becomes receivable, seconds.
    #[arg(long)]
    delay: Option<i32>,
    /// String attribute, e.g. `--attribute order_id=42`.
    #[arg(long = "attribute", value_parser = parse_key_value)]
    attributes: Vec<(String, String)>,
    /// Message group id (required on FIFO queues).
    #[arg(long)]
    group_id: Option<String>,
    /// FIFO deduplication id (unless the queue has content-based deduplication).
    #[arg(long)]
    dedup_id: Option<String>,
}

/// Runs `ackbox send`.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.endpoint.client()?;
    let body = if args.body == "-" {
        let mut body = String::new();
        std::io::stdin().read_to_string(&mut body)?;
        body
    } else {
        args.body
    };
    let url = client.queue_url(&args.queue).await?;
    let attributes: BTreeMap<String, Value> = args
        .attributes
        .into_iter()
        .map(|(name, value)| (name, json!({ "DataType": "String", "StringValue": value })))
        .collect();
    let mut request =
        json!({ "QueueUrl": url, "MessageBody": body, "MessageAttributes": attributes });
    if let Some(delay) = args.delay {
        request["DelaySeconds"] = json!(delay);
    }
    if let Some(group_id) = args.group_id {
        request["MessageGroupId"] = json!(group_id);
    }
    if let Some(dedup_id) = args.dedup_id {
        request["MessageDeduplicationId"] = json!(dedup_id);
    }
    let reply = client.call("SendMessage", &request).await?;
    print(args.endpoint.json, &reply, || {
        let message_id = reply["MessageId"].as_str().unwrap_or_default();
        match reply["SequenceNumber"].as_str() {
            Some(sequence_number) => format!("{message_id} (sequence number {sequence_number})"),
            None => message_id.to_owned(),
        }
    })?;
    Ok(())
}
