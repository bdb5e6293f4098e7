//! An in-process broker on `127.0.0.1:0` with its own temporary data directory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ackbox_core::clock::{Clock, ManualClock, SystemClock};
use ackbox_core::queue_name::Realm;
use ackbox_engine::Engine;
use ackbox_engine::store::{Durability, EmbeddedStore, PostgresOptions, StoreConfig};
use ackbox_server::broker::{BrokerConfig, RunningBroker};
use ackbox_server::limits::HttpLimits;
use ackbox_server::push::PushConfig;
use tempfile::TempDir;

use crate::postgres::PostgresSchema;
use crate::tls::TestCertificate;

/// Set to `postgres` to run every [`TestServer`] on a throwaway schema of
/// `ACKBOX_TEST_POSTGRES_URL`, or to `log` to run it on the log store,
/// instead of the embedded SQLite store: `.ci/run` runs the server suites
/// once each way.
pub const STORE_VARIABLE: &str = "ACKBOX_TEST_SERVER_STORE";

/// The store [`STORE_VARIABLE`] asks for: the embedded store to use, and
/// the schema to run on when it asks for PostgreSQL.
///
/// # Panics
/// When it names a store there is none of, or PostgreSQL without its URL:
/// a run meant for PostgreSQL must not pass on SQLite unnoticed.
fn chosen_store() -> (EmbeddedStore, Option<PostgresSchema>) {
    match std::env::var(STORE_VARIABLE).as_deref() {
        Err(_) | Ok("" | "sqlite") => (EmbeddedStore::Sqlite, None),
        Ok("log") => (EmbeddedStore::Log, None),
        Ok("postgres") => (
            EmbeddedStore::Sqlite,
            Some(
                PostgresSchema::new("the server on PostgreSQL")
                    .expect("ACKBOX_TEST_SERVER_STORE=postgres needs ACKBOX_TEST_POSTGRES_URL"),
            ),
        ),
        Ok(other) => panic!("{STORE_VARIABLE} must be sqlite, log or postgres, not {other:?}"),
    }
}

/// Builds a [`TestServer`].
#[derive(Debug, Default)]
pub struct TestServerBuilder {
    clock: Option<ManualClock>,
    durability: Option<Durability>,
    ui_read_only: bool,
    credentials: Option<String>,
    tls: bool,
    limits: Option<HttpLimits>,
    push: PushConfig,
}

impl TestServerBuilder {
    /// Drive the broker's time with `clock` instead of the wall clock.
    pub fn clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Serve the dashboard read-only (`--ui-read-only`).
    pub fn ui_read_only(mut self) -> Self {
        self.ui_read_only = true;
        self
    }

    /// Require SigV4 with the keys of this credentials file (TOML text).
    pub fn credentials(mut self, toml: &str) -> Self {
        self.credentials = Some(toml.to_owned());
        self
    }

    /// Serve HTTPS with a freshly generated certificate
    /// ([`TestServer::certificate_authority`] is what clients must trust).
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Give push endpoints `timeout` to answer instead of SNS's 15 s.
    pub fn push_timeout(mut self, timeout: Duration) -> Self {
        self.push.timeout = timeout;
        self
    }

    /// Trust the PEM certificates of `path` for `https` push endpoints.
    pub fn push_roots(mut self, path: std::path::PathBuf) -> Self {
        self.push.extra_roots = Some(path);
        self
    }

    /// Use these HTTP limits instead of the defaults.
    pub fn limits(mut self, limits: HttpLimits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Use `durability` instead of fsync-per-commit.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// Starts the broker.
    ///
    /// # Panics
    /// When the broker cannot start: a test cannot go on without it.
    pub async fn start(self) -> TestServer {
        let data_dir = tempfile::tempdir().expect("a temporary data directory");
        let clock: Arc<dyn Clock> = match &self.clock {
            Some(clock) => Arc::new(clock.clone()),
            None => Arc::new(SystemClock),
        };
        let credentials = self.credentials.map(|toml| {
            let path = data_dir.path().join("credentials.toml");
            std::fs::write(&path, toml).expect("the credentials file is written");
            path
        });
        let certificate = self.tls.then(|| TestCertificate::generate(data_dir.path()));
        let (embedded, schema) = chosen_store();
        let config = BrokerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            store: StoreConfig {
                data_dir: data_dir.path().to_path_buf(),
                durability: self.durability.unwrap_or(Durability::Fsync),
                embedded,
                postgres: schema.as_ref().map(|schema| PostgresOptions {
                    max_connections: 8,
                    schema: Some(schema.name().to_owned()),
                    ..PostgresOptions::new(schema.url())
                }),
                // Tests that fill a disk use the binary on a small filesystem.
                disk_reserve_bytes: 0,
            },
            realm: Realm::default(),
            ui_read_only: self.ui_read_only,
            credentials,
            tls: certificate
                .as_ref()
                .map(|certificate| certificate.files.clone()),
            limits: self.limits.unwrap_or_default(),
            push: self.push,
        };
        let broker = RunningBroker::start(config.clone(), Arc::clone(&clock))
            .await
            .expect("the test broker starts");
        TestServer {
            config: BrokerConfig {
                listen: broker.local_addr,
                ..config
            },
            clock,
            broker: Some(broker),
            certificate,
            _data_dir: data_dir,
            _schema: schema,
        }
    }
}

