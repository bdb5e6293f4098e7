//! NATS JetStream (`ACKBOX_TEST_NATS_URL`): a fresh stream per test, with
//! its dead-letter stream, deleted when the test ends; streams a killed run
//! left behind for more than an hour are deleted by the next.

use std::time::Duration;

use ackbox_consumer::async_trait;
use ackbox_consumer::nats::{
    FAILURE_CLASS_HEADER, MESSAGE_ID_HEADER, NatsPublisher, NatsQueue, NatsTransport,
};
use async_nats::HeaderMap;
use async_nats::jetstream::Context;
use async_nats::jetstream::message::PublishMessage;
use futures_util::StreamExt;

use super::{Broker, unique_name};

const URL_VARIABLE: &str = "ACKBOX_TEST_NATS_URL";
const PREFIX: &str = "ackboxtest";

pub struct NatsBroker {
    url: String,
    client: async_nats::Client,
    jetstream: Context,
    queue: NatsQueue,
}

impl NatsBroker {
    async fn stream_messages(&self, stream: &str) -> u64 {
        let mut stream = self.jetstream.get_stream(stream).await.unwrap();
        stream.info().await.unwrap().state.messages
    }

    /// The dead letters with their headers, oldest first.
    async fn letters(&self) -> Vec<async_nats::jetstream::message::StreamMessage> {
        let mut stream = self
            .jetstream
            .get_stream(self.queue.dead_letter_stream())
            .await
            .unwrap();
        let state = stream.info().await.unwrap().state.clone();
        let mut letters = Vec::new();
        if state.messages == 0 {
            return letters;
        }
        for sequence in state.first_sequence..=state.last_sequence {
            if let Ok(message) = stream.get_raw_message(sequence).await {
                letters.push(message);
            }
        }
        letters
    }
}

impl Drop for NatsBroker {
    fn drop(&mut self) {
        // A client of its own: this one's connection lives on the test's runtime.
        let url = self.url.clone();
        let names = [
            self.queue.stream().to_owned(),
            self.queue.dead_letter_stream(),
        ];
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let jetstream = async_nats::jetstream::new(async_nats::connect(&url).await.ok()?);
                for name in names {
                    jetstream.delete_stream(&name).await.ok()?;
                }
                Some(())
            })
        })
        .join();
    }
}

/// Deletes test streams older than an hour: a crashed run leaves its own.
///
/// A stream another test is creating right now is listed too, before its
/// store exists, and NATS 2.9 reports its creation time as year 1: such a
/// stream is young, not stale (deleting it failed that test's create with
/// "error creating store for stream").
async fn delete_stale_streams(jetstream: &Context) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
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

#[async_trait]
impl Broker for NatsBroker {
    type Transport = NatsTransport;
    type Publisher = NatsPublisher;
    const DROPS_REPUBLISHED_EVENTS: bool = true;

    fn available() -> bool {
        let available = std::env::var(URL_VARIABLE).is_ok();
        if !available {
            eprintln!(
                "skipped: {URL_VARIABLE} is not set, so the NATS transport is not tested here"
            );
        }
        available
    }

    async fn start(lease_seconds: u32, max_deliveries: u32) -> Self {
        let url = std::env::var(URL_VARIABLE).unwrap();
        let client = async_nats::connect(&url).await.expect("NATS is reachable");
        let jetstream = async_nats::jetstream::new(client.clone());
        delete_stale_streams(&jetstream).await;
        let queue = NatsQueue::new(unique_name(PREFIX))
            .lease(Duration::from_secs(lease_seconds.into()))
            .max_deliveries(max_deliveries);
        queue.declare(&jetstream).await.unwrap();
        Self {
            url,
            client,
            jetstream,
            queue,
        }
    }

    async fn transport(&self) -> NatsTransport {
        NatsTransport::connect(self.client.clone(), self.queue.clone())
            .await
            .unwrap()
    }

    async fn publisher(&self) -> NatsPublisher {
        NatsPublisher::new(self.client.clone())
    }

    fn destination(&self) -> String {
        self.queue.stream().to_owned()
    }

    async fn send(&self, body: &str) -> String {
        let ack = self
            .jetstream
            .publish(self.queue.stream().to_owned(), body.to_owned().into())
            .await
            .unwrap()
            .await
            .unwrap();
        format!("{}:{}", ack.stream, ack.sequence)
    }

    async fn send_batch(&self, bodies: &[String]) {
        // The client bounds publishes awaiting their acknowledgement.
        for chunk in bodies.chunks(1_000) {
            let mut acks = Vec::with_capacity(chunk.len());
            for body in chunk {
                acks.push(
                    self.jetstream
                        .publish(self.queue.stream().to_owned(), body.clone().into())
                        .await
                        .unwrap(),
                );
            }
            for ack in acks {
                ack.await.unwrap();
            }
        }
    }

    async fn depth(&self) -> (u64, u64) {
        let mut stream = self
            .jetstream
            .get_stream(self.queue.stream())
            .await
            .unwrap();
        let info = stream.consumer_info(self.queue.consumer()).await.unwrap();
        let held = u64::try_from(info.num_ack_pending).unwrap();
        // A work queue keeps a message until it is acknowledged or terminated.
        let stored = stream.info().await.unwrap().state.messages;
        (stored.saturating_sub(held), held)
    }

    async fn dead_letter_depth(&self) -> u64 {
        // The transport dead-letters a delivery past the limit when it
        // receives it: receive once.
        let transport = self.transport().await;
        let _ =
            ackbox_consumer::Transport::receive(&transport, 10, Duration::from_millis(200)).await;
        self.stream_messages(&self.queue.dead_letter_stream()).await
    }

    async fn dead_letters(&self) -> Vec<(String, String)> {
        self.letters()
            .await
            .into_iter()
            .map(|letter| {
                let class = letter
                    .headers
                    .get(FAILURE_CLASS_HEADER)
                    .map(|value| value.as_str().to_owned())
                    .unwrap_or_default();
                (String::from_utf8_lossy(&letter.payload).into_owned(), class)
            })
            .collect()
    }

    async fn redrive(&self) {
        let dead_letters = self
            .jetstream
            .get_stream(self.queue.dead_letter_stream())
            .await
            .unwrap();
        for letter in self.letters().await {
            let mut headers = HeaderMap::new();
            if let Some(id) = letter.headers.get(MESSAGE_ID_HEADER) {
                headers.insert(MESSAGE_ID_HEADER, id.as_str());
            }
            self.jetstream
                .send_publish(
                    self.queue.stream().to_owned(),
                    PublishMessage::build()
                        .payload(letter.payload.clone())
                        .headers(headers),
                )
                .await
                .unwrap()
                .await
                .unwrap();
            dead_letters.delete_message(letter.sequence).await.unwrap();
        }
    }
}
