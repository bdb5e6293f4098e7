//! The [`Engine`]: SQS queue semantics over a [`Store`].
//!
//! The engine validates requests against SQS limits, reads the clock once per
//! request, seals and opens receipt handles, and wakes long pollers. It holds
//! no state the store does not also hold, apart from caches and notifiers that
//! a restart rebuilds.
//!
//! One file though it is long: every action's validation, clock reading and
//! handle sealing follow one pattern over the store, read best side by side.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ackbox_core::attributes::{ARCHIVE_POLICY, QueueAttributes, is_known_attribute_name};
use ackbox_core::clock::{Clock, Timestamp};
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::limits::{
    MAX_LIST_QUEUES_RESULTS, MAX_QUEUE_TAGS, MAX_TAG_KEY_LEN, MAX_TAG_VALUE_LEN,
    PURGE_COOLDOWN_SECONDS, QUEUE_RECREATE_COOLDOWN_SECONDS,
};
use ackbox_core::queue_name::{QueueName, Realm};
use ackbox_core::receipt::ReceiptKey;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::EngineError;
use crate::queue::{Queue, QueueSnapshot, Registry};
use crate::reaper;
use crate::store::{
    QueueCreateOutcome, QueueCreateParams, QueueDeleteParams, QueuePurgeOutcome, QueuePurgeParams,
    QueueStatsParams, QueueUpdateParams, Store,
};
use crate::topic::archive_retention;

/// How the engine is set up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Region and account that appear in ARNs and URLs.
    pub realm: Realm,
    /// The key that seals receipt handles; keep it across restarts so handles
    /// issued before a restart still work after it.
    pub receipt_key: ReceiptKey,
    /// How often expired messages are swept out.
    pub retention_sweep_interval: Duration,
}

impl EngineConfig {
    /// A configuration with the default realm and sweep interval.
    pub fn new(receipt_key: ReceiptKey) -> Self {
        Self {
            realm: Realm::default(),
            receipt_key,
            retention_sweep_interval: Duration::from_secs(1),
        }
    }
}

/// A cheap, cloneable handle to the queue engine.
///
/// Background work (the retention sweeper) stops with [`Engine::shutdown`],
/// which also flushes and closes the store.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: EngineConfig,
    pub(crate) registry: Registry,
    /// Serialises queue creation, deletion and attribute changes, so the
    /// registry and the store never disagree about which queues exist.
    pub(crate) admin: tokio::sync::Mutex<()>,
    /// Other nodes share the store: their changes arrive as events, and
    /// their move tasks may need adopting.
    pub(crate) shared_store: bool,
    /// Move tasks with a runner on this node, so none gets two.
    pub(crate) move_runners: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Topic definitions as this node last read them.
    pub(crate) definitions: crate::topic::DefinitionCache,
    /// Replays with a runner on this node, so none gets two.
    pub(crate) replay_runners: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Names this engine's runners in the leases they take on shared work.
    pub(crate) runner_id: String,
    /// Cancelled at shutdown: long polls return, background tasks stop.
    pub(crate) shutdown: CancellationToken,
    pub(crate) tasks: TaskTracker,
}

/// One queue's message counts at one instant.
#[derive(Debug, Clone)]
pub struct QueueDepth {
    /// The queue.
    pub name: QueueName,
    /// Whether some queue's redrive policy names it.
    pub dead_letter_queue: bool,
    /// Visible, in-flight and delayed messages, and the oldest send.
    pub stats: crate::store::QueueStats,
    /// When it was counted.
    pub now: Timestamp,
}

impl QueueDepth {
    /// Seconds since the oldest message was sent (0 when empty).
    pub fn oldest_age_seconds(&self) -> f64 {
        self.stats
            .oldest_sent_at
            .map_or(0.0, |sent_at| (self.now - sent_at).max(0) as f64 / 1_000.0)
    }
}

/// The attributes GetQueueAttributes returns, by wire name.
pub type AttributeMap = BTreeMap<String, String>;

