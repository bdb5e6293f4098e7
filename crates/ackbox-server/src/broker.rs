//! A whole broker in one call: open the store, load the installation secret,
//! start the engine and serve HTTP. Used by `ackbox serve` and by the test
//! harness, so both run exactly the same wiring.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ackbox_core::clock::Clock;
use ackbox_core::queue_name::Realm;
use ackbox_engine::error::EngineError;
use ackbox_engine::store::{OpenedStore, StoreConfig};
use ackbox_engine::{Engine, EngineConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::ServerError;
use crate::app::AppState;
use crate::auth::Authenticator;
use crate::auth::credentials::CredentialsError;
use crate::limits::{HttpLimits, LimitsError};
use crate::listener::serve;
use crate::push::{PushConfig, PushError, PushWorker};
use crate::tls::{TlsError, TlsFiles};

/// Everything needed to start a broker.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Where queues and messages are kept.
    pub store: StoreConfig,
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
    /// How topics post to `http` and `https` subscriptions.
    pub push: PushConfig,
}

impl BrokerConfig {
    /// A broker on `listen` over `data_dir` with every other setting at the
    /// default of `ackbox serve`.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            listen,
            store: StoreConfig::embedded(data_dir),
            realm: Realm::default(),
            ui_read_only: false,
            credentials: None,
            tls: None,
            limits: HttpLimits::default(),
            push: PushConfig::default(),
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
    /// The push worker could not be set up.
    #[error("cannot set up deliveries to http and https subscriptions")]
    Push {
        /// Why.
        #[source]
        source: PushError,
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

/// A broker whose store is open, engine started and address bound, that
/// does not serve yet: what must hold before the first request (queues a
/// configuration file defines) is done here, so no client ever sees the
/// broker without it.
pub struct OpenedBroker {
    /// The engine, for in-process administration.
    pub engine: Engine,
    listener: TcpListener,
    local_addr: SocketAddr,
    tls: Option<TlsAcceptor>,
    scheme: &'static str,
    auth: Arc<Authenticator>,
    ui_read_only: bool,
    limits: HttpLimits,
    push: PushWorker,
}

impl std::fmt::Debug for OpenedBroker {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("OpenedBroker")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl OpenedBroker {
    /// Opens the store, starts the engine and binds the listen address.
    pub async fn open(config: BrokerConfig, clock: Arc<dyn Clock>) -> Result<Self, StartError> {
        let store_error = |source| StartError::Store {
            data_dir: match &config.store.postgres {
                Some(options) => redact_password(&options.url),
                None => config.store.data_dir.display().to_string(),
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
        let OpenedStore { store, receipt_key } = ackbox_engine::store::open(&config.store)
            .await
            .map_err(store_error)?;
        let mut engine_config = EngineConfig::new(receipt_key);
        engine_config.realm = config.realm.clone();
        let engine = Engine::start(engine_config, store, clock)
            .await
            .map_err(|source| StartError::Engine { source })?;
        let bind_error = |source| StartError::Bind {
            address: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen).await.map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        let push = PushWorker::new(engine.clone(), &config.push)
            .map_err(|source| StartError::Push { source })?;
        Ok(Self {
            engine,
            listener,
            local_addr,
            tls,
            scheme,
            auth: Arc::new(auth),
            ui_read_only: config.ui_read_only,
            limits: config.limits,
            push,
        })
    }

    /// Begins serving.
    pub fn serve(self) -> RunningBroker {
        let shutdown = CancellationToken::new();
        let state = AppState {
            engine: self.engine.clone(),
            fallback_base_url: format!("{}://{}", self.scheme, self.local_addr),
            scheme: self.scheme,
            ui_read_only: self.ui_read_only,
            history: Arc::default(),
            auth: Arc::clone(&self.auth),
            limits: self.limits,
        };
        {
            let (history, engine, stop) = (
                Arc::clone(&state.history),
                self.engine.clone(),
                shutdown.clone(),
            );
            tokio::spawn(async move { history.run(engine, stop).await });
        }
        tokio::spawn(self.push.run(shutdown.clone()));
        // Said here, not in the serving task: it comes before whatever the
        // caller says next ("ackbox is ready").
        tracing::info!(
            address = %self.local_addr,
            tls = self.tls.is_some(),
            "serving the SQS API"
        );
        let stop = shutdown.clone();
        let task = tokio::spawn(serve(self.listener, state, self.tls, async move {
            stop.cancelled().await;
        }));
        RunningBroker {
            local_addr: self.local_addr,
            engine: self.engine,
            scheme: self.scheme,
            auth: self.auth,
            shutdown,
            task,
        }
    }

    /// Stops without having served: flushes and closes the store.
    pub async fn close(self) -> Result<(), EngineError> {
        drop(self.listener);
        self.engine.shutdown().await
    }
}

impl RunningBroker {
    /// Opens the store, starts the engine and begins serving.
    pub async fn start(config: BrokerConfig, clock: Arc<dyn Clock>) -> Result<Self, StartError> {
        Ok(OpenedBroker::open(config, clock).await?.serve())
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
