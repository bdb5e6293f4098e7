//! What a receive does with each visible message it meets, and when a nack
//! ends a message's attempts: the rules every store applies, written once.
//!
//! A receive walks a queue's visible messages oldest first. A message past
//! the retention period is dropped; one received as often as its
//! dead-letter queue allows moves there (its next lease would exceed the
//! limit); any other is leased. Expiry wins over the move: a message past
//! retention is gone whatever its receive count.

/// Most messages one receive drops (expired or dead-lettered) on its way:
/// later receives and the retention sweep do the rest, so one receive
/// never holds a store (and every other queue) for a huge backlog.
pub const MAX_DROPPED_PER_RECEIVE: usize = 1_000;

/// What happens to one message a receive meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate<'a, T> {
    /// Lease it to the caller.
    Lease,
    /// Drop it: it is past retention.
    Expire,
    /// Move it to this dead-letter queue.
    DeadLetter(&'a T),
    /// It is to be dropped, but this receive has dropped all it may: stop
    /// here, leaving it for a later receive.
    OutOfBudget,
}

/// One receive's rules and how much of its drop budget it has spent.
/// `T` is the store's own description of the dead-letter queue.
#[derive(Debug)]
pub struct ReceivePolicy<'a, T> {
    expire_sent_at_or_before: Option<i64>,
    dead_letter: Option<(&'a T, i64)>,
    dropped: usize,
}

impl<'a, T> ReceivePolicy<'a, T> {
    /// Messages sent at or before `expire_sent_at_or_before` expire
    /// (`None`: retention is not judged here); with `dead_letter` (the
    /// queue and its `maxReceiveCount`), a message received that often
    /// moves there. Pass no dead-letter queue when it was deleted: the
    /// message then stays and keeps being delivered, never dropped.
    pub fn new(expire_sent_at_or_before: Option<i64>, dead_letter: Option<(&'a T, i64)>) -> Self {
        Self {
            expire_sent_at_or_before,
            dead_letter,
            dropped: 0,
        }
    }

    /// The fate of a message sent at `sent_at` and received
    /// `receive_count` times so far; a drop counts against the budget.
    pub fn fate(&mut self, sent_at: i64, receive_count: i64) -> Fate<'a, T> {
        let expired = self
            .expire_sent_at_or_before
            .is_some_and(|cutoff| sent_at <= cutoff);
        let dead_letter = self
            .dead_letter
            .filter(|&(_, max_receive_count)| receive_count >= max_receive_count);
        if !expired && dead_letter.is_none() {
            return Fate::Lease;
        }
        if self.out_of_budget() {
            return Fate::OutOfBudget;
        }
        self.dropped += 1;
        match dead_letter {
            Some((target, _)) if !expired => Fate::DeadLetter(target),
            _ => Fate::Expire,
        }
    }

    /// Whether this receive has dropped as many messages as one may.
    pub fn out_of_budget(&self) -> bool {
        self.dropped >= MAX_DROPPED_PER_RECEIVE
    }
}

/// Whether a nacked message moves to its dead-letter queue now: the
/// consumer said the failure is permanent, or the lease that would come
/// next would exceed `max_receive_count`, so it moves now rather than be
/// received once more only to move.
pub fn nack_dead_letters(permanent: bool, receive_count: i64, max_receive_count: i64) -> bool {
    permanent || receive_count >= max_receive_count
}

#[cfg(test)]
mod tests {
    use super::*;

    const DLQ: &str = "dlq";

    #[test]
    fn a_fresh_message_under_its_limit_is_leased() {
        let mut policy = ReceivePolicy::new(Some(100), Some((&DLQ, 3)));
        assert_eq!(policy.fate(101, 2), Fate::Lease);
    }

    #[test]
    fn a_message_at_its_limit_moves_and_one_past_retention_expires_first() {
        let mut policy = ReceivePolicy::new(Some(100), Some((&DLQ, 3)));
        assert_eq!(policy.fate(101, 3), Fate::DeadLetter(&DLQ));
        assert_eq!(policy.fate(100, 3), Fate::Expire);
        assert_eq!(policy.fate(100, 0), Fate::Expire);
    }

    #[test]
    fn without_a_dead_letter_queue_or_a_cutoff_nothing_is_dropped() {
        let mut policy = ReceivePolicy::<&str>::new(None, None);
        assert_eq!(policy.fate(i64::MIN, 1_000), Fate::Lease);
    }

    #[test]
    fn the_budget_stops_drops_but_not_leases() {
        let mut policy = ReceivePolicy::new(Some(100), Some((&DLQ, 3)));
        for _ in 0..MAX_DROPPED_PER_RECEIVE {
            assert_eq!(policy.fate(0, 0), Fate::Expire);
        }
        assert!(policy.out_of_budget());
        assert_eq!(policy.fate(0, 0), Fate::OutOfBudget);
        assert_eq!(policy.fate(101, 5), Fate::OutOfBudget);
        assert_eq!(policy.fate(101, 0), Fate::Lease);
    }

    #[test]
    fn a_nack_moves_when_permanent_or_when_the_next_lease_would_exceed_the_limit() {
        assert!(nack_dead_letters(true, 1, 5));
        assert!(nack_dead_letters(false, 5, 5));
        assert!(!nack_dead_letters(false, 4, 5));
    }
}
