//! Throughput of a no-op handler through `ackbox-consumer`, with the
//! PostgreSQL inbox and with a baseline that claims nothing (the same
//! transaction, begun and committed, without the inbox row), alternating for
//! several rounds against a running broker.
//!
//! ```sh
//! cargo run --release -p ackbox -- serve &
//! cargo run --release -p ackbox-consumer --example throughput -- \
//!     http://127.0.0.1:9324 postgres://postgres@127.0.0.1:5432/test 20000 16 3
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use ackbox_consumer::{
    CancellationToken, Claim, ClaimRequest, Consumer, Handler, HandlerError, Inbox, Message,
    PgInbox, SqsTransport, async_trait,
};
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use sqlx::{Postgres, Transaction};

struct NoOp;

#[async_trait]
impl Handler<Postgres> for NoOp {
    async fn handle(
        &self,
        _: &Message,
        _: &mut Transaction<'static, Postgres>,
    ) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// The baseline: the handler's transaction without the inbox row.
#[derive(Clone)]
struct NoClaim(PgInbox);

#[async_trait]
impl Inbox for NoClaim {
    type Database = Postgres;

    async fn migrate(&self) -> Result<(), sqlx::Error> {
        Ok(())
    }

    async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.0.begin().await
    }

    async fn claim(
        &self,
        _: &mut Transaction<'static, Postgres>,
        _: ClaimRequest<'_>,
    ) -> Result<Claim, sqlx::Error> {
        Ok(Claim::Fresh)
    }

    async fn store_result(
        &self,
        _: &mut Transaction<'static, Postgres>,
        _: &str,
        _: &str,
        _: &str,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }

    async fn purge_expired(&self, _: i64) -> Result<u64, sqlx::Error> {
        Ok(0)
    }
}

async fn fill(client: &aws_sdk_sqs::Client, url: &str, messages: usize) {
    let mut sends = tokio::task::JoinSet::new();
    for chunk in 0..messages.div_ceil(10) {
        let (client, url) = (client.clone(), url.to_owned());
        sends.spawn(async move {
            let mut request = client.send_message_batch().queue_url(url);
            for index in 0..10 {
                request = request.entries(
                    SendMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .message_body(format!(r#"{{"n":{}}}"#, chunk * 10 + index))
                        .build()
                        .expect("a valid entry"),
                );
            }
            request.send().await.expect("SendMessageBatch succeeds");
        });
        while sends.len() >= 32 {
            sends.join_next().await;
        }
    }
    while sends.join_next().await.is_some() {}
}

async fn measure<I: Inbox<Database = Postgres>>(
    client: &aws_sdk_sqs::Client,
    endpoint: &str,
    queue: &str,
    inbox: I,
    messages: usize,
    concurrency: usize,
) -> f64 {
    let url = client
        .create_queue()
        .queue_name(queue)
        .send()
        .await
        .expect("CreateQueue succeeds")
        .queue_url
        .expect("a queue URL");
    fill(client, &url, messages).await;
    let consumer = Arc::new(
        Consumer::builder(queue)
            .transport(SqsTransport::new(client.clone(), &url).with_ackbox_extensions(endpoint))
            .inbox(inbox)
            .concurrency(concurrency)
            .wait(Duration::from_secs(1))
            .build()
            .expect("a consumer"),
    );
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let running = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(NoOp, shutdown).await })
    };
    while consumer.stats().applied() < messages as u64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    shutdown.cancel();
    running
        .await
        .expect("the consumer task")
        .expect("the consumer ran");
    messages as f64 / seconds
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let endpoint = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "http://127.0.0.1:9324".into());
    let database = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
    let messages: usize = args
        .get(3)
        .and_then(|value| value.parse().ok())
        .unwrap_or(20_000);
    let concurrency: usize = args
        .get(4)
        .and_then(|value| value.parse().ok())
        .unwrap_or(16);
    let rounds: usize = args
        .get(5)
        .and_then(|value| value.parse().ok())
        .unwrap_or(3);
    let client = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("key", "secret", None, None, "static"))
            .endpoint_url(&endpoint)
            .build(),
    );
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(u32::try_from(concurrency).unwrap_or(16) + 2)
        .connect(&database)
        .await
        .expect("PostgreSQL is reachable");
    let inbox = PgInbox::new(pool);
    inbox.migrate().await.expect("the inbox table exists");
    let stamp = std::process::id();
    let (mut with_inbox, mut without) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let baseline = measure(
            &client,
            &endpoint,
            &format!("tp-{stamp}-none-{round}"),
            NoClaim(inbox.clone()),
            messages,
            concurrency,
        )
        .await;
        let claimed = measure(
            &client,
            &endpoint,
            &format!("tp-{stamp}-inbox-{round}"),
            inbox.clone(),
            messages,
            concurrency,
        )
        .await;
        println!(
            "round {round}: no inbox {baseline:>8.0} msg/s | PostgreSQL inbox {claimed:>8.0} msg/s"
        );
        without.push(baseline);
        with_inbox.push(claimed);
    }
    let (baseline, claimed) = (median(&mut without), median(&mut with_inbox));
    println!(
        "median of {rounds}: no inbox {baseline:.0} msg/s, PostgreSQL inbox {claimed:.0} msg/s \
         (concurrency {concurrency}, {messages} messages); inbox overhead {:.0} µs per message",
        (1.0 / claimed - 1.0 / baseline) * 1e6
    );
}
