//! What the records add up to: each standard queue's live messages, their
//! receive order and leases, in memory.
//!
//! The ledger is rebuilt at start by applying every record in log order, and
//! kept current by applying each record as it is appended, so a receive is a
//! walk of an ordered set instead of an index scan, and a lease or delete
//! changes a few map entries instead of rewriting pages. Bodies stay in the
//! log: a message's state names the position of its [`Record::Sent`].
//!
//! Replay tolerates records about messages it does not know: compaction may
//! have dropped the segment holding a message's send after copying the
//! message forward, and the copy (a later `Sent`) carries everything the
//! dropped leases had recorded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use ackbox_core::fair_queue::FairOrder;

use std::path::Path;

use crate::disk::{Disk, RealDisk};
use crate::log::{Log, LogError, LogOptions, LogPosition, Recovery};
use crate::record::{Failures, Record, SentMessage};

/// What the ledger knows of one live message: 48 bytes, as there is one per
/// queued message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageState {
    /// Where its latest [`Record::Sent`] (or move) is: the body's home.
    pub position: LogPosition,
    /// Deliveries so far.
    pub receive_count: u32,
    /// Epoch milliseconds.
    pub sent_at: i64,
    /// Epoch milliseconds: delay end or lease deadline.
    pub visible_at: i64,
    /// The first and latest deliveries, epoch milliseconds; [`NEVER`] until
    /// the first (an `Option<i64>` would take twice the room).
    first_received_at: i64,
    last_received_at: i64,
}

/// No delivery yet.
const NEVER: i64 = i64::MIN;

fn from_never(at: i64) -> Option<i64> {
    (at != NEVER).then_some(at)
}

impl MessageState {
    /// When it was first delivered, epoch milliseconds.
    pub fn first_received_at(&self) -> Option<i64> {
        from_never(self.first_received_at)
    }

    /// When it was last delivered, epoch milliseconds.
    pub fn last_received_at(&self) -> Option<i64> {
        from_never(self.last_received_at)
    }
}

/// A queue's messages split as SQS's approximate counts split them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Deliverable now.
    pub visible: u64,
    /// Leased: received and not yet visible again.
    pub in_flight: u64,
    /// Never received and still delayed.
    pub delayed: u64,
}

/// Receive order: earliest visible first, then fewest deliveries (a message
/// that failed often does not starve a fresh one), then send order.
type OrderKey = (i64, u32, u64);

#[derive(Debug, Default)]
struct QueueLedger {
    messages: BTreeMap<u64, MessageState>,
    order: BTreeSet<OrderKey>,
    /// Retention's order: oldest sent first. Not the sequence order, since a
    /// dead-letter move keeps the message's original send time.
    by_age: BTreeSet<(i64, u64)>,
    /// Reported failures, of the few messages that have any: kept beside
    /// the states so that a message without one costs nothing for them.
    failures: HashMap<u64, Failures>,
    /// The move task that redrove a message here, of the few that have one:
    /// a task's relapse brake counts its messages back in the dead-letter
    /// queue.
    redriven_by: HashMap<u64, Box<str>>,
    /// The tenant (`MessageGroupId`) of the messages sent with one: fair
    /// queues count their leases.
    tenants: HashMap<u64, Box<str>>,
}

impl QueueLedger {
    /// Adds a message numbered `seq`, which the queue must not hold.
    fn insert(&mut self, seq: u64, state: MessageState, message: &SentMessage) {
        if let Some(failures) = &message.failures {
            self.failures.insert(seq, failures.clone());
        }
        if let Some(task) = &message.redriven_by_task {
            self.redriven_by.insert(seq, task.as_str().into());
        }
        if let Some(tenant) = &message.content.group_id {
            self.tenants.insert(seq, tenant.as_str().into());
        }
        self.order
            .insert((state.visible_at, state.receive_count, seq));
        self.by_age.insert((state.sent_at, seq));
        self.messages.insert(seq, state);
    }

    fn remove(&mut self, seq: u64) -> Option<MessageState> {
        let state = self.messages.remove(&seq)?;
        self.order
            .remove(&(state.visible_at, state.receive_count, seq));
        self.by_age.remove(&(state.sent_at, seq));
        self.failures.remove(&seq);
        self.redriven_by.remove(&seq);
        self.tenants.remove(&seq);
        Some(state)
    }

