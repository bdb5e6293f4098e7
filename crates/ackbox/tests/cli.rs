//! The CLI against the real binary: queue administration, send and receive,
//! `--json` output, predefined queues from `--config`, and commands that must fail.

use std::process::{Command, Output};

use ackbox_core::utc::rfc3339;
use ackbox_testkit::process::{ServerProcess, free_port};
use serde_json::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");

fn ackbox(endpoint: &str, args: &[&str]) -> Output {
    Command::new(BINARY)
        .args(args)
        .arg("--endpoint")
        .arg(endpoint)
        .env("ACKBOX_LOG", "warn")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .output()
        .expect("the ackbox binary runs")
}

fn ackbox_signed(endpoint: &str, (id, secret): (&str, &str), args: &[&str]) -> Output {
    Command::new(BINARY)
        .args(args)
        .arg("--endpoint")
        .arg(endpoint)
        .env("ACKBOX_LOG", "warn")
        .env("AWS_ACCESS_KEY_ID", id)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .output()
        .expect("the ackbox binary runs")
}

fn ok_stdout(output: Output) -> String {
    assert!(
        output.status.success(),
        "command failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn queue_send_receive_and_stats_round_trip() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let endpoint = server.url();

    let url = ok_stdout(ackbox(
        &endpoint,
        &[
            "queue",
            "create",
            "cli-q",
            "--attribute",
            "VisibilityTimeout=7",
            "--tag",
            "team=ops",
        ],
    ));
    assert_eq!(url.trim(), format!("{endpoint}/000000000000/cli-q"));
    let message_id = ok_stdout(ackbox(
        &endpoint,
        &[
            "send",
            "cli-q",
            "hello from the cli",
            "--attribute",
            "kind=greeting",
        ],
    ));
    assert_eq!(
        message_id.trim().len(),
        36,
        "a UUID message id: {message_id}"
    );

    let stats: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["queue", "stats", "cli-q", "--json"],
    )))
    .unwrap();
    assert_eq!(stats["ApproximateNumberOfMessages"], "1");
    assert_eq!(stats["VisibilityTimeout"], "7");

    let shown = ok_stdout(ackbox(
        &endpoint,
        &["receive", "cli-q", "--keep", "--visibility", "0"],
    ));
    assert!(
        shown.contains("\tkind=greeting\t") && shown.trim_end().ends_with("hello from the cli"),
        "receive shows the attributes: {shown}"
    );
    let received: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["receive", "cli-q", "--max", "10", "--json"],
    )))
    .unwrap();
    let messages = received["Messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["Body"], "hello from the cli");
    assert_eq!(
        messages[0]["MessageAttributes"]["kind"]["StringValue"],
        "greeting"
    );

    let stats: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["queue", "stats", "cli-q", "--json"],
    )))
    .unwrap();
    assert_eq!(
        stats["ApproximateNumberOfMessages"], "0",
        "receive deletes by default"
    );
    assert_eq!(stats["ApproximateNumberOfMessagesNotVisible"], "0");

    let listed: Value =
        serde_json::from_str(&ok_stdout(ackbox(&endpoint, &["queue", "list", "--json"]))).unwrap();
    assert_eq!(listed["QueueUrls"].as_array().unwrap().len(), 1);
    let refused = ackbox(&endpoint, &["queue", "purge", "cli-q"]);
    assert!(
        !refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("--yes"),
        "a purge asks for --yes"
    );
    ok_stdout(ackbox(&endpoint, &["queue", "purge", "cli-q", "--yes"]));
    ok_stdout(ackbox(&endpoint, &["queue", "delete", "cli-q"]));

    let missing = ackbox(&endpoint, &["send", "cli-q", "x"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("QueueDoesNotExist"));
    let bad_name = ackbox(&endpoint, &["queue", "create", "bad name"]);
    assert!(!bad_name.status.success());
    assert!(String::from_utf8_lossy(&bad_name.stderr).contains("QueueName"));
    let bad_flag = ackbox(&endpoint, &["receive", "x", "--max", "many"]);
    assert!(!bad_flag.status.success());
    // Limits are the flag's, named as the flag.
    let too_many = ackbox(&endpoint, &["receive", "x", "--max", "11"]);
    let stderr = String::from_utf8_lossy(&too_many.stderr);
    assert!(
        !too_many.status.success() && stderr.contains("--max") && stderr.contains("1..=10"),
        "{stderr}"
    );
    // A broker that is not there is named.
    let nobody = ackbox(
        &format!("http://127.0.0.1:{}", free_port()),
        &["queue", "list"],
    );
    let stderr = String::from_utf8_lossy(&nobody.stderr);
    assert!(
        !nobody.status.success() && stderr.contains("cannot reach the broker at http://127.0.0.1:"),
        "{stderr}"
    );
}

/// `queue create --dlq` makes the dead-letter queue (of the queue's kind)
/// and the redrive policy in one command; `queue list` shows each queue's
/// counts.
#[test]
fn queue_create_makes_its_dead_letter_queue_and_list_shows_counts() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let endpoint = server.url();
    ok_stdout(ackbox(
        &endpoint,
        &[
            "queue",
            "create",
            "work",
            "--dlq",
            "work-dlq",
            "--max-receive",
            "3",
        ],
    ));
    let stats: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["queue", "stats", "work", "--json"],
    )))
    .unwrap();
    let policy: Value = serde_json::from_str(stats["RedrivePolicy"].as_str().unwrap()).unwrap();
    assert_eq!(
        policy,
        serde_json::json!({
            "deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:work-dlq",
            "maxReceiveCount": 3
        })
    );
    ok_stdout(ackbox(
        &endpoint,
        &["queue", "create", "events.fifo", "--dlq", "events-dlq.fifo"],
    ));
    let dlq: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["queue", "stats", "events-dlq.fifo", "--json"],
    )))
    .unwrap();
    assert_eq!(dlq["FifoQueue"], "true");
    for body in ["a", "b"] {
        ok_stdout(ackbox(&endpoint, &["send", "work", body]));
    }
    let listed = ok_stdout(ackbox(&endpoint, &["queue", "list"]));
    let work = listed
        .lines()
        .find(|line| line.starts_with("work "))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        work.contains("2 visible") && work.contains("0 in flight"),
        "{listed}"
    );
    assert_eq!(listed.lines().count(), 4, "{listed}");
}

#[test]
fn fifo_queues_from_the_cli_deduplicate_and_keep_order() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let endpoint = server.url();
    ok_stdout(ackbox(&endpoint, &["queue", "create", "cli.fifo"]));
    let send = |body: &str, dedup: &str| {
        let reply: Value = serde_json::from_str(&ok_stdout(ackbox(
            &endpoint,
            &[
                "send",
                "cli.fifo",
                body,
                "--group-id",
                "g",
                "--dedup-id",
                dedup,
                "--json",
            ],
        )))
        .unwrap();
        reply
    };
    let first = send("one", "1");
    send("two", "2");
    let repeated = send("one again", "1");
    assert_eq!(repeated["MessageId"], first["MessageId"]);
    assert_eq!(repeated["SequenceNumber"], first["SequenceNumber"]);
    let received: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["receive", "cli.fifo", "--max", "10", "--json"],
    )))
    .unwrap();
    let bodies: Vec<&str> = received["Messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["Body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["one", "two"]);
    let no_group = ackbox(&endpoint, &["send", "cli.fifo", "x", "--dedup-id", "3"]);
    assert!(!no_group.status.success());
    assert!(String::from_utf8_lossy(&no_group.stderr).contains("MessageGroupId"));
}

