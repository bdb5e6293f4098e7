//! What the throughput examples share: a no-op handler, filling an SQS
//! queue, and timing a consumer until it has applied every message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ackbox_consumer::PgInbox;
use ackbox_consumer::{
    CancellationToken, Consumer, Handler, HandlerError, Inbox, Message, Transport, async_trait,
};
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use sqlx::{Postgres, Transaction};

pub(crate) struct NoOp;

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

/// An SQS client for the broker at `endpoint`, with dummy credentials.
pub(crate) fn sqs_client(endpoint: &str) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("key", "secret", None, None, "static"))
            .endpoint_url(endpoint)
            .build(),
    )
}

/// The PostgreSQL inbox at `database`, with a connection per handler.
pub(crate) async fn pg_inbox(database: &str, concurrency: usize) -> PgInbox {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(u32::try_from(concurrency).unwrap_or(16) + 2)
        .connect(database)
        .await
        .expect("PostgreSQL is reachable");
    let inbox = PgInbox::new(pool);
    inbox.migrate().await.expect("the inbox table exists");
    inbox
}

pub(crate) fn body(index: usize) -> String {
    format!(r#"{{"n":{index}}}"#)
}

/// Sends `messages` to the queue at `url`, ten per batch, 32 batches at once.
pub(crate) async fn fill_sqs(client: &aws_sdk_sqs::Client, url: &str, messages: usize) {
    let mut sends = tokio::task::JoinSet::new();
    for chunk in 0..messages.div_ceil(10) {
        let (client, url) = (client.clone(), url.to_owned());
        sends.spawn(async move {
            let mut request = client.send_message_batch().queue_url(url);
            for index in 0..10 {
                request = request.entries(
                    SendMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .message_body(body(chunk * 10 + index))
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

/// Messages per second a no-op consumer named `name` applies from a full
/// queue, until all `messages` are applied.
pub(crate) async fn consume<T: Transport, I: Inbox<Database = Postgres>>(
    name: &str,
    transport: T,
    inbox: I,
    messages: usize,
    concurrency: usize,
) -> f64 {
    let consumer = Arc::new(
        Consumer::builder(name)
            .transport(transport)
            .inbox(inbox)
            .concurrency(concurrency)
            .wait(Duration::from_secs(1))
            // A benchmark's no-op handler never fails for good.
            .without_dead_letter_queue()
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

pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
