//! The ackbox server: the Amazon SQS wire protocol over the ackbox engine.
//!
//! It speaks AWS JSON 1.0 (`X-Amz-Target: AmazonSQS.<Action>`), answers
//! `/healthz`, and shuts down gracefully: stop accepting, end long polls,
//! finish requests, flush the store.
//!
//! # Layout
//! - [`broker`]: store + engine + HTTP in one call ([`RunningBroker`](broker::RunningBroker)).
//! - [`app`]: the router, request ids, protocol selection and [`serve`](app::serve).
//! - [`protocol`]: wire protocols (JSON 1.0).
//! - [`action`]: one module per SQS action.
//! - [`error`]: the one mapping from failures to SQS error responses.
//! - [`shutdown`]: the SIGINT/SIGTERM signal.
//!
//! # Example
//! ```no_run
//! # async fn demo(engine: ackbox_engine::Engine) -> Result<(), Box<dyn std::error::Error>> {
//! use ackbox_server::app::{AppState, serve};
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9324").await?;
//! let state = AppState { engine, fallback_base_url: "http://127.0.0.1:9324".into(), ui_read_only: false, history: Default::default() };
//! serve(listener, state, ackbox_server::shutdown::signal()).await?;
//! # Ok(()) }
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod action;
pub mod app;
pub mod broker;
pub mod error;
pub mod history;
pub mod protocol;
pub mod shutdown;
pub mod telemetry;
mod ui;

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The HTTP server failed.
    #[error("serving HTTP failed")]
    Serve {
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Flushing or closing the engine failed.
    #[error("closing the engine failed")]
    Close {
        /// The engine's error.
        #[source]
        source: ackbox_engine::EngineError,
    },
}
