//! Effectively-once message consumers.
//!
//! Exactly-once *delivery* is impossible; exactly-once *effect* costs one
//! extra write per message. For every delivery, `ackbox-consumer`:
//!
//! 1. opens a transaction on the application's database and, as its first
//!    statement, claims the message's effect key in the inbox table;
//! 2. if the key was claimed before, acknowledges the message without calling
//!    the handler (a duplicate);
//! 3. otherwise calls the handler with the message and the transaction,
//!    commits, and only then acknowledges the message.
//!
//! A crash anywhere leaves either nothing (the transaction rolled back, the
//! message comes back) or the effect *and* its claim (the message comes back
//! and is a duplicate). A concurrent duplicate blocks on the uncommitted claim
//! and then sees it. Transient failures come back with exponential backoff
//! and full jitter, up to a bounded number of attempts; permanent ones go to
//! the dead-letter queue at once, with the reason. A heartbeat extends the
//! lease of every message the consumer holds, and a handler timeout bounds
//! each handler call.
//!
//! On FIFO queues the messages of one group run one at a time, in delivery
//! order, while groups run side by side ([`GroupOrder`]); a failing message
//! is retried in place and holds its group until it succeeds or is
//! dead-lettered. A consumer refuses to start on a queue without a
//! dead-letter queue unless told to accept one. Replayed messages (the
//! `ackbox.replay` attribute) are skipped, caught up or re-applied as the
//! handler says ([`OnReplay`]), and never make an external call through
//! [`effects::Effects::run`]. A [`Router`] sends each event type to its
//! handler and dead-letters a type nobody handles, naming it.
//!
//! A complete consumer, with its inbox in PostgreSQL, against ackbox:
//!
//! ```no_run
//! use ackbox_consumer::{Consumer, Handler, HandlerError, Message, PgInbox, RetryPolicy, SqsTransport};
//! use ackbox_consumer::{async_trait, CancellationToken};
//! use sqlx::{Postgres, Transaction};
//!
//! #[derive(serde::Deserialize)]
//! struct Payment { payment_id: String, account: String, cents: i64 }
//!
//! struct ApplyPayment;
//!
//! #[async_trait]
//! impl Handler<Postgres> for ApplyPayment {
//!     async fn handle(&self, message: &Message, tx: &mut Transaction<'static, Postgres>) -> Result<(), HandlerError> {
//!         let payment: Payment = message.json()?; // a malformed body is permanent
//!         sqlx::query("UPDATE accounts SET balance = balance + $1 WHERE id = $2")
//!             .bind(payment.cents).bind(&payment.account)
//!             .execute(&mut **tx).await?; // database errors are transient
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let endpoint = "http://127.0.0.1:9324";
//! let sqs = aws_sdk_sqs::Client::from_conf(aws_sdk_sqs::Config::builder()
//!     .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
//!     .region(aws_sdk_sqs::config::Region::new("us-east-1"))
//!     .credentials_provider(aws_sdk_sqs::config::Credentials::new("key", "secret", None, None, "static"))
//!     .endpoint_url(endpoint).build());
//! let pool = sqlx::PgPool::connect("postgres://127.0.0.1/test").await?;
//! let consumer = Consumer::builder("payments")
//!     .transport(SqsTransport::new(sqs, format!("{endpoint}/000000000000/payments")).with_ackbox_extensions())
//!     .inbox(PgInbox::new(pool))
//!     .effect_key(|message| message.json::<Payment>().map_or_else(|_| message.id.clone(), |p| p.payment_id))
//!     .concurrency(16)
//!     .retry(RetryPolicy::exponential(5, std::time::Duration::from_secs(1), std::time::Duration::from_secs(60)))
//!     .build()?;
//! let shutdown = CancellationToken::new();
//! consumer.run(ApplyPayment, shutdown).await?;
//! # Ok(()) }
//! ```
//!
//! Transports: [`SqsTransport`] (ackbox, AWS); with the feature `rabbitmq`,
//! `rabbitmq::RabbitMqTransport` (quorum queues through `lapin`); with the
//! feature `nats`, `nats::NatsTransport` (JetStream through `async-nats`).
//! The outbox relay publishes through the matching `*Publisher`. With the
//! feature `push`, `push::PushEndpoint` takes a topic's `http`/`https`
//! pushes as deliveries, through the same inbox.
//!
//! Each attempt is an OpenTelemetry span continuing the trace of the
//! message's `traceparent` attribute, and outbox events carry the current
//! span on ([`trace`]); with the feature `otlp`, `otlp::install` exports
//! spans to a collector.
//!
//! The inbox TTL defaults to the queue's redelivery horizon (maxReceiveCount
//! × VisibilityTimeout + MessageRetentionPeriod + the dead-letter queue's
//! retention) plus an hour; a shorter configured TTL is refused at start.
//! [`testing`] has a fault kit to exercise handlers under crashes,
//! duplicates and reordering.

mod consumer;
mod context;
mod decision;
pub mod effects;
mod error;
mod group;
mod handler;
mod handling;
mod held;
mod inbox;
#[cfg(any(feature = "rabbitmq", feature = "nats"))]
mod lease;
mod message;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod outbox;
pub mod projection;
#[cfg(feature = "push")]
pub mod push;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
mod retry;
mod router;
mod schema;
mod sqs;
mod telemetry;
pub mod testing;
pub mod trace;
mod transport;

pub use async_trait::async_trait;
pub use consumer::{Consumer, ConsumerBuilder, EffectKey};
pub use decision::{ConsumerStats, Decision};
pub use error::{ConsumerError, Failure, HandlerError, TransportError};
pub use group::GroupOrder;
pub use handler::{Handler, OnReplay, ResultHandler};
pub use inbox::{Claim, ClaimRequest, Inbox, PgInbox, SqliteInbox};
pub use message::{
    AGGREGATE_ID_ATTRIBUTE, AGGREGATE_VERSION_ATTRIBUTE, CAUSATION_ID_ATTRIBUTE,
    CORRELATION_ID_ATTRIBUTE, Delivery, EVENT_ID_ATTRIBUTE, EVENT_TYPE_ATTRIBUTE, Message,
    REPLAY_ATTRIBUTE, TOPIC_ARN_ATTRIBUTE,
};
pub use retry::{RetryBudget, RetryPolicy};
pub use router::Router;
pub use sqs::{SqsPublisher, SqsTransport};
pub use telemetry::MOST_EVENT_TYPES;
pub use tokio_util::sync::CancellationToken;
pub use transport::{QueueSettings, Transport};
