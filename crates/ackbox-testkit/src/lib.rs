//! Test harness for ackbox: real brokers on real sockets, in-process or as a
//! child process that can be `kill -9`ed, plus the official AWS SDK client
//! pointed at them.
//!
//! Use it only from `tests/` directories: a `#[cfg(test)]` unit test that
//! links the testkit would link a second copy of the engine.
//!
//! # Layout
//! - [`server`]: [`TestServer`](server::TestServer), an in-process broker with restart.
//! - [`process`]: [`ServerProcess`](process::ServerProcess), the built binary as a child process.
//! - [`client`]: an `aws-sdk-sqs` client for an endpoint (with given keys, or over HTTPS).
//! - [`faulty_store`]: [`FaultyStore`](faulty_store::FaultyStore), a store that fails chosen calls before or after applying them.
//! - [`postgres`]: a throwaway PostgreSQL schema for the shared store.
//! - [`tls`]: a throwaway certificate authority and server certificate.
//!
//! # Example
//! ```no_run
//! # async fn demo() {
//! use ackbox_testkit::server::TestServer;
//! let server = TestServer::builder().start().await;
//! let client = server.client();
//! client.create_queue().queue_name("q").send().await.unwrap();
//! # }
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod client;
pub mod faulty_store;
pub mod postgres;
pub mod process;
pub mod server;
pub mod tls;
pub mod webdriver;
pub mod writers;