impl Engine {
    /// Loads every queue from `store` and starts background work.
    pub async fn start(
        config: EngineConfig,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, EngineError> {
        let events = store.events();
        let registry = Registry::default();
        for record in store.queue_list().await? {
            registry.insert(Arc::new(Queue::from_record(record)?));
        }
        let engine = Self {
            inner: Arc::new(Inner {
                store,
                clock,
                config,
                registry,
                admin: tokio::sync::Mutex::new(()),
                shared_store: events.is_some(),
                move_runners: std::sync::Mutex::default(),
                definitions: crate::topic::DefinitionCache::default(),
                replay_runners: std::sync::Mutex::default(),
                runner_id: uuid::Uuid::new_v4().to_string(),
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
            }),
        };
        if let Some(events) = events {
            crate::follower::spawn(&engine, events);
        }
        reaper::spawn(&engine);
        engine.adopt_move_tasks().await?;
        engine.adopt_replays(true).await?;
        Ok(engine)
    }

    /// Stops background work, ends long polls, then flushes and closes the store.
    pub async fn shutdown(&self) -> Result<(), EngineError> {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        self.inner.store.close().await?;
        Ok(())
    }

    /// Whether the store's writes are failing for want of disk space
    /// ([`Store::disk_full`]).
    pub fn disk_full(&self) -> bool {
        self.inner.store.disk_full()
    }

    /// The region and account of this engine.
    pub fn realm(&self) -> &Realm {
        &self.inner.config.realm
    }

    /// The current time by the engine's clock.
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// A token cancelled when the engine shuts down.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// The live queue `name`, from the cache or the store.
    pub(crate) async fn queue(&self, name: &QueueName) -> Result<Arc<Queue>, EngineError> {
        if let Some(queue) = self.inner.registry.get(name.as_str()) {
            return Ok(queue);
        }
        match self.inner.store.queue_get(name.as_str()).await? {
            Some(record) => {
                let queue = Arc::new(Queue::from_record(record)?);
                Ok(self.inner.registry.insert_if_absent(queue))
            }
            None => Err(SqsError::queue_does_not_exist().into()),
        }
    }

    /// CreateQueue: creates `name`, or returns it when it exists with the same attributes.
    pub async fn create_queue(
        &self,
        name: &str,
        attributes: &AttributeMap,
        tags: &BTreeMap<String, String>,
    ) -> Result<QueueName, EngineError> {
        let name: QueueName = name.parse()?;
        let fifo_requested = attributes
            .get("FifoQueue")
            .is_some_and(|fifo| fifo.eq_ignore_ascii_case("true"));
        if fifo_requested && !name.is_fifo() {
            return Err(SqsError::invalid_value(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, or \
                 underscores, must end with .fifo suffix and be 1 to 80 in length.",
            )
            .into());
        }
        if name.is_fifo() && !fifo_requested {
            return Err(SqsError::invalid_parameter(
                "QueueName",
                &name,
                "Only a FIFO queue's name may end with .fifo; set the FifoQueue attribute to \
                 true to create one.",
            )
            .into());
        }
        let mut settings = QueueAttributes::for_kind(name.is_fifo());
        settings.apply(attributes)?;
        let archive_retention_days = archive_retention(&name, &settings)?;
        validate_tags(tags)?;

        let _admin = self.inner.admin.lock().await;
        if let Some(existing) = self.inner.registry.get(name.as_str()) {
            self.ensure_same_attributes(&existing, attributes)?;
            return Ok(name);
        }
        self.validate_redrive(&name, &settings).await?;
        let now = self.now();
        let outcome = self
            .inner
            .store
            .queue_create(QueueCreateParams {
                name: name.to_string(),
                attributes: settings.to_map(),
                tags: tags.clone(),
                now,
                deleted_after: now - QUEUE_RECREATE_COOLDOWN_SECONDS * 1_000,
                fifo: settings.is_fifo(),
            })
            .await?;
        match outcome {
            QueueCreateOutcome::Created(record) | QueueCreateOutcome::Exists(record) => {
                let queue = Arc::new(Queue::from_record(record)?);
                self.ensure_same_attributes(&queue, attributes)?;
                self.inner.registry.insert(Arc::clone(&queue));
                drop(_admin);
                if let Some(retention_days) = archive_retention_days {
                    // Boxed: making the archive creates its queue.
                    Box::pin(self.ensure_queue_archive(&queue, retention_days)).await?;
                }
                Ok(name)
            }
            QueueCreateOutcome::DeletedRecently => Err(SqsError::new(
                ErrorCode::QueueDeletedRecently,
                format!(
                    "You must wait {QUEUE_RECREATE_COOLDOWN_SECONDS} seconds after deleting a queue before you can create another with the same name."
                ),
            )
            .into()),
        }
    }

    /// A redrive policy must name another existing queue that allows `source`
    /// to use it, checked when the policy is set (as SQS does), so a message is
    /// never sent to a queue that cannot take it.
    async fn validate_redrive(
        &self,
        source: &QueueName,
        settings: &QueueAttributes,
    ) -> Result<(), EngineError> {
        let Some(policy) = &settings.redrive_policy else {
            return Ok(());
        };
        let invalid = |reason: &str| SqsError::invalid_parameter("RedrivePolicy", policy, reason);
        let target_name = self
            .realm()
            .queue_name_from_arn(&policy.dead_letter_target_arn)
            .ok_or_else(|| invalid("Dead letter target does not exist."))?;
        if &target_name == source {
            return Err(invalid("A queue cannot be its own dead-letter queue.").into());
        }
        let target = match self.queue(&target_name).await {
            Ok(target) => target,
            Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => {
                return Err(invalid("Dead letter target does not exist.").into());
            }
            Err(other) => return Err(other),
        };
        if target.snapshot().attributes.is_fifo() != settings.is_fifo() {
            return Err(
                invalid("Dead-letter queue must be same type of queue as the source.").into(),
            );
        }
        let source_arn = self.realm().queue_arn(source);
        if let Some(allow) = &target.snapshot().attributes.redrive_allow_policy
            && !allow.allows(&source_arn)
        {
            return Err(invalid(&format!(
                "The RedriveAllowPolicy of {} does not allow {source_arn} as a source queue.",
                policy.dead_letter_target_arn
            ))
            .into());
        }
        Ok(())
    }

    /// ListDeadLetterSourceQueues: the queues whose redrive policy names
    /// `name`, in name order, paginated like ListQueues.
    pub async fn list_dead_letter_source_queues(
        &self,
        name: &QueueName,
        max_results: Option<i32>,
        next_token: Option<&str>,
    ) -> Result<(Vec<QueueName>, Option<String>), EngineError> {
        let target = self.queue(name).await?;
        let target_arn = self.realm().queue_arn(&target.name);
        let sources = self.inner.registry.matching(|queue| {
            queue
                .snapshot()
                .attributes
                .redrive_policy
                .as_ref()
                .is_some_and(|policy| policy.dead_letter_target_arn == target_arn)
        });
        Ok(paginate(sources, max_results, next_token)?)
    }

    fn ensure_same_attributes(
        &self,
        queue: &Queue,
        requested: &AttributeMap,
    ) -> Result<(), SqsError> {
        match queue.snapshot().attributes.first_difference(requested)? {
            Some(attribute) => Err(SqsError::new(
                ErrorCode::QueueNameExists,
                format!(
                    "A queue already exists with the same name and a different value for attribute {attribute}"
                ),
            )),
            None => Ok(()),
        }
    }

    /// GetQueueUrl: the queue's name if it exists.
    pub async fn get_queue(&self, name: &str) -> Result<QueueName, EngineError> {
        let name: QueueName = name
            .parse()
            .map_err(|_: SqsError| SqsError::queue_does_not_exist())?;
        Ok(self.queue(&name).await?.name.clone())
    }

    /// ListQueues: names with `prefix`, in name order, after `next_token`.
    ///
    /// Returns the page and, when `max_results` was given and more remain, the
    /// token of the next page.
    pub fn list_queues(
        &self,
        prefix: &str,
        max_results: Option<i32>,
        next_token: Option<&str>,
    ) -> Result<(Vec<QueueName>, Option<String>), EngineError> {
        let names = self
            .inner
            .registry
            .matching(|queue| queue.name.as_str().starts_with(prefix));
        Ok(paginate(names, max_results, next_token)?)
    }

    /// DeleteQueue: removes the queue and every message in it.
    pub async fn delete_queue(&self, name: &QueueName) -> Result<(), EngineError> {
        let admin = self.inner.admin.lock().await;
        let queue = self.queue(name).await?;
        self.inner
            .store
            .queue_delete(QueueDeleteParams {
                queue_id: queue.id,
                now: self.now(),
            })
            .await?;
        self.inner.registry.remove(name.as_str());
        queue.mark_deleted();
        drop(admin);
        // Boxed: dropping the archive deletes its queue.
        Box::pin(self.drop_queue_archive(&queue)).await
    }

    /// Every queue's message counts, for metrics: whether it is some queue's
    /// dead-letter queue, and its visible / in-flight / delayed messages.
    pub async fn queue_depths(&self) -> Result<Vec<QueueDepth>, EngineError> {
        let queues = self.inner.registry.all();
        let dead_letter_targets: std::collections::HashSet<String> = queues
            .iter()
            .filter_map(|queue| {
                queue
                    .snapshot()
                    .attributes
                    .redrive_policy
                    .as_ref()
                    .map(|policy| policy.dead_letter_target_arn.clone())
            })
            .collect();
        let now = self.now();
        let mut depths = Vec::with_capacity(queues.len());
        for queue in queues {
            let stats = self
                .inner
                .store
                .queue_stats(QueueStatsParams {
                    queue_id: queue.id,
                    now,
                })
                .await?;
            depths.push(QueueDepth {
                dead_letter_queue: dead_letter_targets
                    .contains(&self.realm().queue_arn(&queue.name)),
                name: queue.name.clone(),
                stats,
                now,
            });
        }
        Ok(depths)
    }

    /// One queue's message counts (the dashboard's queue page), without
    /// counting every other queue too.
    pub async fn queue_depth(&self, name: &QueueName) -> Result<QueueDepth, EngineError> {
        let stats = self.queue_stats(name).await?;
        let dead_letter_queue = !self
            .list_dead_letter_source_queues(name, None, None)
            .await?
            .0
            .is_empty();
        Ok(QueueDepth {
            name: name.clone(),
            dead_letter_queue,
            stats,
            now: self.now(),
        })
    }

    /// GetQueueAttributes: the named attributes (`All` for every one).
    pub async fn get_queue_attributes(
        &self,
        name: &QueueName,
        attribute_names: &[String],
    ) -> Result<AttributeMap, EngineError> {
        if let Some(unknown) = attribute_names
            .iter()
            .find(|name| !is_known_attribute_name(name))
        {
            return Err(SqsError::new(
                ErrorCode::InvalidAttributeName,
                format!("Unknown Attribute {unknown}."),
            )
            .into());
        }
        let queue = self.queue(name).await?;
        let snapshot = queue.snapshot();
        let wants = |attribute: &str| {
            attribute_names
                .iter()
                .any(|name| name == "All" || name == attribute)
        };
        let mut result: AttributeMap = snapshot
            .attributes
            .to_visible_map()
            .into_iter()
            .filter(|(attribute, _)| wants(attribute))
            .collect();
        let seconds = |millis: Timestamp| (millis / 1_000).to_string();
        if wants("CreatedTimestamp") {
            result.insert("CreatedTimestamp".into(), seconds(snapshot.created_at));
        }
        if wants("LastModifiedTimestamp") {
            result.insert(
                "LastModifiedTimestamp".into(),
                seconds(snapshot.last_modified_at),
            );
        }
        if wants("QueueArn") {
            result.insert("QueueArn".into(), self.realm().queue_arn(&queue.name));
        }
        let counters = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ];
        if counters.iter().any(|counter| wants(counter)) {
            let stats = self
                .inner
                .store
                .queue_stats(QueueStatsParams {
                    queue_id: queue.id,
                    now: self.now(),
                })
                .await?;
            for (counter, value) in
                counters
                    .iter()
                    .zip([stats.visible, stats.in_flight, stats.delayed])
            {
                if wants(counter) {
                    result.insert((*counter).to_owned(), value.to_string());
                }
            }
        }
        Ok(result)
    }