    fn update(&mut self, seq: u64, change: impl FnOnce(&mut MessageState)) -> bool {
        let Some(state) = self.messages.get_mut(&seq) else {
            return false;
        };
        self.order
            .remove(&(state.visible_at, state.receive_count, seq));
        change(state);
        self.order
            .insert((state.visible_at, state.receive_count, seq));
        true
    }
}

/// Every standard queue's live messages.
#[derive(Debug, Default)]
pub struct Ledger {
    queues: HashMap<u64, QueueLedger>,
    next_seq: u64,
    /// The highest sequence number inserted so far: a message numbered
    /// above it is in no queue yet, so a send need not look for what it
    /// would replace (most inserts are sends in the order numbered).
    highest_inserted: u64,
    /// Live messages whose latest `Sent` is in each segment: a prefix of
    /// segments with none can be removed.
    live_per_segment: BTreeMap<u64, u64>,
    /// Sends (and copies) ever applied in each segment: with the live count,
    /// how much of a segment compaction would have to copy to free it.
    sends_per_segment: BTreeMap<u64, u64>,
    /// Purges not yet swept: each queue's messages numbered up to the mark
    /// are purged and go in chunks ([`Record::Purged`]).
    purges: BTreeMap<u64, u64>,
}

impl Ledger {
    /// An empty ledger that hands out sequence numbers from `seq_floor` on
    /// (the log's [`Recovery::seq_floor`](crate::log::Recovery)), or above
    /// any it is later told of.
    pub fn new(seq_floor: u64) -> Self {
        Self {
            next_seq: seq_floor.max(1),
            ..Self::default()
        }
    }

    /// Opens the log in `dir` and rebuilds the ledger from every record in
    /// it (see [`Log::open`] for what recovery repairs and what it refuses).
    pub fn recover(dir: &Path, options: LogOptions) -> Result<(Log, Self, Recovery), LogError> {
        Self::recover_on(RealDisk::shared(), dir, options)
    }

    /// [`Ledger::recover`] on `disk`.
    pub fn recover_on(
        disk: Arc<dyn Disk>,
        dir: &Path,
        options: LogOptions,
    ) -> Result<(Log, Self, Recovery), LogError> {
        // Applied as read: holding the records (bodies and all) until the
        // end would take as much memory as the log is long.
        let mut ledger = Self::new(0);
        let (log, recovery) = Log::open_on(disk, dir, options, |position, payload| {
            let record = Record::decode(payload).map_err(|error| error.to_string())?;
            ledger.apply(&record, position);
            Ok(())
        })?;
        ledger.next_seq = ledger.next_seq.max(recovery.seq_floor);
        Ok((log, ledger, recovery))
    }

    /// Takes `count` fresh sequence numbers.
    pub fn allocate_seqs(&mut self, count: u64) -> Range<u64> {
        let start = self.next_seq;
        self.next_seq += count;
        start..self.next_seq
    }

    /// The next sequence number to be handed out: the floor a new segment
    /// records.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Appends `records` to `log` as one write and applies them: the
    /// single-threaded path (recovery tools, tests, benchmarks). Nothing is
    /// durable until the log is synced.
    pub fn append_to(
        &mut self,
        log: &mut Log,
        records: &[Record],
    ) -> Result<Vec<LogPosition>, LogError> {
        let positions = log.append(records, self.next_seq)?;
        for (record, position) in records.iter().zip(&positions) {
            self.apply(record, *position);
        }
        Ok(positions)
    }

