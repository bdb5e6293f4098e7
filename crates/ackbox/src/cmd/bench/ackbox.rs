//! ackbox (or any SQS-API broker) as a benchmark target: SendMessageBatch,
//! ReceiveMessage + DeleteMessageBatch over the CLI's JSON 1.0 client.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use serde_json::{Value, json};

use super::target::{Consumer, Producer, Target};
use crate::api_client::ApiClient;

/// One queue on the broker.
#[derive(Debug, Clone)]
pub(super) struct AckboxTarget {
    /// The node this handle (and the producer or consumer holding it) talks to.
    client: ApiClient,
    queue_url: String,
    shape: Shape,
    /// Every node of the installation; producers and consumers take turns.
    nodes: Arc<[ApiClient]>,
    next_node: Arc<AtomicUsize>,
}

impl AckboxTarget {
    /// Creates queue `name` (FIFO, spread over `fifo_groups`, when given).
    pub(super) async fn create(
        client: ApiClient,
        name: &str,
        fifo_groups: Option<u64>,
    ) -> anyhow::Result<Self> {
        let mut attributes = json!({ "VisibilityTimeout": "60" });
        let name = if fifo_groups.is_some() {
            attributes["FifoQueue"] = json!("true");
            format!("{name}.fifo")
        } else {
            name.to_owned()
        };
        let reply = client
            .call(
                "CreateQueue",
                &json!({ "QueueName": name, "Attributes": attributes }),
            )
            .await?;
        let queue_url = reply["QueueUrl"]
            .as_str()
            .context("CreateQueue returned no QueueUrl")?
            .to_owned();
        Ok(Self {
            nodes: Arc::from([client.clone()]),
            client,
            queue_url,
            shape: Shape::new(fifo_groups),
            next_node: Arc::default(),
        })
    }

    /// Spreads producers and consumers over these nodes of one installation
    /// (several `ackbox serve` on one PostgreSQL store) instead of one.
    pub(super) fn spread_over(mut self, nodes: Vec<ApiClient>) -> Self {
        if !nodes.is_empty() {
            self.nodes = Arc::from(nodes);
        }
        self
    }

    /// A copy of this handle on the next node in turn.
    fn on_next_node(&self) -> Self {
        let turn = self.next_node.fetch_add(1, Ordering::Relaxed);
        Self {
            client: self.nodes[turn % self.nodes.len()].clone(),
            ..self.clone()
        }
    }
}

impl AckboxTarget {
    /// An existing standard queue.
    pub(super) fn open(client: ApiClient, queue_url: String) -> Self {
        Self {
            nodes: Arc::from([client.clone()]),
            client,
            queue_url,
            shape: Shape::new(None),
            next_node: Arc::default(),
        }
    }
}

impl Target for AckboxTarget {
    type Producer = AckboxProducer;
    type Consumer = AckboxConsumer;

    async fn producer(&self) -> anyhow::Result<AckboxProducer> {
        Ok(AckboxProducer {
            target: self.on_next_node(),
            prepared: Arc::default(),
        })
    }

    async fn consumer(&self) -> anyhow::Result<AckboxConsumer> {
        Ok(AckboxConsumer {
            target: self.on_next_node(),
        })
    }

    async fn remove(&self) -> anyhow::Result<()> {
        self.client
            .call("DeleteQueue", &json!({ "QueueUrl": self.queue_url }))
            .await
            .map(drop)
    }
}

/// Sends SendMessageBatch requests.
#[derive(Debug, Clone)]
pub(super) struct AckboxProducer {
    target: AckboxTarget,
    /// The last standard-queue request and the bodies it carries: W1 sends
    /// the same bodies again and again, and encoding them each time would
    /// spend the CPU the broker under test shares with the load generator.
    prepared: Arc<Mutex<Option<Prepared>>>,
}

/// A request and the bodies it was encoded from.
#[derive(Debug)]
struct Prepared {
    bodies: Vec<Bytes>,
    request: Bytes,
}