    /// Message counts of a queue, for operators and metrics.
    pub async fn queue_stats(
        &self,
        name: &QueueName,
    ) -> Result<crate::store::QueueStats, EngineError> {
        let queue = self.queue(name).await?;
        Ok(self
            .inner
            .store
            .queue_stats(QueueStatsParams {
                queue_id: queue.id,
                now: self.now(),
            })
            .await?)
    }

    /// SetQueueAttributes: validates and applies `attributes` atomically.
    pub async fn set_queue_attributes(
        &self,
        name: &QueueName,
        attributes: &AttributeMap,
    ) -> Result<(), EngineError> {
        if attributes.contains_key(ARCHIVE_POLICY) {
            // Made before the queue says it archives, so that a send that
            // reads the policy finds the archive there.
            let queue = self.queue(name).await?;
            let mut requested = queue.snapshot().attributes.clone();
            requested.change(attributes)?;
            if let Some(retention_days) = archive_retention(name, &requested)? {
                Box::pin(self.ensure_queue_archive(&queue, retention_days)).await?;
            }
        }
        let _admin = self.inner.admin.lock().await;
        let queue = self.queue(name).await?;
        let current = queue.snapshot();
        let mut updated = current.attributes.clone();
        updated.change(attributes)?;
        // Only a policy being set is checked: an existing policy whose target
        // has gone stays (receives then move nothing), as on SQS.
        if attributes
            .get("RedrivePolicy")
            .is_some_and(|policy| !policy.is_empty())
        {
            self.validate_redrive(name, &updated).await?;
        }
        self.store_attributes(&queue, updated).await
    }

