//! `ackbox serve`: the broker on the embedded store.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ackbox_core::clock::SystemClock;
use ackbox_core::queue_name::Realm;
use ackbox_engine::Engine;
use ackbox_engine::store::{Durability, EmbeddedStore, PostgresOptions, StoreConfig};
use ackbox_server::auth::Authenticator;
use ackbox_server::broker::{BrokerConfig, OpenedBroker};
use ackbox_server::limits::HttpLimits;
use ackbox_server::push::{DEFAULT_PUSH_TIMEOUT, PushConfig};
use ackbox_server::shutdown::StopSignal;
use ackbox_server::tls::TlsFiles;
use anyhow::{Context, bail};
use clap::ValueEnum;
use serde::Deserialize;

/// How acknowledged writes reach the disk.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum DurabilityMode {
    /// fsync before every acknowledgement (group commit keeps it fast).
    Fsync,
    /// fsync at most every `--fsync-interval-ms`: a power loss may lose that window.
    Relaxed,
}

/// How API requests are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AuthMode {
    /// No authentication: for local development on loopback.
    Open,
    /// AWS Signature Version 4 against `--credentials`.
    Sigv4,
}

/// Flags of `ackbox serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address to listen on.
    #[arg(long, env = "ACKBOX_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Port to listen on.
    #[arg(long, env = "ACKBOX_PORT", default_value_t = 9324)]
    port: u16,
    /// Directory of the embedded store [default: `$STATE_DIRECTORY` under
    /// systemd, else ./ackbox-data, never `/`].
    #[arg(long, env = "ACKBOX_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Where queues and messages live: `sqlite` (the embedded store in
    /// `--data-dir`), `log` (standard queues' messages in an append-only
    /// log in `--data-dir`, the rest in SQLite beside it) or a
    /// `postgres://` URL shared by several ackbox nodes; list a primary's
    /// replicas after it (`postgres://u@db1:5432,db2:5432/db`) to follow a
    /// failover.
    #[arg(long, env = "ACKBOX_STORE", default_value = "sqlite")]
    store: String,
    /// With a PostgreSQL store: most connections this node opens (at least 3: one listens, half of the rest commit leases and deletes).
    #[arg(long, env = "ACKBOX_STORE_POOL_SIZE", default_value_t = 32)]
    store_pool_size: u32,
    /// With a PostgreSQL store: keep ackbox's tables in this schema.
    #[arg(long, env = "ACKBOX_STORE_SCHEMA")]
    store_schema: Option<String>,
    /// Region in queue ARNs.
    #[arg(long, env = "ACKBOX_REGION", default_value = "us-east-1")]
    region: String,
    /// 12-digit account id in queue URLs and ARNs.
    #[arg(long, env = "ACKBOX_ACCOUNT_ID", default_value = "000000000000")]
    account_id: String,
    /// Durability of acknowledged writes.
    #[arg(long, env = "ACKBOX_DURABILITY", value_enum, default_value_t = DurabilityMode::Fsync)]
    durability: DurabilityMode,
    /// MiB of the embedded store's disk held back (`ackbox.reserve` in
    /// `--data-dir`): when the disk fills, the reserve is released so that
    /// receives and deletes go on while sends are refused until there is
    /// room again. 0 holds nothing back.
    #[arg(long, env = "ACKBOX_DISK_RESERVE_MIB", default_value_t = 64)]
    disk_reserve_mib: u64,
    /// With `--durability relaxed`: the longest an acknowledged write stays un-fsynced.
    #[arg(long, env = "ACKBOX_FSYNC_INTERVAL_MS", default_value_t = 100)]
    fsync_interval_ms: u64,
    /// TOML file of queues to create (or bring up to date) at every start.
    #[arg(long, env = "ACKBOX_CONFIG")]
    config: Option<PathBuf>,
    /// Serve the dashboard at /ui without its forms: look, do not touch.
    #[arg(long, env = "ACKBOX_UI_READ_ONLY")]
    ui_read_only: bool,
    /// How requests are authenticated.
    #[arg(long, env = "ACKBOX_AUTH", value_enum, default_value_t = AuthMode::Open)]
    auth: AuthMode,
    /// With `--auth sigv4`: the TOML file of access keys and their permissions.
    #[arg(long, env = "ACKBOX_CREDENTIALS")]
    credentials: Option<PathBuf>,
    /// Refuse to start without authentication.
    #[arg(long, env = "ACKBOX_REQUIRE_AUTH")]
    require_auth: bool,
    /// PEM certificate chain: serve HTTPS (with `--tls-key`).
    #[arg(long, env = "ACKBOX_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "ACKBOX_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Largest request body, bytes.
    #[arg(long, env = "ACKBOX_MAX_BODY_BYTES", default_value_t = HttpLimits::default().max_body_bytes)]
    max_body_bytes: usize,
    /// Largest request head (request line and headers), bytes.
    #[arg(long, env = "ACKBOX_MAX_HEADER_BYTES", default_value_t = HttpLimits::default().max_header_bytes)]
    max_header_bytes: usize,
    /// Connections served at once; more wait to be accepted.
    #[arg(long, env = "ACKBOX_MAX_CONNECTIONS", default_value_t = HttpLimits::default().max_connections)]
    max_connections: usize,
    /// Longest wait for a request's headers (and a TLS handshake, and an idle connection).
    #[arg(long, env = "ACKBOX_HEADER_TIMEOUT_MS", default_value_t = millis(HttpLimits::default().header_timeout))]
    header_timeout_ms: u64,
    /// Longest wait for a request's body after its headers.
    #[arg(long, env = "ACKBOX_BODY_TIMEOUT_MS", default_value_t = millis(HttpLimits::default().body_timeout))]
    body_timeout_ms: u64,
    /// Longest a request may take, long polls included (more than 20).
    #[arg(long, env = "ACKBOX_REQUEST_TIMEOUT_SECS", default_value_t = HttpLimits::default().request_timeout.as_secs())]
    request_timeout_secs: u64,
    /// Longest a topic's http/https subscriber may take to answer one
    /// delivery before it counts as failed and is retried (SNS: 15).
    #[arg(long, env = "ACKBOX_PUSH_TIMEOUT_SECS", default_value_t = DEFAULT_PUSH_TIMEOUT.as_secs())]
    push_timeout_secs: u64,
    /// PEM certificates to trust for https subscribers beside the system's
    /// (a private certificate authority's, say).
    #[arg(long, env = "ACKBOX_PUSH_CA_FILE")]
    push_ca_file: Option<PathBuf>,
    /// Threads serving requests. Default: with the embedded store one fewer
    /// than the CPUs (its fsyncs, checkpoints and, under load, its writer
    /// thread need one), at least one; with PostgreSQL, one per CPU.
    #[arg(long, env = "ACKBOX_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    worker_threads: Option<u16>,
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Args {
    /// How many threads the runtime serving requests gets; see `--worker-threads`.
    ///
    /// Measured on 2 CPUs with the embedded store (medians of two runs of 3
    /// and 4 interleaved rounds): one worker instead of two cut the server's
    /// CPU at 1,000 messages a second by 12 % and that workload's
    /// acknowledgement p99 from 3.4–5.9 ms to 2.3–2.4 ms, as the workers no
    /// longer preempt the writer or wake each other to steal work;
    /// throughput moved within the machine's noise. Measured again once
    /// requests committed their own groups (2 rounds each): two workers
    /// used 14–24 % more CPU per W2 message and 14–15 % more at 1,000 a second.
    pub(crate) fn worker_threads(&self) -> usize {
        if let Some(threads) = self.worker_threads {
            return usize::from(threads);
        }
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        if self.embedded_store() {
            cpus.saturating_sub(1).max(1)
        } else {
            cpus
        }
    }

    /// `--store` names an embedded store.
    fn embedded_store(&self) -> bool {
        self.embedded().is_some()
    }

    /// The embedded store `--store` names, if it names one.
    fn embedded(&self) -> Option<EmbeddedStore> {
        let store = self.store.trim();
        if store.eq_ignore_ascii_case("sqlite") {
            Some(EmbeddedStore::Sqlite)
        } else if store.eq_ignore_ascii_case("log") {
            Some(EmbeddedStore::Log)
        } else {
            None
        }
    }

    /// The PostgreSQL store `--store` names, or `None` for the embedded one.
    fn postgres(&self) -> anyhow::Result<Option<PostgresOptions>> {
        if self.embedded_store() {
            return Ok(None);
        }
        let store = self.store.trim();
        if !(store.starts_with("postgres://") || store.starts_with("postgresql://")) {
            anyhow::bail!(
                "--store (ACKBOX_STORE) must be `sqlite`, `log` or a postgres:// URL; got {:?}",
                ackbox_server::broker::redact_password(store)
            );
        }
        Ok(Some(PostgresOptions {
            url: store.to_owned(),
            max_connections: self.store_pool_size,
            schema: self.store_schema.clone(),
        }))
    }

    fn limits(&self) -> HttpLimits {
        HttpLimits {
            max_body_bytes: self.max_body_bytes,
            max_header_bytes: self.max_header_bytes,
            max_connections: self.max_connections,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            body_timeout: Duration::from_millis(self.body_timeout_ms),
            request_timeout: Duration::from_secs(self.request_timeout_secs),
        }
    }

    /// The credentials file, if authentication is on; refuses flag
    /// combinations that would leave a broker open by mistake.
    fn credentials(&self) -> anyhow::Result<Option<PathBuf>> {
        let credentials = match (self.auth, &self.credentials) {
            (AuthMode::Sigv4, Some(path)) => Some(path.clone()),
            (AuthMode::Sigv4, None) => bail!("--auth sigv4 needs --credentials PATH"),
            (AuthMode::Open, Some(_)) => {
                bail!("--credentials is given but --auth is open; add --auth sigv4")
            }
            (AuthMode::Open, None) => None,
        };
        if credentials.is_none() && self.require_auth {
            bail!("--require-auth: refusing to start without --auth sigv4 --credentials PATH");
        }
        if credentials.is_none() && !self.bind.is_loopback() {
            tracing::warn!(
                bind = %self.bind,
                "WARNING: serving on a non-loopback address WITHOUT AUTHENTICATION: anyone who \
                 can reach it can read, send and delete every message. Use --auth sigv4 \
                 --credentials PATH (and --require-auth to make this an error)."
            );
        }
        if credentials.is_some() && self.tls_cert.is_none() && !self.bind.is_loopback() {
            tracing::warn!(
                bind = %self.bind,
                "serving on a non-loopback address without TLS: request bodies, and the \
                 dashboard's passwords (secret access keys), cross the network in clear text; \
                 use --tls-cert and --tls-key"
            );
        }
        Ok(credentials)
    }
}

