//! Message move tasks (StartMessageMoveTask, ListMessageMoveTasks,
//! CancelMessageMoveTask): redrive a dead-letter queue, as AWS documents it.
//!
//! A task lives in the store; a runner on the engine's task tracker moves a
//! slice of messages every tick, at most `MaxNumberOfMessagesPerSecond`, each
//! slice in one transaction with the task's progress. A restart resumes
//! running tasks where their cursor stands: no message moves twice and none
//! is lost. Only messages already in the dead-letter queue when the task
//! started move.

use ackbox_core::clock::Timestamp;
use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_core::limits::{MAX_LIST_MOVE_TASKS, MAX_MOVE_TASK_RATE};

use crate::engine::Engine;
use crate::error::EngineError;
use crate::pace::{Pace, TICK};
use crate::store::{
    MoveDestination, MoveFilter, MoveTaskCreateOutcome, MoveTaskCreateParams, MoveTaskFilter,
    MoveTaskRecord, MoveTaskStepParams,
};

/// Most tasks one history call returns.
const MAX_MOVE_TASK_HISTORY: i32 = 1_000;
/// The rate when the caller names none (the highest SQS allows).
const DEFAULT_RATE: i64 = MAX_MOVE_TASK_RATE as i64;

/// A move task as ListMessageMoveTasks reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveTask {
    /// The handle (only reported while running, as SQS does).
    pub handle: Option<String>,
    /// `RUNNING`, `COMPLETED`, `CANCELLED` or `FAILED`.
    pub status: String,
    /// The dead-letter queue.
    pub source_arn: String,
    /// The destination, when one was named.
    pub destination_arn: Option<String>,
    /// The rate, when one was named.
    pub max_messages_per_second: Option<i64>,
    /// Messages moved so far.
    pub moved: i64,
    /// Messages in the source when the task started.
    pub to_move: i64,
    /// Why it failed.
    pub failure_reason: Option<String>,
    /// When it started, epoch milliseconds.
    pub started_at: Timestamp,
    /// When it ended, epoch milliseconds.
    pub finished_at: Option<Timestamp>,
    /// Who started it: an access key, or `anonymous`.
    pub requested_by: String,
    /// Which messages it moves.
    pub filter: MoveFilter,
    /// Messages it passed over because they did not match the filter.
    pub skipped: i64,
}

impl From<MoveTaskRecord> for MoveTask {
    fn from(record: MoveTaskRecord) -> Self {
        Self {
            // Reported while the handle is still useful (cancel, resume).
            handle: matches!(record.status.as_str(), "RUNNING" | "PAUSED").then_some(record.handle),
            status: record.status,
            source_arn: record.source_arn,
            destination_arn: record.destination_arn,
            max_messages_per_second: record.rate,
            moved: record.moved,
            to_move: record.to_move,
            failure_reason: record.failure_reason,
            started_at: record.started_at,
            finished_at: record.finished_at,
            requested_by: record.requested_by,
            filter: record.filter,
            skipped: record.skipped,
        }
    }
}

/// Whether `error` says a queue does not exist (as opposed to a store failure,
/// which must surface as it is).
fn is_missing_queue(error: &EngineError) -> bool {
    matches!(error, EngineError::Sqs(error) if error.code == ErrorCode::QueueDoesNotExist)
}

/// Looks up the queue of `arn`, answering ResourceNotFoundException for
/// `parameter` when there is none.
async fn existing_queue(
    engine: &Engine,
    arn: &str,
    parameter: &str,
) -> Result<std::sync::Arc<crate::queue::Queue>, EngineError> {
    let name = engine
        .realm()
        .queue_name_from_arn(arn)
        .ok_or_else(|| not_found(parameter))?;
    match engine.queue(&name).await {
        Ok(queue) => Ok(queue),
        Err(error) if is_missing_queue(&error) => Err(not_found(parameter).into()),
        Err(error) => Err(error),
    }
}

/// Refuses what cannot be a task handle (ackbox's are UUIDs) as AWS
/// refuses a handle it did not issue: `InvalidParameterValue`, where a
/// handle of no known task is `ResourceNotFoundException`.
fn check_task_handle(handle: &str) -> Result<(), SqsError> {
    if uuid::Uuid::try_parse(handle).is_err() {
        return Err(SqsError::invalid_value(
            "Value for parameter TaskHandle is invalid.",
        ));
    }
    Ok(())
}

fn not_found(parameter: &str) -> SqsError {
    SqsError::new(
        ErrorCode::ResourceNotFoundException,
        format!("The resource that you specified for the {parameter} parameter doesn't exist."),
    )
}