/// A running in-process broker. Dropping it abandons the server task; call
/// [`TestServer::stop`] to test graceful shutdown.
#[derive(Debug)]
pub struct TestServer {
    config: BrokerConfig,
    clock: Arc<dyn Clock>,
    broker: Option<RunningBroker>,
    /// The generated certificate, when serving HTTPS.
    certificate: Option<TestCertificate>,
    _data_dir: TempDir,
    /// The PostgreSQL schema the broker runs on, dropped after it.
    _schema: Option<PostgresSchema>,
}

impl TestServer {
    /// A builder with the wall clock and fsync durability.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    fn broker(&self) -> &RunningBroker {
        self.broker.as_ref().expect("the broker is running")
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        self.broker().url()
    }

    /// An `aws-sdk-sqs` client for this broker.
    pub fn client(&self) -> aws_sdk_sqs::Client {
        crate::client::sqs_client(&self.url())
    }

    /// An `aws-sdk-sns` client for this broker.
    pub fn sns_client(&self) -> aws_sdk_sns::Client {
        crate::client::sns_client(&self.url())
    }

    /// An `aws-sdk-sns` client for this broker signing with the given key.
    pub fn sns_client_with_key(
        &self,
        access_key_id: &str,
        secret_access_key: &str,
    ) -> aws_sdk_sns::Client {
        crate::client::sns_client_with_key(&self.url(), access_key_id, secret_access_key)
    }

    /// An `aws-sdk-sqs` client signing with the given key (over HTTPS,
    /// trusting the generated authority, when the broker serves HTTPS).
    pub fn client_with_key(
        &self,
        access_key_id: &str,
        secret_access_key: &str,
    ) -> aws_sdk_sqs::Client {
        match &self.certificate {
            Some(certificate) => crate::client::https_sqs_client(
                &self.url(),
                &certificate.authority_pem,
                access_key_id,
                secret_access_key,
            ),
            None => {
                crate::client::sqs_client_with_key(&self.url(), access_key_id, secret_access_key)
            }
        }
    }

    /// The PEM certificate authority clients must trust, when serving HTTPS.
    pub fn certificate_authority(&self) -> Option<&str> {
        self.certificate
            .as_ref()
            .map(|certificate| certificate.authority_pem.as_str())
    }

    /// The running broker, to reload its credentials and the like.
    pub fn running(&self) -> &RunningBroker {
        self.broker()
    }

    /// The engine behind the broker.
    pub fn engine(&self) -> &Engine {
        &self.broker().engine
    }

    /// Whether the broker runs on the embedded store (not PostgreSQL, see
    /// [`STORE_VARIABLE`]): some metrics and files exist only there.
    pub fn on_embedded_store(&self) -> bool {
        self.config.store.postgres.is_none()
    }

    /// The data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.config.store.data_dir
    }

    /// Stops gracefully and starts again on the same data directory and port.
    ///
    /// # Panics
    /// When the broker does not stop cleanly or cannot start again.
    pub async fn restart(&mut self) {
        if let Some(broker) = self.broker.take() {
            broker.stop().await.expect("the broker stops cleanly");
        }
        let mut attempts = 0;
        let broker = loop {
            match RunningBroker::start(self.config.clone(), Arc::clone(&self.clock)).await {
                Ok(broker) => break broker,
                // The port may linger for a moment after the old listener closed.
                Err(_) if attempts < 50 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(error) => panic!("the broker restarts: {error}"),
            }
        };
        self.broker = Some(broker);
    }

    /// Stops gracefully.
    ///
    /// # Panics
    /// When the broker does not stop cleanly.
    pub async fn stop(mut self) {
        if let Some(broker) = self.broker.take() {
            broker.stop().await.expect("the broker stops cleanly");
        }
    }
}
