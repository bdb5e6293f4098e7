//! Side-effect records: calls outside the database, made once.
//!
//! A payment gateway cannot roll back with your transaction. [`Effects::run`]
//! records `PENDING` (durably, in its own transaction) before the call, and
//! `SUCCEEDED` with the provider's reference after it. A second run after
//! success returns the stored reference without calling. A timeout or an
//! ambiguous error records `UNKNOWN`, and an `UNKNOWN` effect is **never
//! called again blindly**: [`Effects::reconcile`] asks the provider what
//! happened (by the idempotency key) and marks it `SUCCEEDED`, or `RETRY` —
//! the next run calls again with the *same* idempotency key — until the
//! retry budget is spent (`FAILED`, for a person to look at).
//!
//! A process that dies mid-call leaves its record `PENDING`. A `PENDING`
//! record younger than [`Effects::stale_pending_bound`] may belong to a call
//! still in progress, and a run finding one returns
//! [`EffectError::Pending`] without calling. Once older than the bound, it
//! is as ambiguous as a timeout: a run finding it moves it to `UNKNOWN` and
//! returns [`EffectError::Unknown`], and [`Effects::reconcile`] moves every
//! such record to `UNKNOWN` before settling the `UNKNOWN` ones — so the
//! message waits for reconciliation instead of dead-lettering as pending,
//! and the call is never repeated blindly. Each one is logged (a warning
//! with its key and age) and counted (`effects_stale_pending_total`).
//!
//! A replayed message (the `ackbox.replay` attribute) never makes a call:
//! run from its handler, [`Effects::run`] returns the reference an earlier
//! run recorded, or [`EffectError::SuppressedInReplay`]
//! (`effects_suppressed_in_replay_total`).

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::consumer::now_ms;

mod sql;

pub use sql::{PgEffectStore, SqliteEffectStore};

/// The states of an effect record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffectState {
    /// The call is being made, or its maker died mid-call (once older than
    /// [`Effects::stale_pending_bound`], it is treated as [`Self::Unknown`]).
    Pending,
    /// The call succeeded; the provider's reference is stored.
    Succeeded,
    /// The call's outcome is not known; reconcile before anything else.
    Unknown,
    /// Reconciliation found no trace of the call: the next run calls again,
    /// with the same idempotency key.
    Retry,
    /// The provider refused, or the retry budget is spent.
    Failed,
}

impl EffectState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Succeeded => "SUCCEEDED",
            Self::Unknown => "UNKNOWN",
            Self::Retry => "RETRY",
            Self::Failed => "FAILED",
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "SUCCEEDED" => Self::Succeeded,
            "UNKNOWN" => Self::Unknown,
            "RETRY" => Self::Retry,
            "FAILED" => Self::Failed,
            _ => Self::Pending,
        }
    }

    /// Every state, for reporting.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Succeeded,
        Self::Unknown,
        Self::Retry,
        Self::Failed,
    ];
}

/// How an external call ended, as far as the caller can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The provider definitely did not act (a validation error, a 4xx).
    Rejected(String),
    /// It may have acted (a timeout, a dropped connection, a 5xx after the
    /// request was sent).
    Ambiguous(String),
}

/// Why [`Effects::run`] did not return a reference.
#[derive(Debug, thiserror::Error)]
pub enum EffectError {
    /// The outcome of an earlier call is unknown: it must be reconciled
    /// before anything else happens (retry the message later).
    #[error("effect {0} has an unknown outcome; waiting for reconciliation")]
    Unknown(String),
    /// Another run of the same effect is in progress: its PENDING record is
    /// younger than [`Effects::stale_pending_bound`].
    #[error("effect {0} is pending")]
    Pending(String),
    /// The provider refused, or reconciliation ran out of retries.
    #[error("effect {key} failed: {reason}")]
    Failed {
        /// The effect key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The message being handled is a replay, and the effect was never
    /// made: a replay makes no external call. A handler that gets this
    /// while rebuilding should leave the effect out; returned as is, it
    /// dead-letters the replayed message with this reason, for a person to
    /// decide.
    #[error(
        "effect {0} was not made: the message is a replay, and a replay makes no external call"
    )]
    SuppressedInReplay(String),
    /// The effect records could not be read or written.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl From<EffectError> for crate::HandlerError {
    /// An unknown, pending or unreadable effect is worth retrying later
    /// (after reconciliation); a failed one is not.
    fn from(error: EffectError) -> Self {
        match &error {
            EffectError::Failed { .. } => Self::permanent("EffectFailed", &error),
            EffectError::SuppressedInReplay(_) => Self::permanent("SuppressedInReplay", &error),
            EffectError::Unknown(_) => Self::transient("EffectUnknown", &error),
            EffectError::Pending(_) => Self::transient("EffectPending", &error),
            EffectError::Database(_) => Self::transient("Database", &error),
        }
    }
}

