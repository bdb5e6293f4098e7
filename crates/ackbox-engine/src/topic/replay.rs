//! Replays of a topic's or a queue's archive (`archive.rs`): archived
//! publishes or sends from a time range delivered again — to a queue
//! (`AckBox.StartReplay`, `ackbox replay start`) or to a topic's
//! subscription (SNS's `ReplayPolicy`) — rate-limited and audited as move
//! tasks are.
//!
//! A replayed copy is the copy the first delivery made (the same envelope,
//! `MessageId` and `Timestamp`, or the same raw message) plus three
//! attributes: `ackbox.replay=true`, and the publish's id and time
//! (`ackbox.replay.message_id`, `ackbox.replay.published_at`), so a consumer
//! knows a replay from a first delivery and can rebuild a projection without
//! repeating an irreversible effect.
//!
//! A replay is a task in its owner's definition: a cursor over the archive's
//! sequence numbers, advanced after each slice is stored in the destination.
//! One runner at a time holds it, by a lease renewed with each slice; a
//! runner that dies leaves the lease to lapse and another node (or the
//! restarted one) goes on from the cursor. The slice in flight when a runner
//! dies is delivered again: a replay is at-least-once, like every delivery,
//! its copies keyed by the publish's id; into a FIFO queue the copies carry
//! a deduplication id derived from the replay and the publish, so the queue
//! drops the repeat.

use ackbox_core::clock::Timestamp;
use ackbox_core::digest::content_deduplication_id;
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::filter_policy::{FilterPolicy, FilterScope};
use ackbox_core::limits::MAX_MOVE_TASK_RATE;
use ackbox_core::message::{MessageAttributeValue, MessageAttributes};
use ackbox_core::topic_name::TopicName;
use ackbox_core::utc::{parse_rfc3339, rfc3339_millis};
use serde::{Deserialize, Serialize};

use super::archive::{ArchiveOwner, ArchivedPublish, is_archive_queue};
use super::publish::{Stamp, Target, TargetKind};
use super::push::{delivery_queue, is_push};
use super::{SubscriptionDefinition, TopicDefinition, validate_endpoint_kind};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::pace::{Pace, TICK};
use crate::store::{MessageInsertParams, MessagePeekParams};

/// The attribute that marks a replayed copy.
pub const REPLAY_ATTRIBUTE: &str = "ackbox.replay";
/// The attribute of a replayed copy with the publish's `MessageId`.
pub const REPLAY_MESSAGE_ID_ATTRIBUTE: &str = "ackbox.replay.message_id";
/// The attribute of a replayed copy with the publish's time (RFC 3339).
pub const REPLAY_PUBLISHED_AT_ATTRIBUTE: &str = "ackbox.replay.published_at";
/// The subscription attribute that starts a replay to it (SNS's).
pub const REPLAY_POLICY: &str = "ReplayPolicy";
/// The read-only subscription attribute with its latest replay's status.
pub const REPLAY_STATUS: &str = "ReplayStatus";

/// Most archived publishes one slice reads (delivered or passed over).
const PAGE: u32 = 1_000;
/// How long a runner's hold on a replay lasts without a slice renewing it.
const LEASE_MILLIS: i64 = 30_000;
/// A publish stamped this much after a replay's end may still be followed
/// by one inside it (two nodes' clocks): the replay reads that far on.
const CLOCK_SLACK_MILLIS: i64 = 5_000;
/// Ended replays a topic keeps for its audit log.
const KEPT_ENDED: usize = 20;

const RUNNING: &str = "RUNNING";
const COMPLETED: &str = "COMPLETED";
const CANCELLED: &str = "CANCELLED";
const FAILED: &str = "FAILED";

/// Where a replay delivers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "Kind")]
pub(crate) enum ReplayDestination {
    /// A subscription of the topic, as it takes publishes (its filter, its
    /// raw flag, its queue or push endpoint).
    Subscription { id: String },
    /// A queue no subscription needs to name.
    Queue {
        arn: String,
        raw_message_delivery: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filter_policy: Option<String>,
    },
}