/// `ackbox queue stats q | head -1`: the reader is gone before the answer is
/// written. The command must end quietly and successfully, as Unix tools do,
/// not panic on the broken pipe (exit 101).
#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let endpoint = server.url();
    ok_stdout(ackbox(&endpoint, &["queue", "create", "piped"]));
    for json in [false, true] {
        let mut command = Command::new(BINARY);
        command.args(["queue", "stats", "piped", "--endpoint", &endpoint]);
        if json {
            command.arg("--json");
        }
        let mut child = command
            .env("ACKBOX_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Closes the pipe's only read end before the command has asked the
        // server anything, so its first write meets a broken pipe.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "--json {json}: {:?}, stderr: {stderr}",
            output.status
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn serve_refuses_bad_flags() {
    let data_dir = tempfile::tempdir().unwrap();
    let output = Command::new(BINARY)
        .args(["serve", "--account-id", "12", "--port", "0", "--data-dir"])
        .arg(data_dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("12 digits"));
}

/// Serving a data directory with the other embedded store would hide the
/// messages the first one wrote: `serve` refuses, naming the store to use,
/// and the right store still delivers them.
#[test]
fn serve_refuses_a_data_dir_whose_messages_another_store_wrote() {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &["--store", "log"]);
    ok_stdout(ackbox(&server.url(), &["queue", "create", "switched"]));
    ok_stdout(ackbox(&server.url(), &["send", "switched", "kept"]));
    drop(server);

    let output = Command::new(BINARY)
        .args(["serve", "--port", "0", "--data-dir"])
        .arg(data_dir.path())
        .env("ACKBOX_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "serve started on the log's messages"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("1 standard-queue message(s) written by `--store log`")
            && stderr.contains("ackbox store adopt --into sqlite"),
        "{stderr}"
    );

    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &["--store", "log"]);
    let received: Value = serde_json::from_str(&ok_stdout(ackbox(
        &server.url(),
        &["receive", "switched", "--json", "--keep"],
    )))
    .unwrap();
    assert_eq!(received["Messages"][0]["Body"], "kept");
    drop(server);

    // Or the default store takes the log's messages over, and serves them.
    let adopted = Command::new(BINARY)
        .args(["store", "adopt", "--into", "sqlite", "--data-dir"])
        .arg(data_dir.path())
        .env("ACKBOX_LOG", "warn")
        .output()
        .unwrap();
    assert!(ok_stdout(adopted).contains("moved 1 message(s) of 1 standard queue(s)"));
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &[]);
    let received: Value = serde_json::from_str(&ok_stdout(ackbox(
        &server.url(),
        &["receive", "switched", "--json"],
    )))
    .unwrap();
    assert_eq!(received["Messages"][0]["Body"], "kept");
}

#[test]
fn serve_refuses_a_data_dir_another_server_holds_until_it_is_gone() {
    // Two servers on one directory would each keep part of what they
    // acknowledged where the other cannot see it.
    let data_dir = tempfile::tempdir().unwrap();
    let first = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    ok_stdout(ackbox(&first.url(), &["queue", "create", "held"]));
    ok_stdout(ackbox(&first.url(), &["send", "held", "kept"]));
    for store in ["sqlite", "log"] {
        let mut second = Command::new(BINARY)
            .args(["serve", "--port", "0", "--store", store, "--data-dir"])
            .arg(data_dir.path())
            .env("ACKBOX_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            if let Some(status) = second.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = second.kill();
                panic!("a second server started on a held directory (--store {store})");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(!status.success());
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut stderr).unwrap();
        let expected = format!(
            "{} is in use by another ackbox (pid {})",
            data_dir.path().display(),
            first.pid()
        );
        assert!(stderr.contains(&expected), "{stderr}");
    }
    // The first one never noticed.
    ok_stdout(ackbox(&first.url(), &["send", "held", "also kept"]));
    // A killed holder lets go with its process.
    first.kill9();
    let port = free_port();
    let second = ServerProcess::start(BINARY.as_ref(), data_dir.path(), port, &[]);
    let received: Value = serde_json::from_str(&ok_stdout(ackbox(
        &second.url(),
        &["receive", "held", "--max", "10", "--json"],
    )))
    .unwrap();
    let mut bodies: Vec<&str> = received["Messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["Body"].as_str().unwrap())
        .collect();
    bodies.sort_unstable();
    assert_eq!(bodies, ["also kept", "kept"]);
}

fn store_check(data_dir: &std::path::Path) -> Output {
    Command::new(BINARY)
        .args(["store", "check", "--data-dir"])
        .arg(data_dir)
        .env("ACKBOX_LOG", "warn")
        .output()
        .unwrap()
}

#[test]
fn damage_in_the_log_stops_serve_and_store_check_names_the_byte() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        BINARY.as_ref(),
        data_dir.path(),
        free_port(),
        &["--store", "log"],
    );
    ok_stdout(ackbox(&server.url(), &["queue", "create", "checked"]));
    for body in ["first", "second", "third"] {
        ok_stdout(ackbox(&server.url(), &["send", "checked", body]));
    }
    let busy = store_check(data_dir.path());
    assert!(!busy.status.success(), "checked a directory a server holds");
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("in use by another ackbox"),
        "{}",
        String::from_utf8_lossy(&busy.stderr)
    );
    server.kill9();

    let sound = ok_stdout(store_check(data_dir.path()));
    assert!(sound.contains("ackbox.sqlite: ok"), "{sound}");
    assert!(sound.contains("3 record(s) readable"), "{sound}");
    assert!(sound.contains("whole"), "{sound}");

    // A byte of the first message's record flips: the two after it are
    // whole, so this is damage, not a torn tail to cut.
    let segment = data_dir.path().join("log").join("00000000000000000001.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    let first_record = 24;
    bytes[first_record + 12] ^= 0xFF;
    std::fs::write(&segment, &bytes).unwrap();
    let refused = Command::new(BINARY)
        .args(["serve", "--port", "0", "--store", "log", "--data-dir"])
        .arg(data_dir.path())
        .env("ACKBOX_LOG", "warn")
        .output()
        .unwrap();
    assert!(!refused.status.success(), "served a damaged log");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!(
            "{} is damaged at byte {first_record}",
            segment.display()
        )) && stderr.contains("ackbox store check"),
        "{stderr}"
    );
    let checked = store_check(data_dir.path());
    assert!(!checked.status.success());
    let report = String::from_utf8_lossy(&checked.stdout);
    assert!(
        report.contains(&format!(
            "0 record(s) readable, {} bytes, DAMAGED at byte {first_record}",
            bytes.len()
        )),
        "{report}"
    );
    assert_eq!(
        std::fs::read(&segment).unwrap(),
        bytes,
        "the check changed nothing"
    );
}