/// `ackbox.toml`: queues that exist whenever the broker runs.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default, rename = "queue")]
    queues: Vec<QueueDefinition>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueDefinition {
    name: String,
    #[serde(default)]
    attributes: BTreeMap<String, toml::Value>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
}

/// A queue's attributes as the API takes them: strings, numbers and flags
/// as text, and a table (a `RedrivePolicy`, say) as the JSON document SQS
/// wants — `RedrivePolicy = { deadLetterTargetArn = "…", maxReceiveCount = 5 }`.
/// A `.fifo` name makes a FIFO queue without `FifoQueue = true`, as the CLI
/// does.
fn attribute_strings(queue: &QueueDefinition) -> anyhow::Result<BTreeMap<String, String>> {
    let mut attributes = queue
        .attributes
        .iter()
        .map(|(name, value)| {
            let text = match value {
                toml::Value::String(text) => text.clone(),
                toml::Value::Integer(number) => number.to_string(),
                toml::Value::Boolean(flag) => flag.to_string(),
                toml::Value::Table(table) => serde_json::to_string(table)?,
                other => bail!(
                    "queue {}: attribute {name} must be a string, a number, a boolean or a \
                     table (for a JSON policy); got {other}",
                    queue.name
                ),
            };
            Ok((name.clone(), text))
        })
        .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
    if queue.name.ends_with(".fifo") {
        attributes
            .entry("FifoQueue".to_owned())
            .or_insert_with(|| "true".to_owned());
    }
    Ok(attributes)
}