/// A replay as its topic's definition keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReplayTask {
    pub(crate) handle: String,
    pub(crate) destination: ReplayDestination,
    /// Publishes stamped from here…
    pub(crate) from: Timestamp,
    /// …to here, both included.
    pub(crate) to: Timestamp,
    pub(crate) rate: Option<i64>,
    pub(crate) status: String,
    /// The archive's last sequence number read.
    pub(crate) cursor: i64,
    pub(crate) replayed: i64,
    /// Publishes in the range the destination's filter passed over.
    pub(crate) skipped: i64,
    pub(crate) requested_by: String,
    pub(crate) started_at: Timestamp,
    pub(crate) finished_at: Option<Timestamp>,
    pub(crate) failure_reason: Option<String>,
    /// This server's URL as the starter reached it (envelopes'
    /// `UnsubscribeURL`).
    pub(crate) endpoint: String,
    /// The runner holding the replay, and until when.
    pub(crate) runner: Option<String>,
    pub(crate) lease_until: Timestamp,
}

/// What starts a replay.
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// The topic or queue whose archive is replayed.
    pub source_arn: String,
    /// A queue's ARN, or a subscription's of the topic.
    pub destination_arn: String,
    /// Publishes from this time…
    pub start: Timestamp,
    /// …to this one (now when absent).
    pub end: Option<Timestamp>,
    /// For a queue: only publishes this policy (message-attributes scope)
    /// lets through.
    pub filter_policy: Option<String>,
    /// For a queue: the message alone, not the envelope.
    pub raw_message_delivery: bool,
    /// Copies per second (at most the move tasks' bound).
    pub rate: Option<i64>,
    /// Who starts it, for the audit log.
    pub requested_by: String,
    /// This server's URL as the caller reached it.
    pub endpoint: String,
}

/// A replay as listings report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// Its handle (for CancelReplay).
    pub handle: String,
    /// The topic or queue whose archive is replayed.
    pub source_arn: String,
    /// The queue or subscription it delivers to.
    pub destination_arn: String,
    /// The filter policy it applies, if any (a queue's, or the
    /// subscription's).
    pub filter_policy: Option<String>,
    /// The time range, epoch milliseconds, both ends included.
    pub start: Timestamp,
    /// The end of the range.
    pub end: Timestamp,
    /// Copies per second, if the starter chose.
    pub rate: Option<i64>,
    /// `RUNNING`, `COMPLETED`, `CANCELLED` or `FAILED`.
    pub status: String,
    /// Publishes delivered again so far.
    pub replayed: i64,
    /// Publishes in range the filter passed over.
    pub skipped: i64,
    /// Who started it.
    pub requested_by: String,
    /// When it started and ended.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Option<Timestamp>,
    /// Why it failed.
    pub failure_reason: Option<String>,
}

/// SNS's `ReplayPolicy`: `{"PointType":"Timestamp","StartingPoint":…,
/// "EndingPoint":…}` with RFC 3339 times; the range it names.
pub(crate) fn parse_replay_policy(
    policy: &str,
) -> Result<(Timestamp, Option<Timestamp>), SqsError> {
    let invalid = |reason: String| {
        SqsError::sns_invalid_parameter(&format!("Attributes.{REPLAY_POLICY}"), reason)
    };
    let document: serde_json::Map<String, serde_json::Value> = serde_json::from_str(policy)
        .map_err(|_| invalid(format!("{policy:?} is not a JSON object.")))?;
    if let Some(other) = document
        .keys()
        .find(|key| !matches!(key.as_str(), "PointType" | "StartingPoint" | "EndingPoint"))
    {
        return Err(invalid(format!(
            "{other:?} is not a member of a replay policy (PointType, StartingPoint, EndingPoint)."
        )));
    }
    let text = |member: &str| document.get(member).and_then(serde_json::Value::as_str);
    if text("PointType") != Some("Timestamp") {
        return Err(invalid(
            "PointType must be \"Timestamp\", the only point type SNS has.".to_owned(),
        ));
    }
    let time = |member: &str| -> Result<Option<Timestamp>, SqsError> {
        match document.get(member) {
            None => Ok(None),
            Some(value) => value
                .as_str()
                .and_then(parse_rfc3339)
                .map(Some)
                .ok_or_else(|| {
                    invalid(format!(
                        "{member} {value} is not an RFC 3339 time (2026-12-07T10:00:00.000Z)."
                    ))
                }),
        }
    };
    let start = time("StartingPoint")?
        .ok_or_else(|| invalid("a replay policy needs a StartingPoint.".to_owned()))?;
    Ok((start, time("EndingPoint")?))
}

