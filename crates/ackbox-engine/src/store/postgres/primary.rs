//! Which of several database servers takes writes, followed through a
//! failover.
//!
//! A store URL may name several hosts, as libpq's do
//! (`postgres://user@primary:5432,replica:5432/db`): a primary and the
//! streaming replicas an HA manager may promote. sqlx connects to one host,
//! so the store finds the writable one itself — the first host whose
//! session is not read-only, libpq's `target_session_attrs=read-write` —
//! and points both pools at it.
//!
//! A watcher asks the current primary once per [`CHECK_EVERY`] whether it
//! still takes writes. When it cannot be reached or has become a standby,
//! the watcher tries every host until one takes writes and moves the pools
//! there; meanwhile requests fail as unavailable, which SQS clients retry.
//! A connection opened before the move is closed rather than reused: the
//! old primary may still answer, read-only or as a stale copy.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{ConnectOptions, Connection};
use tokio_util::sync::CancellationToken;

use crate::store::StoreError;

use super::database_error::postgres_error;

/// How often the watcher asks the primary whether it still takes writes.
const CHECK_EVERY: Duration = Duration::from_millis(500);
/// How long one host may take to accept a connection and answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The one `target_session_attrs` the store can work with: it writes.
const READ_WRITE: [&str; 2] = ["read-write", "primary"];

/// The hosts of a store URL, each as connect options.
#[derive(Debug, Clone)]
pub(super) struct Hosts {
    candidates: Vec<PgConnectOptions>,
}

impl Hosts {
    /// Parses `url`, which may list several `host[:port]`s separated by
    /// commas. `target_session_attrs`, if given, must ask for a writable
    /// session, which is what the store looks for anyway.
    pub(super) fn parse(url: &str) -> Result<Self, StoreError> {
        let invalid = |detail: String| StoreError::Corrupt { detail };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("the store URL must start with postgres://".to_owned()))?;
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(authority_end);
        let (user, host_list) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (format!("{user}@"), hosts),
            None => (String::new(), authority),
        };
        let path = without_session_attrs(path)?;
        let candidates = host_list
            .split(',')
            .map(|host| {
                format!("{scheme}://{user}{host}{path}")
                    .parse::<PgConnectOptions>()
                    .map_err(postgres_error("parse the store URL"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { candidates })
    }

    /// Whether there is anything to fail over to.
    pub(super) fn several(&self) -> bool {
        self.candidates.len() > 1
    }

    /// The first host that takes writes, tried in the URL's order; when
    /// none does, why the last one did not.
    pub(super) async fn find_writable(&self) -> Result<PgConnectOptions, StoreError> {
        let mut last = StoreError::Unavailable {
            reason: "no PostgreSQL host takes writes",
        };
        for candidate in &self.candidates {
            match takes_writes(candidate).await {
                Ok(true) => return Ok(candidate.clone()),
                Ok(false) => {}
                Err(error) => last = error,
            }
        }
        Err(last)
    }
}

/// The path and query of a store URL without `target_session_attrs`,
/// which sqlx does not know.
fn without_session_attrs(path: &str) -> Result<String, StoreError> {
    let Some((before, query)) = path.split_once('?') else {
        return Ok(path.to_owned());
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("target_session_attrs", value)) if READ_WRITE.contains(&value) => {}
            Some(("target_session_attrs", value)) => {
                return Err(StoreError::Corrupt {
                    detail: format!(
                        "target_session_attrs={value}: the store writes, so it connects to the host \
                         that takes writes (read-write or primary)"
                    ),
                });
            }
            _ => kept.push(pair),
        }
    }
    Ok(if kept.is_empty() {
        before.to_owned()
    } else {
        format!("{before}?{}", kept.join("&"))
    })
}

/// Whether the server at `options` accepts writes in a new session.
async fn takes_writes(options: &PgConnectOptions) -> Result<bool, StoreError> {
    let probe = async {
        let mut connection = options.connect().await?;
        let read_only: String = sqlx::query_scalar("SHOW transaction_read_only")
            .fetch_one(&mut connection)
            .await?;
        let _ = connection.close().await;
        Ok::<_, sqlx::Error>(read_only == "off")
    };
    match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
        Ok(answer) => answer.map_err(postgres_error("find the primary")),
        Err(_) => Err(StoreError::Unavailable {
            reason: "a PostgreSQL host did not answer in time",
        }),
    }
}