impl AckboxProducer {
    fn request(&self, bodies: &[Bytes]) -> Bytes {
        let shape = &self.target.shape;
        if shape.fifo_groups.is_some() {
            return shape.send_batch_body(&self.target.queue_url, bodies);
        }
        let mut prepared = self
            .prepared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(reused) = prepared.as_ref()
            && reused.bodies.len() == bodies.len()
            && reused.bodies.iter().zip(bodies).all(|(cached, body)| {
                cached.as_ptr() == body.as_ptr() && cached.len() == body.len()
            })
        {
            return reused.request.clone();
        }
        let request = shape.send_batch_body(&self.target.queue_url, bodies);
        *prepared = Some(Prepared {
            bodies: bodies.to_vec(),
            request: request.clone(),
        });
        request
    }
}

impl Producer for AckboxProducer {
    async fn send(&self, bodies: &[Bytes]) -> anyhow::Result<u64> {
        let (status, reply) = self
            .target
            .client
            .call_raw("SendMessageBatch", self.request(bodies))
            .await?;
        if !status.is_success() {
            bail!("SendMessageBatch answered {status}");
        }
        Ok(bodies.len() as u64 - failed_entries(&reply))
    }
}

/// Receives up to 10, then deletes them in one DeleteMessageBatch.
#[derive(Debug)]
pub(super) struct AckboxConsumer {
    target: AckboxTarget,
}

impl Consumer for AckboxConsumer {
    async fn receive(&mut self, wait: Duration) -> anyhow::Result<Vec<Bytes>> {
        let AckboxTarget {
            client, queue_url, ..
        } = &self.target;
        let request = json!({
            "QueueUrl": queue_url,
            "MaxNumberOfMessages": 10,
            "WaitTimeSeconds": wait.as_secs().clamp(0, 20),
        });
        let (status, reply) = client
            .call_raw("ReceiveMessage", Bytes::from(request.to_string()))
            .await?;
        if !status.is_success() {
            bail!("ReceiveMessage answered {status}");
        }
        let reply: Value = serde_json::from_slice(&reply)?;
        let messages = reply["Messages"].as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let entries: Vec<Value> = messages
            .iter()
            .enumerate()
            .map(|(index, message)| {
                json!({ "Id": index.to_string(), "ReceiptHandle": message["ReceiptHandle"] })
            })
            .collect();
        let request = json!({ "QueueUrl": queue_url, "Entries": entries });
        let (status, reply) = client
            .call_raw("DeleteMessageBatch", Bytes::from(request.to_string()))
            .await?;
        if !status.is_success() {
            bail!("DeleteMessageBatch answered {status}");
        }
        if failed_entries(&reply) > 0 {
            bail!(
                "DeleteMessageBatch failed entries: {}",
                String::from_utf8_lossy(&reply)
            );
        }
        Ok(messages
            .iter()
            .filter_map(|message| message["Body"].as_str())
            .map(|body| Bytes::copy_from_slice(body.as_bytes()))
            .collect())
    }
}

/// What the bench's messages look like: standard, or FIFO spread round-robin
/// over groups with a unique deduplication id each.
#[derive(Debug, Clone)]
struct Shape {
    fifo_groups: Option<u64>,
    /// The next message's number, shared by every sender so ids stay unique.
    next: Arc<AtomicU64>,
}

impl Shape {
    fn new(fifo_groups: Option<u64>) -> Self {
        Self {
            fifo_groups,
            next: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Adds a FIFO message's group and deduplication id to `entry`.
    fn mark(&self, entry: &mut Value) {
        if let Some(groups) = self.fifo_groups {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            entry["MessageGroupId"] = json!(format!("g{}", index % groups));
            entry["MessageDeduplicationId"] = json!(format!("m{index}"));
        }
    }

    /// A SendMessageBatch body.
    fn send_batch_body(&self, queue_url: &str, bodies: &[Bytes]) -> Bytes {
        let entries: Vec<Value> = bodies
            .iter()
            .enumerate()
            .map(|(index, body)| {
                let mut entry = json!({
                    "Id": index.to_string(),
                    "MessageBody": String::from_utf8_lossy(body),
                });
                self.mark(&mut entry);
                entry
            })
            .collect();
        Bytes::from(json!({ "QueueUrl": queue_url, "Entries": entries }).to_string())
    }
}

fn failed_entries(reply: &[u8]) -> u64 {
    serde_json::from_slice::<Value>(reply)
        .ok()
        .and_then(|value| value["Failed"].as_array().map(|failed| failed.len() as u64))
        .unwrap_or(0)
}
