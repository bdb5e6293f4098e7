//! NATS JetStream (`ACKBOX_TEST_NATS_URL`): work-queue streams of the
//! trial's own on the machine's shared server, which is never killed.
//! Streams a dead run left behind for more than an hour are deleted by the
//! next.

use ackbox_consumer::TransportError;
use ackbox_consumer::nats::{NatsQueue, NatsTransport};
use async_nats::jetstream::Context;
use futures_util::StreamExt;

use super::{Broker, Depth, Endpoint, LEASE, MAX_DELIVERIES, QueueAddress, unique_name};
use crate::workload::{Outgoing, Workload};

pub(crate) const URL_VARIABLE: &str = "ACKBOX_TEST_NATS_URL";
const PREFIX: &str = "ackboxchaos";
/// Publishes awaiting their acknowledgement at once, under the client's bound.
const IN_FLIGHT: usize = 1_000;

pub(crate) struct NatsBroker {
    url: String,
    jetstream: Context,
    queues: Vec<NatsQueue>,
}

/// How the driver and every consumer process declare stream `name`.
pub(crate) fn queue(name: &str) -> NatsQueue {
    NatsQueue::new(name)
        .lease(LEASE)
        .max_deliveries(MAX_DELIVERIES)
}

/// A consumer process's transport on its own client.
pub(crate) async fn transport(
    client: async_nats::Client,
    address: &QueueAddress,
) -> Result<NatsTransport, TransportError> {
    NatsTransport::connect(client, queue(&address.name)).await
}

impl NatsBroker {
    /// `None` (after a "skipped" line) when `ACKBOX_TEST_NATS_URL` is unset.
    pub(crate) async fn connect() -> Option<Self> {
        let Ok(url) = std::env::var(URL_VARIABLE) else {
            println!("skipped: {URL_VARIABLE} is not set, so the NATS chaos trial does not run");
            return None;
        };
        let client = async_nats::connect(&url)
            .await
            .expect("NATS is reachable at ACKBOX_TEST_NATS_URL");
        let jetstream = async_nats::jetstream::new(client);
        delete_stale_streams(&jetstream).await;
        Some(Self {
            url,
            jetstream,
            queues: Vec::new(),
        })
    }

    /// Messages stored in `stream` and, of those, delivered and unacknowledged.
    async fn stream_depth(&self, stream: &str, consumer: Option<String>) -> Depth {
        let unreadable = || Depth {
            queue: format!("{stream} (unreadable)"),
            ready: u64::MAX,
            held: u64::MAX,
        };
        let Ok(mut handle) = self.jetstream.get_stream(stream).await else {
            return unreadable();
        };
        let Ok(info) = handle.info().await else {
            return unreadable();
        };
        let stored = info.state.messages;
        let held = match consumer {
            None => 0,
            Some(consumer) => match handle.consumer_info(consumer).await {
                Ok(info) => u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX),
                Err(_) => return unreadable(),
            },
        };
        // A work queue keeps a message until it is acknowledged or terminated.
        Depth {
            queue: stream.to_owned(),
            ready: stored.saturating_sub(held),
            held,
        }
    }
}

/// Deletes this test's streams older than an hour: a killed run leaves its
/// own. A stream being created right now reports year 1 as its creation
/// time on some servers: young, not stale.
async fn delete_stale_streams(jetstream: &Context) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let mut names = jetstream.stream_names();
    let mut stale = Vec::new();
    while let Some(Ok(name)) = names.next().await {
        if !name.starts_with(PREFIX) {
            continue;
        }
        if let Ok(mut stream) = jetstream.get_stream(&name).await
            && let Ok(info) = stream.info().await
            && let Ok(created) = u64::try_from(info.created.unix_timestamp())
            && created > 0
            && now.saturating_sub(created) > 3_600
        {
            stale.push(name);
        }
    }
    for name in stale {
        let _ = jetstream.delete_stream(&name).await;
    }
}

impl Broker for NatsBroker {
    fn endpoint(&self) -> Endpoint {
        Endpoint::Nats(self.url.clone())
    }

    fn keeps_group_order(&self) -> bool {
        false
    }

    async fn declare(&mut self, workload: Workload) -> QueueAddress {
        assert!(
            !workload.fifo(),
            "the NATS transport has no message groups yet"
        );
        let queue = queue(&unique_name(PREFIX, workload));
        queue
            .declare(&self.jetstream)
            .await
            .expect("the streams and the consumer are declared");
        let address = QueueAddress {
            workload,
            name: queue.stream().to_owned(),
        };
        self.queues.push(queue);
        address
    }

    async fn publish(&self, queue: &QueueAddress, messages: &[Outgoing]) {
        for chunk in messages.chunks(IN_FLIGHT) {
            let mut acks = Vec::with_capacity(chunk.len());
            for message in chunk {
                // No Nats-Msg-Id: a producer duplicate is another message.
                acks.push(
                    self.jetstream
                        .publish(queue.name.clone(), message.body.clone().into())
                        .await
                        .expect("a JetStream publish"),
                );
            }
            for ack in acks {
                ack.await.expect("JetStream stored the message");
            }
        }
    }

    async fn depths(&self) -> Vec<Depth> {
        let mut depths = Vec::new();
        for queue in &self.queues {
            depths.push(
                self.stream_depth(queue.stream(), Some(queue.consumer()))
                    .await,
            );
            depths.push(self.stream_depth(&queue.dead_letter_stream(), None).await);
        }
        depths
    }

    fn can_crash(&self) -> bool {
        false
    }

    async fn crash_and_restart(&mut self) {
        unreachable!("a shared broker is never killed");
    }

    async fn remove(self) {
        for queue in &self.queues {
            let _ = self.jetstream.delete_stream(queue.stream()).await;
            let _ = self
                .jetstream
                .delete_stream(queue.dead_letter_stream())
                .await;
        }
    }
}
