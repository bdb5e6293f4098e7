//! The rules of one move-task step that do not depend on the store: which
//! messages a task takes, when the relapse brake stops it, and how a step
//! ends. Both stores apply them, so a task behaves the same on either.

use super::{MoveDestination, MoveFilter};

/// Relapses above this share of the moved messages stop a move task.
const RELAPSE_LIMIT_PERCENT: i64 = 10;
/// The brake judges only after this many messages have moved.
const RELAPSE_MIN_MOVED: i64 = 10;

impl MoveFilter {
    /// Whether a message with this last failure class and send time is one
    /// the task moves.
    pub(crate) fn admits(&self, failure_class: Option<&String>, sent_at: i64) -> bool {
        self.class
            .as_ref()
            .is_none_or(|class| failure_class == Some(class))
            && self.sent_before.is_none_or(|before| sent_at <= before)
    }
}

/// The relapse brake: when more than [`RELAPSE_LIMIT_PERCENT`] of the
/// messages a task moved since its last resume are back in the dead-letter
/// queue while it runs, the cause is not fixed, and moving the rest would
/// only feed the loop. Returns why the task pauses.
pub(crate) fn relapse_brake(moved_since: i64, relapsed_since: i64) -> Option<String> {
    (moved_since >= RELAPSE_MIN_MOVED && relapsed_since * 100 > RELAPSE_LIMIT_PERCENT * moved_since)
        .then(|| {
            format!(
                "Relapse brake: {relapsed_since} of the {moved_since} messages this task moved came back \
                 to the dead-letter queue while it ran (more than {RELAPSE_LIMIT_PERCENT}%); the task \
                 paused. Fix the cause, then resume it, or cancel it."
            )
        })
}

/// Why a task fails when a message's destination is gone.
pub(crate) fn destination_gone(destination: &MoveDestination, source_arn: Option<&str>) -> String {
    match destination {
        MoveDestination::Queue(_) | MoveDestination::Gone => {
            "The destination queue no longer exists; the remaining messages stay in the \
             dead-letter queue."
                .to_owned()
        }
        MoveDestination::OriginalSource(_) => format!(
            "The original source queue of a message ({}) no longer exists; it and the remaining \
             messages stay in the dead-letter queue.",
            source_arn.unwrap_or("unknown")
        ),
    }
}

/// What one step met, to decide how it ends.
#[derive(Debug, Default)]
pub(crate) struct StepEnd {
    /// A destination was gone: the task fails with this reason.
    pub(crate) failure: Option<String>,
    /// The relapse brake's reason, if it stopped the task.
    pub(crate) brake: Option<String>,
    /// A matching message is leased in the dead-letter queue: wait for it.
    pub(crate) held: bool,
    /// The task's `max_messages` are moved.
    pub(crate) quota_reached: bool,
    /// The task's sample is moved: pause for review.
    pub(crate) sample_reached: bool,
    /// Candidates the step read, and the most it asked for.
    pub(crate) candidates: usize,
    pub(crate) limit: u32,
    /// Messages the task has moved, this step included.
    pub(crate) moved_total: i64,
}

impl StepEnd {
    /// Whether the step stops before its next candidate: a destination is
    /// gone, the brake holds, or the task's quota or sample is moved.
    pub(crate) fn stops_before_next(&mut self, filter: &MoveFilter, moved_total: i64) -> bool {
        if self.failure.is_some() || self.brake.is_some() {
            return true;
        }
        if filter.max_messages.is_some_and(|max| moved_total >= max) {
            self.quota_reached = true;
            return true;
        }
        if filter.sample.is_some_and(|sample| moved_total >= sample) {
            self.sample_reached = true;
            return true;
        }
        false
    }

    /// The task's status after the step, and the reason it records.
    pub(crate) fn conclude(self) -> (&'static str, Option<String>) {
        let exhausted = !self.held
            && !self.sample_reached
            && (self.quota_reached || (self.candidates as u64) < u64::from(self.limit));
        match (self.failure, self.brake) {
            (Some(failure), _) => ("FAILED", Some(failure)),
            (None, Some(brake)) => ("PAUSED", Some(brake)),
            (None, None) if exhausted => ("COMPLETED", None),
            (None, None) if self.sample_reached => (
                "PAUSED",
                Some(format!(
                    "Paused after a sample of {} moved messages: review them, then resume the task.",
                    self.moved_total
                )),
            ),
            (None, None) => ("RUNNING", None),
        }
    }
}

impl MoveDestination {
    /// The queue a message dead-lettered from `source_arn` moves to, if it exists.
    pub(crate) fn queue_for(&self, source_arn: Option<&String>) -> Option<i64> {
        match self {
            Self::Queue(queue_id) => Some(*queue_id),
            Self::OriginalSource(by_arn) => source_arn.and_then(|arn| by_arn.get(arn).copied()),
            Self::Gone => None,
        }
    }
}
