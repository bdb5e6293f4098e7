//! The consumer process: what this test binary does when the driver starts
//! it again with [`SPEC_VARIABLE`] set. It is an application as a user
//! would write it — one pool on the application's database, one SDK
//! consumer per queue — plus a report of each consumer's decisions on
//! stdout, four times a second, for the driver to add up.
//!
//! It stops gracefully when its stdin closes: the driver closes it to stop
//! the process, and the kernel closes it if the driver dies, so no consumer
//! outlives its test.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackbox_consumer::{
    CancellationToken, Consumer, PgInbox, RetryPolicy, Transport, TransportError,
};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::task::JoinSet;

use crate::broker::{self, Endpoint, MAX_DELIVERIES, QueueAddress, RETRY_BASE, RETRY_CAP};
use crate::database::DatabaseAddress;
use crate::workload::{self, Pace};

/// Holds the JSON [`ConsumerSpec`] of a consumer process.
pub(crate) const SPEC_VARIABLE: &str = "ACKBOX_CHAOS_CONSUMER";
/// An `EnvFilter` for the SDK's logs on stderr (off unless set).
const LOG_VARIABLE: &str = "ACKBOX_CHAOS_LOG";
/// Each consumer's concurrency.
const CONCURRENCY: usize = 16;
/// Connections per process, shared by its consumers as an application's
/// pool would be; four processes stay well under the server's limit of
/// 100, which the workspace's other tests share.
const POOL_SIZE: u32 = 6;
/// How long a stopping consumer waits for its running handlers.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);
/// After stdin closes, the process exits by this deadline whatever runs.
const EXIT_DEADLINE: Duration = Duration::from_secs(20);
const REPORT_EVERY: Duration = Duration::from_millis(250);
/// Marks a report line on stdout.
pub(crate) const REPORT_PREFIX: &str = "consumer-report ";

/// What one consumer process runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ConsumerSpec {
    pub(crate) process: usize,
    /// Off in one process, so its long handlers really lose their lease.
    pub(crate) heartbeat: bool,
    pub(crate) database: DatabaseAddress,
    pub(crate) endpoint: Endpoint,
    pub(crate) queues: Vec<QueueAddress>,
    pub(crate) pace: Pace,
}

/// One consumer's decisions so far, as a report line carries them.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct Counts {
    pub(crate) applied: u64,
    pub(crate) duplicates: u64,
    pub(crate) failed: u64,
    pub(crate) quarantined: u64,
    pub(crate) released: u64,
    pub(crate) extensions: u64,
}

impl Counts {
    pub(crate) fn add(&mut self, other: &Self) {
        self.applied += other.applied;
        self.duplicates += other.duplicates;
        self.failed += other.failed;
        self.quarantined += other.quarantined;
        self.released += other.released;
        self.extensions += other.extensions;
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "{} applied, {} duplicates, {} failed, {} quarantined, {} released, {} lease extensions",
            self.applied,
            self.duplicates,
            self.failed,
            self.quarantined,
            self.released,
            self.extensions
        )
    }
}

/// A report line: one consumer's counts in this process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Report {
    pub(crate) consumer: String,
    pub(crate) counts: Counts,
}

/// Reads each consumer's counts; a consumer restarted inside the process
/// adds a source, so the sum covers the process's whole life.
type CountSource = Box<dyn Fn() -> Counts + Send + Sync>;
type Board = Arc<Mutex<BTreeMap<&'static str, Vec<CountSource>>>>;