    /// Makes queue `name` keep each message `seconds` seconds, an
    /// archive's retention, which may be longer than a queue's.
    pub(crate) async fn keep_as_archive(
        &self,
        name: &QueueName,
        seconds: i64,
    ) -> Result<(), EngineError> {
        let _admin = self.inner.admin.lock().await;
        let queue = self.queue(name).await?;
        let mut updated = queue.snapshot().attributes.clone();
        updated.archive_queue_retention_period = Some(seconds);
        self.store_attributes(&queue, updated).await
    }

    /// Stores `queue`'s changed attributes and serves them from now on.
    /// Under the admin lock.
    async fn store_attributes(
        &self,
        queue: &Queue,
        updated: QueueAttributes,
    ) -> Result<(), EngineError> {
        let current = queue.snapshot();
        let now = self.now();
        self.inner
            .store
            .queue_update(QueueUpdateParams {
                queue_id: queue.id,
                attributes: Some(updated.to_map()),
                tags: None,
                now,
            })
            .await?;
        queue.replace_snapshot(QueueSnapshot {
            attributes: updated,
            last_modified_at: now,
            ..(*current).clone()
        });
        // A shorter delay or wait may make messages receivable sooner.
        queue.arrivals.notify_waiters();
        Ok(())
    }

    /// ListQueueTags.
    pub async fn list_queue_tags(
        &self,
        name: &QueueName,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        Ok(self.queue(name).await?.snapshot().tags.clone())
    }