/// `ackbox_worker_threads` from the server's `/metrics`.
async fn worker_threads(server: &ServerProcess) -> usize {
    let reply = ackbox_testkit::client::call_raw(&server.url(), "GET", "/metrics", &[], b"").await;
    let metrics = String::from_utf8(reply.body).unwrap();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("ackbox_worker_threads "))
        .unwrap_or_else(|| panic!("no ackbox_worker_threads in {metrics}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn serve_leaves_the_embedded_writer_a_cpu_unless_told_otherwise() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    assert_eq!(worker_threads(&server).await, cpus.saturating_sub(1).max(1));
    drop(server);
    let server = ServerProcess::start(
        BINARY.as_ref(),
        data_dir.path(),
        free_port(),
        &["--worker-threads", "3"],
    );
    assert_eq!(worker_threads(&server).await, 3);
    drop(server);

    let output = Command::new(BINARY)
        .args([
            "serve",
            "--worker-threads",
            "0",
            "--port",
            "0",
            "--data-dir",
        ])
        .arg(data_dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--worker-threads") && stderr.contains('0'),
        "{stderr}"
    );
}

fn credentials(id: &str, secret: &str) -> String {
    format!(
        "[[keys]]\naccess_key_id = \"{id}\"\nsecret_access_key = \"{secret}\"\n\
         allow_queues = [\"*\"]\nallow_actions = [\"*\"]\n"
    )
}

#[test]
fn the_cli_signs_for_a_secured_broker_and_keys_rotate_on_sighup() {
    const FIRST: (&str, &str) = ("FIRSTKEY", "first-secret-0123456789");
    const SECOND: (&str, &str) = ("SECONDKEY", "second-secret-0123456789");
    let data_dir = tempfile::tempdir().unwrap();
    let file = data_dir.path().join("credentials.toml");
    std::fs::write(&file, credentials(FIRST.0, FIRST.1)).unwrap();
    let server = ServerProcess::start(
        BINARY.as_ref(),
        data_dir.path(),
        free_port(),
        &["--auth", "sigv4", "--credentials", file.to_str().unwrap()],
    );
    let endpoint = server.url();
    let unsigned = ackbox(&endpoint, &["queue", "create", "locked"]);
    assert!(!unsigned.status.success());
    assert!(
        String::from_utf8_lossy(&unsigned.stderr).contains("MissingAuthenticationToken"),
        "{}",
        String::from_utf8_lossy(&unsigned.stderr)
    );
    ok_stdout(ackbox_signed(
        &endpoint,
        FIRST,
        &["queue", "create", "locked"],
    ));
    ok_stdout(ackbox_signed(
        &endpoint,
        FIRST,
        &["send", "locked", "signed"],
    ));
    let wrong = ackbox_signed(
        &endpoint,
        (FIRST.0, "a-wrong-secret-0000000"),
        &["queue", "list"],
    );
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("SignatureDoesNotMatch"));

    // Rotation: the new key is in force after SIGHUP, the old one is not.
    std::fs::write(&file, credentials(SECOND.0, SECOND.1)).unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let output = ackbox_signed(&endpoint, SECOND, &["receive", "locked", "--json"]);
        if output.status.success() {
            let received: Value = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(received["Messages"][0]["Body"], "signed");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new key never took effect"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let old = ackbox_signed(&endpoint, FIRST, &["queue", "list"]);
    assert!(String::from_utf8_lossy(&old.stderr).contains("InvalidClientTokenId"));
    // A broken file is refused; the keys in force stay.
    std::fs::write(&file, "this is [not toml").unwrap();
    Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    ok_stdout(ackbox_signed(&endpoint, SECOND, &["queue", "list"]));
}

#[test]
fn serve_refuses_to_start_open_when_auth_is_required_or_half_configured() {
    let data_dir = tempfile::tempdir().unwrap();
    let serve = |args: &[&str]| {
        Command::new(BINARY)
            .args(["serve", "--port", "0", "--data-dir"])
            .arg(data_dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let file = data_dir.path().join("credentials.toml");
    std::fs::write(
        &file,
        "[[keys]]\naccess_key_id = \"A\"\nsecret_access_key = \"short\"\n",
    )
    .unwrap();
    for (args, expected) in [
        (
            vec!["--require-auth"],
            "refusing to start without --auth sigv4",
        ),
        (vec!["--auth", "sigv4"], "--auth sigv4 needs --credentials"),
        (
            vec!["--credentials", file.to_str().unwrap()],
            "--auth is open; add --auth sigv4",
        ),
        (
            vec!["--auth", "sigv4", "--credentials", file.to_str().unwrap()],
            "at least 16 characters",
        ),
        (
            vec!["--request-timeout-secs", "5"],
            "--request-timeout-secs must be at least 21",
        ),
        (vec!["--tls-cert", "/nonexistent.pem"], "--tls-key"),
    ] {
        let output = serve(&args);
        assert!(!output.status.success(), "{args:?} started");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// `ackbox serve args…` logging at info.
fn serve_command(args: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command
        .arg("serve")
        .args(args)
        .env("ACKBOX_LOG", "info")
        .env_remove("ACKBOX_DATA_DIR")
        .env_remove("STATE_DIRECTORY");
    command
}

/// What `ackbox serve args…` writes to stderr up to its "ackbox is ready"
/// line (within 30 s), after which it is stopped.
fn serve_until_ready(args: &[&str]) -> Vec<String> {
    until_ready(serve_command(args))
}

/// What `command` (a serve) writes to stderr up to its "ackbox is ready"
/// line (within 30 s), after which it is stopped.
fn until_ready(command: Command) -> Vec<String> {
    let mut server = LoggingServer::spawn(command);
    server.said_until(|line| line.contains("ackbox is ready"))
}

/// A serve whose stderr is read line by line; killed when dropped.
struct LoggingServer {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl LoggingServer {
    fn spawn(mut command: Command) -> Self {
        use std::io::{BufRead, BufReader};
        let mut child = command
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The lines said until (and with) the first that `last` picks, or
    /// until 30 s pass without a line.
    fn said_until(&mut self, last: impl Fn(&str) -> bool) -> Vec<String> {
        let mut said = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(std::time::Duration::from_secs(30)) {
            let done = last(&line);
            said.push(line);
            if done {
                break;
            }
        }
        said
    }
}

impl Drop for LoggingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every request leaves an access-log line by default — what was asked,
/// of which queue, how it ended and how long it took — and
/// `ACKBOX_LOG=info,access=off` silences it alone.
#[test]
fn every_request_is_in_the_access_log_unless_it_is_turned_off() {
    for (filter, logged) in [(None, true), (Some("info,access=off"), false)] {
        let data_dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut command = serve_command(&["--log-format", "json", "--port", &port.to_string()]);
        command
            .arg("--data-dir")
            .arg(data_dir.path())
            .env_remove("ACKBOX_LOG");
        if let Some(filter) = filter {
            command.env("ACKBOX_LOG", filter);
        }
        let mut server = LoggingServer::spawn(command);
        let ready = server.said_until(|line| line.contains("ackbox is ready"));
        assert!(
            ready
                .last()
                .is_some_and(|line| line.contains("ackbox is ready")),
            "{ready:#?}"
        );
        let endpoint = format!("http://127.0.0.1:{port}");
        ok_stdout(ackbox(&endpoint, &["queue", "create", "orders"]));
        ok_stdout(ackbox(&endpoint, &["send", "orders", "one"]));
        let access = |line: &str| {
            let entry: Value = serde_json::from_str(line).unwrap();
            (entry["target"] == "access").then_some(entry)
        };
        if logged {
            let said = server.said_until(|line| {
                access(line).is_some_and(|entry| entry["span"]["action"] == "SendMessage")
            });
            let sent = access(said.last().unwrap())
                .unwrap_or_else(|| panic!("no access line for the send: {said:#?}"));
            assert_eq!(sent["status"], 200, "{sent}");
            assert_eq!(sent["outcome"], "ok", "{sent}");
            assert_eq!(sent["span"]["queue"], "orders", "{sent}");
            assert!(sent["duration_ms"].as_f64().is_some(), "{sent}");
            assert!(sent["span"]["request_id"].as_str().is_some(), "{sent}");
        } else {
            // Anything the server still says within a moment is not an
            // access line.
            while let Ok(line) = server
                .lines
                .recv_timeout(std::time::Duration::from_millis(500))
            {
                assert!(access(&line).is_none(), "{line}");
            }
        }
    }
}

#[test]
fn serve_warns_loudly_when_exposed_without_authentication() {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let data_dir_arg = data_dir.path().to_str().unwrap();
    let said = serve_until_ready(&[
        "--bind",
        "0.0.0.0",
        "--port",
        &port,
        "--data-dir",
        data_dir_arg,
    ]);
    assert!(
        said.last()
            .is_some_and(|line| line.contains("ackbox is ready")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|line| line.contains("WITHOUT AUTHENTICATION")),
        "no warning before the broker was ready: {said:?}"
    );
}

/// A supervisor may stop (SIGTERM) or reload (SIGHUP) a server that has
/// just come up: while it still applies its `--config`, the signals must
/// already be caught — their default action would kill it.
#[test]
fn signals_sent_while_serve_applies_its_config_are_kept_for_a_clean_stop() {
    let data_dir = tempfile::tempdir().unwrap();
    let config = data_dir.path().join("ackbox.toml");
    // Enough queues that applying them takes a while.
    let queues: String = (0..400)
        .map(|index| format!("[[queue]]\nname = \"predefined-{index}\"\n"))
        .collect();
    std::fs::write(&config, queues).unwrap();
    let mut server = Command::new(BINARY)
        .args(["serve", "--port", "0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(data_dir.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The store opens after the signals are caught, and the queues are
    // made after it opens.
    let store = data_dir.path().join("ackbox.sqlite");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !store.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for signal in ["-HUP", "-TERM"] {
        let sent = Command::new("kill")
            .arg(signal)
            .arg(server.id().to_string())
            .status()
            .unwrap();
        assert!(sent.success());
    }
    let status = server.wait().unwrap();
    assert!(
        status.success(),
        "serve did not stop cleanly after SIGHUP and SIGTERM during its start: {status}"
    );
}

#[test]
fn config_file_predefines_queues_idempotently() {
    let data_dir = tempfile::tempdir().unwrap();
    let config = data_dir.path().join("ackbox.toml");
    std::fs::write(
        &config,
        "[[queue]]\nname = \"orders\"\nattributes = { VisibilityTimeout = 60, DelaySeconds = \"2\" }\ntags = { team = \"payments\" }\n",
    )
    .unwrap();
    let port = free_port();
    let config_arg = config.to_str().unwrap();
    for _ in 0..2 {
        let server = ServerProcess::start(
            BINARY.as_ref(),
            data_dir.path(),
            port,
            &["--config", config_arg],
        );
        let stats: Value = serde_json::from_str(&ok_stdout(ackbox(
            &server.url(),
            &["queue", "stats", "orders", "--json"],
        )))
        .unwrap();
        assert_eq!(stats["VisibilityTimeout"], "60");
        assert_eq!(stats["DelaySeconds"], "2");
        assert!(server.terminate());
    }
    std::fs::write(
        &config,
        "[[queue]]\nname = \"orders\"\nattributes = { VisibilityTimeout = 90 }\n",
    )
    .unwrap();
    let server = ServerProcess::start(
        BINARY.as_ref(),
        data_dir.path(),
        port,
        &["--config", config_arg],
    );
    let stats: Value = serde_json::from_str(&ok_stdout(ackbox(
        &server.url(),
        &["queue", "stats", "orders", "--json"],
    )))
    .unwrap();
    assert_eq!(
        stats["VisibilityTimeout"], "90",
        "a changed configuration updates the queue"
    );
}

/// A configuration file as people write it: a `RedrivePolicy` as a TOML
/// table, a `.fifo` queue without `FifoQueue`; and one with a mistake in
/// its last queue creates none of them and says which queue and why — as
/// a JSON line under `--log-format json`.
#[test]
fn a_config_file_takes_policies_as_tables_infers_fifo_and_is_checked_whole_first() {
    let data_dir = tempfile::tempdir().unwrap();
    let config = data_dir.path().join("ackbox.toml");
    std::fs::write(
        &config,
        r#"
[[queue]]
name = "orders-dlq"

[[queue]]
name = "orders"
attributes = { RedrivePolicy = { deadLetterTargetArn = "arn:aws:sqs:us-east-1:000000000000:orders-dlq", maxReceiveCount = 5 } }

[[queue]]
name = "events.fifo"
"#,
    )
    .unwrap();
    let port = free_port();
    let server = ServerProcess::start(
        BINARY.as_ref(),
        data_dir.path(),
        port,
        &["--config", config.to_str().unwrap()],
    );
    let orders: Value = serde_json::from_str(&ok_stdout(ackbox(
        &server.url(),
        &["queue", "stats", "orders", "--json"],
    )))
    .unwrap();
    let policy: Value = serde_json::from_str(orders["RedrivePolicy"].as_str().unwrap()).unwrap();
    assert_eq!(policy["maxReceiveCount"], 5);
    let events: Value = serde_json::from_str(&ok_stdout(ackbox(
        &server.url(),
        &["queue", "stats", "events.fifo", "--json"],
    )))
    .unwrap();
    assert_eq!(events["FifoQueue"], "true");
    drop(server);

    let other = tempfile::tempdir().unwrap();
    let bad = other.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[queue]]\nname = \"first\"\n\n[[queue]]\nname = \"second\"\nattributes = { VisibilityTimeout = 99999 }\n",
    )
    .unwrap();
    let output = Command::new(BINARY)
        .args(["serve", "--log-format", "json", "--port", "0", "--config"])
        .arg(&bad)
        .arg("--data-dir")
        .arg(other.path())
        .env("ACKBOX_LOG", "warn")
        .output()
        .unwrap();
    assert!(!output.status.success(), "a bad configuration stops serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last: Value = serde_json::from_str(stderr.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("the error is a JSON line: {stderr}"));
    let error = last["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("\"second\"") && error.contains("VisibilityTimeout"),
        "{last}"
    );
    let server = ServerProcess::start(BINARY.as_ref(), other.path(), free_port(), &[]);
    assert_eq!(
        ok_stdout(ackbox(&server.url(), &["queue", "list"])).trim(),
        "",
        "nothing of the bad configuration was created"
    );
}

/// Without `--data-dir`, a server started in `/` (a service without a
/// working directory) refuses to write its queues there, naming the flag;
/// under systemd it keeps them in the unit's `StateDirectory=`.
#[test]
fn serve_never_keeps_its_queues_in_the_root_directory_and_uses_systemd_s_state_directory() {
    let existed = std::path::Path::new("/ackbox-data").exists();
    let mut refused = serve_command(&["--port", "0"]);
    refused.current_dir("/");
    let mut refused = LoggingServer::spawn(refused);
    let said = refused.said_until(|line| line.contains("ackbox is ready"));
    // Its stderr closed without a ready line: it is exiting, if not gone.
    let exited = (!said.iter().any(|line| line.contains("ackbox is ready")))
        .then(|| refused.child.wait().unwrap());
    drop(refused);
    if !existed {
        // What a server that should have refused made, gone with it.
        let _ = std::fs::remove_dir_all("/ackbox-data");
    }
    assert!(exited.is_some_and(|status| !status.success()), "{said:#?}");
    let said = said.concat();
    assert!(
        said.contains("--data-dir") && said.contains("StateDirectory"),
        "{said}"
    );

    let state = tempfile::tempdir().unwrap();
    let mut under_systemd = serve_command(&["--port", "0"]);
    under_systemd
        .current_dir("/")
        .env("STATE_DIRECTORY", state.path());
    let said = until_ready(under_systemd);
    assert!(
        said.last()
            .is_some_and(|line| line.contains("ackbox is ready")),
        "{said:?}"
    );
    assert!(state.path().join("ackbox.sqlite").exists(), "{said:?}");
}

/// `deploy/ackbox.service` started as systemd would start it — its
/// `ExecStart`, its `Environment=`, `$STATE_DIRECTORY` for
/// `StateDirectory=`, in `/` — with `deploy/ackbox.toml` as its
/// configuration: every queue of the example is made as the file says.
#[test]
fn the_example_systemd_unit_and_configuration_start_a_server() {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let unit = std::fs::read_to_string(deploy.join("ackbox.service")).unwrap();
    let directive = |name: &str| {
        unit.lines()
            .filter_map(|line| line.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(directive("StateDirectory"), ["ackbox"]);
    // systemd's own reading: every directive known, the binary runnable.
    let checked = tempfile::tempdir().unwrap();
    let checked_unit = checked.path().join("ackbox.service");
    std::fs::write(&checked_unit, unit.replace("/usr/local/bin/ackbox", BINARY)).unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&checked_unit)
        .output()
        .expect("systemd-analyze (Debian's systemd package) runs");
    assert!(
        verify.status.success() && verify.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let exec = directive("ExecStart").concat();
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/ackbox"));
    let config = deploy.join("ackbox.toml");
    let args: Vec<String> = words
        .map(|word| match word {
            "/etc/ackbox/ackbox.toml" => config.to_str().unwrap().to_owned(),
            other => other.to_owned(),
        })
        .collect();
    let state = tempfile::tempdir().unwrap();
    let mut command = Command::new(BINARY);
    command
        .args(&args)
        .current_dir("/")
        .env_remove("ACKBOX_DATA_DIR")
        .env("STATE_DIRECTORY", state.path())
        .env("ACKBOX_LOG", "info");
    for setting in directive("Environment") {
        let (name, value) = setting.split_once('=').unwrap();
        command.env(name, value);
    }
    let port = free_port();
    command.env("ACKBOX_PORT", port.to_string());
    let said = until_ready(command);
    assert!(
        said.last()
            .is_some_and(|line| line.contains("ackbox is ready")),
        "{said:#?}"
    );
    for line in &said {
        serde_json::from_str::<Value>(line)
            .unwrap_or_else(|_| panic!("the unit asks for JSON lines: {line}"));
    }
    // The server was stopped; the store it left is read by a new one.
    let server = ServerProcess::start(BINARY.as_ref(), state.path(), free_port(), &[]);
    let orders: Value = serde_json::from_str(&ok_stdout(ackbox(
        &server.url(),
        &["queue", "stats", "orders", "--json"],
    )))
    .unwrap();
    let policy: Value = serde_json::from_str(orders["RedrivePolicy"].as_str().unwrap()).unwrap();
    assert_eq!(policy["maxReceiveCount"], 5);
    let events: Value = serde_json::from_str(&ok_stdout(ackbox(
        &server.url(),
        &["queue", "stats", "customer-events.fifo", "--json"],
    )))
    .unwrap();
    assert_eq!(events["DeduplicationScope"], "messageGroup");
}

/// Logs a file or a collector can read: no colour codes when stderr is not
/// a terminal, addresses and modes as people write them (not Rust's debug
/// form), JSON lines whose fields are plain values. And the configuration
/// is applied before the API serves: no client finds a queue it defines
/// missing.
#[test]
fn serve_logs_plain_values_and_serves_only_once_configured() {
    let data_dir = tempfile::tempdir().unwrap();
    let config = data_dir.path().join("ackbox.toml");
    std::fs::write(&config, "[[queue]]\nname = \"orders\"\n").unwrap();
    let data_dir_arg = data_dir.path().to_str().unwrap();
    let config_arg = config.to_str().unwrap();
    let run = |format: &str| {
        serve_until_ready(&[
            "--log-format",
            format,
            "--port",
            "0",
            "--config",
            config_arg,
            "--data-dir",
            data_dir_arg,
        ])
    };
    let human = run("human");
    let position = |said: &[String], what: &str| {
        said.iter()
            .position(|line| line.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {said:#?}"))
    };
    assert!(
        position(&human, "queue defined by configuration")
            < position(&human, "serving the SQS API"),
        "served before the configuration was applied: {human:#?}"
    );
    for line in &human {
        assert!(!line.contains('\u{1b}'), "colour codes in a pipe: {line:?}");
    }
    let serving = &human[position(&human, "serving the SQS API")];
    assert!(
        serving.contains("address=127.0.0.1:") && !serving.contains("Some("),
        "{serving}"
    );
    let ready = &human[position(&human, "ackbox is ready")];
    assert!(
        ready.contains("durability=fsync") && !ready.contains("Fsync"),
        "{ready}"
    );
    let json = run("json");
    let serving = &json[position(&json, "serving the SQS API")];
    for line in &json {
        let entry: Value =
            serde_json::from_str(line).unwrap_or_else(|_| panic!("not a JSON line: {line}"));
        assert!(entry.get("spans").is_none(), "{line}");
    }
    let entry: Value = serde_json::from_str(serving).unwrap();
    assert!(
        entry["address"]
            .as_str()
            .is_some_and(|address| address.starts_with("127.0.0.1:")),
        "{serving}"
    );
}

/// Help says what a command does and how: every step of a redrive, and a
/// command's own flags apart from how to reach the broker.
#[test]
fn help_lists_every_redrive_step_and_keeps_connection_flags_apart() {
    let help = |args: &[&str]| {
        let output = Command::new(BINARY).args(args).output().unwrap();
        assert!(output.status.success(), "{args:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let redrive = help(&["redrive", "--help"]);
    for step in ["start", "status", "history", "resume", "cancel"] {
        assert!(
            redrive
                .lines()
                .any(|line| line.trim_start().starts_with(&format!("{step} "))),
            "{step} missing from {redrive}"
        );
    }
    let start = help(&["redrive", "start", "-h"]);
    let (own, connection) = start
        .split_once("\nConnection:\n")
        .unwrap_or_else(|| panic!("no Connection section in {start}"));
    for flag in [
        "--source",
        "--dry-run",
        "--class",
        "--max-messages",
        "--sample",
    ] {
        assert!(
            own.contains(flag),
            "{flag} not among the command's own: {start}"
        );
    }
    for flag in ["--endpoint", "--access-key-id", "--region"] {
        assert!(
            connection.contains(flag) && !own.contains(flag),
            "{flag} not under Connection: {start}"
        );
    }
}

/// A dry run counts what the task would move: no more than
/// `--max-messages`, and no more than `--sample` before it pauses.
#[test]
fn a_dry_run_counts_no_more_than_the_task_would_move() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let endpoint = server.url();
    ok_stdout(ackbox(
        &endpoint,
        &["queue", "create", "jobs", "--dlq", "jobs-dlq"],
    ));
    for body in ["one", "two", "three"] {
        ok_stdout(ackbox(&endpoint, &["send", "jobs-dlq", body]));
    }
    let moves = |limits: &[&str]| -> Value {
        let mut args = vec![
            "redrive",
            "start",
            "--source",
            "jobs-dlq",
            "--dry-run",
            "--json",
        ];
        args.extend_from_slice(limits);
        let reply: Value = serde_json::from_str(&ok_stdout(ackbox(&endpoint, &args))).unwrap();
        reply["ApproximateNumberOfMessagesToMove"].clone()
    };
    assert_eq!(moves(&[]), 3);
    assert_eq!(moves(&["--max-messages", "2"]), 2);
    assert_eq!(moves(&["--max-messages", "5"]), 3);
    assert_eq!(moves(&["--sample", "1"]), 1);
    assert_eq!(moves(&["--sample", "2", "--max-messages", "1"]), 1);
    let human = ok_stdout(ackbox(
        &endpoint,
        &[
            "redrive",
            "start",
            "--source",
            "jobs-dlq",
            "--dry-run",
            "--sample",
            "2",
        ],
    ));
    assert!(
        human.contains("would move 2 of these") && human.contains("then pause for review"),
        "{human}"
    );
}

#[test]
fn dead_letter_queues_can_be_inspected_and_redriven_from_the_cli() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let endpoint = server.url();
    ok_stdout(ackbox(&endpoint, &["queue", "create", "dlq"]));
    let policy = r#"RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}"#;
    ok_stdout(ackbox(
        &endpoint,
        &["queue", "create", "jobs", "--attribute", policy],
    ));
    ok_stdout(ackbox(&endpoint, &["send", "jobs", "poison pill"]));
    // One receive is allowed (and released at once); the next moves it.
    ok_stdout(ackbox(
        &endpoint,
        &["receive", "jobs", "--visibility", "0", "--keep"],
    ));
    let second: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["receive", "jobs", "--json"],
    )))
    .unwrap();
    assert!(second["Messages"].as_array().unwrap().is_empty());

    let peeked: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["dlq", "peek", "dlq", "--json"],
    )))
    .unwrap();
    let messages = peeked["Messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["Body"], "poison pill");
    assert_eq!(
        messages[0]["Attributes"]["DeadLetterQueueSourceArn"],
        "arn:aws:sqs:us-east-1:000000000000:jobs"
    );
    let summary: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["dlq", "summary", "dlq", "--json"],
    )))
    .unwrap();
    assert_eq!(summary["Total"], 1);
    assert_eq!(summary["Classes"][0]["Class"], "", "no reason was recorded");
    assert_eq!(summary["Classes"][0]["Count"], 1);
    let human = ok_stdout(ackbox(&endpoint, &["dlq", "summary", "dlq"]));
    assert!(human.contains("dlq: 1 messages"), "{human}");
    // People read times, not epoch milliseconds.
    let oldest = summary["Classes"][0]["OldestSentTimestamp"]
        .as_i64()
        .unwrap();
    assert!(
        human.contains(&format!("sent {} .. {}", rfc3339(oldest), rfc3339(oldest))),
        "{human}"
    );
    let sent: i64 = messages[0]["Attributes"]["SentTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let human = ok_stdout(ackbox(&endpoint, &["dlq", "peek", "dlq"]));
    assert!(
        human.contains(&format!("sent {}", rfc3339(sent))),
        "{human}"
    );

    let dry_run = ok_stdout(ackbox(
        &endpoint,
        &["redrive", "start", "--source", "dlq", "--dry-run"],
    ));
    assert!(
        dry_run.contains("nothing moved") && dry_run.contains("(no reason given)"),
        "{dry_run}"
    );
    // A dry run counts what the task would take, with the same filters.
    let dry_run_of = |filters: &[&str]| -> Value {
        let mut args = vec!["redrive", "start", "--source", "dlq", "--dry-run", "--json"];
        args.extend_from_slice(filters);
        serde_json::from_str(&ok_stdout(ackbox(&endpoint, &args))).unwrap()
    };
    assert_eq!(dry_run_of(&[])["ApproximateNumberOfMessagesToMove"], 1);
    assert_eq!(
        dry_run_of(&["--class", "NoSuchClass"])["ApproximateNumberOfMessagesToMove"],
        0
    );
    assert_eq!(
        dry_run_of(&["--older-than", "1h"])["ApproximateNumberOfMessagesToMove"],
        0,
        "the message is seconds old"
    );
    let refused = ackbox(
        &endpoint,
        &[
            "redrive",
            "start",
            "--source",
            "dlq",
            "--dry-run",
            "--max-messages",
            "0",
        ],
    );
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("--max-messages"), "{message}");
    let still: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["queue", "stats", "dlq", "--json"],
    )))
    .unwrap();
    assert_eq!(
        still["ApproximateNumberOfMessages"], "1",
        "a dry run moves nothing"
    );

    let filtered: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &[
            "redrive",
            "start",
            "--source",
            "dlq",
            "--class",
            "NoSuchClass",
            "--older-than",
            "1h",
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(filtered["Status"], "COMPLETED");
    assert_eq!(
        filtered["ApproximateNumberOfMessagesMoved"], 0,
        "the filters match nothing"
    );

    let finished: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["redrive", "start", "--source", "dlq", "--json"],
    )))
    .unwrap();
    assert_eq!(finished["Status"], "COMPLETED");
    assert_eq!(finished["ApproximateNumberOfMessagesMoved"], 1);
    let stats: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["queue", "stats", "jobs", "--json"],
    )))
    .unwrap();
    assert_eq!(
        stats["ApproximateNumberOfMessages"], "1",
        "the message is home again"
    );
    let status: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["redrive", "status", "--source", "dlq", "--json"],
    )))
    .unwrap();
    assert_eq!(status["Results"][0]["Status"], "COMPLETED");

    let history: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["redrive", "history", "--json"],
    )))
    .unwrap();
    let audit = &history["Tasks"][0];
    assert_eq!(audit["RequestedBy"], "anonymous");
    assert_eq!(audit["Status"], "COMPLETED");
    assert_eq!(audit["ApproximateNumberOfMessagesMoved"], 1);
    assert!(audit["FinishedTimestamp"].as_i64().is_some());
    let human = ok_stdout(ackbox(
        &endpoint,
        &["redrive", "history", "--source", "dlq"],
    ));
    assert!(
        human.contains("by anonymous") && human.contains("COMPLETED"),
        "{human}"
    );
    for at in ["StartedTimestamp", "FinishedTimestamp"] {
        let at = rfc3339(audit[at].as_i64().unwrap());
        assert!(human.contains(&at), "{at} in {human}");
    }
    let cancel = ackbox(
        &endpoint,
        &["redrive", "cancel", "10f57157-fc38-4da9-a113-4de7e12d05aa"],
    );
    assert!(!cancel.status.success());
    assert!(String::from_utf8_lossy(&cancel.stderr).contains("ResourceNotFoundException"));
    let garbled = ackbox(&endpoint, &["redrive", "cancel", "no-such-task"]);
    assert!(!garbled.status.success());
    assert!(String::from_utf8_lossy(&garbled.stderr).contains("TaskHandle is invalid"));
    let not_a_dlq = ackbox(&endpoint, &["redrive", "start", "--source", "jobs"]);
    assert!(!not_a_dlq.status.success());
    assert!(String::from_utf8_lossy(&not_a_dlq.stderr).contains("Dead Letter Queue"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_speaks_https_to_a_broker_it_is_told_to_trust() {
    const KEY: (&str, &str) = ("TLSCLI", "tls-cli-secret-0123456789");
    let server = ackbox_testkit::server::TestServer::builder()
        .tls()
        .credentials(&credentials(KEY.0, KEY.1))
        .start()
        .await;
    let endpoint = server.url();
    let authority = server.data_dir().join("authority.pem");
    std::fs::write(&authority, server.certificate_authority().unwrap()).unwrap();
    let trusted = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--ca-cert", authority.to_str().unwrap()]);
        ackbox_signed(&endpoint, KEY, &all)
    };
    let url = ok_stdout(trusted(&["queue", "create", "tls-q"]));
    assert!(url.trim().starts_with("https://"), "{url}");
    ok_stdout(trusted(&["send", "tls-q", "over tls"]));
    let received: Value =
        serde_json::from_str(&ok_stdout(trusted(&["receive", "tls-q", "--json"]))).unwrap();
    assert_eq!(received["Messages"][0]["Body"], "over tls");
    let untrusted = ackbox_signed(&endpoint, KEY, &["queue", "list"]);
    assert!(
        !untrusted.status.success(),
        "a certificate no trusted authority signed is refused"
    );
}

/// `ackbox replay`: a topic's archive delivered again into a queue, with a
/// filter and raw, followed to its end; the audit log; bad input refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_archive_is_replayed_from_the_cli() {
    let server = ackbox_testkit::server::TestServer::builder().start().await;
    let endpoint = server.url();
    ackbox_testkit::client::archived_topic(
        &server.sns_client(),
        "orders",
        3,
        &[("o-1", "placed"), ("o-2", "cancelled"), ("o-3", "placed")],
    )
    .await;
    ok_stdout(ackbox(&endpoint, &["queue", "create", "rebuild"]));
    let report = ok_stdout(ackbox(
        &endpoint,
        &[
            "replay",
            "start",
            "--topic",
            "orders",
            "--to",
            "rebuild",
            "--from",
            "1h",
            "--filter",
            r#"{"kind":["placed"]}"#,
            "--raw",
        ],
    ));
    assert!(
        report.starts_with("COMPLETED  replayed 2 (skipped 1)"),
        "{report}"
    );
    let received: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["receive", "rebuild", "--max", "10", "--json"],
    )))
    .unwrap();
    let mut bodies: Vec<&str> = received["Messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["Body"].as_str().unwrap())
        .collect();
    bodies.sort_unstable();
    assert_eq!(bodies, ["o-1", "o-3"]);

    let listed: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["replay", "list", "--topic", "orders", "--json"],
    )))
    .unwrap();
    let replay = &listed["Replays"][0];
    assert_eq!(replay["Status"], "COMPLETED");
    assert_eq!(replay["RequestedBy"], "anonymous");
    assert_eq!(replay["FilterPolicy"], r#"{"kind":["placed"]}"#);

    for (args, names) in [
        (
            vec![
                "replay", "start", "--topic", "nope", "--to", "rebuild", "--from", "1h",
            ],
            "no topic is named \"nope\"",
        ),
        (
            vec![
                "replay",
                "start",
                "--topic",
                "orders",
                "--to",
                "rebuild",
                "--from",
                "yesterday",
            ],
            "RFC 3339",
        ),
        (
            vec!["replay", "start", "--topic", "orders", "--from", "1h"],
            "--to",
        ),
    ] {
        let output = ackbox(&endpoint, &args);
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(names), "{args:?}: {stderr}");
    }
}