/// The consumer process's `main`.
pub(crate) fn main(spec: &str) -> ExitCode {
    let spec: ConsumerSpec = match serde_json::from_str(spec) {
        Ok(spec) => spec,
        Err(error) => {
            eprintln!("consumer process: {SPEC_VARIABLE} is not a consumer spec: {error}");
            return ExitCode::from(2);
        }
    };
    if let Ok(filter) = std::env::var(LOG_VARIABLE) {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("consumer process: no runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(spec)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("consumer process: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(spec: ConsumerSpec) -> Result<(), String> {
    let shutdown = CancellationToken::new();
    stop_when_stdin_closes(shutdown.clone());
    let pool = spec
        .database
        .pool(&spec.database.consumer_application(spec.process), POOL_SIZE)
        .map_err(|error| format!("database options: {error}"))?;
    let board: Board = Arc::default();
    let spec = Arc::new(spec);
    let mut consumers = JoinSet::new();
    match &spec.endpoint {
        Endpoint::Sqs(endpoint) => {
            let client = broker::sqs::client(endpoint);
            for queue in &spec.queues {
                let (client, address) = (client.clone(), queue.clone());
                consumers.spawn(supervise(
                    Arc::clone(&spec),
                    queue.clone(),
                    move || {
                        let transport = broker::sqs::transport(&client, &address);
                        async move { Ok(transport) }
                    },
                    pool.clone(),
                    Arc::clone(&board),
                    shutdown.clone(),
                ));
            }
        }
        Endpoint::RabbitMq(url) => {
            for queue in &spec.queues {
                let (url, address) = (url.clone(), queue.clone());
                consumers.spawn(supervise(
                    Arc::clone(&spec),
                    queue.clone(),
                    move || {
                        let (url, address) = (url.clone(), address.clone());
                        async move { broker::rabbitmq::transport(&url, &address).await }
                    },
                    pool.clone(),
                    Arc::clone(&board),
                    shutdown.clone(),
                ));
            }
        }
        Endpoint::Nats(url) => {
            for queue in &spec.queues {
                let (url, address) = (url.clone(), queue.clone());
                consumers.spawn(supervise(
                    Arc::clone(&spec),
                    queue.clone(),
                    move || {
                        let (url, address) = (url.clone(), address.clone());
                        async move {
                            let client = async_nats::connect(&url).await.map_err(|error| {
                                TransportError {
                                    operation: "connect",
                                    detail: error.to_string(),
                                }
                            })?;
                            broker::nats::transport(client, &address).await
                        }
                    },
                    pool.clone(),
                    Arc::clone(&board),
                    shutdown.clone(),
                ));
            }
        }
    }
    let mut tick = tokio::time::interval(REPORT_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => report(&board),
            finished = consumers.join_next() => match finished {
                Some(Ok(())) => {}
                Some(Err(error)) => return Err(format!("a consumer task failed: {error}")),
                None => break,
            },
        }
    }
    // The last report, after every acknowledgement went out.
    report(&board);
    pool.close().await;
    Ok(())
}

/// Runs one queue's consumer until shutdown, starting it again whenever it
/// stops on its own (the broker was unreachable at start, say), as a
/// supervisor would restart an application.
async fn supervise<T, Connect, Connecting>(
    spec: Arc<ConsumerSpec>,
    queue: QueueAddress,
    connect: Connect,
    pool: PgPool,
    board: Board,
    shutdown: CancellationToken,
) where
    T: Transport,
    Connect: Fn() -> Connecting + Send,
    Connecting: Future<Output = Result<T, TransportError>> + Send,
{
    let workload = queue.workload;
    while !shutdown.is_cancelled() {
        let stopped = match connect().await {
            Err(error) => format!("could not connect: {error}"),
            Ok(transport) => {
                let consumer = Consumer::builder(workload.name())
                    .transport(transport)
                    .inbox(PgInbox::new(pool.clone()))
                    .effect_key(workload::effect_key(workload))
                    .concurrency(CONCURRENCY)
                    .heartbeat(spec.heartbeat)
                    .retry(RetryPolicy::exponential(
                        MAX_DELIVERIES,
                        RETRY_BASE,
                        RETRY_CAP,
                    ))
                    .wait(Duration::from_secs(1))
                    .shutdown_deadline(SHUTDOWN_DEADLINE)
                    .build();
                match consumer {
                    Err(error) => format!("could not build the consumer: {error}"),
                    Ok(consumer) => {
                        let consumer = Arc::new(consumer);
                        let counted = Arc::clone(&consumer);
                        board
                            .lock()
                            .expect("board lock poisoned")
                            .entry(workload.name())
                            .or_default()
                            .push(Box::new(move || counts(&counted)));
                        match workload::run(
                            workload,
                            &consumer,
                            pool.clone(),
                            spec.pace,
                            shutdown.clone(),
                        )
                        .await
                        {
                            Ok(()) => continue,
                            Err(error) => format!("stopped: {error}"),
                        }
                    }
                }
            }
        };
        eprintln!(
            "consumer process {}: {} {stopped}; starting it again in a second",
            spec.process,
            workload.name()
        );
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = shutdown.cancelled() => {}
        }
    }
}

fn counts<T: Transport>(consumer: &Consumer<T, PgInbox>) -> Counts {
    let stats = consumer.stats();
    Counts {
        applied: stats.applied(),
        duplicates: stats.duplicates(),
        failed: stats.failed(),
        quarantined: stats.quarantined(),
        released: stats.released(),
        extensions: stats.extensions(),
    }
}

fn report(board: &Board) {
    let board = board.lock().expect("board lock poisoned");
    for (consumer, sources) in board.iter() {
        let mut total = Counts::default();
        for source in sources {
            total.add(&source());
        }
        let report = Report {
            consumer: (*consumer).to_owned(),
            counts: total,
        };
        if let Ok(line) = serde_json::to_string(&report) {
            println!("{REPORT_PREFIX}{line}");
        }
    }
}

/// Cancels `shutdown` when stdin reaches its end, then gives the process
/// [`EXIT_DEADLINE`] to stop before it exits regardless.
fn stop_when_stdin_closes(shutdown: CancellationToken) {
    std::thread::spawn(move || {
        let mut ignored = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut ignored);
        shutdown.cancel();
        std::thread::sleep(EXIT_DEADLINE);
        eprintln!(
            "consumer process: still running {EXIT_DEADLINE:?} after being told to stop; exiting"
        );
        std::process::exit(3);
    });
}
