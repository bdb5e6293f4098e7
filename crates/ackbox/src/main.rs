//! `ackbox`: serve the broker, manage queues, send and receive, benchmark.

use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

mod api_client;
mod cmd;
mod data_dir;

/// glibc's allocator took 7 % of the server's CPU sending 256 B messages
/// (`perf`: `_int_malloc`, `_int_free`, `malloc_consolidate`, …): every
/// request allocates and frees dozens of small buffers across threads.
/// With mimalloc, 4 interleaved rounds: W1 server CPU 24.4 → 22.3 µs per
/// message, W2 33.8 → 27.5 µs, for 11–15 MiB more resident memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A durable, self-hostable message queue that speaks the Amazon SQS API.
#[derive(Debug, Parser)]
#[command(name = "ackbox", version, about)]
struct Cli {
    /// Log output format.
    #[arg(long, env = "ACKBOX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Readable lines.
    Human,
    /// One JSON object per line, stable field names.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the broker.
    Serve(cmd::serve::Args),
    /// Create, list, inspect, purge and delete queues.
    Queue(cmd::queue::Args),
    /// Send a message.
    Send(cmd::send::Args),
    /// Receive (and by default delete) messages.
    Receive(cmd::receive::Args),
    /// Look into a dead-letter queue: peek, summary by failure class.
    Dlq(cmd::dlq::Args),
    /// Move dead-lettered messages back: start (or dry-run), status, history, resume, cancel.
    Redrive(cmd::redrive::Args),
    /// Deliver a topic's archived publishes again: start, list, cancel.
    Replay(cmd::replay::Args),
    /// Load-test ackbox, alone or side by side with RabbitMQ, NATS and PostgreSQL.
    Bench(cmd::bench::Args),
    /// Check an embedded store's files: what is readable, where damage is.
    Store(cmd::store::Args),
}

fn init_tracing(format: LogFormat, default_level: &str) {
    let filter =
        EnvFilter::try_from_env("ACKBOX_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    // Colours only for a person at a terminal, never into a file or a pipe.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Human => builder.init(),
        // The current span once (`span`), not again in a list of every
        // enclosing one: ackbox's spans do not nest.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_span_list(false)
            .init(),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The server reports what it does; a client command's output is its
    // answer, which library chatter (connection events) would only bury.
    let default_level = if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    let log_format = cli.log_format;
    init_tracing(log_format, default_level);
    match run(cli.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader of the answer stopped early (`| head -1`): it has what
        // it wanted, as with any Unix tool.
        Err(error) if reader_gone(&error) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // A log collector reading JSON lines gets the reason as one.
            match log_format {
                LogFormat::Human => eprintln!("error: {error:#}"),
                LogFormat::Json => tracing::error!(error = %format!("{error:#}"), "ackbox stopped"),
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn reader_gone(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|error| error.kind() == std::io::ErrorKind::BrokenPipe)
}

fn run(command: Command) -> anyhow::Result<()> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Command::Serve(args) = &command {
        runtime.worker_threads(args.worker_threads());
    }
    let runtime = runtime.enable_all().build()?;
    runtime.block_on(async {
        match command {
            Command::Serve(args) => cmd::serve::run(args).await,
            Command::Queue(args) => cmd::queue::run(args).await,
            Command::Send(args) => cmd::send::run(args).await,
            Command::Receive(args) => cmd::receive::run(args).await,
            Command::Dlq(args) => cmd::dlq::run(args).await,
            Command::Redrive(args) => cmd::redrive::run(args).await,
            Command::Replay(args) => cmd::replay::run(args).await,
            Command::Bench(args) => cmd::bench::run(args).await,
            Command::Store(args) => cmd::store::run(args).await,
        }
    })
}
