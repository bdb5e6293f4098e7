//! `ackbox serve`: the broker on the embedded store.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ackbox_core::clock::SystemClock;
use ackbox_core::queue_name::Realm;
use ackbox_engine::Engine;
use ackbox_engine::store::sqlite::Durability;
use ackbox_server::broker::{BrokerConfig, RunningBroker};
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

/// Flags of `ackbox serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address to listen on.
    #[arg(long, env = "ACKBOX_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Port to listen on.
    #[arg(long, env = "ACKBOX_PORT", default_value_t = 9324)]
    port: u16,
    /// Directory of the embedded store.
    #[arg(long, env = "ACKBOX_DATA_DIR", default_value = "./ackbox-data")]
    data_dir: PathBuf,
    /// Region in queue ARNs.
    #[arg(long, env = "ACKBOX_REGION", default_value = "us-east-1")]
    region: String,
    /// 12-digit account id in queue URLs and ARNs.
    #[arg(long, env = "ACKBOX_ACCOUNT_ID", default_value = "000000000000")]
    account_id: String,
    /// Durability of acknowledged writes.
    #[arg(long, env = "ACKBOX_DURABILITY", value_enum, default_value_t = DurabilityMode::Fsync)]
    durability: DurabilityMode,
    /// With `--durability relaxed`: the longest an acknowledged write stays un-fsynced.
    #[arg(long, env = "ACKBOX_FSYNC_INTERVAL_MS", default_value_t = 100)]
    fsync_interval_ms: u64,
    /// TOML file of queues to create (or bring up to date) at every start.
    #[arg(long, env = "ACKBOX_CONFIG")]
    config: Option<PathBuf>,
    /// Serve the dashboard at /ui without its forms: look, do not touch.
    #[arg(long, env = "ACKBOX_UI_READ_ONLY")]
    ui_read_only: bool,
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

fn attribute_strings(
    attributes: &BTreeMap<String, toml::Value>,
) -> anyhow::Result<BTreeMap<String, String>> {
    attributes
        .iter()
        .map(|(name, value)| {
            let text = match value {
                toml::Value::String(text) => text.clone(),
                toml::Value::Integer(number) => number.to_string(),
                toml::Value::Boolean(flag) => flag.to_string(),
                other => {
                    bail!("attribute {name} must be a string, integer or boolean; got {other}")
                }
            };
            Ok((name.clone(), text))
        })
        .collect()
}

/// Creates each configured queue, or brings an existing one's attributes and
/// tags to the configured values; running it twice changes nothing.
async fn apply_config(engine: &Engine, path: &PathBuf) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config: ConfigFile =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    for queue in config.queues {
        let attributes = attribute_strings(&queue.attributes)?;
        let name = match engine.get_queue(&queue.name).await {
            Ok(name) => {
                engine
                    .set_queue_attributes(&name, &attributes)
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
                .create_queue(&queue.name, &attributes, &queue.tags)
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

/// Runs the broker until SIGINT or SIGTERM.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let durability = match args.durability {
        DurabilityMode::Fsync => Durability::Fsync,
        DurabilityMode::Relaxed => Durability::Relaxed {
            sync_interval: Duration::from_millis(args.fsync_interval_ms.max(1)),
        },
    };
    let config = BrokerConfig {
        listen: SocketAddr::new(args.bind, args.port),
        data_dir: args.data_dir.clone(),
        durability,
        realm: realm(&args)?,
        ui_read_only: args.ui_read_only,
    };
    let mut broker = RunningBroker::start(config, Arc::new(SystemClock)).await?;
    if let Some(path) = &args.config
        && let Err(error) = apply_config(&broker.engine, path).await
    {
        broker.stop().await?;
        return Err(error);
    }
    tracing::info!(
        url = %broker.url(),
        data_dir = %args.data_dir.display(),
        durability = ?durability,
        "ackbox is ready"
    );
    let stopped_by_itself = tokio::select! {
        () = ackbox_server::shutdown::signal() => None,
        result = broker.wait() => Some(result),
    };
    match stopped_by_itself {
        None => broker.stop().await?,
        Some(result) => result?,
    }
    Ok(())
}
