//! No-op handler throughput through `ackbox-consumer` over each transport,
//! with the PostgreSQL inbox: ackbox (SQS API), RabbitMQ (quorum queue) and
//! NATS JetStream (file storage), alternating for several rounds. Each round
//! fills a fresh queue, then times the consumer until every message is
//! applied.
//!
//! ```sh
//! cargo run --release -p ackbox -- serve &
//! cargo run --release -p ackbox-consumer --example transports -- \
//!     http://127.0.0.1:9324 amqp://guest:guest@127.0.0.1:5672/%2f nats://127.0.0.1:4222 \
//!     postgres://postgres@127.0.0.1:5432/test 10000 16 3
//! ```

mod common;

use std::time::Duration;

use ackbox_consumer::SqsTransport;
use ackbox_consumer::nats::{NatsQueue, NatsTransport};
use ackbox_consumer::rabbitmq::{RabbitMqQueue, RabbitMqTransport};
use common::{body, consume, fill_sqs, median, pg_inbox, sqs_client};

struct Targets {
    amqp: String,
    nats: async_nats::Client,
    sqs: aws_sdk_sqs::Client,
}

impl Targets {
    async fn sqs(&self, queue: &str, messages: usize) -> SqsTransport {
        let url = self
            .sqs
            .create_queue()
            .queue_name(queue)
            .send()
            .await
            .expect("CreateQueue succeeds")
            .queue_url
            .expect("a queue URL");
        fill_sqs(&self.sqs, &url, messages).await;
        SqsTransport::new(self.sqs.clone(), &url).with_ackbox_extensions()
    }

    async fn rabbitmq(&self, queue: &str, messages: usize, prefetch: u16) -> RabbitMqTransport {
        let queue = RabbitMqQueue::new(queue)
            .prefetch(prefetch)
            .expires(Duration::from_secs(600));
        let connection =
            lapin::Connection::connect(&self.amqp, lapin::ConnectionProperties::default())
                .await
                .expect("RabbitMQ is reachable");
        let channel = connection.create_channel().await.expect("a channel");
        channel
            .confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        queue.declare(&channel).await.expect("the queues exist");
        let mut confirms = Vec::with_capacity(messages);
        for index in 0..messages {
            confirms.push(
                channel
                    .basic_publish(
                        "".into(),
                        queue.name().into(),
                        lapin::options::BasicPublishOptions::default(),
                        body(index).as_bytes(),
                        lapin::BasicProperties::default()
                            .with_message_id(format!("m{index}").into())
                            .with_delivery_mode(2),
                    )
                    .await
                    .expect("published"),
            );
        }
        for confirm in confirms {
            assert!(confirm.await.expect("confirmed").is_ack());
        }
        RabbitMqTransport::connect(&self.amqp, queue)
            .await
            .expect("a RabbitMQ transport")
    }

    async fn nats(&self, stream: &str, messages: usize) -> NatsTransport {
        let queue = NatsQueue::new(stream);
        let jetstream = async_nats::jetstream::new(self.nats.clone());
        queue.declare(&jetstream).await.expect("the streams exist");
        // The client bounds publishes awaiting their acknowledgement.
        for chunk in (0..messages).collect::<Vec<_>>().chunks(1_000) {
            let mut acks = Vec::with_capacity(chunk.len());
            for &index in chunk {
                acks.push(
                    jetstream
                        .publish(stream.to_owned(), body(index).into())
                        .await
                        .expect("published"),
                );
            }
            for ack in acks {
                ack.await.expect("stored");
            }
        }
        NatsTransport::connect(self.nats.clone(), queue)
            .await
            .expect("a NATS transport")
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let argument = |index: usize, default: &str| args.get(index).cloned().unwrap_or(default.into());
    let endpoint = argument(1, "http://127.0.0.1:9324");
    let amqp = argument(2, "amqp://guest:guest@127.0.0.1:5672/%2f");
    let nats_url = argument(3, "nats://127.0.0.1:4222");
    let database = argument(4, "postgres://postgres@127.0.0.1:5432/test");
    let messages: usize = argument(5, "10000").parse().expect("a message count");
    let concurrency: usize = argument(6, "16").parse().expect("a concurrency");
    let rounds: usize = argument(7, "3").parse().expect("a round count");
    let targets = Targets {
        sqs: sqs_client(&endpoint),
        nats: async_nats::connect(nats_url)
            .await
            .expect("NATS is reachable"),
        amqp,
    };
    let inbox = pg_inbox(&database, concurrency).await;
    let stamp = std::process::id();
    let prefetch = u16::try_from(concurrency).unwrap_or(u16::MAX);
    let (mut sqs, mut rabbitmq, mut nats) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let name = format!("tp_{stamp}_{round}");
        let transport = targets.sqs(&name, messages).await;
        sqs.push(
            consume(
                &format!("{name}_sqs"),
                transport,
                inbox.clone(),
                messages,
                concurrency,
            )
            .await,
        );
        let transport = targets.rabbitmq(&name, messages, prefetch).await;
        rabbitmq.push(
            consume(
                &format!("{name}_amqp"),
                transport,
                inbox.clone(),
                messages,
                concurrency,
            )
            .await,
        );
        let transport = targets.nats(&name, messages).await;
        nats.push(
            consume(
                &format!("{name}_nats"),
                transport,
                inbox.clone(),
                messages,
                concurrency,
            )
            .await,
        );
        println!(
            "round {round}: ackbox (SQS API) {:.0} msg/s, RabbitMQ {:.0} msg/s, NATS JetStream {:.0} msg/s",
            sqs[round], rabbitmq[round], nats[round]
        );
    }
    println!(
        "median of {rounds} rounds, {messages} messages, concurrency {concurrency}, PostgreSQL inbox:\n  \
         ackbox (SQS API)  {:>8.0} msg/s\n  RabbitMQ          {:>8.0} msg/s\n  NATS JetStream    {:>8.0} msg/s",
        median(&mut sqs),
        median(&mut rabbitmq),
        median(&mut nats)
    );
}