impl Engine {
    /// StartMessageMoveTask: moves the messages of dead-letter queue
    /// `source_arn` to `destination_arn`, or each back to its original source.
    pub async fn start_message_move_task(
        &self,
        source_arn: &str,
        destination_arn: Option<&str>,
        rate: Option<i32>,
        filter: MoveFilter,
        requested_by: &str,
    ) -> Result<String, EngineError> {
        if let Some(class) = &filter.class
            && !(1..=crate::nack::MAX_FAILURE_CLASS_CHARS).contains(&class.chars().count())
        {
            return Err(SqsError::invalid_value(format!(
                "AckBoxFailureClass must be 1 to {} characters long.",
                crate::nack::MAX_FAILURE_CLASS_CHARS
            ))
            .into());
        }
        if let Some(max) = filter.max_messages
            && max < 1
        {
            return Err(SqsError::invalid_parameter(
                "AckBoxMaxMessages",
                max,
                "Must be at least 1, if provided.",
            )
            .into());
        }
        if let Some(sample) = filter.sample
            && sample < 1
        {
            return Err(SqsError::invalid_parameter(
                "AckBoxSample",
                sample,
                "Must be at least 1, if provided.",
            )
            .into());
        }
        if let Some(rate) = rate
            && !(1..=MAX_MOVE_TASK_RATE).contains(&rate)
        {
            return Err(SqsError::invalid_parameter(
                "MaxNumberOfMessagesPerSecond",
                rate,
                &format!("Must be between 1 and {MAX_MOVE_TASK_RATE}, if provided."),
            )
            .into());
        }
        let source_name = self
            .realm()
            .queue_name_from_arn(source_arn)
            .ok_or_else(|| not_found("SourceArn"))?;
        let source = self
            .queue(&source_name)
            .await
            .map_err(|_| not_found("SourceArn"))?;
        let is_dead_letter_queue = !self
            .list_dead_letter_source_queues(&source_name, None, None)
            .await?
            .0
            .is_empty();
        if !is_dead_letter_queue {
            return Err(SqsError::invalid_value(
                "Source queue must be configured as a Dead Letter Queue.",
            )
            .into());
        }
        if let Some(destination_arn) = destination_arn {
            if destination_arn == source_arn {
                return Err(SqsError::invalid_parameter(
                    "DestinationArn",
                    destination_arn,
                    "The destination must differ from the source.",
                )
                .into());
            }
            let destination = self
                .realm()
                .queue_name_from_arn(destination_arn)
                .ok_or_else(|| not_found("DestinationArn"))?;
            let destination = self
                .queue(&destination)
                .await
                .map_err(|_| not_found("DestinationArn"))?;
            // A FIFO queue cannot take messages without a group, and its
            // messages would lose their order in a standard one.
            if destination.snapshot().attributes.is_fifo() != source.snapshot().attributes.is_fifo()
            {
                return Err(SqsError::invalid_parameter(
                    "DestinationArn",
                    destination_arn,
                    "The destination queue must be the same type of queue as the source queue.",
                )
                .into());
            }
        }
        let handle = uuid::Uuid::new_v4().to_string();
        let outcome = self
            .inner
            .store
            .move_task_create(MoveTaskCreateParams {
                handle: handle.clone(),
                source_queue_id: source.id,
                source_arn: source_arn.to_owned(),
                destination_arn: destination_arn.map(str::to_owned),
                rate: rate.map(i64::from),
                requested_by: requested_by.to_owned(),
                filter,
                now: self.now(),
            })
            .await?;
        match outcome {
            MoveTaskCreateOutcome::Created(record) => {
                tracing::info!(task = %handle, source = %source_arn, destination = ?destination_arn, to_move = record.to_move, "message move task started");
                self.spawn_move_task(*record);
                Ok(handle)
            }
            // AWS's code and words (as LocalStack's AWS-validated move task
            // tests record them).
            MoveTaskCreateOutcome::AlreadyRunning => Err(SqsError::invalid_value(
                "There is already a task running. Only one active task is allowed for a source queue arn at a given time.",
            )
            .into()),
        }
    }

    /// ListMessageMoveTasks: the tasks of a source, newest first (1..=10, default 1).
    pub async fn list_message_move_tasks(
        &self,
        source_arn: &str,
        max_results: Option<i32>,
    ) -> Result<Vec<MoveTask>, EngineError> {
        let limit = match max_results {
            None => 1,
            Some(max) if (1..=MAX_LIST_MOVE_TASKS).contains(&max) => max.unsigned_abs(),
            Some(max) => {
                return Err(SqsError::invalid_parameter(
                    "MaxResults",
                    max,
                    &format!("Must be between 1 and {MAX_LIST_MOVE_TASKS}, if provided."),
                )
                .into());
            }
        };
        let source_name = self
            .realm()
            .queue_name_from_arn(source_arn)
            .ok_or_else(|| not_found("SourceArn"))?;
        self.queue(&source_name)
            .await
            .map_err(|_| not_found("SourceArn"))?;
        let tasks = self
            .inner
            .store
            .move_task_list(MoveTaskFilter::Source(source_arn.to_owned()), limit)
            .await?;
        Ok(tasks.into_iter().map(MoveTask::from).collect())
    }