/// The status SNS's `ReplayStatus` attribute shows for a replay.
fn sns_status(status: &str) -> &'static str {
    match status {
        RUNNING => "In progress",
        COMPLETED => "Completed",
        CANCELLED => "Cancelled",
        _ => "Failed",
    }
}

impl TopicDefinition {
    /// `ReplayStatus` of subscription `id`: its latest replay's, if any.
    pub(crate) fn replay_status(&self, id: &str) -> Option<&'static str> {
        self.replays
            .iter()
            .rev()
            .find(|task| {
                matches!(&task.destination, ReplayDestination::Subscription { id: of } if of == id)
            })
            .map(|task| sns_status(&task.status))
    }

    /// Keeps every running replay and the latest ended ones.
    fn prune_replays(&mut self) {
        let ended = self
            .replays
            .iter()
            .filter(|task| task.status != RUNNING)
            .count();
        let mut excess = ended.saturating_sub(KEPT_ENDED);
        self.replays.retain(|task| {
            if excess > 0 && task.status != RUNNING {
                excess -= 1;
                return false;
            }
            true
        });
    }
}

fn replay_not_found(handle: &str) -> SqsError {
    SqsError::new(
        ErrorCode::ResourceNotFoundException,
        format!("No replay has the handle {handle:?}."),
    )
}

/// The attributes every copy of one replayed publish carries.
fn replay_marks(record: &ArchivedPublish) -> MessageAttributes {
    MessageAttributes::from([
        (
            REPLAY_ATTRIBUTE.to_owned(),
            MessageAttributeValue::string("true"),
        ),
        (
            REPLAY_MESSAGE_ID_ATTRIBUTE.to_owned(),
            MessageAttributeValue::string(&record.message_id),
        ),
        (
            REPLAY_PUBLISHED_AT_ATTRIBUTE.to_owned(),
            MessageAttributeValue::string(rfc3339_millis(record.timestamp)),
        ),
    ])
}

/// What one slice did.
enum Slice {
    /// Delivered (or passed over) some; more may follow.
    Progress {
        cursor: i64,
        replayed: i64,
        skipped: i64,
        done: bool,
    },
    /// The replay cannot go on.
    Failed(String),
}

impl Engine {
    /// Starts a replay of `request.source_arn`'s archive.
    pub async fn start_replay(&self, request: ReplayRequest) -> Result<Replay, EngineError> {
        let owner = ArchiveOwner::from_arn(self.realm(), "SourceArn", &request.source_arn)?;
        if let ArchiveOwner::Queue(queue) = &owner {
            // Its existence first: a queue that never kept an archive has
            // no record to find.
            self.queue(queue).await?;
        }
        let definition = match self.owner_definition(&owner).await {
            Ok((definition, _)) if definition.archive.is_some() => definition,
            Err(EngineError::Sqs(error))
                if error.code == ErrorCode::NotFound && matches!(owner, ArchiveOwner::Queue(_)) =>
            {
                return Err(owner.without_archive(self.realm()).into());
            }
            Ok(_) => return Err(owner.without_archive(self.realm()).into()),
            Err(other) => return Err(other),
        };
        let destination = self
            .replay_destination(&owner, &definition, &request)
            .await?;
        let now = self.now();
        let end = request.end.unwrap_or(now);
        if request.start > end {
            return Err(SqsError::sns_invalid_parameter(
                "StartTime",
                format_args!(
                    "{} is after the replay's end, {}.",
                    rfc3339_millis(request.start),
                    rfc3339_millis(end)
                ),
            )
            .into());
        }
        if let Some(rate) = request
            .rate
            .filter(|rate| !(1..=i64::from(MAX_MOVE_TASK_RATE)).contains(rate))
        {
            return Err(SqsError::sns_invalid_parameter(
                "MaxNumberOfMessagesPerSecond",
                format_args!("{rate} must be from 1 to {MAX_MOVE_TASK_RATE}."),
            )
            .into());
        }
        let task = ReplayTask {
            handle: uuid::Uuid::new_v4().to_string(),
            destination,
            from: request.start,
            to: end,
            rate: request.rate,
            status: RUNNING.to_owned(),
            cursor: 0,
            replayed: 0,
            skipped: 0,
            requested_by: request.requested_by,
            started_at: now,
            finished_at: None,
            failure_reason: None,
            endpoint: request.endpoint,
            runner: Some(self.inner.runner_id.clone()),
            lease_until: now + LEASE_MILLIS,
        };
        self.change_owner(&owner, |definition| {
            definition.replays.push(task.clone());
            definition.prune_replays();
            Ok(())
        })
        .await?;
        tracing::info!(source = %owner, replay = %task.handle, "replay started");
        let replay = self.replay_view(&owner, &definition, &task);
        self.spawn_replay(owner, task.handle);
        Ok(replay)
    }

