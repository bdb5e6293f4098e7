//! RabbitMQ (`ACKBOX_TEST_AMQP_URL`): a fresh quorum queue per test, with
//! its retry and dead-letter queues, deleted when the test ends (and by the
//! broker an hour after their last use, should a run be killed).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ackbox_consumer::async_trait;
use ackbox_consumer::rabbitmq::{
    FAILURE_CLASS_HEADER, RabbitMqPublisher, RabbitMqQueue, RabbitMqTransport,
};
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use super::{Broker, unique_name};

const URL_VARIABLE: &str = "ACKBOX_TEST_AMQP_URL";

pub struct RabbitMqBroker {
    url: String,
    queue: RabbitMqQueue,
    channel: Channel,
    connection: Connection,
    /// Every transport handed out, for what they hold unacknowledged; weak,
    /// so a dropped transport closes its connection and gives its messages
    /// back, as a stopped process would.
    transports: Mutex<Vec<Weak<RabbitMqTransport>>>,
}

/// Messages ready in `queue`, by a passive declaration (an error if the
/// queue does not exist, which also closes `channel`).
async fn ready_in(channel: &Channel, queue: &str) -> lapin::Result<u64> {
    let declared = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(u64::from(declared.message_count()))
}

impl RabbitMqBroker {
    async fn count(&self, queue: &str) -> u64 {
        ready_in(&self.channel, queue).await.unwrap()
    }

    /// Like `count`, for a queue that may not exist: on a channel of its
    /// own, since asking about a missing queue closes the channel.
    async fn count_if_declared(&self, queue: &str) -> u64 {
        let channel = self.connection.create_channel().await.unwrap();
        let ready = ready_in(&channel, queue).await.unwrap_or(0);
        let _ = channel.close(200, "counted".into()).await;
        ready
    }

    async fn publish(&self, queue: &str, body: &[u8], properties: BasicProperties) {
        let confirm = self
            .channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body,
                properties.with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(confirm.is_ack());
    }

    /// Ready messages, and those waiting to be retried or unacknowledged.
    async fn depth_now(&self) -> (u64, u64) {
        let ready = self.count(self.queue.name()).await;
        let mut waiting = 0;
        for retry_queue in self.queue.retry_queues() {
            waiting += self.count_if_declared(&retry_queue).await;
        }
        let held: u64 = self
            .transports
            .lock()
            .unwrap()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|transport| transport.unsettled())
            .sum();
        (ready, waiting + held)
    }

    /// Takes every dead letter off the queue (unacknowledged), for `look`.
    async fn with_dead_letters<R>(
        &self,
        look: impl FnOnce(&[lapin::message::BasicGetMessage]) -> R,
    ) -> R {
        let mut taken = Vec::new();
        while let Some(message) = self
            .channel
            .basic_get(
                self.queue.dead_letter_queue().as_str().into(),
                BasicGetOptions::default(),
            )
            .await
            .unwrap()
        {
            taken.push(message);
        }
        look(&taken)
    }
}

/// The queues go when the test ends, passed or failed: hundreds of idle
/// quorum queues slow the broker down for every later test.
impl Drop for RabbitMqBroker {
    fn drop(&mut self) {
        let url = self.url.clone();
        let mut names = vec![self.queue.name().to_owned(), self.queue.dead_letter_queue()];
        names.extend(self.queue.retry_queues());
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let connection = Connection::connect(&url, ConnectionProperties::default())
                    .await
                    .ok()?;
                for name in names {
                    // Retry queues exist only once used, and an error
                    // closes its channel: one channel per queue.
                    let channel = connection.create_channel().await.ok()?;
                    let _ = channel
                        .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                        .await;
                }
                connection.close(200, "test done".into()).await.ok()
            })
        })
        .join();
        if !matches!(deleted, Ok(Some(()))) {
            eprintln!("the test queues were not deleted; the broker drops them within the hour");
        }
    }
}

fn header_text(properties: &BasicProperties, name: &str) -> Option<String> {
    match properties.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongString(text) => Some(String::from_utf8_lossy(text.as_bytes()).into_owned()),
        _ => None,
    }
}

#[async_trait]
impl Broker for RabbitMqBroker {
    type Transport = Arc<RabbitMqTransport>;
    type Publisher = RabbitMqPublisher;
    const DROPS_REPUBLISHED_EVENTS: bool = false;

    fn available() -> bool {
        let available = std::env::var(URL_VARIABLE).is_ok();
        if !available {
            eprintln!(
                "skipped: {URL_VARIABLE} is not set, so the RabbitMQ transport is not tested here"
            );
        }
        available
    }

