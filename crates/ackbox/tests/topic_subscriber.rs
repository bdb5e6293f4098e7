//! The consumer SDK and a topic, through the real binary: a queue
//! subscribes to a topic in SNS's envelope, SNS may deliver one publish
//! twice (two SQS messages, one envelope), and the consumer — which
//! unwraps the envelope and keys the effect on the publish's `MessageId` —
//! applies it once, in the application's own SQLite database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ackbox_consumer::{
    CancellationToken, Consumer, Handler, HandlerError, Message, SqliteInbox, SqsTransport,
    async_trait,
};
use ackbox_testkit::client::{
    create_queue, create_topic, queue_arn, queue_depth, sns_client, sqs_client, subscribe_queue,
};
use ackbox_testkit::process::{ServerProcess, free_port};
use aws_sdk_sqs::types::QueueAttributeName;
use sqlx::{Sqlite, SqlitePool, Transaction};

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");

/// Records each message it applies: its body and its effect key.
struct Ledger;

#[async_trait]
impl Handler<Sqlite> for Ledger {
    async fn handle(
        &self,
        message: &Message,
        transaction: &mut Transaction<'static, Sqlite>,
    ) -> Result<(), HandlerError> {
        sqlx::query("INSERT INTO ledger (body, event_id) VALUES ($1, $2)")
            .bind(&message.body)
            .bind(message.event_id())
            .execute(&mut **transaction)
            .await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_delivered_twice_to_a_subscriber_is_applied_once_through_the_binary() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let (sqs, sns) = (sqs_client(&server.url()), sns_client(&server.url()));
    let dlq = create_queue(&sqs, "orders-dlq").await;
    let dlq_arn = queue_arn(&sqs, &dlq).await;
    let orders = sqs
        .create_queue()
        .queue_name("orders")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":5}}"#),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let topic = create_topic(&sns, "order-events").await;
    subscribe_queue(&sns, &topic, "orders", false).await;
    let published = sns
        .publish()
        .topic_arn(&topic)
        .message(r#"{"order":9}"#)
        .send()
        .await
        .unwrap()
        .message_id
        .unwrap();
    // The duplicate SNS would deliver: the same envelope, another message.
    let delivered = sqs
        .receive_message()
        .queue_url(&orders)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let envelope = delivered.messages()[0].body().unwrap().to_owned();
    assert!(envelope.contains("\"Notification\""), "{envelope}");
    sqs.send_message()
        .queue_url(&orders)
        .message_body(&envelope)
        .send()
        .await
        .unwrap();

    let app = tempfile::tempdir().unwrap();
    let pool = SqlitePool::connect_with(
        sqlx::sqlite::SqliteConnectOptions::new()
            .filename(app.path().join("app.sqlite"))
            .create_if_missing(true),
    )
    .await
    .unwrap();
    sqlx::query("CREATE TABLE ledger (body TEXT NOT NULL, event_id TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let consumer = Arc::new(
        Consumer::builder("fulfilment")
            .transport(SqsTransport::new(sqs.clone(), &orders).with_ackbox_extensions())
            .inbox(SqliteInbox::new(pool.clone()))
            .wait(Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    let shutdown = CancellationToken::new();
    let running = {
        let (consumer, shutdown) = (Arc::clone(&consumer), shutdown.clone());
        tokio::spawn(async move { consumer.run(Ledger, shutdown).await })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while consumer.stats().applied() + consumer.stats().duplicates() < 2 {
        assert!(
            Instant::now() < deadline,
            "both deliveries decided within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();

    let ledger: Vec<(String, String)> = sqlx::query_as("SELECT body, event_id FROM ledger")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        ledger,
        [(r#"{"order":9}"#.to_owned(), published)],
        "one effect, of the message inside the envelope, keyed on the publish's id"
    );
    assert_eq!(consumer.stats().duplicates(), 1);
    assert_eq!(queue_depth(&sqs, &orders).await, 0, "both acknowledged");
    assert!(server.terminate(), "the server exits cleanly");
}