    /// Checks the destination a replay names and keeps it as the task will.
    async fn replay_destination(
        &self,
        owner: &ArchiveOwner,
        definition: &TopicDefinition,
        request: &ReplayRequest,
    ) -> Result<ReplayDestination, EngineError> {
        let arn = &request.destination_arn;
        if arn.starts_with("arn:aws:sns:") {
            let (of, id) = self.realm().subscription_from_arn(arn)?;
            if owner != &ArchiveOwner::Topic(of)
                || !definition.subscriptions.iter().any(|s| s.id == id)
            {
                return Err(SqsError::sns_invalid_parameter(
                    "DestinationArn",
                    format_args!("{arn} is not a subscription of {}.", request.source_arn),
                )
                .into());
            }
            if request.filter_policy.is_some() || request.raw_message_delivery {
                return Err(SqsError::sns_invalid_parameter(
                    "FilterPolicy",
                    "a replay to a subscription delivers as the subscription does: its own \
                     filter policy and raw flag; set those on the subscription.",
                )
                .into());
            }
            return Ok(ReplayDestination::Subscription { id });
        }
        let queue = self.realm().queue_name_from_arn(arn).ok_or_else(|| {
            SqsError::sns_invalid_parameter(
                "DestinationArn",
                format_args!("{arn:?} is not the ARN of a queue or subscription of this server."),
            )
        })?;
        if is_archive_queue(&queue) {
            return Err(SqsError::sns_invalid_parameter(
                "DestinationArn",
                format_args!("{arn} is a topic's archive; replay into an ordinary queue."),
            )
            .into());
        }
        match owner {
            ArchiveOwner::Topic(_) => validate_endpoint_kind(definition, Some(&queue), arn)?,
            ArchiveOwner::Queue(_) => {
                let fifo_archive = definition
                    .archive
                    .as_ref()
                    .is_some_and(|archive| archive.fifo);
                if queue.is_fifo() && !fifo_archive {
                    return Err(SqsError::sns_invalid_parameter(
                        "DestinationArn",
                        format_args!(
                            "{arn} is a FIFO queue; a standard queue's messages have no group \
                             to keep in order there."
                        ),
                    )
                    .into());
                }
            }
        }
        match self.queue(&queue).await {
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => {
                return Err(SqsError::sns_invalid_parameter(
                    "DestinationArn",
                    format_args!("the queue {arn} does not exist."),
                )
                .into());
            }
            other => other.map(drop)?,
        }
        if let Some(policy) = &request.filter_policy {
            FilterPolicy::parse(policy, FilterScope::MessageAttributes)
                .map_err(|reason| SqsError::sns_invalid_parameter("FilterPolicy", reason))?;
        }
        Ok(ReplayDestination::Queue {
            arn: arn.clone(),
            // A queue's archive holds messages as they were sent, not
            // publishes: they come back as sent.
            raw_message_delivery: request.raw_message_delivery
                || matches!(owner, ArchiveOwner::Queue(_)),
            filter_policy: request.filter_policy.clone(),
        })
    }

    fn replay_view(
        &self,
        owner: &ArchiveOwner,
        definition: &TopicDefinition,
        task: &ReplayTask,
    ) -> Replay {
        let (destination_arn, filter_policy) = match &task.destination {
            ReplayDestination::Subscription { id } => (
                match owner {
                    ArchiveOwner::Topic(topic) => self.realm().subscription_arn(topic, id),
                    ArchiveOwner::Queue(_) => id.clone(),
                },
                definition
                    .subscriptions
                    .iter()
                    .find(|subscription| &subscription.id == id)
                    .and_then(|subscription| subscription.attributes.get(super::FILTER_POLICY))
                    .filter(|policy| !policy.is_empty())
                    .cloned(),
            ),
            ReplayDestination::Queue {
                arn, filter_policy, ..
            } => (arn.clone(), filter_policy.clone()),
        };
        Replay {
            handle: task.handle.clone(),
            source_arn: owner.arn(self.realm()),
            destination_arn,
            filter_policy,
            start: task.from,
            end: task.to,
            rate: task.rate,
            status: task.status.clone(),
            replayed: task.replayed,
            skipped: task.skipped,
            requested_by: task.requested_by.clone(),
            started_at: task.started_at,
            finished_at: task.finished_at,
            failure_reason: task.failure_reason.clone(),
        }
    }