/// A queue's archive from the CLI: made with `queue create --attribute`,
/// replayed with `replay start --queue`, listed with `replay list --queue`;
/// a replay names one archive.
#[test]
fn a_queue_archive_is_replayed_from_the_cli() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let endpoint = server.url();
    ok_stdout(ackbox(
        &endpoint,
        &[
            "queue",
            "create",
            "orders",
            "--attribute",
            r#"AckBoxArchivePolicy={"MessageRetentionPeriod":"3"}"#,
        ],
    ));
    ok_stdout(ackbox(&endpoint, &["queue", "create", "rebuild"]));
    for body in ["o-1", "o-2"] {
        ok_stdout(ackbox(&endpoint, &["send", "orders", body]));
    }
    // Consumed from the queue, kept in its archive.
    ok_stdout(ackbox(&endpoint, &["receive", "orders", "--max", "10"]));
    let report = ok_stdout(ackbox(
        &endpoint,
        &[
            "replay", "start", "--queue", "orders", "--to", "rebuild", "--from", "1h",
        ],
    ));
    assert!(report.starts_with("COMPLETED  replayed 2"), "{report}");
    let received: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["receive", "rebuild", "--max", "10", "--json"],
    )))
    .unwrap();
    let mut bodies: Vec<&str> = received["Messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["Body"].as_str().unwrap())
        .collect();
    bodies.sort_unstable();
    assert_eq!(bodies, ["o-1", "o-2"]);
    let listed: Value = serde_json::from_str(&ok_stdout(ackbox(
        &endpoint,
        &["replay", "list", "--queue", "orders", "--json"],
    )))
    .unwrap();
    assert_eq!(
        listed["Replays"][0]["SourceArn"],
        "arn:aws:sqs:us-east-1:000000000000:orders"
    );
    let both = ackbox(
        &endpoint,
        &[
            "replay", "start", "--queue", "orders", "--topic", "t", "--to", "rebuild", "--from",
            "1h",
        ],
    );
    assert!(!both.status.success());
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
}