    /// TagQueue: adds or overwrites tags.
    pub async fn tag_queue(
        &self,
        name: &QueueName,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), EngineError> {
        validate_tags(tags)?;
        self.update_tags(name, |current| {
            current.extend(tags.iter().map(|(key, value)| (key.clone(), value.clone())));
        })
        .await
    }

    /// UntagQueue: removes tags by key; unknown keys are ignored.
    pub async fn untag_queue(&self, name: &QueueName, keys: &[String]) -> Result<(), EngineError> {
        self.update_tags(name, |current| {
            for key in keys {
                current.remove(key);
            }
        })
        .await
    }

    async fn update_tags(
        &self,
        name: &QueueName,
        change: impl FnOnce(&mut BTreeMap<String, String>),
    ) -> Result<(), EngineError> {
        let _admin = self.inner.admin.lock().await;
        let queue = self.queue(name).await?;
        let current = queue.snapshot();
        let mut tags = current.tags.clone();
        change(&mut tags);
        if tags.len() > MAX_QUEUE_TAGS {
            return Err(SqsError::invalid_value(format!(
                "Too many tags: a queue may have at most {MAX_QUEUE_TAGS}; this change would leave {}.",
                tags.len()
            ))
            .into());
        }
        self.inner
            .store
            .queue_update(QueueUpdateParams {
                queue_id: queue.id,
                attributes: None,
                tags: Some(tags.clone()),
                now: self.now(),
            })
            .await?;
        queue.replace_snapshot(QueueSnapshot {
            tags,
            ..(*current).clone()
        });
        Ok(())
    }

    /// PurgeQueue: deletes every message, at most once per 60 seconds. A
    /// queue deeper than [`PURGE_AT_ONCE`] loses the rest of what was sent
    /// before the purge to the sweeper, within seconds, as SQS allows ("may
    /// take up to 60 seconds"); receives meanwhile may still return some of
    /// them (on a FIFO queue, in group order). A FIFO queue's deduplication
    /// window is cleared at once.
    pub async fn purge_queue(&self, name: &QueueName) -> Result<Purge, EngineError> {
        let queue = self.queue(name).await?;
        let now = self.now();
        let outcome = self
            .inner
            .store
            .queue_purge(QueuePurgeParams {
                queue_id: queue.id,
                now,
                purged_after: now - PURGE_COOLDOWN_SECONDS * 1_000,
                delete_at_once: PURGE_AT_ONCE,
            })
            .await?;
        match outcome {
            QueuePurgeOutcome::Purged { deleted, more } => Ok(Purge {
                deleted,
                rest_swept: more,
            }),
            QueuePurgeOutcome::InProgress => Err(SqsError::new(
                ErrorCode::PurgeQueueInProgress,
                format!("Only one PurgeQueue operation on {name} is allowed every {PURGE_COOLDOWN_SECONDS} seconds."),
            )
            .into()),
        }
    }
}

