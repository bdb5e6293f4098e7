//! Domain types shared by every ackbox crate: SQS limits and error codes,
//! queue names and attributes, message attributes and their digests, receipt
//! handles and the clock.
//!
//! Nothing here knows about HTTP or SQL; the engine, the server and the SDK all
//! build on these types so that a limit or an error code is defined once.
//!
//! # Layout
//! - [`error`]: [`ErrorCode`](error::ErrorCode) and [`SqsError`](error::SqsError).
//! - [`limits`]: the numeric limits of SQS.
//! - [`queue_name`]: queue names, URLs, ARNs and the [`Realm`](queue_name::Realm).
//! - [`attributes`]: queue attributes with their ranges and defaults.
//! - [`message`]: message attributes, body rules and size.
//! - [`digest`]: `MD5OfMessageBody` and `MD5OfMessageAttributes`.
//! - [`receipt`]: sealed receipt handles.
//! - [`redrive`]: dead-letter policies (`RedrivePolicy`, `RedriveAllowPolicy`).
//! - [`fair_queue`]: which tenants of a standard queue are noisy, and the order a receive takes them in.
//! - [`clock`]: [`Clock`](clock::Clock), system and manual.
//! - [`utc`]: calendar times of timestamps (SigV4 dates, RFC 3339 for people).
//!
//! # Example
//! ```
//! use ackbox_core::queue_name::{QueueName, Realm};
//! let name: QueueName = "orders".parse()?;
//! assert_eq!(Realm::default().queue_arn(&name), "arn:aws:sqs:us-east-1:000000000000:orders");
//! # Ok::<(), ackbox_core::error::SqsError>(())
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod archive_policy;
pub mod attributes;
pub mod clock;
pub mod delivery_policy;
pub mod digest;
pub mod error;
pub mod fair_queue;
pub mod filter_policy;
pub mod limits;
pub mod message;
pub mod queue_name;
pub mod receipt;
pub mod receive_policy;
pub mod redrive;
pub mod topic_name;
pub mod utc;
pub mod visibility_change;