/// The peers of the side-by-side table (README) through their own clients,
/// against the services `.ci/run` starts: each runs every workload without
/// an error, and W2 takes what W1 sent.
#[test]
fn bench_drives_rabbitmq_nats_and_postgresql_side_by_side() {
    let urls: Vec<(&str, Option<String>)> = [
        ("--amqp-url", "ACKBOX_TEST_AMQP_URL"),
        ("--nats-url", "ACKBOX_TEST_NATS_URL"),
        ("--postgres-url", "ACKBOX_TEST_POSTGRES_URL"),
    ]
    .into_iter()
    .map(|(flag, variable)| (flag, std::env::var(variable).ok()))
    .collect();
    if urls.iter().any(|(_, url)| url.is_none()) {
        eprintln!(
            "skipped: ACKBOX_TEST_AMQP_URL, ACKBOX_TEST_NATS_URL and ACKBOX_TEST_POSTGRES_URL \
             are not all set, so the bench's peers are not tested here"
        );
        return;
    }
    let mut args = vec!["bench", "--target", "rabbitmq,nats,postgres"];
    args.extend(SHORT_BENCH);
    for (flag, url) in &urls {
        args.extend([*flag, url.as_deref().unwrap_or_default()]);
    }
    // No ackbox target: the endpoint is never called.
    let output: Value =
        serde_json::from_str(&ok_stdout(ackbox("http://127.0.0.1:9", &args))).unwrap();
    let reports = output["reports"].as_array().unwrap();
    for target in ["rabbitmq", "nats", "postgres"] {
        let ran: Vec<&Value> = reports
            .iter()
            .filter(|report| report["target"] == target)
            .collect();
        assert_short_bench_ran(&ran, target);
    }
}

