//! What a message becomes when it moves to another queue, the same on every
//! SQL store: a dead-lettered message keeps its receive history, and a FIFO
//! dead-letter queue restarts its retention (as SQS does); a redriven one
//! starts over, visible at once, with the task that moved it recorded.
//! Each store's `relocate.rs` carries the move out.

use super::DeadLetterTarget;

/// Where a moved message goes and how it arrives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Relocation<'a> {
    pub(crate) queue_id: i64,
    pub(crate) visible_at: i64,
    /// Recorded as `DeadLetterQueueSourceArn`; `None` clears it.
    pub(crate) dead_letter_source_arn: Option<&'a str>,
    /// A redriven message starts its receives over.
    pub(crate) reset_receives: bool,
    /// The move task redriving it; `None` keeps what the message had.
    pub(crate) redriven_by_task: Option<&'a str>,
    /// Restarts its retention clock.
    pub(crate) sent_at: Option<i64>,
}

impl<'a> Relocation<'a> {
    /// A message received too often, into `target`'s queue (a FIFO one when
    /// `fifo_target`), at `now`.
    pub(crate) fn dead_letter(target: &'a DeadLetterTarget, fifo_target: bool, now: i64) -> Self {
        Self {
            queue_id: target.queue_id,
            visible_at: now,
            dead_letter_source_arn: Some(&target.source_arn),
            reset_receives: false,
            redriven_by_task: None,
            sent_at: fifo_target.then_some(now),
        }
    }

    /// A dead letter that move task `handle` sends to `queue_id` at `now`.
    pub(crate) fn redrive(queue_id: i64, handle: &'a str, now: i64) -> Self {
        Self {
            queue_id,
            visible_at: now,
            dead_letter_source_arn: None,
            reset_receives: true,
            redriven_by_task: Some(handle),
            sent_at: None,
        }
    }
}