    /// Applies one record found at (or just appended to) `position`.
    pub fn apply(&mut self, record: &Record, position: LogPosition) {
        match record {
            Record::Sent(message) => self.insert(message, position),
            Record::Moved {
                from_queue,
                from_seq,
                to,
            } => {
                self.remove(*from_queue, *from_seq);
                self.insert(to, position);
            }
            Record::Leased {
                queue,
                seq,
                visible_at,
                receive_count,
                received_at,
            } => {
                if let Some(ledger) = self.queues.get_mut(queue) {
                    ledger.update(*seq, |state| {
                        state.visible_at = *visible_at;
                        state.receive_count = *receive_count;
                        if state.first_received_at == NEVER {
                            state.first_received_at = *received_at;
                        }
                        state.last_received_at = *received_at;
                    });
                }
            }
            Record::Nacked {
                queue,
                seq,
                visible_at,
                failed_at,
                class,
                message,
            } => {
                if let Some(ledger) = self.queues.get_mut(queue)
                    && ledger.update(*seq, |state| state.visible_at = *visible_at)
                {
                    let failures =
                        Failures::and(ledger.failures.get(seq), *failed_at, class, message);
                    ledger.failures.insert(*seq, failures);
                }
            }
            Record::VisibilityChanged {
                queue,
                seq,
                visible_at,
            } => {
                if let Some(ledger) = self.queues.get_mut(queue) {
                    ledger.update(*seq, |state| state.visible_at = *visible_at);
                }
            }
            Record::Deleted { queue, seq } => self.remove(*queue, *seq),
            Record::Purged { queue, through_seq } => {
                let mark = self.purges.entry(*queue).or_default();
                *mark = (*mark).max(*through_seq);
            }
        }
    }

    /// A message sent, moved in or copied forward, whose record is at
    /// `position`; a copy replaces what the ledger had.
    fn insert(&mut self, message: &SentMessage, position: LogPosition) {
        self.next_seq = self.next_seq.max(message.seq + 1);
        let fresh = message.seq > self.highest_inserted;
        self.highest_inserted = self.highest_inserted.max(message.seq);
        let state = MessageState {
            position,
            sent_at: message.sent_at,
            visible_at: message.visible_at,
            receive_count: message.receive_count,
            first_received_at: message.first_received_at.unwrap_or(NEVER),
            last_received_at: message.last_received_at.unwrap_or(NEVER),
        };
        let queue = self.queues.entry(message.queue).or_default();
        let replaced = if fresh {
            None
        } else {
            queue.remove(message.seq)
        };
        queue.insert(message.seq, state, message);
        if let Some(replaced) = replaced {
            self.forget_live(u64::from(replaced.position.segment));
        }
        let segment = u64::from(position.segment);
        *self.live_per_segment.entry(segment).or_default() += 1;
        *self.sends_per_segment.entry(segment).or_default() += 1;
    }

    fn remove(&mut self, queue: u64, seq: u64) {
        let removed = self
            .queues
            .get_mut(&queue)
            .and_then(|ledger| ledger.remove(seq));
        if let Some(removed) = removed {
            self.forget_live(u64::from(removed.position.segment));
        }
        self.drop_queue_if_empty(queue);
    }

    fn forget_live(&mut self, segment: u64) {
        if let Some(live) = self.live_per_segment.get_mut(&segment) {
            *live -= 1;
            if *live == 0 {
                self.live_per_segment.remove(&segment);
            }
        }
    }

    fn drop_queue_if_empty(&mut self, queue: u64) {
        if self
            .queues
            .get(&queue)
            .is_some_and(|ledger| ledger.messages.is_empty())
        {
            self.queues.remove(&queue);
        }
    }

    /// Writes a live message's current state and failures into `message`
    /// (its record holds them as they were when it was written); false when
    /// the message is not live.
    pub fn stamp(&self, queue: u64, seq: u64, message: &mut SentMessage) -> bool {
        let Some(ledger) = self.queues.get(&queue) else {
            return false;
        };
        let Some(state) = ledger.messages.get(&seq) else {
            return false;
        };
        message.visible_at = state.visible_at;
        message.receive_count = state.receive_count;
        message.first_received_at = state.first_received_at();
        message.last_received_at = state.last_received_at();
        message.failures = ledger.failures.get(&seq).cloned();
        true
    }

    /// A live message's state.
    pub fn message(&self, queue: u64, seq: u64) -> Option<&MessageState> {
        self.queues.get(&queue)?.messages.get(&seq)
    }

    /// Up to `limit` messages of `queue` deliverable at `now`, in receive order.
    pub fn deliverable(&self, queue: u64, now: i64, limit: usize) -> Vec<u64> {
        self.visible(queue, now)
            .take(limit)
            .map(|(seq, _)| seq)
            .collect()
    }

