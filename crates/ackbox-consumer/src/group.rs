//! Order per message group: messages that share a group run one at a time,
//! in delivery order, while different groups run side by side.
//!
//! Each group with work in hand has a lane: a queue of the deliveries this
//! process holds for it, drained by one task. The next message of a lane
//! starts only once the one before it is settled (acknowledged or
//! dead-lettered); a transient failure is retried in place, so nothing of
//! the group overtakes it. When a lane cannot go on (shutdown, a lost
//! lease, a failure the broker has to hand back), the messages behind the
//! stuck one are given back unstarted, and come again after it.
//!
//! This keeps order inside one process. Across processes it is the
//! broker's lock on the group that keeps it: an SQS FIFO queue hands out
//! nothing of a group while any of its messages is leased, so one process
//! holds a group at a time. Without that lock (standard queues, RabbitMQ,
//! NATS) order holds as far as one process sees it: run one consumer
//! process per queue where order across all of them matters.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::message::Message;
use crate::transport::QueueSettings;

/// Whether messages that share a group are handled in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupOrder {
    /// In order per group when the queue itself keeps its groups in order
    /// (SQS FIFO queues); otherwise every message runs concurrently.
    #[default]
    Auto,
    /// In order per group on any queue (fair-queue groups on a standard
    /// queue, groups carried by RabbitMQ or NATS); a message without a group
    /// is dead-lettered with `MissingGroupId`. Only as strong as the
    /// broker's hold on groups across processes: see the module docs.
    Required,
    /// Never: every message runs concurrently, whatever its group.
    Off,
}

impl GroupOrder {
    /// Whether a consumer of a queue with `settings` serializes groups.
    fn applies(self, settings: &QueueSettings) -> bool {
        match self {
            Self::Auto => settings.ordered_groups,
            Self::Required => true,
            Self::Off => false,
        }
    }
}

/// How a run routes messages by group.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Routing {
    /// Messages that share a group run in order, one at a time, and a
    /// message without a group is refused (dead-lettered): it has no place
    /// in any order.
    ordered: bool,
}

impl Routing {
    pub(crate) fn new(order: GroupOrder, settings: &QueueSettings) -> Self {
        Self {
            ordered: order.applies(settings),
        }
    }

    /// The lane `message` waits in, if its group is kept in order.
    pub(crate) fn lane(self, message: &Message) -> Option<&str> {
        message.group_id.as_deref().filter(|_| self.ordered)
    }

    /// Whether `message` is refused for having no group.
    pub(crate) fn refuses(self, message: &Message) -> bool {
        self.ordered && message.group_id.is_none()
    }
}

/// The lanes of one run: per group, what waits to run after the message its
/// task is working on. Written by the receive loop (push) and the lanes'
/// tasks (pop, drain); a group's entry exists exactly while its task runs.
#[derive(Debug)]
pub(crate) struct Lanes<T> {
    waiting: Arc<Mutex<HashMap<String, VecDeque<T>>>>,
}

impl<T> Clone for Lanes<T> {
    fn clone(&self) -> Self {
        Self {
            waiting: Arc::clone(&self.waiting),
        }
    }
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Self {
            waiting: Arc::default(),
        }
    }
}

impl<T> Lanes<T> {
    /// Queues `item` behind its group's lane. Returns it back when the group
    /// has no lane yet: the caller starts one, with `item` first.
    pub(crate) fn push(&self, group: &str, item: T) -> Option<T> {
        let mut waiting = self.lock();
        match waiting.get_mut(group) {
            Some(lane) => {
                lane.push_back(item);
                None
            }
            None => {
                waiting.insert(group.to_owned(), VecDeque::new());
                Some(item)
            }
        }
    }

    /// The next item of `group`'s lane; `None` ends the lane (its entry is
    /// removed in the same step, so a later push starts a new one).
    pub(crate) fn next(&self, group: &str) -> Option<T> {
        let mut waiting = self.lock();
        let next = waiting.get_mut(group).and_then(VecDeque::pop_front);
        if next.is_none() {
            waiting.remove(group);
        }
        next
    }

    /// Ends `group`'s lane and returns what waited in it.
    pub(crate) fn close(&self, group: &str) -> Vec<T> {
        self.lock().remove(group).map(Vec::from).unwrap_or_default()
    }

    /// Ends every lane and returns what waited in them.
    pub(crate) fn close_all(&self) -> Vec<T> {
        self.lock().drain().flat_map(|(_, lane)| lane).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<T>>> {
        self.waiting.lock().expect("lanes lock poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(group: Option<&str>) -> Message {
        Message {
            id: "m".into(),
            body: String::new(),
            attributes: Default::default(),
            receive_count: 1,
            group_id: group.map(str::to_owned),
        }
    }

    fn settings(ordered_groups: bool) -> QueueSettings {
        QueueSettings {
            ordered_groups,
            ..QueueSettings::default()
        }
    }

    #[test]
    fn auto_orders_groups_only_where_the_queue_keeps_them_in_order() {
        let fifo = Routing::new(GroupOrder::Auto, &settings(true));
        assert_eq!(fifo.lane(&message(Some("g"))), Some("g"));
        assert!(fifo.refuses(&message(None)));
        let standard = Routing::new(GroupOrder::Auto, &settings(false));
        assert_eq!(standard.lane(&message(Some("g"))), None);
        assert!(!standard.refuses(&message(None)));
    }

    #[test]
    fn required_orders_groups_on_any_queue_and_off_on_none() {
        let required = Routing::new(GroupOrder::Required, &settings(false));
        assert_eq!(required.lane(&message(Some("g"))), Some("g"));
        assert!(required.refuses(&message(None)));
        let off = Routing::new(GroupOrder::Off, &settings(true));
        assert_eq!(off.lane(&message(Some("g"))), None);
        assert!(!off.refuses(&message(None)));
    }

    #[test]
    fn a_lane_exists_from_its_first_push_until_a_next_finds_it_empty() {
        let lanes = Lanes::default();
        assert_eq!(
            lanes.push("g", 1),
            Some(1),
            "the first item starts the lane"
        );
        assert_eq!(lanes.push("g", 2), None);
        assert_eq!(lanes.push("g", 3), None);
        assert_eq!(
            lanes.push("h", 10),
            Some(10),
            "another group has its own lane"
        );
        assert_eq!(lanes.next("g"), Some(2));
        assert_eq!(lanes.next("g"), Some(3));
        assert_eq!(lanes.next("g"), None, "the lane ends");
        assert_eq!(
            lanes.push("g", 4),
            Some(4),
            "a later push starts a new lane"
        );
        assert_eq!(lanes.push("g", 5), None);
        assert_eq!(lanes.close("g"), vec![5]);
        assert_eq!(lanes.push("g", 6), Some(6));
        assert_eq!(lanes.push("h", 11), None);
        let mut rest = lanes.close_all();
        rest.sort_unstable();
        assert_eq!(rest, vec![11]);
    }
}