    /// Every replay kept (running and the latest ended), of one topic's or
    /// queue's archive or of all, newest first.
    pub async fn list_replays(&self, source_arn: Option<&str>) -> Result<Vec<Replay>, EngineError> {
        let only = source_arn
            .map(|arn| ArchiveOwner::from_arn(self.realm(), "SourceArn", arn))
            .transpose()?;
        let mut replays = Vec::new();
        for record in self.inner.store.topic_list().await? {
            let Some(owner) = ArchiveOwner::from_key(&record.name) else {
                continue;
            };
            if only.as_ref().is_some_and(|only| only != &owner) {
                continue;
            }
            let definition = TopicDefinition::decode(&record)?;
            replays.extend(
                definition
                    .replays
                    .iter()
                    .map(|task| self.replay_view(&owner, &definition, task)),
            );
        }
        replays.sort_by_key(|replay| std::cmp::Reverse(replay.started_at));
        Ok(replays)
    }

    /// Cancels a running replay of `source_arn`'s archive; what it
    /// delivered stays delivered.
    pub async fn cancel_replay(
        &self,
        source_arn: &str,
        handle: &str,
    ) -> Result<Replay, EngineError> {
        let owner = ArchiveOwner::from_arn(self.realm(), "SourceArn", source_arn)?;
        let now = self.now();
        let (definition, task) = self
            .change_owner(&owner, |definition| {
                let task = definition
                    .replays
                    .iter_mut()
                    .find(|task| task.handle == handle)
                    .ok_or_else(|| replay_not_found(handle))?;
                if task.status != RUNNING {
                    return Err(SqsError::sns_invalid_parameter(
                        "TaskHandle",
                        format_args!("the replay {handle} is {}, not running.", task.status),
                    ));
                }
                task.status = CANCELLED.to_owned();
                task.finished_at = Some(now);
                let task = task.clone();
                Ok((definition.clone(), task))
            })
            .await?;
        tracing::info!(source = %owner, replay = %handle, replayed = task.replayed, "replay cancelled");
        Ok(self.replay_view(&owner, &definition, &task))
    }

    /// Cancels the running replays to subscription `id` (its
    /// `ReplayPolicy` cleared, or replaced by a new one).
    pub(crate) async fn cancel_subscription_replays(
        &self,
        topic: &TopicName,
        id: &str,
    ) -> Result<(), EngineError> {
        let now = self.now();
        self.change_topic(topic, |definition| {
            for task in &mut definition.replays {
                let to_it = matches!(&task.destination, ReplayDestination::Subscription { id: of } if of == id);
                if to_it && task.status == RUNNING {
                    task.status = CANCELLED.to_owned();
                    task.finished_at = Some(now);
                }
            }
            Ok(())
        })
        .await
    }

    /// Starts a runner for every running replay that no live runner holds:
    /// at start (`restarted`: this node's earlier runners are gone, whatever
    /// their leases say, on a store no other node shares) and
    /// periodically, to take over from a node that died.
    pub(crate) async fn adopt_replays(&self, restarted: bool) -> Result<(), EngineError> {
        let now = self.now();
        for record in self.inner.store.topic_list().await? {
            let Some(owner) = ArchiveOwner::from_key(&record.name) else {
                continue;
            };
            for task in TopicDefinition::decode(&record)?.replays {
                if task.status != RUNNING {
                    continue;
                }
                let mine = task.runner.as_deref() == Some(self.inner.runner_id.as_str());
                if restarted && !self.inner.shared_store && !mine {
                    // The lease names a runner of this node before the
                    // restart: nobody runs the replay now.
                    self.take_replay(&owner, &task.handle).await?;
                } else if !mine && task.lease_until > now {
                    continue;
                }
                self.spawn_replay(owner.clone(), task.handle);
            }
        }
        Ok(())
    }