/// Rows (messages, then a FIFO queue's deduplication ids) a purge deletes in
/// its own transaction (see [`Engine::purge_queue`]).
pub const PURGE_AT_ONCE: u32 = 10_000;

/// What a purge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purge {
    /// Messages deleted by the purge itself.
    pub deleted: u64,
    /// The queue held more; the sweeper drops the rest of what was sent
    /// before the purge within seconds.
    pub rest_swept: bool,
}

pub(crate) fn validate_tags(tags: &BTreeMap<String, String>) -> Result<(), SqsError> {
    if tags.len() > MAX_QUEUE_TAGS {
        return Err(SqsError::invalid_value(format!(
            "Too many tags: a queue may have at most {MAX_QUEUE_TAGS}; got {}.",
            tags.len()
        )));
    }
    for (key, value) in tags {
        if key.is_empty() || key.chars().count() > MAX_TAG_KEY_LEN {
            return Err(SqsError::invalid_value(format!(
                "Tag key {key:?} is invalid: it must be 1 to {MAX_TAG_KEY_LEN} characters long."
            )));
        }
        if value.chars().count() > MAX_TAG_VALUE_LEN {
            return Err(SqsError::invalid_value(format!(
                "The value of tag {key:?} is too long: at most {MAX_TAG_VALUE_LEN} characters are allowed."
            )));
        }
    }
    Ok(())
}

/// One page of `names` (in name order) after `next_token`; a next-page token
/// only when `max_results` was given and more remain, as SQS does.
fn paginate(
    names: Vec<QueueName>,
    max_results: Option<i32>,
    next_token: Option<&str>,
) -> Result<(Vec<QueueName>, Option<String>), SqsError> {
    if let Some(max) = max_results
        && !(1..=MAX_LIST_QUEUES_RESULTS).contains(&max)
    {
        return Err(SqsError::invalid_parameter(
            "MaxResults",
            max,
            &format!("MaxResults must be between 1 and {MAX_LIST_QUEUES_RESULTS}."),
        ));
    }
    let limit = max_results.map_or(MAX_LIST_QUEUES_RESULTS, |max| max) as usize;
    let after = next_token.map(decode_next_token).transpose()?;
    let mut page: Vec<QueueName> = names
        .into_iter()
        .filter(|name| after.as_deref().is_none_or(|after| name.as_str() > after))
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let token = match (max_results, more, page.last()) {
        (Some(_), true, Some(last)) => Some(encode_next_token(last.as_str())),
        _ => None,
    };
    Ok((page, token))
}

fn encode_next_token(last_name: &str) -> String {
    hex_encode(last_name.as_bytes())
}

fn decode_next_token(token: &str) -> Result<String, SqsError> {
    let invalid =
        || SqsError::invalid_parameter("NextToken", token, "Invalid or expired next token.");
    if !token.len().is_multiple_of(2) {
        return Err(invalid());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(token.get(index..index + 2).unwrap_or("zz"), 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| invalid())?;
    String::from_utf8(bytes).map_err(|_| invalid())
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_token_round_trips_and_rejects_garbage() {
        let token = encode_next_token("queue-7");
        assert_eq!(decode_next_token(&token).unwrap(), "queue-7");
        assert!(decode_next_token("xyz").is_err());
        assert!(decode_next_token("zz").is_err());
    }

    #[test]
    fn tags_are_bounded() {
        let too_many: BTreeMap<String, String> = (0..51)
            .map(|index| (format!("k{index}"), "v".into()))
            .collect();
        assert!(validate_tags(&too_many).is_err());
        let long_key: BTreeMap<String, String> =
            [("k".repeat(129), "v".into())].into_iter().collect();
        assert!(validate_tags(&long_key).is_err());
    }
}