/// One effect record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectRecord {
    /// What the effect is (say, `charge:order-7`).
    pub effect_key: String,
    /// The key the provider deduplicates on; the same on every attempt.
    pub idempotency_key: String,
    /// Where it stands.
    pub state: EffectState,
    /// The provider's reference, once succeeded.
    pub result: Option<String>,
    /// Calls made.
    pub attempts: u32,
    /// When the record last changed state, epoch milliseconds; for a
    /// PENDING record, when its call began.
    pub updated_at_ms: i64,
}

/// What the provider says about an effect being reconciled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// It was done; here is its reference.
    Succeeded(String),
    /// There is no trace of it: it may be called again (same idempotency key).
    NotFound,
    /// The provider cannot tell yet; ask again later.
    StillUnknown,
}

/// What a reconciliation pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reconciled {
    /// UNKNOWN effects found done.
    pub succeeded: u64,
    /// UNKNOWN effects set to be called again.
    pub retried: u64,
    /// UNKNOWN effects out of retries.
    pub failed: u64,
    /// PENDING effects older than [`Effects::stale_pending_bound`] (their
    /// caller died mid-call), moved to UNKNOWN in this pass; those the pass
    /// settled are also counted above.
    pub stale_pending: u64,
}

/// A move of one record from one state to another.
#[derive(Debug, Clone, Copy)]
pub struct Transition<'a> {
    /// The effect.
    pub key: &'a str,
    /// The state it must be in.
    pub from: EffectState,
    /// The state it moves to.
    pub to: EffectState,
    /// The provider's reference, when known.
    pub result: Option<&'a str>,
    /// Why, for failures and unknowns.
    pub error: Option<&'a str>,
    /// Whether a call is about to be made (counts an attempt).
    pub counts_attempt: bool,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
    /// Moves it only if it has not changed since this instant (epoch
    /// milliseconds) either: a compare-and-set on its age as well as its
    /// state.
    pub unchanged_since: Option<i64>,
}

impl<'a> Transition<'a> {
    fn new(key: &'a str, from: EffectState, to: EffectState, now_ms: i64) -> Self {
        Self {
            key,
            from,
            to,
            result: None,
            error: None,
            counts_attempt: false,
            now_ms,
            unchanged_since: None,
        }
    }

    fn result(mut self, result: &'a str) -> Self {
        self.result = Some(result);
        self
    }

    fn error(mut self, error: &'a str) -> Self {
        self.error = Some(error);
        self
    }

    fn counting_an_attempt(mut self) -> Self {
        self.counts_attempt = true;
        self
    }

    fn unchanged_since(mut self, instant_ms: i64) -> Self {
        self.unchanged_since = Some(instant_ms);
        self
    }
}