/// A queue the configuration defines, with its attributes as the API takes
/// them.
type ConfiguredQueue = (QueueDefinition, BTreeMap<String, String>);

/// Reads the configuration and checks every queue in it — its name, its
/// attributes against SQS's limits — before anything is created, so a
/// mistake in the last queue does not leave the first ones made.
fn read_config(path: &PathBuf) -> anyhow::Result<Vec<ConfiguredQueue>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config: ConfigFile =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    config
        .queues
        .into_iter()
        .map(|queue| {
            let attributes = attribute_strings(&queue)?;
            let checked = queue
                .name
                .parse::<ackbox_core::queue_name::QueueName>()
                .map_err(|error| anyhow::anyhow!(error.message))
                .and_then(|name| {
                    let mut settings =
                        ackbox_core::attributes::QueueAttributes::for_kind(name.is_fifo());
                    settings
                        .apply(&attributes)
                        .map_err(|error| anyhow::anyhow!(error.message))
                });
            checked.with_context(|| format!("queue {:?} in {}", queue.name, path.display()))?;
            Ok((queue, attributes))
        })
        .collect()
}

/// Creates each configured queue, or brings an existing one's attributes and
/// tags to the configured values; running it twice changes nothing.
async fn apply_config(
    engine: &Engine,
    path: &Path,
    queues: &[ConfiguredQueue],
) -> anyhow::Result<()> {
    for (queue, attributes) in queues {
        let name = match engine.get_queue(&queue.name).await {
            Ok(name) => {
                engine
                    .set_queue_attributes(&name, attributes)
                    .await
                    .with_context(|| {
                        format!("updating queue {} from {}", queue.name, path.display())
                    })?;
                if !queue.tags.is_empty() {
                    engine.tag_queue(&name, &queue.tags).await?;
                }
                name
            }
            Err(_) => engine
                .create_queue(&queue.name, attributes, &queue.tags)
                .await
                .with_context(|| {
                    format!("creating queue {} from {}", queue.name, path.display())
                })?,
        };
        tracing::info!(queue = %name, "queue defined by configuration");
    }
    Ok(())
}

