//! Version-guarded projections: read models that stay right when events
//! arrive late, twice, out of order, or at the same time.
//!
//! Each aggregate's newest applied version is stored next to the read
//! model, in the same transaction. [`Projection::apply_if_newer`] says
//! whether an event's version should be applied; a stale or repeated
//! version is a no-op, and a gap (a version skipped) can be quarantined
//! instead of applied. Versions start at 1.
//!
//! Concurrent events of one aggregate are judged one at a time: the
//! aggregate's version row is made to exist and locked before the judgment,
//! so a transaction judging a version waits for any other transaction that
//! judged one of the same aggregate to commit or roll back, and then sees
//! its outcome. Two first events of an aggregate cannot both be applied,
//! and a stored version never goes down.

use async_trait::async_trait;
use sqlx::{Database, Transaction};

/// Where the newest applied versions live.
///
/// An implementation must serialize judgments: [`current_version`] holds a
/// lock on the aggregate, even one with no version yet, until the
/// transaction ends, and [`set_version`] never lowers a stored version.
///
/// [`current_version`]: VersionStore::current_version
/// [`set_version`]: VersionStore::set_version
#[async_trait]
pub trait VersionStore: Send + Sync + 'static {
    /// The application's database.
    type Database: Database;

    /// The newest applied version of `aggregate_id` (`None` before the
    /// first), locking the aggregate for the rest of `transaction` — also
    /// when it has no version yet, so concurrent first events queue too.
    async fn current_version(
        &self,
        transaction: &mut Transaction<'static, Self::Database>,
        projection: &str,
        aggregate_id: &str,
    ) -> Result<Option<i64>, sqlx::Error>;

    /// Records `version` as the newest applied, unless a version at least
    /// as new is already stored (a stored version never goes down).
    async fn set_version(
        &self,
        transaction: &mut Transaction<'static, Self::Database>,
        projection: &str,
        aggregate_id: &str,
        version: i64,
    ) -> Result<(), sqlx::Error>;
}

/// What to do with an event that skips versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GapPolicy {
    /// Apply it: the read model only needs the newest state (the default).
    #[default]
    Apply,
    /// Refuse it ([`Verdict::Gap`]): the read model folds every event, so a
    /// missing one must arrive first or a person must look.
    Quarantine,
}

/// Whether to apply an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Newer than anything applied: apply it (the version is recorded).
    Apply,
    /// Older than what is applied: ignore it.
    Stale,
    /// Exactly what is applied: ignore it.
    Duplicate,
    /// Skips versions, and the policy quarantines gaps: nothing recorded.
    Gap {
        /// The version that should come next.
        expected: i64,
        /// The version that came.
        got: i64,
    },
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "applied",
            Self::Stale => "stale",
            Self::Duplicate => "duplicate",
            Self::Gap { .. } => "gap",
        }
    }
}

/// One read model's version guard.
#[derive(Debug, Clone)]
pub struct Projection<S> {
    store: S,
    name: String,
    gaps: GapPolicy,
}

impl<S: VersionStore> Projection<S> {
    /// The guard of projection `name`, versions kept in `store`.
    pub fn new(store: S, name: impl Into<String>) -> Self {
        Self {
            store,
            name: name.into(),
            gaps: GapPolicy::default(),
        }
    }

    /// What to do with events that skip versions.
    pub fn gaps(mut self, gaps: GapPolicy) -> Self {
        self.gaps = gaps;
        self
    }

    /// Judges `version` of `aggregate_id` inside `transaction`, recording it
    /// when the verdict is [`Verdict::Apply`] — then apply the event in the
    /// same transaction. The aggregate stays locked until the transaction
    /// ends, so a concurrent event of the same aggregate is judged after
    /// this one commits or rolls back. Every verdict is logged and counted
    /// (`projection_decision_total{projection, verdict}`).
    ///
    /// Versions start at 1; a lower one is refused
    /// ([`sqlx::Error::InvalidArgument`]), because the store cannot tell it
    /// from "nothing applied yet".
    pub async fn apply_if_newer(
        &self,
        transaction: &mut Transaction<'static, S::Database>,
        aggregate_id: &str,
        version: i64,
    ) -> Result<Verdict, sqlx::Error> {
        if version < 1 {
            return Err(sqlx::Error::InvalidArgument(format!(
                "projection {}: version {version} of {aggregate_id} is below 1, the first version",
                self.name
            )));
        }
        let current = self
            .store
            .current_version(transaction, &self.name, aggregate_id)
            .await?;
        let verdict = match current {
            Some(current) if version < current => Verdict::Stale,
            Some(current) if version == current => Verdict::Duplicate,
            Some(current) if version > current + 1 && self.gaps == GapPolicy::Quarantine => {
                Verdict::Gap {
                    expected: current + 1,
                    got: version,
                }
            }
            None if version > 1 && self.gaps == GapPolicy::Quarantine => Verdict::Gap {
                expected: 1,
                got: version,
            },
            _ => Verdict::Apply,
        };
        if verdict == Verdict::Apply {
            self.store
                .set_version(transaction, &self.name, aggregate_id, version)
                .await?;
        }
        tracing::info!(projection = %self.name, aggregate_id, version, current, verdict = verdict.as_str(), "projection decision");
        metrics::counter!("projection_decision_total", "projection" => self.name.clone(), "verdict" => verdict.as_str())
            .increment(1);
        Ok(verdict)
    }
}
