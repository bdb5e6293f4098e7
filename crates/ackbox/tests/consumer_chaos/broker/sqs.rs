//! ackbox itself: `ackbox serve` as a child process on a port and data
//! directory of the trial's own, so the trial may `kill -9` it and start it
//! again where it was.

use std::collections::BTreeMap;
use std::time::Duration;

use ackbox_consumer::SqsTransport;
use ackbox_testkit::client::{queue_arn, sqs_client};
use ackbox_testkit::process::{ServerProcess, free_port};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use tokio::task::JoinSet;

use super::{Broker, Depth, Endpoint, LEASE, MAX_DELIVERIES, QueueAddress};
use crate::workload::{Outgoing, Workload};

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");
/// Concurrent senders on a standard queue.
const LANES: usize = 8;

pub(crate) struct SqsBroker {
    data_dir: tempfile::TempDir,
    port: u16,
    /// `None` only between a kill and the restart.
    server: Option<ServerProcess>,
    client: Client,
    /// Every queue declared, dead-letter queues included, by name.
    queues: BTreeMap<String, String>,
}

impl SqsBroker {
    pub(crate) fn start() -> Self {
        let data_dir = tempfile::tempdir().expect("a data directory");
        let port = free_port();
        let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &[]);
        let client = sqs_client(&server.url());
        Self {
            data_dir,
            port,
            server: Some(server),
            client,
            queues: BTreeMap::new(),
        }
    }

    async fn create(&mut self, name: &str, attributes: &[(QueueAttributeName, String)]) -> String {
        let mut request = self.client.create_queue().queue_name(name);
        for (attribute, value) in attributes {
            request = request.attributes(attribute.clone(), value);
        }
        let url = request
            .send()
            .await
            .unwrap_or_else(|error| panic!("CreateQueue {name}: {error:?}"))
            .queue_url
            .expect("CreateQueue returns a URL");
        self.queues.insert(name.to_owned(), url.clone());
        url
    }

    async fn depth(&self, name: &str, url: &str) -> Depth {
        let reply = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await;
        let Ok(reply) = reply else {
            // Unknown is not empty: a drain never passes on a broker that
            // does not answer.
            return Depth {
                queue: format!("{name} (unreadable)"),
                ready: u64::MAX,
                held: u64::MAX,
            };
        };
        let attributes = reply.attributes.unwrap_or_default();
        let count = |name: QueueAttributeName| {
            attributes
                .get(&name)
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(u64::MAX)
        };
        Depth {
            queue: name.to_owned(),
            ready: count(QueueAttributeName::ApproximateNumberOfMessages),
            held: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible).saturating_add(
                count(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
            ),
        }
    }
}

/// A consumer process's client: the official SDK with dummy credentials.
pub(crate) fn client(endpoint: &str) -> Client {
    sqs_client(endpoint)
}

/// A consumer process's transport, with ackbox's extensions (nacks carry
/// the failure and a delay).
pub(crate) fn transport(client: &Client, queue: &QueueAddress) -> SqsTransport {
    SqsTransport::new(client.clone(), &queue.name).with_ackbox_extensions()
}

impl Broker for SqsBroker {
    fn endpoint(&self) -> Endpoint {
        Endpoint::Sqs(format!("http://127.0.0.1:{}", self.port))
    }

    fn keeps_group_order(&self) -> bool {
        true
    }

    async fn declare(&mut self, workload: Workload) -> QueueAddress {
        let base = workload.name();
        let (name, dead_letters) = if workload.fifo() {
            (format!("{base}.fifo"), format!("{base}-dlq.fifo"))
        } else {
            (base.to_owned(), format!("{base}-dlq"))
        };
        let fifo: Vec<(QueueAttributeName, String)> = if workload.fifo() {
            vec![(QueueAttributeName::FifoQueue, "true".to_owned())]
        } else {
            Vec::new()
        };
        let dead_letter_url = self.create(&dead_letters, &fifo).await;
        let dead_letter_arn = queue_arn(&self.client, &dead_letter_url).await;
        let mut attributes = fifo;
        attributes.push((
            QueueAttributeName::VisibilityTimeout,
            LEASE.as_secs().to_string(),
        ));
        attributes.push((
            QueueAttributeName::RedrivePolicy,
            format!(
                r#"{{"deadLetterTargetArn":"{dead_letter_arn}","maxReceiveCount":{MAX_DELIVERIES}}}"#
            ),
        ));
        let url = self.create(&name, &attributes).await;
        QueueAddress {
            workload,
            name: url,
        }
    }

    async fn publish(&self, queue: &QueueAddress, messages: &[Outgoing]) {
        // One lane per message group keeps each group in order; a standard
        // queue's messages are spread over a few lanes.
        let mut lanes: BTreeMap<String, Vec<Outgoing>> = BTreeMap::new();
        for (index, message) in messages.iter().enumerate() {
            let lane = message
                .group_id
                .clone()
                .unwrap_or_else(|| (index % LANES).to_string());
            lanes.entry(lane).or_default().push(message.clone());
        }
        let mut senders = JoinSet::new();
        for lane in lanes.into_values() {
            let (client, url) = (self.client.clone(), queue.name.clone());
            senders.spawn(async move {
                for batch in lane.chunks(10) {
                    let entries = batch
                        .iter()
                        .enumerate()
                        .map(|(index, message)| {
                            SendMessageBatchRequestEntry::builder()
                                .id(index.to_string())
                                .message_body(&message.body)
                                .set_message_group_id(message.group_id.clone())
                                .set_message_deduplication_id(message.deduplication_id.clone())
                                .build()
                                .expect("a batch entry")
                        })
                        .collect();
                    let sent = client
                        .send_message_batch()
                        .queue_url(&url)
                        .set_entries(Some(entries))
                        .send()
                        .await
                        .unwrap_or_else(|error| panic!("SendMessageBatch to {url}: {error:?}"));
                    assert!(sent.failed().is_empty(), "{:?}", sent.failed());
                }
            });
        }
        while let Some(sent) = senders.join_next().await {
            sent.expect("a sender finishes");
        }
    }

    async fn depths(&self) -> Vec<Depth> {
        let mut depths = Vec::with_capacity(self.queues.len());
        for (name, url) in &self.queues {
            depths.push(self.depth(name, url).await);
        }
        depths
    }

    fn can_crash(&self) -> bool {
        true
    }

    async fn crash_and_restart(&mut self) {
        if let Some(server) = self.server.take() {
            server.kill9();
        }
        // Down long enough for every consumer to hit a refused connection.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (data_dir, port) = (self.data_dir.path().to_owned(), self.port);
        let server = tokio::task::spawn_blocking(move || {
            ServerProcess::start(BINARY.as_ref(), &data_dir, port, &[])
        })
        .await
        .expect("ackbox serve restarts on its port and data directory");
        self.server = Some(server);
    }

    async fn remove(self) {
        // The server is killed and its data directory removed on drop.
    }
}
