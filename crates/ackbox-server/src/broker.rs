//! A whole broker in one call: open the store, load the installation secret,
//! start the engine and serve HTTP. Used by `ackbox serve` and by the test
//! harness, so both run exactly the same wiring.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ackbox_core::clock::Clock;
use ackbox_core::queue_name::Realm;
use ackbox_engine::secret::load_or_create_receipt_key;
use ackbox_engine::store::log::LogStore;
use ackbox_engine::store::postgres::{PostgresOptions, PostgresStore};
use ackbox_engine::store::sqlite::{Durability, SqliteStore};
use ackbox_engine::store::{Store, StoreError};
use ackbox_engine::{Engine, EngineConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::ServerError;
use crate::app::AppState;
use crate::auth::Authenticator;
use crate::auth::credentials::CredentialsError;
use crate::limits::{HttpLimits, LimitsError};
use crate::listener::serve;
use crate::tls::{TlsError, TlsFiles};

/// Which store keeps queues and messages when PostgreSQL does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbeddedStore {
    /// Everything in one SQLite database.
    #[default]
    Sqlite,
    /// Standard queues' messages in an append-only log, everything else in
    /// SQLite beside it ([`LogStore`]).
    Log,
}

/// Everything needed to start a broker.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Directory of the embedded store and the installation secret.
    pub data_dir: PathBuf,
    /// How commits reach the disk (embedded store).
    pub durability: Durability,
    /// Which embedded store, when `postgres` is `None`.
    pub embedded: EmbeddedStore,
    /// Keep queues and messages in this PostgreSQL database instead of the
    /// embedded store, shared with every other node pointed at it; the
    /// installation secret then lives there too.
    pub postgres: Option<PostgresOptions>,
    /// Region and account.
    pub realm: Realm,
    /// The dashboard shows but changes nothing.
    pub ui_read_only: bool,
    /// The credentials file; `None` leaves the broker open (local development).
    pub credentials: Option<PathBuf>,
    /// Serve HTTPS with this certificate; `None` serves plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Sizes, connection counts and timeouts.
    pub limits: HttpLimits,
    /// Bytes of the embedded store's disk held back, so that a full disk
    /// refuses sends but not receives and deletes (0: none).
    pub disk_reserve_bytes: u64,
}

impl BrokerConfig {
    /// A broker on `listen` over `data_dir` with every other setting at the
    /// default of `ackbox serve`.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            listen,
            data_dir,
            durability: Durability::Fsync,
            embedded: EmbeddedStore::Sqlite,
            postgres: None,
            realm: Realm::default(),
            ui_read_only: false,
            credentials: None,
            tls: None,
            limits: HttpLimits::default(),
            disk_reserve_bytes: 0,
        }
    }
}