/// A bench of every workload kept short: 1 s of W1, W2 on what it left, 1 s
/// of W3 at 50 msg/s, 2 producers and 2 consumers.
const SHORT_BENCH: [&str; 11] = [
    "--json",
    "--workload",
    "all",
    "--duration",
    "1",
    "--rate",
    "50",
    "-P",
    "2",
    "-C",
    "2",
];

/// One target's reports of a [`SHORT_BENCH`]: every workload ran without an
/// error, W2 took what W1 sent (each of the two consumers may take one more
/// batch of 10 than that), and W3 sent its 50.
fn assert_short_bench_ran(reports: &[&Value], target: &str) {
    let workloads: Vec<&str> = reports
        .iter()
        .map(|report| report["workload"].as_str().unwrap())
        .collect();
    assert_eq!(workloads, ["W1", "W2", "W3"], "{target}");
    for report in reports {
        assert_eq!(report["errors"], 0, "{report}");
    }
    let (sent, taken) = (
        reports[0]["messages"].as_u64().unwrap(),
        reports[1]["messages"].as_u64().unwrap(),
    );
    assert!(sent > 0, "{target}: W1 sent nothing");
    assert!(
        (sent..=sent + 20).contains(&taken),
        "{target}: W1 sent {sent}, W2 took {taken}"
    );
    assert_eq!(
        reports[2]["messages"], 50,
        "{target}: W3 sent 50 a second for 1 s"
    );
    // Its rate is the sends': not diluted by the consumers' last polls
    // (which halved it), never above what was offered.
    let rate = reports[2]["messages_per_second"].as_f64().unwrap();
    assert!(
        (35.0..=52.5).contains(&rate),
        "{target}: W3 offered 50 msg/s and reports {rate}"
    );
}

