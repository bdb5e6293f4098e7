//! DeleteMessage and ChangeMessageVisibility: acting on a lease by its handle.
//!
//! A handle is opened (HMAC-checked) before anything reaches the store; a
//! handle sealed for another queue is as invalid as a garbled one. Delete
//! succeeds for a message that is already gone, as SQS does, so a retried
//! delete is harmless. A stale handle (the message was received again since)
//! also answers success, as on SQS, but leaves the message to the consumer
//! that holds the newer lease.

use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::limits::MAX_VISIBILITY_TIMEOUT_SECONDS;
use ackbox_core::queue_name::QueueName;
use ackbox_core::receipt::ReceiptClaims;

use crate::counters;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::queue::Queue;
use crate::store::{
    ChangeVisibilityOutcome, DeleteOutcome, LeaseRef, MessageChangeVisibilityParams,
    MessageDeleteParams, VisibilityChange,
};

impl Engine {
    /// What `handle` claims, if this installation sealed it for `queue`.
    fn open_claims(&self, queue: &Queue, handle: &str) -> Result<ReceiptClaims, SqsError> {
        let claims = self.inner.config.receipt_key.open(handle)?;
        if claims.queue_id != queue.id {
            return Err(SqsError::receipt_handle_invalid(handle));
        }
        Ok(claims)
    }

    fn open_handle(&self, queue: &Queue, handle: &str) -> Result<LeaseRef, SqsError> {
        self.open_claims(queue, handle)
            .map(|claims| lease_of(&claims))
    }

    /// DeleteMessage.
    pub async fn delete_message(
        &self,
        queue_name: &QueueName,
        handle: &str,
    ) -> Result<(), EngineError> {
        let mut results = self.delete_message_batch(queue_name, &[handle]).await?;
        results
            .pop()
            .expect("one handle in, one result out")
            .map_err(EngineError::from)
    }

    /// DeleteMessageBatch: one result per handle, in order.
    pub async fn delete_message_batch(
        &self,
        queue_name: &QueueName,
        handles: &[&str],
    ) -> Result<Vec<Result<(), SqsError>>, EngineError> {
        let queue = self.queue(queue_name).await?;
        let now = self.now();
        let opened: Vec<Result<ReceiptClaims, SqsError>> = handles
            .iter()
            .map(|handle| self.open_claims(&queue, handle))
            .collect();
        let leases: Vec<LeaseRef> = opened
            .iter()
            .filter_map(|claims| claims.as_ref().ok().map(lease_of))
            .collect();
        let mut outcomes = if leases.is_empty() {
            Vec::new()
        } else {
            self.inner
                .store
                .message_delete_batch(MessageDeleteParams {
                    queue_id: queue.id,
                    now,
                    leases,
                })
                .await?
        }
        .into_iter();
        let mut released = false;
        let mut deleted = 0u64;
        let results = opened
            .into_iter()
            .zip(handles)
            .map(|(claims, handle)| {
                let claims = claims?;
                match outcomes.next().expect("one outcome per valid handle") {
                    DeleteOutcome::Expired => Err(SqsError::invalid_parameter(
                        "ReceiptHandle",
                        handle,
                        "The receipt handle has expired.",
                    )),
                    DeleteOutcome::Deleted => {
                        released = true;
                        deleted += 1;
                        if let Some(leased_at) = claims.leased_at {
                            counters::processed(
                                &queue.name,
                                (now - leased_at).max(0) as f64 / 1_000.0,
                            );
                        }
                        Ok(())
                    }
                    DeleteOutcome::AlreadyGone | DeleteOutcome::LeasedToAnother => Ok(()),
                }
            })
            .collect();
        counters::deleted(&queue.name, deleted);
        // On a FIFO queue a delete may unblock the message's group.
        if released && queue.snapshot().attributes.is_fifo() {
            queue.arrivals.notify_waiters();
        }
        Ok(results)
    }