/// When the pools last moved to another host: connections older than that
/// lead to the old one.
#[derive(Debug, Clone)]
pub(super) struct LastMove(Arc<Mutex<Option<Instant>>>);

impl LastMove {
    pub(super) fn new() -> Self {
        Self(Arc::new(Mutex::new(None)))
    }

    /// Whether a connection `age` old was opened after the last move.
    pub(super) fn is_current(&self, age: Duration) -> bool {
        self.0
            .lock()
            .expect("last move poisoned")
            .is_none_or(|moved| age < moved.elapsed())
    }

    fn record(&self) {
        *self.0.lock().expect("last move poisoned") = Some(Instant::now());
    }
}

/// The pools to keep on the primary, each with the session settings it
/// adds to the host's options.
pub(super) struct Watched {
    pub(super) pool: PgPool,
    pub(super) configure: fn(PgConnectOptions) -> PgConnectOptions,
}

/// Keeps `pools` on whichever of `hosts` takes writes until `stop`.
pub(super) async fn watch(
    hosts: Hosts,
    mut current: PgConnectOptions,
    pools: Vec<Watched>,
    last_move: LastMove,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
        if matches!(takes_writes(&current).await, Ok(true)) {
            continue;
        }
        let Ok(primary) = hosts.find_writable().await else {
            tracing::warn!("no PostgreSQL host takes writes; retrying");
            continue;
        };
        if same_host(&primary, &current) {
            continue;
        }
        tracing::warn!(
            from = %current.get_host(), from_port = current.get_port(),
            to = %primary.get_host(), to_port = primary.get_port(),
            "the PostgreSQL primary moved; following it"
        );
        last_move.record();
        for watched in &pools {
            watched
                .pool
                .set_connect_options((watched.configure)(primary.clone()));
        }
        current = primary;
    }
}

fn same_host(a: &PgConnectOptions, b: &PgConnectOptions) -> bool {
    a.get_host() == b.get_host() && a.get_port() == b.get_port()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_host_becomes_a_candidate_with_the_same_user_and_database() {
        let hosts =
            Hosts::parse("postgres://app:secret@db1:5433,db2,[::1]:5434/orders?sslmode=disable")
                .unwrap();
        let seen: Vec<(String, u16, Option<String>)> = hosts
            .candidates
            .iter()
            .map(|options| {
                (
                    options.get_host().to_owned(),
                    options.get_port(),
                    options.get_database().map(str::to_owned),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("db1".to_owned(), 5433, Some("orders".to_owned())),
                ("db2".to_owned(), 5432, Some("orders".to_owned())),
                ("[::1]".to_owned(), 5434, Some("orders".to_owned())),
            ]
        );
        assert!(
            hosts
                .candidates
                .iter()
                .all(|options| options.get_username() == "app")
        );
        assert!(hosts.several());
    }

    #[test]
    fn a_writable_session_attribute_is_accepted_and_any_other_refused() {
        let hosts =
            Hosts::parse("postgres://u@a,b/db?target_session_attrs=read-write&sslmode=disable")
                .unwrap();
        assert_eq!(hosts.candidates.len(), 2);
        let refused = Hosts::parse("postgres://u@a,b/db?target_session_attrs=standby")
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("target_session_attrs=standby"),
            "{refused}"
        );
    }

    #[test]
    fn one_host_is_nothing_to_fail_over_to() {
        assert!(!Hosts::parse("postgres://u@localhost/db").unwrap().several());
    }

    #[test]
    fn only_connections_opened_since_the_move_are_current() {
        let last_move = LastMove::new();
        assert!(last_move.is_current(Duration::from_secs(3_600)));
        last_move.record();
        assert!(!last_move.is_current(Duration::from_secs(1)));
        std::thread::sleep(Duration::from_millis(20));
        assert!(last_move.is_current(Duration::from_millis(5)));
    }
}
