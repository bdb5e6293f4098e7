//! Whether a receipt handle may still change its message's visibility: the
//! rule every store applies, written once.
//!
//! A handle names the lease it was issued with (the message's receive count
//! then); once the message is received again, the handle is stale. On a
//! standard queue a handle whose lease ran out still changes the message
//! while nobody has received it again, as AWS does: the change applies, and
//! the message is in flight until the new timeout. A FIFO queue's handle
//! ends with its lease, since the group went on without it.

/// What a visibility change asked with a receipt handle does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisibilityChange {
    /// Move the message's visibility to the time asked.
    Apply,
    /// The message was received again under a newer lease.
    Stale,
    /// A FIFO queue's lease that already ended.
    LeaseEnded,
}

/// The decision for a handle issued with `handle_lease` on a message whose
/// receive count is `receive_count` and which becomes visible at
/// `visible_at`.
pub fn judge<L: PartialEq>(
    handle_lease: L,
    receive_count: L,
    visible_at: i64,
    now: i64,
    fifo: bool,
) -> VisibilityChange {
    if handle_lease != receive_count {
        VisibilityChange::Stale
    } else if fifo && visible_at <= now {
        VisibilityChange::LeaseEnded
    } else {
        VisibilityChange::Apply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_lease_still_changes_a_standard_message_but_not_a_fifo_one() {
        assert_eq!(judge(1, 1, 100, 200, false), VisibilityChange::Apply);
        assert_eq!(judge(1, 1, 100, 200, true), VisibilityChange::LeaseEnded);
        assert_eq!(judge(1, 1, 300, 200, true), VisibilityChange::Apply);
        assert_eq!(judge(1, 2, 300, 200, false), VisibilityChange::Stale);
    }
}
