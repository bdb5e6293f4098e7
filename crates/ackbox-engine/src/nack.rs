//! NackMessage (an ackbox extension): a consumer gives a message back and
//! says why it failed.
//!
//! The reason is recorded on the message (count, first and last time, last
//! class and text) and travels with it into the dead-letter queue, where
//! operators read it as `AckBoxFailure*` system attributes. A permanent
//! failure, or one on a message that has used up its receives, moves the
//! message to the dead-letter queue at once and atomically; otherwise the
//! message becomes visible again after the requested delay.

use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::limits::MAX_VISIBILITY_TIMEOUT_SECONDS;
use ackbox_core::queue_name::QueueName;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::store::{DeadLetterTarget, FailureReport, MessageNackParams, NackOutcome};

/// Longest failure class, in characters.
pub const MAX_FAILURE_CLASS_CHARS: usize = 256;
/// Longest failure message, in bytes.
pub const MAX_FAILURE_MESSAGE_BYTES: usize = 4_096;

/// A NackMessage request, protocol-neutral.
#[derive(Debug, Clone, Default)]
pub struct NackRequest {
    /// Seconds until the message is visible again, if it stays (0..=43,200).
    pub delay_seconds: i32,
    /// Why it failed.
    pub reason: Option<FailureReport>,
    /// Dead-letter it now: retrying cannot help.
    pub permanent: bool,
}

/// Where a nacked message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackDisposition {
    /// It stays and becomes visible after the delay.
    Retried,
    /// It moved to the dead-letter queue.
    DeadLettered,
}

impl NackRequest {
    fn validate(&self) -> Result<(), SqsError> {
        if !(0..=MAX_VISIBILITY_TIMEOUT_SECONDS).contains(&i64::from(self.delay_seconds)) {
            return Err(SqsError::invalid_parameter(
                "DelaySeconds",
                self.delay_seconds,
                &format!("Must be between 0 and {MAX_VISIBILITY_TIMEOUT_SECONDS}."),
            ));
        }
        if let Some(reason) = &self.reason {
            let chars = reason.class.chars().count();
            if chars == 0 || chars > MAX_FAILURE_CLASS_CHARS {
                return Err(SqsError::invalid_value(format!(
                    "Reason.Class must be 1 to {MAX_FAILURE_CLASS_CHARS} characters long; it has {chars}."
                )));
            }
            if reason.message.len() > MAX_FAILURE_MESSAGE_BYTES {
                return Err(SqsError::invalid_value(format!(
                    "Reason.Message must be at most {MAX_FAILURE_MESSAGE_BYTES} bytes long; it has {}.",
                    reason.message.len()
                )));
            }
        }
        Ok(())
    }
}

impl Engine {
    /// NackMessage: ends the lease of `handle` with a failure.
    pub async fn nack_message(
        &self,
        queue_name: &QueueName,
        handle: &str,
        request: NackRequest,
    ) -> Result<NackDisposition, EngineError> {
        request.validate()?;
        let queue = self.queue(queue_name).await?;
        let claims = self.inner.config.receipt_key.open(handle)?;
        if claims.queue_id != queue.id {
            return Err(SqsError::receipt_handle_invalid(handle).into());
        }
        let dead_letter_queue = self.dead_letter_queue(&queue.snapshot().attributes).await;
        if request.permanent && dead_letter_queue.is_none() {
            return Err(SqsError::invalid_value(format!(
                "Queue {queue_name} has no usable RedrivePolicy; a permanent failure needs a dead-letter queue to go to."
            ))
            .into());
        }
        let now = self.now();
        let class = request.reason.as_ref().map(|reason| reason.class.clone());
        let outcome = self
            .inner
            .store
            .message_nack(MessageNackParams {
                queue_id: queue.id,
                now,
                lease: crate::store::LeaseRef {
                    seq: claims.seq,
                    lease: claims.lease,
                },
                visible_at: now + i64::from(request.delay_seconds) * 1_000,
                failure: request.reason,
                permanent: request.permanent,
                dead_letter: dead_letter_queue.as_ref().map(|(dlq, max_receive_count)| {
                    DeadLetterTarget {
                        queue_id: dlq.id,
                        max_receive_count: i64::from(*max_receive_count),
                        source_arn: self.realm().queue_arn(&queue.name),
                    }
                }),
            })
            .await?;
        match outcome {
            NackOutcome::Retried => {
                // A shorter wait than the lease makes the message visible sooner.
                queue.arrivals.notify_waiters();
                Ok(NackDisposition::Retried)
            }
            NackOutcome::DeadLettered => {
                crate::counters::dead_lettered(&queue.name, &[class]);
                if let Some((dlq, _)) = dead_letter_queue {
                    dlq.arrivals.notify_one();
                }
                Ok(NackDisposition::DeadLettered)
            }
            NackOutcome::NotAvailable => Err(SqsError::invalid_parameter(
                "ReceiptHandle",
                handle,
                "Message does not exist or is not available for a nack.",
            )
            .into()),
            NackOutcome::NotInFlight => Err(SqsError::new(
                ErrorCode::MessageNotInflight,
                format!("The message referred to by receipt handle {handle} is not in flight."),
            )
            .into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nack_limits_name_the_field_and_the_limit() {
        let long_delay = NackRequest {
            delay_seconds: 43_201,
            ..NackRequest::default()
        };
        assert!(
            long_delay
                .validate()
                .unwrap_err()
                .message
                .contains("DelaySeconds")
        );
        let reason = |class: &str, message: &str| NackRequest {
            reason: Some(FailureReport {
                class: class.into(),
                message: message.into(),
            }),
            ..NackRequest::default()
        };
        assert!(
            reason("", "x")
                .validate()
                .unwrap_err()
                .message
                .contains("Reason.Class")
        );
        assert!(reason(&"c".repeat(257), "x").validate().is_err());
        assert!(
            reason("c", &"m".repeat(4_097))
                .validate()
                .unwrap_err()
                .message
                .contains("4096")
        );
        assert!(
            reason(&"c".repeat(256), &"m".repeat(4_096))
                .validate()
                .is_ok()
        );
    }
}