    /// Makes this engine's runner the holder of replay `handle`.
    async fn take_replay(&self, owner: &ArchiveOwner, handle: &str) -> Result<(), EngineError> {
        let now = self.now();
        self.change_owner(owner, |definition| {
            if let Some(task) = definition
                .replays
                .iter_mut()
                .find(|task| task.handle == handle)
            {
                task.runner = Some(self.inner.runner_id.clone());
                task.lease_until = now + LEASE_MILLIS;
            }
            Ok(())
        })
        .await
    }

    fn spawn_replay(&self, owner: ArchiveOwner, handle: String) {
        if !self
            .inner
            .replay_runners
            .lock()
            .expect("replay runner set poisoned")
            .insert(handle.clone())
        {
            return;
        }
        let engine = self.clone();
        let shutdown = self.inner.shutdown.clone();
        self.inner.tasks.spawn(async move {
            let mut pace = Pace::new();
            let mut ticker = tokio::time::interval(TICK);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    _ = ticker.tick() => {}
                }
                match engine.replay_step(&owner, &handle, &mut pace).await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(replay = %handle, %error, "replay step failed; will retry");
                    }
                }
            }
            engine
                .inner
                .replay_runners
                .lock()
                .expect("replay runner set poisoned")
                .remove(&handle);
        });
    }

    /// One slice of a replay; `true` once this runner is done with it
    /// (ended, or held by another runner).
    async fn replay_step(
        &self,
        owner: &ArchiveOwner,
        handle: &str,
        pace: &mut Pace,
    ) -> Result<bool, EngineError> {
        let me = self.inner.runner_id.clone();
        let now = self.now();
        let (definition, _) = match self.owner_definition(owner).await {
            Ok(found) => found,
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::NotFound => return Ok(true),
            Err(other) => return Err(other),
        };
        let Some(task) = definition.replays.iter().find(|task| task.handle == handle) else {
            return Ok(true);
        };
        let held_by_me = task.runner.as_deref() == Some(me.as_str());
        if task.status != RUNNING || (!held_by_me && task.lease_until > now) {
            return Ok(true);
        }
        if !held_by_me || task.lease_until - now < LEASE_MILLIS / 2 {
            // Claimed (or renewed) before anything is delivered, so two
            // runners never deliver the same slice on purpose.
            let claimed = self
                .change_owner(owner, |definition| {
                    Ok(definition
                        .replays
                        .iter_mut()
                        .find(|task| task.handle == handle)
                        .filter(|task| {
                            task.status == RUNNING
                                && (task.runner.as_deref() == Some(me.as_str())
                                    || task.lease_until <= now)
                        })
                        .map(|task| {
                            task.runner = Some(me.clone());
                            task.lease_until = now + LEASE_MILLIS;
                        })
                        .is_some())
                })
                .await?;
            if !claimed {
                return Ok(true);
            }
        }
        let limit = pace.slice(task.rate.unwrap_or(i64::from(MAX_MOVE_TASK_RATE)));
        if limit == 0 {
            return Ok(false);
        }
        let slice = self.replay_slice(owner, &definition, task, limit).await?;
        let finished = self
            .change_owner(owner, |definition| {
                let Some(task) = definition
                    .replays
                    .iter_mut()
                    .find(|task| task.handle == handle)
                    .filter(|task| {
                        task.status == RUNNING && task.runner.as_deref() == Some(me.as_str())
                    })
                else {
                    return Ok(true);
                };
                let ended = match &slice {
                    Slice::Progress {
                        cursor,
                        replayed,
                        skipped,
                        done,
                    } => {
                        task.cursor = *cursor;
                        task.replayed += replayed;
                        task.skipped += skipped;
                        done.then_some(COMPLETED)
                    }
                    Slice::Failed(reason) => {
                        task.failure_reason = Some(reason.clone());
                        Some(FAILED)
                    }
                };
                task.lease_until = self.now() + LEASE_MILLIS;
                if let Some(status) = ended {
                    task.status = status.to_owned();
                    task.finished_at = Some(self.now());
                }
                Ok(ended.is_some())
            })
            .await?;
        if finished {
            tracing::info!(source = %owner, replay = %handle, "replay ended");
        }
        Ok(finished)
    }

    /// Reads the archive after the task's cursor and delivers up to `limit`
    /// publishes of its range to its destination, in one store write.
    async fn replay_slice(
        &self,
        owner: &ArchiveOwner,
        definition: &TopicDefinition,
        task: &ReplayTask,
        limit: i64,
    ) -> Result<Slice, EngineError> {
        let Some(archive) = &definition.archive else {
            return Ok(Slice::Failed(
                "The archive was turned off; nothing is left to replay.".to_owned(),
            ));
        };
        let archive_queue = match self.queue(&archive.queue()).await {
            Ok(queue) => queue,
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => {
                return Ok(Slice::Failed("The archive is gone.".to_owned()));
            }
            Err(other) => return Err(other),
        };
        let target = match self.replay_target(definition, &task.destination).await? {
            Ok(target) => target,
            Err(reason) => return Ok(Slice::Failed(reason)),
        };
        let page = self
            .inner
            .store
            .message_peek(MessagePeekParams {
                queue_id: archive_queue.id,
                limit: PAGE,
                after_seq: task.cursor,
            })
            .await?;
        let source_arn = owner.arn(self.realm());
        let fifo = target.queue.name.is_fifo();
        let (mut cursor, mut replayed, mut skipped) = (task.cursor, 0, 0);
        let mut done = page.len() < PAGE as usize;
        let mut copies = Vec::new();
        for stored in &page {
            if replayed >= limit {
                done = false;
                break;
            }
            let Some(record) = ArchivedPublish::decode(&stored.body) else {
                cursor = stored.seq;
                continue;
            };
            if record.timestamp > task.to + CLOCK_SLACK_MILLIS {
                done = true;
                break;
            }
            cursor = stored.seq;
            if record.timestamp < task.from || record.timestamp > task.to {
                continue;
            }
            let entry = record.entry();
            let message = entry.message.clone();
            if !target.takes(&entry, &message) {
                skipped += 1;
                continue;
            }
            let marks = replay_marks(&record);
            let stamp = Stamp {
                message_id: &record.message_id,
                timestamp: record.timestamp,
                // The replay's own: a first delivery's id would be dropped
                // by a queue that still remembers it.
                deduplication_id: fifo.then(|| {
                    content_deduplication_id(&format!(
                        "{}:{}",
                        task.handle,
                        record
                            .message_deduplication_id
                            .as_deref()
                            .unwrap_or(&record.message_id)
                    ))
                }),
                marks: &marks,
            };
            let copy = match self.copy(
                &target,
                &entry,
                &stamp,
                &source_arn,
                &self.realm().account_id,
                &task.endpoint,
            ) {
                Ok(copy) => copy,
                Err(refusal) => {
                    return Ok(Slice::Failed(format!(
                        "The archived publish {} cannot be delivered: {}",
                        record.message_id, refusal.message
                    )));
                }
            };
            copies.push(copy);
            replayed += 1;
        }
        if !copies.is_empty() {
            let window_start =
                self.now() - ackbox_core::limits::FIFO_DEDUPLICATION_WINDOW_SECONDS * 1_000;
            self.inner
                .store
                .message_insert_atomic(vec![MessageInsertParams {
                    queue_id: target.queue.id,
                    messages: copies,
                    deduplication_window_start: window_start,
                }])
                .await?;
            crate::counters::sent(&target.queue.name, replayed as u64, 0);
            target.queue.arrivals.notify_waiters();
        }
        Ok(Slice::Progress {
            cursor,
            replayed,
            skipped,
            done,
        })
    }

    /// The queue a replay delivers to, and how; `Err` with the reason when
    /// it is gone.
    async fn replay_target<'a>(
        &self,
        definition: &'a TopicDefinition,
        destination: &ReplayDestination,
    ) -> Result<Result<Target<'a>, String>, EngineError> {
        let (queue_name, kind, filter) = match destination {
            ReplayDestination::Subscription { id } => {
                let Some(subscription) = definition
                    .subscriptions
                    .iter()
                    .find(|subscription| &subscription.id == id)
                else {
                    return Ok(Err("The subscription was deleted.".to_owned()));
                };
                let Some(queue) = subscription_queue(self, subscription) else {
                    return Ok(Err(format!(
                        "The subscription's endpoint {} is not a queue of this server.",
                        subscription.endpoint
                    )));
                };
                (
                    queue,
                    TargetKind::Subscription(subscription),
                    subscription.filter()?,
                )
            }
            ReplayDestination::Queue {
                arn,
                raw_message_delivery,
                filter_policy,
            } => {
                let Some(queue) = self.realm().queue_name_from_arn(arn) else {
                    return Ok(Err(format!("{arn} is not a queue of this server.")));
                };
                let filter = filter_policy
                    .as_deref()
                    .map(|policy| {
                        FilterPolicy::parse(policy, FilterScope::MessageAttributes)
                            .map(|policy| (policy, FilterScope::MessageAttributes))
                    })
                    .transpose()
                    .map_err(|reason| crate::store::StoreError::Corrupt {
                        detail: format!("a replay's filter policy: {reason}"),
                    })?;
                (
                    queue,
                    TargetKind::Queue {
                        raw_message_delivery: *raw_message_delivery,
                    },
                    filter,
                )
            }
        };
        match self.queue(&queue_name).await {
            Ok(queue) => Ok(Ok(Target {
                kind,
                filter,
                queue,
            })),
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => Ok(Err(
                format!("The destination queue {queue_name} no longer exists."),
            )),
            Err(other) => Err(other),
        }
    }
}