    async fn start(lease_seconds: u32, max_deliveries: u32) -> Self {
        let url = std::env::var(URL_VARIABLE).unwrap();
        let queue = RabbitMqQueue::new(unique_name("work"))
            .lease(Duration::from_secs(lease_seconds.into()))
            .max_deliveries(max_deliveries)
            .expires(Duration::from_secs(3_600));
        let connection = Connection::connect(&url, ConnectionProperties::default())
            .await
            .expect("RabbitMQ is reachable");
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        queue.declare(&channel).await.unwrap();
        Self {
            url,
            queue,
            channel,
            connection,
            transports: Mutex::default(),
        }
    }

    async fn transport(&self) -> Arc<RabbitMqTransport> {
        let transport = Arc::new(
            RabbitMqTransport::connect(&self.url, self.queue.clone())
                .await
                .unwrap(),
        );
        self.transports
            .lock()
            .unwrap()
            .push(Arc::downgrade(&transport));
        transport
    }

    async fn publisher(&self) -> RabbitMqPublisher {
        RabbitMqPublisher::connect(&self.url).await.unwrap()
    }

    fn destination(&self) -> String {
        self.queue.name().to_owned()
    }

    async fn send(&self, body: &str) -> String {
        let id = unique_name("message");
        self.publish(
            self.queue.name(),
            body.as_bytes(),
            BasicProperties::default().with_message_id(id.as_str().into()),
        )
        .await;
        id
    }

    async fn send_batch(&self, bodies: &[String]) {
        let mut confirms = Vec::with_capacity(bodies.len());
        for body in bodies {
            let id = unique_name("message");
            confirms.push(
                self.channel
                    .basic_publish(
                        "".into(),
                        self.queue.name().into(),
                        BasicPublishOptions::default(),
                        body.as_bytes(),
                        BasicProperties::default()
                            .with_message_id(id.as_str().into())
                            .with_delivery_mode(2),
                    )
                    .await
                    .unwrap(),
            );
        }
        for confirm in confirms {
            assert!(confirm.await.unwrap().is_ack());
        }
    }

    async fn depth(&self) -> (u64, u64) {
        let depth = self.depth_now().await;
        if depth != (0, 0) {
            return depth;
        }
        // A message on its way to a consumer, or given back and not yet
        // requeued, is counted nowhere for a moment: look again.
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.depth_now().await
    }

    async fn dead_letter_depth(&self) -> u64 {
        // The broker dead-letters a message given back past its delivery
        // limit; the transport, one it receives past the limit: receive once.
        let transport = self.transport().await;
        let _ =
            ackbox_consumer::Transport::receive(&transport, 10, Duration::from_millis(200)).await;
        // Closed before going on: a transport closing in the background
        // still takes deliveries — a redriven message among them, which
        // would come back past its delivery limit.
        let _ = transport.close().await;
        self.count(&self.queue.dead_letter_queue()).await
    }

    async fn dead_letters(&self) -> Vec<(String, String)> {
        let (letters, last_tag) = self
            .with_dead_letters(|messages| {
                let letters = messages
                    .iter()
                    .map(|message| {
                        let properties = &message.delivery.properties;
                        let class = header_text(properties, FAILURE_CLASS_HEADER)
                            .or_else(|| header_text(properties, "x-first-death-reason"))
                            .unwrap_or_default();
                        (
                            String::from_utf8_lossy(&message.delivery.data).into_owned(),
                            class,
                        )
                    })
                    .collect::<Vec<_>>();
                (
                    letters,
                    messages.last().map(|message| message.delivery.delivery_tag),
                )
            })
            .await;
        if let Some(tag) = last_tag {
            self.channel
                .basic_nack(
                    tag,
                    BasicNackOptions {
                        multiple: true,
                        requeue: true,
                    },
                )
                .await
                .unwrap();
        }
        letters
    }

    async fn redrive(&self) {
        let taken = self
            .with_dead_letters(|messages| {
                messages
                    .iter()
                    .map(|message| {
                        (
                            message.delivery.data.clone(),
                            message.delivery.properties.message_id().clone(),
                            message.delivery.delivery_tag,
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .await;
        for (body, id, tag) in taken {
            let mut properties = BasicProperties::default();
            if let Some(id) = id {
                properties = properties.with_message_id(id);
            }
            self.publish(self.queue.name(), &body, properties).await;
            self.channel
                .basic_ack(tag, BasicAckOptions::default())
                .await
                .unwrap();
        }
    }
}
