//! `AckBox.NackMessage` (extension): give a message back with the reason it
//! failed; see `docs/protocol-extensions.md`.

use ackbox_engine::nack::{NackDisposition, NackRequest};
use ackbox_engine::store::FailureReport;
use serde::{Deserialize, Serialize};

use super::RequestContext;
use crate::error::ApiError;

/// NackMessage request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// The queue.
    pub queue_url: String,
    /// The handle from ReceiveMessage.
    pub receipt_handle: String,
    /// Seconds until the message is visible again, if it stays (0..=43,200).
    #[serde(default)]
    pub delay_seconds: i32,
    /// Why it failed.
    #[serde(default)]
    pub reason: Option<Reason>,
    /// Dead-letter the message now.
    #[serde(default)]
    pub permanent: bool,
}

/// A failure reason.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Reason {
    /// The failure's class, such as an error type (≤ 256 characters).
    pub class: String,
    /// What went wrong (≤ 4 KiB).
    #[serde(default)]
    pub message: String,
}

/// NackMessage response.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// `Retried` or `DeadLettered`.
    pub disposition: &'static str,
}

/// Runs NackMessage.
pub async fn handle(context: &RequestContext, request: Request) -> Result<Response, ApiError> {
    let name = context.queue_name(&request.queue_url)?;
    let disposition = context
        .engine
        .nack_message(
            &name,
            &request.receipt_handle,
            NackRequest {
                delay_seconds: request.delay_seconds,
                reason: request.reason.map(|reason| FailureReport {
                    class: reason.class,
                    message: reason.message,
                }),
                permanent: request.permanent,
            },
        )
        .await?;
    Ok(Response {
        disposition: match disposition {
            NackDisposition::Retried => "Retried",
            NackDisposition::DeadLettered => "DeadLettered",
        },
    })
}