fn realm(args: &Args) -> anyhow::Result<Realm> {
    if args.account_id.len() != 12 || !args.account_id.bytes().all(|byte| byte.is_ascii_digit()) {
        bail!("--account-id must be 12 digits; got {:?}", args.account_id);
    }
    if args.region.is_empty()
        || !args
            .region
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
    {
        bail!(
            "--region must be letters, digits and hyphens, like us-east-1; got {:?}",
            args.region
        );
    }
    Ok(Realm {
        region: args.region.clone(),
        account_id: args.account_id.clone(),
    })
}

/// SIGHUP, caught from the moment [`Hangups::listen`] returns: each one
/// reloads the credentials file (key rotation).
struct Hangups {
    #[cfg(unix)]
    stream: Option<tokio::signal::unix::Signal>,
}

impl Hangups {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let stream = signal(SignalKind::hangup())
                .inspect_err(|_| {
                    tracing::warn!("cannot listen for SIGHUP; credentials reload only at restart");
                })
                .ok();
            Self { stream }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// Reloads the credentials at every SIGHUP; never returns.
    async fn reload(self, authenticator: Arc<Authenticator>) {
        #[cfg(unix)]
        if let Some(mut hangups) = self.stream {
            while hangups.recv().await.is_some() {
                match authenticator.reload() {
                    Ok(keys) => tracing::info!(keys, "credentials reloaded"),
                    Err(error) => tracing::error!(
                        error = %anyhow::Error::from(error),
                        "credentials reload refused; the keys in use stay"
                    ),
                }
            }
        }
        std::future::pending().await
    }
}

/// Runs the broker until SIGINT or SIGTERM.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let durability = match args.durability {
        DurabilityMode::Fsync => Durability::Fsync,
        DurabilityMode::Relaxed => Durability::Relaxed {
            sync_interval: Duration::from_millis(args.fsync_interval_ms.max(1)),
        },
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(certificate), Some(private_key)) => Some(TlsFiles {
            certificate: certificate.clone(),
            private_key: private_key.clone(),
        }),
        _ => None,
    };
    let postgres = args.postgres()?;
    let data_dir = match (&postgres, &args.data_dir) {
        // A shared store keeps nothing in the directory.
        (Some(_), None) => PathBuf::from(crate::data_dir::QUICK_START),
        _ => crate::data_dir::resolve(args.data_dir.clone())?,
    };
    let store = match &postgres {
        Some(options) => ackbox_server::broker::redact_password(&options.url),
        None => data_dir.display().to_string(),
    };
    let config = BrokerConfig {
        listen: SocketAddr::new(args.bind, args.port),
        store: StoreConfig {
            data_dir: data_dir.clone(),
            durability,
            embedded: args.embedded().unwrap_or_default(),
            postgres,
            disk_reserve_bytes: args.disk_reserve_mib.saturating_mul(1 << 20),
        },
        realm: realm(&args)?,
        ui_read_only: args.ui_read_only,
        credentials: args.credentials()?,
        tls,
        limits: args.limits(),
        push: PushConfig {
            timeout: Duration::from_secs(args.push_timeout_secs.max(1)),
            extra_roots: args.push_ca_file.clone(),
        },
    };
    // Checked whole before anything opens: a mistake leaves nothing made.
    let configured = args.config.as_ref().map(read_config).transpose()?;
    let authenticated = config.credentials.is_some();
    // Caught before the broker starts: a stop or a reload asked for while
    // it starts is kept for it, not left to kill it.
    let stop = StopSignal::listen();
    let hangups = Hangups::listen();
    let opened = OpenedBroker::open(config, Arc::new(SystemClock)).await?;
    if let (Some(path), Some(queues)) = (&args.config, &configured)
        && let Err(error) = apply_config(&opened.engine, path, queues).await
    {
        opened.close().await?;
        return Err(error);
    }
    let mut broker = opened.serve();
    tracing::info!(
        url = %broker.url(),
        store = %store,
        durability = %durability,
        authenticated,
        "ackbox is ready"
    );
    let stopped_by_itself = tokio::select! {
        () = stop.received() => None,
        () = hangups.reload(broker.authenticator()) => None,
        result = broker.wait() => Some(result),
    };
    match stopped_by_itself {
        None => broker.stop().await?,
        Some(result) => result?,
    }
    Ok(())
}