/// The queue a subscription's copies go to: its own queue, or a push
/// subscription's delivery queue.
fn subscription_queue(
    engine: &Engine,
    subscription: &SubscriptionDefinition,
) -> Option<ackbox_core::queue_name::QueueName> {
    if is_push(&subscription.protocol) {
        Some(delivery_queue(&subscription.id))
    } else {
        engine.realm().queue_name_from_arn(&subscription.endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_policy_names_a_time_range_as_sns_writes_it() {
        assert_eq!(
            parse_replay_policy(
                r#"{"PointType":"Timestamp","StartingPoint":"2023-11-14T22:13:20.000Z"}"#
            )
            .unwrap(),
            (1_700_000_000_000, None)
        );
        assert_eq!(
            parse_replay_policy(
                r#"{"PointType":"Timestamp","StartingPoint":"2023-11-14T22:13:20Z","EndingPoint":"2023-11-14T22:13:21Z"}"#
            )
            .unwrap(),
            (1_700_000_000_000, Some(1_700_000_001_000))
        );
        for (policy, names) in [
            (r#"{"PointType":"Timestamp"}"#, "StartingPoint"),
            (
                r#"{"PointType":"Sequence","StartingPoint":"2023-11-14T22:13:20Z"}"#,
                "PointType",
            ),
            (
                r#"{"PointType":"Timestamp","StartingPoint":"yesterday"}"#,
                "\"yesterday\"",
            ),
            (
                r#"{"PointType":"Timestamp","StartingPoint":"2023-11-14T22:13:20Z","Until":1}"#,
                "\"Until\"",
            ),
            ("[]", "not a JSON object"),
        ] {
            let error = parse_replay_policy(policy).unwrap_err();
            assert!(error.message.contains("ReplayPolicy"), "{error:?}");
            assert!(error.message.contains(names), "{policy}: {}", error.message);
        }
    }

    #[test]
    fn a_topic_keeps_every_running_replay_and_the_latest_ended_ones() {
        let task = |index: usize, status: &str| ReplayTask {
            handle: index.to_string(),
            destination: ReplayDestination::Subscription { id: "s".into() },
            from: 0,
            to: 0,
            rate: None,
            status: status.to_owned(),
            cursor: 0,
            replayed: 0,
            skipped: 0,
            requested_by: "anonymous".into(),
            started_at: index as i64,
            finished_at: None,
            failure_reason: None,
            endpoint: String::new(),
            runner: None,
            lease_until: 0,
        };
        let mut definition = TopicDefinition::default();
        definition.replays.push(task(0, RUNNING));
        for index in 1..=KEPT_ENDED + 5 {
            definition.replays.push(task(index, COMPLETED));
        }
        definition.replays.push(task(99, FAILED));
        definition.prune_replays();
        assert_eq!(definition.replays.len(), KEPT_ENDED + 1);
        assert_eq!(definition.replays[0].status, RUNNING, "running ones stay");
        assert_eq!(
            definition.replays[1].handle, "7",
            "the oldest ended ones go"
        );
        assert_eq!(definition.replay_status("s"), Some("Failed"));
        assert_eq!(definition.replay_status("other"), None);
    }
}