    /// Deletes message `seq` of a standard queue as a peek saw it, after
    /// `receive_count` receives: an operator's delete, by no lease. A
    /// consumer that received it since holds a newer lease, and the message
    /// stays for it. A FIFO queue's message is deleted only under a running
    /// lease (its group's order depends on it).
    pub async fn delete_as_peeked(
        &self,
        queue_name: &QueueName,
        seq: i64,
        receive_count: i64,
    ) -> Result<PeekedDelete, EngineError> {
        let queue = self.queue(queue_name).await?;
        let mut outcomes = self
            .inner
            .store
            .message_delete_batch(MessageDeleteParams {
                queue_id: queue.id,
                now: self.now(),
                leases: vec![LeaseRef {
                    seq,
                    lease: receive_count,
                }],
            })
            .await?;
        match outcomes.pop() {
            Some(DeleteOutcome::Deleted) => {
                if queue.snapshot().attributes.is_fifo() {
                    queue.arrivals.notify_waiters();
                }
                Ok(PeekedDelete::Deleted)
            }
            Some(DeleteOutcome::AlreadyGone) | None => Ok(PeekedDelete::AlreadyGone),
            Some(DeleteOutcome::LeasedToAnother) => Ok(PeekedDelete::ReceivedSince),
            Some(DeleteOutcome::Expired) => Err(SqsError::invalid_value(format!(
                "{queue_name} is a FIFO queue: a message of it is deleted only under the lease \
                 of the consumer that received it, so that its group keeps its order."
            ))
            .into()),
        }
    }

    /// ChangeMessageVisibility.
    pub async fn change_message_visibility(
        &self,
        queue_name: &QueueName,
        handle: &str,
        visibility_timeout: i32,
    ) -> Result<(), EngineError> {
        let mut results = self
            .change_message_visibility_batch(queue_name, &[(handle, visibility_timeout)])
            .await?;
        results
            .pop()
            .expect("one change in, one result out")
            .map_err(EngineError::from)
    }

    /// ChangeMessageVisibilityBatch: one result per change, in order. The new
    /// timeout counts from now.
    pub async fn change_message_visibility_batch(
        &self,
        queue_name: &QueueName,
        changes: &[(&str, i32)],
    ) -> Result<Vec<Result<(), SqsError>>, EngineError> {
        let queue = self.queue(queue_name).await?;
        let now = self.now();
        let checked: Vec<Result<VisibilityChange, SqsError>> = changes
            .iter()
            .map(|(handle, timeout)| {
                if !(0..=MAX_VISIBILITY_TIMEOUT_SECONDS).contains(&i64::from(*timeout)) {
                    return Err(SqsError::invalid_parameter(
                        "VisibilityTimeout",
                        timeout,
                        &format!("Must be between 0 and {MAX_VISIBILITY_TIMEOUT_SECONDS}."),
                    ));
                }
                Ok(VisibilityChange {
                    lease: self.open_handle(&queue, handle)?,
                    visible_at: now + i64::from(*timeout) * 1_000,
                })
            })
            .collect();
        let valid: Vec<VisibilityChange> = checked
            .iter()
            .filter_map(|change| change.as_ref().ok().copied())
            .collect();
        let mut outcomes = if valid.is_empty() {
            Vec::new()
        } else {
            self.inner
                .store
                .message_change_visibility_batch(MessageChangeVisibilityParams {
                    queue_id: queue.id,
                    now,
                    changes: valid,
                })
                .await?
        }
        .into_iter();
        let mut changed = false;
        let results = checked
            .into_iter()
            .zip(changes)
            .map(|(change, (handle, _))| {
                change?;
                match outcomes.next().expect("one outcome per valid change") {
                    ChangeVisibilityOutcome::Changed => {
                        changed = true;
                        Ok(())
                    }
                    ChangeVisibilityOutcome::NotAvailable => Err(SqsError::invalid_parameter(
                        "ReceiptHandle",
                        handle,
                        "Message does not exist or is not available for visibility timeout change.",
                    )),
                    ChangeVisibilityOutcome::NotInFlight => Err(SqsError::new(
                        ErrorCode::MessageNotInflight,
                        format!(
                            "The message referred to by receipt handle {handle} is not in flight."
                        ),
                    )),
                }
            })
            .collect();
        // A shortened lease moves the next visibility earlier: pollers wake
        // to re-plan their wait.
        if changed {
            queue.arrivals.notify_waiters();
        }
        Ok(results)
    }
}

fn lease_of(claims: &ReceiptClaims) -> LeaseRef {
    LeaseRef {
        seq: claims.seq,
        lease: claims.lease,
    }
}

/// What [`Engine::delete_as_peeked`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeekedDelete {
    /// The message is gone.
    Deleted,
    /// It was gone already.
    AlreadyGone,
    /// A consumer received it after the peek; it stays for that consumer.
    ReceivedSince,
}