    /// The redrive audit log (an ackbox extension): every move task ever
    /// started, of one source or of all, newest first (1..=1000, default 100).
    pub async fn move_task_history(
        &self,
        source_arn: Option<&str>,
        max_results: Option<i32>,
    ) -> Result<Vec<MoveTask>, EngineError> {
        let limit = match max_results {
            None => 100,
            Some(max) if (1..=MAX_MOVE_TASK_HISTORY).contains(&max) => max.unsigned_abs(),
            Some(max) => {
                return Err(SqsError::invalid_parameter(
                    "MaxResults",
                    max,
                    &format!("Must be between 1 and {MAX_MOVE_TASK_HISTORY}, if provided."),
                )
                .into());
            }
        };
        let filter = match source_arn {
            Some(arn) => MoveTaskFilter::Source(arn.to_owned()),
            None => MoveTaskFilter::All,
        };
        let tasks = self.inner.store.move_task_list(filter, limit).await?;
        Ok(tasks.into_iter().map(MoveTask::from).collect())
    }

    /// The move task with `handle`, whatever its status; `None` if there is none.
    pub async fn move_task(&self, handle: &str) -> Result<Option<MoveTask>, EngineError> {
        let mut tasks = self
            .inner
            .store
            .move_task_list(MoveTaskFilter::Handle(handle.to_owned()), 1)
            .await?;
        Ok(tasks.pop().map(MoveTask::from))
    }

    /// ResumeMessageMoveTask (ackbox extension): continues a task paused
    /// after its sample; returns the task as it stands.
    pub async fn resume_message_move_task(&self, handle: &str) -> Result<MoveTask, EngineError> {
        check_task_handle(handle)?;
        let resumed = self.inner.store.move_task_resume(handle).await?;
        let record = resumed.ok_or_else(|| not_found("TaskHandle"))?;
        tracing::info!(task = %handle, moved = record.moved, "message move task resumed");
        self.spawn_move_task(record.clone());
        Ok(record.into())
    }

    /// CancelMessageMoveTask: stops a running or paused task; returns how many moved.
    pub async fn cancel_message_move_task(&self, handle: &str) -> Result<i64, EngineError> {
        check_task_handle(handle)?;
        let cancelled = self
            .inner
            .store
            .move_task_cancel(handle, self.now())
            .await?;
        let record = cancelled.ok_or_else(|| not_found("TaskHandle"))?;
        tracing::info!(task = %handle, moved = record.moved, "message move task cancelled");
        Ok(record.moved)
    }

    /// Starts a runner for every running task that has none on this node:
    /// at start (tasks running at the last stop) and periodically, so a task
    /// started on another node of a shared store is taken over if that node
    /// dies (the store lets one node at a time move its messages).
    pub(crate) async fn adopt_move_tasks(&self) -> Result<(), EngineError> {
        for record in self
            .inner
            .store
            .move_task_list(MoveTaskFilter::Running, u32::MAX)
            .await?
        {
            self.spawn_move_task(record);
        }
        Ok(())
    }

    fn spawn_move_task(&self, record: MoveTaskRecord) {
        let handle = record.handle.clone();
        if !self
            .inner
            .move_runners
            .lock()
            .expect("move runner set poisoned")
            .insert(handle.clone())
        {
            return;
        }
        tracing::info!(task = %handle, moved = record.moved, "running message move task");
        let engine = self.clone();
        let shutdown = self.inner.shutdown.clone();
        self.inner.tasks.spawn(async move {
            let rate = record.rate.unwrap_or(DEFAULT_RATE);
            let mut pace = Pace::new();
            let mut ticker = tokio::time::interval(TICK);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    _ = ticker.tick() => {}
                }
                let limit = pace.slice(rate);
                if limit == 0 {
                    continue;
                }
                match engine.move_step(&record, limit).await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(task = %record.handle, %error, "message move step failed; will retry");
                    }
                }
            }
            engine
                .inner
                .move_runners
                .lock()
                .expect("move runner set poisoned")
                .remove(&handle);
        });
    }

    /// One slice of a task; `true` once the task is no longer running.
    async fn move_step(&self, record: &MoveTaskRecord, limit: i64) -> Result<bool, EngineError> {
        let destination = match &record.destination_arn {
            // A store failure is retried by the runner; only a queue that is
            // really gone fails the task.
            Some(arn) => match existing_queue(self, arn, "DestinationArn").await {
                Ok(queue) => MoveDestination::Queue(queue.id),
                Err(EngineError::Sqs(error))
                    if error.code == ErrorCode::ResourceNotFoundException =>
                {
                    MoveDestination::Gone
                }
                Err(error) => return Err(error),
            },
            None => MoveDestination::OriginalSource(
                self.inner
                    .registry
                    .all()
                    .into_iter()
                    .map(|queue| (self.realm().queue_arn(&queue.name), queue.id))
                    .collect(),
            ),
        };
        let outcome = self
            .inner
            .store
            .move_task_step(MoveTaskStepParams {
                handle: record.handle.clone(),
                now: self.now(),
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
                destination,
            })
            .await?;
        for queue in self.inner.registry.all() {
            if queue.id == record.source_queue_id {
                crate::counters::redriven(&queue.name, outcome.moved);
            }
            if outcome.destinations.contains(&queue.id) {
                queue.arrivals.notify_waiters();
            }
        }
        if outcome.finished {
            tracing::info!(task = %record.handle, "message move task finished");
        }
        Ok(outcome.finished)
    }
}
