//! The ackbox queue engine: SQS semantics over a durable [`Store`](store::Store).
//!
//! The engine owns visibility leases, delays, retention, long polling and
//! receipt handles. It knows nothing about HTTP: the server translates wire
//! requests into engine calls, and the engine answers with values or
//! [`SqsError`](ackbox_core::error::SqsError)s.
//!
//! # Layout
//! - [`engine`]: the [`Engine`] handle, its configuration and queue administration.
//! - [`send`]: SendMessage and SendMessageBatch.
//! - [`receive`]: ReceiveMessage and long polling.
//! - `lease`: DeleteMessage and ChangeMessageVisibility.
//! - [`redrive`]: message move tasks (redrive of dead-letter queues).
//! - [`nack`]: NackMessage, the failure-reporting extension.
//! - `reaper`: the retention sweeper (and adoption of move tasks started elsewhere).
//! - `follower`: other nodes' changes to a shared store, into this node's cache.
//! - [`secret`]: the installation secret behind receipt handles.
//! - [`queue`]: the cached queue registry and per-queue notifiers.
//! - [`store`]: the [`Store`](store::Store) seam, the embedded SQLite store and
//!   the shared PostgreSQL store.
//!
//! # Example
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use ackbox_core::{clock::SystemClock, receipt::ReceiptKey};
//! use ackbox_engine::{Engine, EngineConfig, receive::ReceiveRequest, send::SendEntry};
//! use ackbox_engine::store::sqlite::{Durability, SqliteStore};
//!
//! let dir = tempfile::tempdir()?;
//! let store = SqliteStore::open(dir.path(), Durability::Fsync)?;
//! let config = EngineConfig::new(ReceiptKey::new(ReceiptKey::generate_secret()));
//! let engine = Engine::start(config, Arc::new(store), Arc::new(SystemClock)).await?;
//! let queue = engine.create_queue("orders", &Default::default(), &Default::default()).await?;
//! let body = "hello".to_owned();
//! engine.send_message(&queue, SendEntry { body, ..SendEntry::default() }, "me").await?;
//! let received = engine.receive_messages(&queue, &ReceiveRequest::default()).await?;
//! engine.delete_message(&queue, &received[0].receipt_handle).await?;
//! engine.shutdown().await?;
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod counters;
pub mod engine;
pub mod error;
mod follower;
mod lease;
pub mod nack;
mod pace;
pub mod queue;
mod reaper;
pub mod receive;
pub mod redrive;
pub mod secret;
pub mod send;
pub mod store;
pub mod topic;

pub use engine::{Engine, EngineConfig, PURGE_AT_ONCE, Purge};
pub use error::EngineError;
pub use lease::PeekedDelete;
