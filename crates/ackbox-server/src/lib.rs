//! The ackbox server: the Amazon SQS wire protocol over the ackbox engine.
//!
//! It speaks AWS JSON 1.0 (`X-Amz-Target: AmazonSQS.<Action>`) and the
//! query protocol (form-encoded `Action=…`, answered in XML), answers
//! `/healthz`, and shuts down gracefully: stop accepting, end long polls,
//! finish requests, flush the store.
//!
//! # Layout
//! - [`broker`]: store + engine + HTTP in one call ([`RunningBroker`](broker::RunningBroker)).
//! - [`app`]: the router, request ids, body limits, authentication, protocol selection.
//! - [`listener`]: accepting connections, TLS, connection and header limits, [`serve`](listener::serve).
//! - [`limits`]: sizes, connection counts and timeouts.
//! - [`tls`]: certificates for HTTPS.
//! - [`operation`]: the actions by name, target and permission (what the protocols need).
//! - [`protocol`]: wire protocols (JSON 1.0, query).
//! - [`action`]: one module per SQS action, and authorization.
//! - [`auth`]: SigV4 authentication, the credentials file, callers.
//! - [`push`]: the worker posting topics' messages to `http`/`https` subscriptions.
//! - [`error`]: the one mapping from failures to SQS error responses.
//! - [`shutdown`]: the SIGINT/SIGTERM signal.
//!
//! # Example
//! ```no_run
//! # async fn demo(engine: ackbox_engine::Engine) -> Result<(), Box<dyn std::error::Error>> {
//! use ackbox_server::app::AppState;
//! use ackbox_server::listener::serve;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9324").await?;
//! let state = AppState::new(engine, "http://127.0.0.1:9324");
//! serve(listener, state, None, ackbox_server::shutdown::signal()).await?;
//! # Ok(()) }
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod action;
pub mod app;
pub mod auth;
pub mod broker;
pub mod error;
pub mod history;
pub mod limits;
pub mod listener;
pub mod operation;
pub mod protocol;
pub mod push;
pub mod shutdown;
pub mod telemetry;
pub mod tls;
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
