//! Fair queues: on a standard queue, a message's `MessageGroupId` names its
//! tenant, and a tenant that holds a disproportionate share of the queue's
//! in-flight messages (a noisy neighbour) gives way to the others.
//!
//! AWS ("How Amazon SQS fair queues work", SQS Developer Guide, 2025-07):
//! a tenant is noisy when it has more than 10 % of the queue's in-flight
//! messages and at least 30 of its own in flight. While one is, a receive
//! returns quiet tenants' messages whenever any are visible, and a noisy
//! tenant's only when none are; among noisy tenants, the one with the fewest
//! in flight first. A message without a group is a tenant of its own (never
//! noisy: it is one message). Nothing is dropped or throttled: a noisy
//! tenant's messages wait longer, and once its share falls it is served as
//! any other.
//!
//! AWS also marks a tenant noisy by its share of recent processing time;
//! ackbox judges by the in-flight share alone, which it can count exactly.
//!
//! Every store applies [`FairOrder`]; the PostgreSQL store's one-statement
//! receive states the same test in SQL, with these constants bound.

/// A tenant with fewer messages in flight than this is never noisy.
pub const NOISY_MIN_IN_FLIGHT: u64 = 30;

/// A tenant is noisy when its in-flight messages times this exceed the
/// queue's (more than a tenth of them).
pub const NOISY_SHARE_DIVISOR: u64 = 10;

/// Whether a tenant with `in_flight` messages leased, on a queue with
/// `queue_in_flight` leased in all, is noisy.
pub fn is_noisy(in_flight: u64, queue_in_flight: u64) -> bool {
    in_flight >= NOISY_MIN_IN_FLIGHT
        && in_flight.saturating_mul(NOISY_SHARE_DIVISOR) > queue_in_flight
}

/// The order in which one receive takes a queue's tenants: every quiet
/// tenant's messages first (in the queue's usual receive order), then each
/// noisy tenant's in turn. `T` names a tenant as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairOrder<T> {
    /// Fewest in flight first.
    noisy: Vec<T>,
}

impl<T> Default for FairOrder<T> {
    fn default() -> Self {
        Self { noisy: Vec::new() }
    }
}

impl<T: Ord> FairOrder<T> {
    /// Judges a queue's tenants from their in-flight counts and the
    /// queue's. A store may pass only the tenants with at least
    /// [`NOISY_MIN_IN_FLIGHT`] in flight: no other can be noisy.
    pub fn judge(tenants: impl IntoIterator<Item = (T, u64)>, queue_in_flight: u64) -> Self {
        let mut noisy: Vec<(u64, T)> = tenants
            .into_iter()
            .filter(|&(_, in_flight)| is_noisy(in_flight, queue_in_flight))
            .map(|(tenant, in_flight)| (in_flight, tenant))
            .collect();
        // By name after the count, so that equal counts take turns the same
        // way on every node.
        noisy.sort_unstable();
        Self {
            noisy: noisy.into_iter().map(|(_, tenant)| tenant).collect(),
        }
    }
}

impl<T> FairOrder<T> {
    /// The noisy tenants, fewest in flight first: a receive's quiet pass
    /// leaves them out.
    pub fn noisy(&self) -> &[T] {
        &self.noisy
    }

    /// The passes a receive makes, in order, until it has what it wants.
    pub fn passes(&self) -> impl Iterator<Item = Pass<'_, T>> {
        std::iter::once(Pass::Quiet {
            excluding: &self.noisy[..],
        })
        .chain(self.noisy.iter().map(Pass::Noisy))
    }
}

/// One pass of a receive over a queue's visible messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass<'a, T> {
    /// Every message whose tenant is not among `excluding` (the noisy ones).
    Quiet {
        /// The noisy tenants; empty when all are quiet.
        excluding: &'a [T],
    },
    /// Only this noisy tenant's messages.
    Noisy(&'a T),
}

impl<T: PartialEq> Pass<'_, T> {
    /// Whether a message of `tenant` (`None`: sent without a group) is
    /// taken in this pass.
    pub fn takes(&self, tenant: Option<&T>) -> bool {
        match (self, tenant) {
            (Pass::Quiet { .. }, None) => true,
            (Pass::Quiet { excluding }, Some(tenant)) => !excluding.contains(tenant),
            (Pass::Noisy(_), None) => false,
            (Pass::Noisy(noisy), Some(tenant)) => *noisy == tenant,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_is_noisy_from_thirty_in_flight_and_more_than_a_tenth() {
        assert!(!is_noisy(29, 29), "29 in flight is never noisy");
        assert!(is_noisy(30, 30));
        assert!(is_noisy(30, 299), "30 of 299 is more than a tenth");
        assert!(!is_noisy(30, 300), "30 of 300 is exactly a tenth");
        assert!(!is_noisy(0, 0));
    }

    #[test]
    fn quiet_tenants_come_first_then_noisy_ones_fewest_in_flight_first() {
        let order = FairOrder::judge([("a", 90), ("b", 40), ("c", 5), ("d", 40)], 200);
        assert_eq!(order.noisy(), &["b", "d", "a"]);
        let passes: Vec<_> = order.passes().collect();
        assert_eq!(
            passes,
            vec![
                Pass::Quiet {
                    excluding: &["b", "d", "a"][..]
                },
                Pass::Noisy(&"b"),
                Pass::Noisy(&"d"),
                Pass::Noisy(&"a"),
            ]
        );
        assert!(passes[0].takes(Some(&"c")));
        assert!(
            passes[0].takes(None),
            "a message without a group is its own tenant"
        );
        assert!(!passes[0].takes(Some(&"a")));
        assert!(passes[3].takes(Some(&"a")));
        assert!(!passes[3].takes(None));
    }

    #[test]
    fn without_a_noisy_tenant_one_pass_takes_everything() {
        let order = FairOrder::judge([("a", 29)], 29);
        assert!(order.noisy().is_empty());
        let passes: Vec<_> = order.passes().collect();
        assert_eq!(passes, vec![Pass::Quiet { excluding: &[][..] }]);
        assert!(passes[0].takes(Some(&"a")));
    }
}