/// Storage of effect records (PostgreSQL and SQLite implement it).
#[async_trait]
pub trait EffectStore: Send + Sync + 'static {
    /// Creates the tables if needed (idempotent).
    async fn migrate(&self) -> Result<(), sqlx::Error>;
    /// Inserts a PENDING record unless one exists; `true` if inserted.
    async fn begin(
        &self,
        key: &str,
        idempotency_key: &str,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error>;
    /// The record of `key`.
    async fn get(&self, key: &str) -> Result<Option<EffectRecord>, sqlx::Error>;
    /// Applies `transition` if the record is still in its `from` state, and
    /// has not changed since `unchanged_since` when that is set (compare and
    /// set); `true` if it moved.
    async fn transition(&self, transition: Transition<'_>) -> Result<bool, sqlx::Error>;
    /// Records in `state`, oldest first, at most `limit`.
    async fn in_state(
        &self,
        state: EffectState,
        limit: u32,
    ) -> Result<Vec<EffectRecord>, sqlx::Error>;
    /// How many records are in each state, and when the oldest UNKNOWN changed.
    async fn census(&self) -> Result<(Vec<(EffectState, u64)>, Option<i64>), sqlx::Error>;
}

/// Side-effect records over a store. See the module documentation.
#[derive(Debug, Clone)]
pub struct Effects<S> {
    store: S,
    timeout: Duration,
    retry_budget: u32,
    stale_pending_after: Option<Duration>,
}

/// Effects reconciled per pass (and stale PENDING records looked at).
const RECONCILE_BATCH: u32 = 100;

/// Without an explicit bound, a PENDING record is stale after this many call
/// timeouts…
const DEFAULT_STALE_PENDING_TIMEOUTS: u32 = 5;

/// …and no sooner than this.
const DEFAULT_STALE_PENDING_FLOOR: Duration = Duration::from_secs(60);

/// A bound is raised to at least this many call timeouts: see
/// [`Effects::stale_pending_bound`].
const MIN_STALE_PENDING_TIMEOUTS: u32 = 2;

impl<S: EffectStore> Effects<S> {
    /// Effects recorded in `store`; calls time out after 10 s (UNKNOWN);
    /// reconciliation retries an effect at most 3 times; a PENDING record
    /// is stale after 5 timeouts, and no sooner than a minute.
    pub fn new(store: S) -> Self {
        Self {
            store,
            timeout: Duration::from_secs(10),
            retry_budget: 3,
            stale_pending_after: None,
        }
    }

    /// How long a call may take before its outcome counts as unknown.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.warn_if_stale_bound_raised();
        self
    }

    /// How old a PENDING record must be before it counts as abandoned (its
    /// caller died mid-call) and is treated as UNKNOWN. Raised to at least
    /// twice the call [`timeout`](Self::timeout): see
    /// [`stale_pending_bound`](Self::stale_pending_bound).
    pub fn stale_pending_after(mut self, bound: Duration) -> Self {
        self.stale_pending_after = Some(bound);
        self.warn_if_stale_bound_raised();
        self
    }

    /// How old a PENDING record must be before it counts as abandoned.
    ///
    /// A live call lasts up to the timeout, and its record is written just
    /// before it and settled just after; a younger PENDING record may belong
    /// to a call still in flight, and treating it as abandoned would let
    /// reconciliation find no trace of it yet and call again while the first
    /// call still runs. So the bound is at least twice the timeout, which
    /// also leaves room for slow database writes around the call and for
    /// clocks that disagree between consumers (the age is measured on one
    /// machine's clock against a time written by another's).
    pub fn stale_pending_bound(&self) -> Duration {
        let floor = self.timeout.saturating_mul(MIN_STALE_PENDING_TIMEOUTS);
        self.stale_pending_after
            .unwrap_or_else(|| {
                self.timeout
                    .saturating_mul(DEFAULT_STALE_PENDING_TIMEOUTS)
                    .max(DEFAULT_STALE_PENDING_FLOOR)
            })
            .max(floor)
    }

    fn warn_if_stale_bound_raised(&self) {
        if let Some(asked) = self.stale_pending_after {
            let bound = self.stale_pending_bound();
            if bound > asked {
                tracing::warn!(
                    asked_ms = asked.as_millis(),
                    bound_ms = bound.as_millis(),
                    timeout_ms = self.timeout.as_millis(),
                    "stale-PENDING bound raised to twice the call timeout: a live call may last that long"
                );
            }
        }
    }

    /// Calls an effect may make in all, retries included.
    pub fn retry_budget(mut self, attempts: u32) -> Self {
        self.retry_budget = attempts.max(1);
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Makes the call for `key` at most once in effect: see the module docs.
    /// `call` gets the idempotency key to send to the provider and returns
    /// the provider's reference.
    pub async fn run<F, Fut>(&self, key: &str, call: F) -> Result<String, EffectError>
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<String, CallError>>,
    {
        if crate::context::current().is_some_and(|handling| handling.replay) {
            return self.recorded_for_replay(key).await;
        }
        let now = now_ms();
        let fresh = self.store.begin(key, key, now).await?;
        if !fresh && let Some(reference) = self.claim_existing(key, now).await? {
            return Ok(reference);
        }
        let idempotency_key = key.to_owned();
        let outcome = tokio::time::timeout(self.timeout, call(idempotency_key)).await;
        let now = now_ms();
        match outcome {
            Ok(Ok(reference)) => {
                self.store
                    .transition(
                        Transition::new(key, EffectState::Pending, EffectState::Succeeded, now)
                            .result(&reference),
                    )
                    .await?;
                Ok(reference)
            }
            Ok(Err(CallError::Rejected(reason))) => {
                self.store
                    .transition(
                        Transition::new(key, EffectState::Pending, EffectState::Failed, now)
                            .error(&reason),
                    )
                    .await?;
                Err(EffectError::Failed {
                    key: key.to_owned(),
                    reason,
                })
            }
            Ok(Err(CallError::Ambiguous(reason))) => {
                self.mark_unknown(key, &reason, now).await?;
                Err(EffectError::Unknown(key.to_owned()))
            }
            Err(_elapsed) => {
                self.mark_unknown(key, "the call timed out", now).await?;
                Err(EffectError::Unknown(key.to_owned()))
            }
        }
    }

    /// Decides what a run does with the record an earlier run left: the
    /// stored reference if it succeeded, `None` if this run is to make the
    /// call (it claimed a RETRY), or why no call may be made now.
    async fn claim_existing(&self, key: &str, now: i64) -> Result<Option<String>, EffectError> {
        // Records move only by compare-and-set: when this run loses a race to
        // move one, a second look finds where the winner left it.
        for _ in 0..2 {
            let Some(record) = self.store.get(key).await? else {
                return Err(EffectError::Pending(key.to_owned()));
            };
            match record.state {
                EffectState::Succeeded => return Ok(Some(record.result.unwrap_or_default())),
                EffectState::Unknown => return Err(EffectError::Unknown(key.to_owned())),
                EffectState::Failed => {
                    return Err(EffectError::Failed {
                        key: key.to_owned(),
                        reason: "an earlier attempt failed".to_owned(),
                    });
                }
                EffectState::Pending if !self.is_stale(&record, now) => {
                    return Err(EffectError::Pending(key.to_owned()));
                }
                EffectState::Pending => {
                    if self.abandon_stale(&record, now).await? {
                        return Err(EffectError::Unknown(key.to_owned()));
                    }
                }
                EffectState::Retry => {
                    // Whoever moves it back to PENDING makes the call.
                    let claimed = self
                        .store
                        .transition(
                            Transition::new(key, EffectState::Retry, EffectState::Pending, now)
                                .counting_an_attempt(),
                        )
                        .await?;
                    if claimed {
                        return Ok(None);
                    }
                }
            }
        }
        Err(EffectError::Pending(key.to_owned()))
    }

    /// Whether `record` (PENDING) is older than the stale bound at `now`.
    fn is_stale(&self, record: &EffectRecord, now: i64) -> bool {
        record.updated_at_ms <= self.stale_cutoff(now)
    }

    /// The newest change time a stale PENDING record can have at `now`.
    fn stale_cutoff(&self, now: i64) -> i64 {
        let bound_ms = i64::try_from(self.stale_pending_bound().as_millis()).unwrap_or(i64::MAX);
        now.saturating_sub(bound_ms)
    }

    /// Moves a stale PENDING record to UNKNOWN, if it is still PENDING and
    /// still stale (its call may have just settled, or another consumer may
    /// have moved it first); `true` if this call moved it.
    async fn abandon_stale(&self, record: &EffectRecord, now: i64) -> Result<bool, sqlx::Error> {
        let age_ms = now.saturating_sub(record.updated_at_ms);
        let reason = format!(
            "PENDING for {age_ms} ms, longer than the stale bound: its caller died mid-call"
        );
        let moved = self
            .store
            .transition(
                Transition::new(
                    &record.effect_key,
                    EffectState::Pending,
                    EffectState::Unknown,
                    now,
                )
                .error(&reason)
                .unchanged_since(self.stale_cutoff(now)),
            )
            .await?;
        if moved {
            tracing::warn!(
                effect_key = %record.effect_key,
                age_seconds = age_ms as f64 / 1_000.0,
                attempts = record.attempts,
                "effect left PENDING past the stale bound (its caller died mid-call); \
                 now UNKNOWN: it will be reconciled, not repeated"
            );
            metrics::counter!("effects_stale_pending_total").increment(1);
        }
        Ok(moved)
    }

    /// What a replayed message gets instead of a call: the reference an
    /// earlier run recorded, or a refusal — never a call.
    async fn recorded_for_replay(&self, key: &str) -> Result<String, EffectError> {
        match self.store.get(key).await? {
            Some(EffectRecord {
                state: EffectState::Succeeded,
                result,
                ..
            }) => Ok(result.unwrap_or_default()),
            _ => {
                tracing::warn!(
                    effect_key = key,
                    "a replayed message asked for an external call; it was not made"
                );
                metrics::counter!("effects_suppressed_in_replay_total").increment(1);
                Err(EffectError::SuppressedInReplay(key.to_owned()))
            }
        }
    }

    async fn mark_unknown(&self, key: &str, reason: &str, now: i64) -> Result<(), sqlx::Error> {
        tracing::warn!(
            effect_key = key,
            reason,
            "external call outcome unknown; it will be reconciled, not repeated"
        );
        self.store
            .transition(
                Transition::new(key, EffectState::Pending, EffectState::Unknown, now).error(reason),
            )
            .await
            .map(drop)
    }

    /// Moves PENDING effects older than the stale bound to UNKNOWN (up to
    /// 100 per pass), then asks `lookup` about every UNKNOWN effect (up to
    /// 100 per pass) and settles it: SUCCEEDED with the reference, RETRY
    /// while attempts remain, FAILED after that.
    pub async fn reconcile<F, Fut>(&self, lookup: F) -> Result<Reconciled, sqlx::Error>
    where
        F: Fn(EffectRecord) -> Fut,
        Fut: Future<Output = Lookup>,
    {
        let mut report = Reconciled::default();
        let now = now_ms();
        for record in self
            .store
            .in_state(EffectState::Pending, RECONCILE_BATCH)
            .await?
        {
            if self.is_stale(&record, now) && self.abandon_stale(&record, now).await? {
                report.stale_pending += 1;
            }
        }
        for record in self
            .store
            .in_state(EffectState::Unknown, RECONCILE_BATCH)
            .await?
        {
            let key = record.effect_key.clone();
            let attempts = record.attempts;
            let now = now_ms();
            match lookup(record).await {
                Lookup::Succeeded(reference) => {
                    if self
                        .store
                        .transition(
                            Transition::new(
                                &key,
                                EffectState::Unknown,
                                EffectState::Succeeded,
                                now,
                            )
                            .result(&reference),
                        )
                        .await?
                    {
                        report.succeeded += 1;
                    }
                }
                Lookup::NotFound if attempts < self.retry_budget => {
                    if self
                        .store
                        .transition(Transition::new(
                            &key,
                            EffectState::Unknown,
                            EffectState::Retry,
                            now,
                        ))
                        .await?
                    {
                        report.retried += 1;
                    }
                }
                Lookup::NotFound => {
                    let reason = format!("not found at the provider after {attempts} attempts");
                    if self
                        .store
                        .transition(
                            Transition::new(&key, EffectState::Unknown, EffectState::Failed, now)
                                .error(&reason),
                        )
                        .await?
                    {
                        report.failed += 1;
                    }
                }
                Lookup::StillUnknown => {}
            }
        }
        self.report().await?;
        Ok(report)
    }

    /// Publishes `effects_state_count{state}`,
    /// `effects_oldest_unknown_age_seconds` and
    /// `effects_oldest_pending_age_seconds` (past
    /// [`stale_pending_bound`](Self::stale_pending_bound), a caller died
    /// mid-call and the next reconciliation picks it up); returns the counts.
    pub async fn report(&self) -> Result<Vec<(EffectState, u64)>, sqlx::Error> {
        let (counts, oldest_unknown) = self.store.census().await?;
        let oldest_pending = self
            .store
            .in_state(EffectState::Pending, 1)
            .await?
            .first()
            .map(|record| record.updated_at_ms);
        for state in EffectState::ALL {
            let count = counts
                .iter()
                .find(|(counted, _)| *counted == state)
                .map_or(0, |(_, count)| *count);
            metrics::gauge!("effects_state_count", "state" => state.as_str()).set(count as f64);
        }
        let now = now_ms();
        let age_seconds = |since: Option<i64>| {
            since.map_or(0.0, |at| now.saturating_sub(at).max(0) as f64 / 1_000.0)
        };
        metrics::gauge!("effects_oldest_unknown_age_seconds").set(age_seconds(oldest_unknown));
        metrics::gauge!("effects_oldest_pending_age_seconds").set(age_seconds(oldest_pending));
        Ok(counts)
    }
}
