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

mod common;

use ackbox_consumer::{Claim, ClaimRequest, Inbox, PgInbox, SqsTransport, async_trait};
use common::{consume, fill_sqs, median, pg_inbox, sqs_client};
use sqlx::{Postgres, Transaction};

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

async fn measure<I: Inbox<Database = Postgres>>(
    client: &aws_sdk_sqs::Client,
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
    fill_sqs(client, &url, messages).await;
    let transport = SqsTransport::new(client.clone(), &url).with_ackbox_extensions();
    consume(queue, transport, inbox, messages, concurrency).await
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
    let client = sqs_client(&endpoint);
    let inbox = pg_inbox(&database, concurrency).await;
    let stamp = std::process::id();
    let (mut with_inbox, mut without) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let baseline = measure(
            &client,
            &format!("tp-{stamp}-none-{round}"),
            NoClaim(inbox.clone()),
            messages,
            concurrency,
        )
        .await;
        let claimed = measure(
            &client,
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