#[test]
fn bench_fans_out_to_each_subscriber_count_beside_a_send_and_leaves_nothing() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let endpoint = server.url();
    ok_stdout(ackbox(&endpoint, &["queue", "create", "bystander"]));
    let said = ok_stdout(ackbox(
        &endpoint,
        &[
            "bench",
            "--workload",
            "fanout",
            "--subscribers",
            "1,3",
            "--duration",
            "1",
            "-P",
            "2",
        ],
    ));
    assert!(!said.contains("errors, first"), "{said}");
    // "median send 1234 msg/s", "median publish to   3 queue(s)          :  987 msg/s = …"
    let median = |prefix: &str| -> (f64, &str) {
        let line = said
            .lines()
            .find(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {said}"));
        let rate = line[prefix.len()..]
            .trim_start_matches([' ', ':'])
            .split_whitespace()
            .next()
            .and_then(|rate| rate.parse().ok())
            .unwrap_or_else(|| panic!("no rate in {line:?}"));
        (rate, line)
    };
    assert!(median("median send").0 > 0.0, "{said}");
    for subscribers in [1, 3] {
        let (rate, line) = median(&format!("median publish to {subscribers:>3} queue(s)"));
        assert!(rate > 0.0, "{line}");
        assert!(
            line.contains("× send") && line.contains("copies/s"),
            "{line}"
        );
    }
    // The topics and queues it measured with are gone.
    let queues = ok_stdout(ackbox(&endpoint, &["queue", "list"]));
    assert_eq!(queues.lines().count(), 1, "{queues}");
    let (status, topics) =
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(ackbox_testkit::client::call_json(
                &endpoint,
                "SNS_20100331.ListTopics",
                &serde_json::json!({}),
            ));
    assert_eq!(status, 200, "{topics}");
    assert_eq!(topics["Topics"], serde_json::json!([]), "{topics}");
}