/// Why a broker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The store could not be opened.
    #[error("cannot open the store in {data_dir}")]
    Store {
        /// The data directory.
        data_dir: String,
        /// The store's error.
        #[source]
        source: ackbox_engine::store::StoreError,
    },
    /// The engine could not load its queues.
    #[error("cannot start the engine")]
    Engine {
        /// The engine's error.
        #[source]
        source: ackbox_engine::EngineError,
    },
    /// A limit cannot work.
    #[error("invalid limit")]
    Limits {
        /// Which limit, and why.
        #[source]
        source: LimitsError,
    },
    /// The credentials file was refused.
    #[error("cannot use the credentials file")]
    Credentials {
        /// What is wrong with it.
        #[source]
        source: CredentialsError,
    },
    /// The certificate or key was refused.
    #[error("cannot set up TLS")]
    Tls {
        /// What is wrong with them.
        #[source]
        source: TlsError,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A broker serving in the background.
#[derive(Debug)]
pub struct RunningBroker {
    /// The bound address.
    pub local_addr: SocketAddr,
    /// The engine, for in-process administration (predefined queues).
    pub engine: Engine,
    /// `http` or `https`.
    scheme: &'static str,
    /// The keys in force, shared with every request; reloadable.
    auth: Arc<Authenticator>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ServerError>>,
}

impl RunningBroker {
    /// Opens the store, starts the engine and begins serving.
    pub async fn start(config: BrokerConfig, clock: Arc<dyn Clock>) -> Result<Self, StartError> {
        let store_error = |source| StartError::Store {
            data_dir: match &config.postgres {
                Some(options) => redact_password(&options.url),
                None => config.data_dir.display().to_string(),
            },
            source,
        };
        config
            .limits
            .validate()
            .map_err(|source| StartError::Limits { source })?;
        let auth = match &config.credentials {
            Some(path) => {
                Authenticator::sigv4(path).map_err(|source| StartError::Credentials { source })?
            }
            None => Authenticator::open(),
        };
        let tls = config
            .tls
            .as_ref()
            .map(TlsFiles::acceptor)
            .transpose()
            .map_err(|source| StartError::Tls { source })?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        // Installed before anything is counted, so no early count is lost.
        crate::telemetry::recorder();
        let (receipt_key, store): (_, Arc<dyn Store>) = match &config.postgres {
            Some(options) => {
                let store = PostgresStore::connect(options).await.map_err(store_error)?;
                (
                    store.receipt_key().await.map_err(store_error)?,
                    Arc::new(store),
                )
            }
            None => {
                // The store takes the data directory first: a second server
                // on it stops here, before it touches anything.
                let (store, reserved): (Arc<dyn Store>, _) = match config.embedded {
                    EmbeddedStore::Sqlite => {
                        let store = SqliteStore::open(&config.data_dir, config.durability)
                            .map_err(store_error)?;
                        if let Err(refused) =
                            LogStore::ensure_no_messages_left(&config.data_dir).await
                        {
                            let _ = store.close().await;
                            return Err(store_error(refused));
                        }
                        let reserved = store.reserve_disk(config.disk_reserve_bytes);
                        (Arc::new(store), reserved)
                    }
                    EmbeddedStore::Log => {
                        let store = LogStore::open(&config.data_dir, config.durability)
                            .await
                            .map_err(store_error)?;
                        let reserved = store.reserve_disk(config.disk_reserve_bytes);
                        (Arc::new(store), reserved)
                    }
                };
                match reserved {
                    Ok(()) => {}
                    // Serving reads and deletes beats not starting; sends
                    // wait for room, as after any full disk.
                    Err(StoreError::DiskFull { detail }) => tracing::warn!(
                        bytes = config.disk_reserve_bytes,
                        detail,
                        "the disk has no room for the reserve: sends are refused until it has"
                    ),
                    Err(error) => {
                        let _ = store.close().await;
                        return Err(store_error(error));
                    }
                }
                let key = match load_or_create_receipt_key(&config.data_dir) {
                    Ok(key) => key,
                    Err(error) => {
                        let _ = store.close().await;
                        return Err(store_error(error));
                    }
                };
                (key, store)
            }
        };
        let mut engine_config = EngineConfig::new(receipt_key);
        engine_config.realm = config.realm.clone();
        let engine = Engine::start(engine_config, store, clock)
            .await
            .map_err(|source| StartError::Engine { source })?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Bind {
                    address: config.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Bind {
            address: config.listen,
            source,
        })?;
        let shutdown = CancellationToken::new();
        let auth = Arc::new(auth);
        let state = AppState {
            engine: engine.clone(),
            fallback_base_url: format!("{scheme}://{local_addr}"),
            scheme,
            ui_read_only: config.ui_read_only,
            history: Arc::default(),
            auth: Arc::clone(&auth),
            limits: config.limits,
        };
        {
            let (history, engine, stop) =
                (Arc::clone(&state.history), engine.clone(), shutdown.clone());
            tokio::spawn(async move { history.run(engine, stop).await });
        }
        let stop = shutdown.clone();
        let task = tokio::spawn(serve(listener, state, tls, async move {
            stop.cancelled().await;
        }));
        Ok(Self {
            local_addr,
            engine,
            scheme,
            auth,
            shutdown,
            task,
        })
    }

    /// `http://host:port` (or `https://`) of the broker.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.local_addr)
    }

    /// The authenticator every request goes through, to reload its
    /// credentials file (key rotation).
    pub fn authenticator(&self) -> Arc<Authenticator> {
        Arc::clone(&self.auth)
    }

    /// Resolves when the server stops on its own (it should not) or fails.
    pub async fn wait(&mut self) -> Result<(), ServerError> {
        (&mut self.task).await.unwrap_or_else(|join| {
            Err(ServerError::Serve {
                source: std::io::Error::other(join),
            })
        })
    }

    /// Graceful stop: stop accepting, finish requests, flush and close the store.
    pub async fn stop(self) -> Result<(), ServerError> {
        self.shutdown.cancel();
        self.task.await.unwrap_or_else(|join| {
            Err(ServerError::Serve {
                source: std::io::Error::other(join),
            })
        })
    }
}

/// `url` without its password, for messages and logs.
pub fn redact_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_password;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact_password("postgres://ackbox:s3cret@db:5432/queues"),
            "postgres://ackbox:***@db:5432/queues"
        );
        assert_eq!(
            redact_password("postgres://ackbox@db/queues"),
            "postgres://ackbox@db/queues"
        );
        assert_eq!(
            redact_password("postgres://db/queues"),
            "postgres://db/queues"
        );
    }
}