    /// `queue`'s messages deliverable at `now`, in receive order, with their
    /// state: a receive walks this until it has leased enough.
    pub fn visible(&self, queue: u64, now: i64) -> impl Iterator<Item = (u64, &MessageState)> + '_ {
        self.queues.get(&queue).into_iter().flat_map(move |ledger| {
            ledger
                .order
                .range(..=(now, u32::MAX, u64::MAX))
                .filter_map(|&(_, _, seq)| Some((seq, ledger.messages.get(&seq)?)))
        })
    }

    /// The tenant (`MessageGroupId`) of a message sent with one.
    pub fn tenant(&self, queue: u64, seq: u64) -> Option<&str> {
        self.queues
            .get(&queue)?
            .tenants
            .get(&seq)
            .map(AsRef::as_ref)
    }

    /// `queue`'s tenants as fair queues judge them at `now`
    /// (`ackbox_core::fair_queue`). A queue none of whose messages has a
    /// group costs a lookup; another, a walk over its messages not visible.
    pub fn fair_order(&self, queue: u64, now: i64) -> FairOrder<&str> {
        let Some(ledger) = self.queues.get(&queue) else {
            return FairOrder::default();
        };
        if ledger.tenants.is_empty() {
            return FairOrder::default();
        }
        let mut in_flight = 0;
        let mut by_tenant: HashMap<&str, u64> = HashMap::new();
        for &(_, receive_count, seq) in ledger.order.range((now + 1, 0, 0)..) {
            if receive_count == 0 {
                continue;
            }
            in_flight += 1;
            if let Some(tenant) = ledger.tenants.get(&seq) {
                *by_tenant.entry(tenant).or_default() += 1;
            }
        }
        FairOrder::judge(by_tenant, in_flight)
    }

    /// Up to `limit` of `queue`'s messages sent at or before `cutoff`, oldest
    /// first: what retention drops, whether or not anyone receives them.
    pub fn expired(&self, queue: u64, cutoff: i64, limit: usize) -> Vec<u64> {
        self.queues.get(&queue).map_or_else(Vec::new, |ledger| {
            ledger
                .by_age
                .range(..=(cutoff, u64::MAX))
                .take(limit)
                .map(|&(_, seq)| seq)
                .collect()
        })
    }

    /// `queue`'s messages numbered after `after`, in sequence order, with
    /// their state: what a peek shows (from 0) and a move task walks (from
    /// its cursor).
    pub fn in_order(
        &self,
        queue: u64,
        after: u64,
    ) -> impl Iterator<Item = (u64, &MessageState)> + '_ {
        self.queues.get(&queue).into_iter().flat_map(move |ledger| {
            ledger
                .messages
                .range(after.saturating_add(1)..)
                .map(|(&seq, state)| (seq, state))
        })
    }

    /// `queue`'s approximate counts at `now`.
    pub fn counts(&self, queue: u64, now: i64) -> QueueCounts {
        let Some(ledger) = self.queues.get(&queue) else {
            return QueueCounts::default();
        };
        let visible = ledger.order.range(..=(now, u32::MAX, u64::MAX)).count() as u64;
        let mut counts = QueueCounts {
            visible,
            ..QueueCounts::default()
        };
        for &(_, receive_count, _) in ledger.order.range((now + 1, 0, 0)..) {
            if receive_count == 0 {
                counts.delayed += 1;
            } else {
                counts.in_flight += 1;
            }
        }
        counts
    }

    /// When `queue`'s oldest live message was sent, epoch milliseconds.
    pub fn oldest_sent_at(&self, queue: u64) -> Option<i64> {
        let ledger = self.queues.get(&queue)?;
        ledger.by_age.first().map(|&(sent_at, _)| sent_at)
    }

    /// The next instant after `now` at which one of `queue`'s messages
    /// becomes deliverable, if any is waiting.
    pub fn next_visible_at(&self, queue: u64, now: i64) -> Option<i64> {
        let ledger = self.queues.get(&queue)?;
        ledger
            .order
            .range((now.saturating_add(1), 0, 0)..)
            .next()
            .map(|&(visible_at, _, _)| visible_at)
    }

    /// The failures reported for a live message, if any.
    pub fn failures(&self, queue: u64, seq: u64) -> Option<&Failures> {
        self.queues.get(&queue)?.failures.get(&seq)
    }

    /// How many of `queue`'s live messages move task `task` redrove (they
    /// came back to it, when `queue` is the task's dead-letter queue).
    pub fn redriven_by(&self, queue: u64, task: &str) -> u64 {
        self.queues.get(&queue).map_or(0, |ledger| {
            ledger
                .redriven_by
                .values()
                .filter(|by| by.as_ref() == task)
                .count() as u64
        })
    }

    /// The highest sequence number live in `queue`.
    pub fn newest_seq(&self, queue: u64) -> Option<u64> {
        let ledger = self.queues.get(&queue)?;
        ledger.messages.last_key_value().map(|(&seq, _)| seq)
    }

    /// Live messages in `queue`.
    pub fn queue_len(&self, queue: u64) -> usize {
        self.queues
            .get(&queue)
            .map_or(0, |ledger| ledger.messages.len())
    }

    /// Every queue holding a live message.
    pub fn queue_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.queues.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Purges not yet swept, as `(queue, through_seq)`.
    pub fn purge_marks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.purges
            .iter()
            .map(|(&queue, &through)| (queue, through))
    }

    /// Forgets `queue`'s purge mark once nothing it covers is live (a
    /// replay sets it again, and the next sweep finds nothing to drop).
    pub fn clear_purge(&mut self, queue: u64) {
        self.purges.remove(&queue);
    }

    /// Live messages in all queues.
    pub fn len(&self) -> usize {
        self.queues
            .values()
            .map(|ledger| ledger.messages.len())
            .sum()
    }

    /// Whether no queue holds a live message.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// The oldest segment holding a live message's send: every segment below
    /// it can be removed. `None` when no message is live.
    pub fn oldest_live_segment(&self) -> Option<u64> {
        self.live_per_segment.keys().next().copied()
    }

    /// Live messages whose send is in `segment`.
    pub fn live_in(&self, segment: u64) -> u64 {
        self.live_per_segment.get(&segment).copied().unwrap_or(0)
    }

    /// Sends (and copies) applied in `segment`, live or not.
    pub fn sends_in(&self, segment: u64) -> u64 {
        self.sends_per_segment.get(&segment).copied().unwrap_or(0)
    }

    /// Forgets the bookkeeping of segments below `segment`, once removed.
    pub fn forget_segments_before(&mut self, segment: u64) {
        self.sends_per_segment = self.sends_per_segment.split_off(&segment);
    }

    /// Live messages whose send is in a segment below `segment`: the ones
    /// compaction copies forward (as [`Record::Sent`] with their current
    /// state) before removing those segments. Only messages numbered below
    /// `below_seq` are looked at: `segment`'s sequence floor bounds them
    /// (see [`Log::seq_floor_of`](crate::log::Log::seq_floor_of)), so a deep
    /// backlog in later segments is not walked.
    pub fn live_before(&self, segment: u64, below_seq: u64) -> Vec<(u64, u64, MessageState)> {
        let mut live: Vec<(u64, u64, MessageState)> = self
            .queues
            .iter()
            .flat_map(|(&queue, ledger)| {
                ledger
                    .messages
                    .range(..below_seq)
                    .filter(|(_, state)| u64::from(state.position.segment) < segment)
                    .map(move |(&seq, &state)| (queue, seq, state))
            })
            .collect();
        live.sort_unstable_by_key(|&(_, _, state)| state.position);
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SentMessage;

    fn at(segment: u32, offset: u32) -> LogPosition {
        LogPosition {
            segment,
            offset,
            len: 0,
        }
    }

    fn sent(queue: u64, seq: u64, visible_at: i64) -> Record {
        Record::Sent(SentMessage {
            queue,
            seq,
            sent_at: visible_at,
            visible_at,
            ..SentMessage::default()
        })
    }

    fn lease(queue: u64, seq: u64, visible_at: i64, receive_count: u32) -> Record {
        Record::Leased {
            queue,
            seq,
            visible_at,
            receive_count,
            received_at: 0,
        }
    }

    #[test]
    fn a_message_costs_the_ledger_48_bytes_of_state() {
        // One per queued message: five million of them are 240 MB here.
        assert_eq!(std::mem::size_of::<MessageState>(), 48);
        assert_eq!(std::mem::size_of::<LogPosition>(), 12);
    }

    #[test]
    fn receive_order_is_visibility_then_fewest_deliveries_then_send_order() {
        let mut ledger = Ledger::new(0);
        for (offset, seq) in (1..=4).enumerate() {
            ledger.apply(&sent(7, seq, 100), at(1, offset as u32));
        }
        // seq 1 failed twice and is visible again at the same instant.
        ledger.apply(&lease(7, 1, 100, 2), at(1, 10));
        ledger.apply(&lease(7, 2, 500, 1), at(1, 11));
        assert_eq!(ledger.deliverable(7, 100, 10), vec![3, 4, 1]);
        assert_eq!(ledger.deliverable(7, 99, 10), Vec::<u64>::new());
        assert_eq!(ledger.deliverable(7, 500, 2), vec![3, 4]);
        assert_eq!(
            ledger.counts(7, 100),
            QueueCounts {
                visible: 3,
                in_flight: 1,
                delayed: 0
            }
        );
    }

    #[test]
    fn a_delayed_message_counts_as_delayed_until_its_delay_ends() {
        let mut ledger = Ledger::new(0);
        ledger.apply(&sent(1, 1, 1_000), at(1, 0));
        assert_eq!(ledger.counts(1, 999).delayed, 1);
        assert_eq!(ledger.counts(1, 1_000).visible, 1);
    }

    #[test]
    fn records_about_unknown_messages_change_nothing() {
        let mut ledger = Ledger::new(0);
        ledger.apply(&lease(1, 5, 10, 1), at(1, 0));
        ledger.apply(&Record::Deleted { queue: 1, seq: 5 }, at(1, 1));
        assert!(ledger.is_empty());
        assert_eq!(ledger.oldest_live_segment(), None);
    }

    #[test]
    fn a_copy_forward_replaces_the_message_and_frees_its_old_segment() {
        let mut ledger = Ledger::new(0);
        ledger.apply(&sent(1, 1, 0), at(1, 0));
        ledger.apply(&sent(1, 2, 0), at(2, 0));
        ledger.apply(&lease(1, 1, 50, 3), at(2, 1));
        assert_eq!(ledger.oldest_live_segment(), Some(1));
        let (queue, seq, state) = ledger.live_before(2, u64::MAX)[0];
        assert_eq!((queue, seq, state.receive_count), (1, 1, 3));
        let Record::Sent(mut copy) = sent(1, 1, 0) else {
            unreachable!()
        };
        copy.visible_at = state.visible_at;
        copy.receive_count = state.receive_count;
        ledger.apply(&Record::Sent(copy), at(3, 0));
        assert_eq!(ledger.oldest_live_segment(), Some(2));
        assert_eq!(ledger.len(), 2);
        let copied = ledger.message(1, 1).copied();
        assert_eq!(
            copied.map(|s| (s.receive_count, s.visible_at)),
            Some((3, 50))
        );
    }

    #[test]
    fn a_purge_marks_its_queue_through_the_mark_and_keeps_the_highest_mark() {
        let mut ledger = Ledger::new(0);
        for seq in 1..=5 {
            ledger.apply(&sent(1, seq, 0), at(seq as u32, 0));
        }
        ledger.apply(&sent(2, 6, 0), at(1, 1));
        let purge = |through_seq| Record::Purged {
            queue: 1,
            through_seq,
        };
        ledger.apply(&purge(3), at(6, 0));
        ledger.apply(&purge(2), at(6, 1));
        // The messages stay until a sweep drops them in chunks.
        assert_eq!(ledger.queue_len(1), 5);
        assert_eq!(ledger.purge_marks().collect::<Vec<_>>(), vec![(1, 3)]);
        ledger.clear_purge(1);
        assert_eq!(ledger.purge_marks().count(), 0);
        assert_eq!(ledger.deliverable(2, 0, 10), vec![6]);
    }

    #[test]
    fn sequence_numbers_never_fall_below_the_floor_or_any_seen() {
        let mut ledger = Ledger::new(100);
        assert_eq!(ledger.allocate_seqs(2), 100..102);
        ledger.apply(&sent(1, 500, 0), at(1, 0));
        assert_eq!(ledger.allocate_seqs(1), 501..502);
        ledger.apply(&Record::Deleted { queue: 1, seq: 500 }, at(1, 1));
        assert_eq!(ledger.next_seq(), 502);
    }
}