#[test]
fn bench_measures_every_workload_beside_a_backlog_and_leaves_only_what_it_found() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(BINARY.as_ref(), data_dir.path(), free_port(), &[]);
    let endpoint = server.url();
    ok_stdout(ackbox(&endpoint, &["queue", "create", "bystander"]));
    let pid = server.pid().to_string();
    let mut args = vec!["bench", "--backlog", "300", "--server-pid", &pid];
    args.extend(SHORT_BENCH);
    let output: Value = serde_json::from_str(&ok_stdout(ackbox(&endpoint, &args))).unwrap();
    let reports: Vec<&Value> = output["reports"].as_array().unwrap().iter().collect();
    // W1 and W2 ran on the backlog queue: W2 took from it what W1 added.
    assert_short_bench_ran(&reports, "ackbox");
    for report in &reports {
        assert!(report["server_rss_mib"].as_f64().unwrap() > 1.0, "{report}");
        assert!(
            report["server_cpu_us_per_message"].as_f64().is_some(),
            "{report}"
        );
    }
    // The bench removes the queues it made (the backlog one too).
    let queues = ok_stdout(ackbox(&endpoint, &["queue", "list"]));
    assert_eq!(queues.lines().collect::<Vec<_>>().len(), 1, "{queues}");
    assert!(queues.contains("bystander"), "{queues}");

    let refused = ackbox(
        &endpoint,
        &["bench", "--backlog", "10", "--target", "ackbox,nats"],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--backlog"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
