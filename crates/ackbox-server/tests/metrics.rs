//! `GET /metrics` after real traffic: the counters, gauges and histograms an
//! operator alarms on, in the Prometheus text format.

use std::time::Duration;

use ackbox_testkit::client::{call_json, create_queue, create_topic, subscribe_queue};
use ackbox_testkit::server::TestServer;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn scrape(server: &TestServer) -> String {
    let authority = server.url().trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{head}"
    );
    body.to_owned()
}

/// The value of the sample named `name` whose labels include every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .find(|line| labels.iter().all(|label| line.contains(label)))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

/// Queue `name` whose messages go to the queue `dlq` after one receive:
/// its URL, and the dead-letter queue's ARN.
async fn with_dead_letter_queue(
    client: &aws_sdk_sqs::Client,
    name: &str,
    dlq: &str,
) -> (String, String) {
    let dlq = create_queue(client, dlq).await;
    let dlq_arn = ackbox_testkit::client::queue_arn(client, &dlq).await;
    let url = client
        .create_queue()
        .queue_name(name)
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":1}}"#),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    (url, dlq_arn)
}

/// Sends `body` to `work` (a queue of [`with_dead_letter_queue`]) and
/// receives it twice without a word: the second receive moves it to the
/// dead-letter queue, with no reason given.
async fn dead_letter_unexplained(client: &aws_sdk_sqs::Client, work: &str, body: &str) {
    client
        .send_message()
        .queue_url(work)
        .message_body(body)
        .send()
        .await
        .unwrap();
    for _ in 0..2 {
        client
            .receive_message()
            .queue_url(work)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn metrics_count_what_happened_and_show_queue_depths() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let (url, _) = with_dead_letter_queue(&client, "metrics-work", "metrics-dlq").await;
    for index in 0..3 {
        client
            .send_message()
            .queue_url(&url)
            .message_body(format!("m{index}"))
            .send()
            .await
            .unwrap();
    }
    let received = client
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(2)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    assert_eq!(received.messages().len(), 2);
    // Received once with a zero lease: the next receive moves both to the
    // dead-letter queue and delivers the third message.
    let next = client
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(next.messages()[0].receipt_handle().unwrap())
        .send()
        .await
        .unwrap();
    let bad = client
        .send_message()
        .queue_url(&url)
        .message_body("")
        .send()
        .await;
    assert!(bad.is_err());

    let text = scrape(&server).await;
    let work = "queue=\"metrics-work\"";
    assert_eq!(
        sample(&text, "ackbox_messages_sent_total", &[work]),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "ackbox_messages_received_total", &[work]),
        Some(3.0)
    );
    assert_eq!(
        sample(&text, "ackbox_messages_deleted_total", &[work]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "ackbox_messages_dead_lettered_total", &[work]),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "ackbox_queue_messages", &[work, "state=\"visible\""]),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "ackbox_dead_letter_queue_messages",
            &["queue=\"metrics-dlq\""]
        ),
        Some(2.0)
    );
    assert!(
        sample(
            &text,
            "ackbox_queue_oldest_message_age_seconds",
            &["queue=\"metrics-dlq\""]
        )
        .is_some()
    );
    assert!(
        sample(
            &text,
            "ackbox_request_duration_seconds_count",
            &["action=\"SendMessage\"", "outcome=\"ok\""]
        )
        .is_some_and(|count| count >= 3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "ackbox_request_duration_seconds_count",
            &["action=\"SendMessage\"", "outcome=\"client_error\""]
        ),
        Some(1.0)
    );
    // The embedded store's writer reports its groups and fsyncs; on
    // PostgreSQL the database does both.
    if server.on_embedded_store() {
        assert!(
            sample(&text, "ackbox_store_commit_seconds_count", &[])
                .is_some_and(|count| count > 0.0)
        );
        assert!(
            sample(&text, "ackbox_store_group_commit_jobs_count", &[])
                .is_some_and(|count| count > 0.0)
        );
        assert!(
            sample(&text, "ackbox_store_fsync_seconds_count", &[]).is_some_and(|count| count > 0.0),
            "acknowledged sends were fsync'd: {text}"
        );
    }
    assert!(
        sample(&text, "ackbox_process_resident_memory_bytes", &[]).is_some_and(|bytes| bytes > 1e6)
    );
    assert!(
        sample(&text, "ackbox_open_connections", &[]).is_some_and(|open| open >= 1.0),
        "the scrape's own connection"
    );
}

/// Dead letters by the reason consumers gave, how long consumers take from
/// receive to delete, and the move tasks running or paused on a
/// dead-letter queue: what an operator triages with.
#[tokio::test]
async fn dead_letters_by_class_processing_times_and_move_tasks_are_measured() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let (work, dlq_arn) = with_dead_letter_queue(&client, "classes-work", "classes-dlq").await;
    for index in 0..3 {
        client
            .send_message()
            .queue_url(&work)
            .message_body(format!("m{index}"))
            .send()
            .await
            .unwrap();
    }
    let received = client
        .receive_message()
        .queue_url(&work)
        .max_number_of_messages(10)
        .visibility_timeout(30)
        .send()
        .await
        .unwrap();
    assert_eq!(received.messages().len(), 3);
    // Two are declined for good; the third is worked on for 300 ms and
    // deleted.
    for message in &received.messages()[..2] {
        let (status, _) = call_json(
            &server.url(),
            "AckBox.NackMessage",
            &json!({
                "QueueUrl": work,
                "ReceiptHandle": message.receipt_handle().unwrap(),
                "Permanent": true,
                "Reason": { "Class": "CardDeclined", "Message": "issuer said no" }
            }),
        )
        .await;
        assert_eq!(status, 200);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .delete_message()
        .queue_url(&work)
        .receipt_handle(received.messages()[2].receipt_handle().unwrap())
        .send()
        .await
        .unwrap();
    // A fourth is received and never heard of again: past the limit, it
    // moves with no reason given.
    dead_letter_unexplained(&client, &work, "m3").await;
    // A redrive of one message for review: it pauses after it.
    let (status, answer) = call_json(
        &server.url(),
        "AmazonSQS.StartMessageMoveTask",
        &json!({ "SourceArn": dlq_arn, "AckBoxSample": 1 }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let tasks = client
            .list_message_move_tasks()
            .source_arn(&dlq_arn)
            .send()
            .await
            .unwrap();
        if tasks.results()[0].status() == Some("PAUSED") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{tasks:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let text = scrape(&server).await;
    let source = "queue=\"classes-work\"";
    let by_class = "ackbox_messages_dead_lettered_by_class_total";
    assert_eq!(
        sample(&text, by_class, &[source, "class=\"CardDeclined\""]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, by_class, &[source, "class=\"unreported\""]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "ackbox_messages_dead_lettered_total", &[source]),
        Some(3.0)
    );
    let processing = "ackbox_message_processing_seconds";
    assert_eq!(
        sample(&text, &format!("{processing}_count"), &[source]),
        Some(1.0)
    );
    let took = sample(&text, &format!("{processing}_sum"), &[source]).unwrap();
    assert!((0.3..30.0).contains(&took), "processing took {took} s");
    // Its own buckets, up to the longest lease; not the request latencies'.
    assert_eq!(
        sample(
            &text,
            &format!("{processing}_bucket"),
            &[source, "le=\"43200\""]
        ),
        Some(1.0),
        "{text}"
    );
    let dlq_label = "queue=\"classes-dlq\"";
    assert_eq!(
        sample(
            &text,
            "ackbox_move_tasks",
            &[dlq_label, "status=\"paused\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "ackbox_move_tasks",
            &[dlq_label, "status=\"running\""]
        ),
        Some(0.0)
    );
}

/// A scrape after traffic of every kind: sends, a receive and delete, a
/// dead letter, and publishes delivered, filtered out and undeliverable.
async fn scrape_after_traffic_of_every_kind(server: &TestServer) -> String {
    let (client, sns) = (server.client(), server.sns_client());
    let url = create_queue(&client, "described").await;
    create_queue(&client, "filtered").await;
    let gone = create_queue(&client, "gone").await;
    let topic = create_topic(&sns, "described").await;
    subscribe_queue(&sns, &topic, "described", false).await;
    subscribe_queue(&sns, &topic, "gone", false).await;
    let filtered = subscribe_queue(&sns, &topic, "filtered", true).await;
    sns.set_subscription_attributes()
        .subscription_arn(filtered)
        .attribute_name("FilterPolicy")
        .attribute_value(r#"{"kind":["never sent"]}"#)
        .send()
        .await
        .unwrap();
    client.delete_queue().queue_url(gone).send().await.unwrap();
    sns.publish()
        .topic_arn(&topic)
        .message("m")
        .send()
        .await
        .unwrap();
    let received = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    for message in received.messages() {
        client
            .delete_message()
            .queue_url(&url)
            .receipt_handle(message.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
    }
    let (work, _) = with_dead_letter_queue(&client, "described-work", "described-dlq").await;
    dead_letter_unexplained(&client, &work, "poison").await;

    scrape(server).await
}

/// Series documented in `docs/operations.md` that no traffic of a test's
/// few seconds makes, and why; each is checked where its event is made.
const SERIES_OF_RARE_EVENTS: [(&str, &str); 3] = [
    (
        "ackbox_push_deliveries_total",
        "posts to an http endpoint: aws_sdk/push.rs",
    ),
    (
        "ackbox_store_backstop_checkpoint_seconds",
        "a checkpoint once the WAL holds 32 MiB",
    ),
    (
        "ackbox_postgres_vacuums_total",
        "PostgreSQL's vacuums of its hot tables, every few minutes",
    ),
];

/// Every family the scrape holds has a `# HELP` line and a row in
/// `docs/operations.md`, and after traffic of every kind (sends, a
/// receive and delete, a dead letter, publishes delivered, filtered out
/// and undeliverable) every documented series of this store is there:
/// a series added without either, or documented and never made, fails here.
#[tokio::test]
async fn every_series_is_described_documented_and_made() {
    let server = TestServer::builder().start().await;
    let text = scrape_after_traffic_of_every_kind(&server).await;
    let documented = documented_series();
    let families: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|line| line.split(' ').next())
        .filter(|name| name.starts_with("ackbox_"))
        .collect();
    let on_postgres =
        std::env::var(ackbox_testkit::server::STORE_VARIABLE).as_deref() == Ok("postgres");
    for row in documented
        .lines()
        .filter(|row| row.starts_with("| `ackbox_"))
    {
        let name = row.trim_start_matches("| `").split('`').next().unwrap();
        let of_another_store = if on_postgres {
            row.contains("embedded store only")
        } else {
            row.contains("PostgreSQL store only")
        };
        if of_another_store || SERIES_OF_RARE_EVENTS.iter().any(|(rare, _)| *rare == name) {
            continue;
        }
        assert!(
            families.contains(&name),
            "{name} is documented but not made by traffic of every kind: {text}"
        );
    }
    for family in families {
        assert!(
            text.lines()
                .any(|line| line.starts_with(&format!("# HELP {family} "))),
            "{family} has no # HELP line"
        );
        assert!(
            documented.contains(&format!("`{family}`")),
            "{family} is not in docs/operations.md's table"
        );
    }
}

/// Series that count what may never happen exist before it does: a rate
/// over them is zero, not "no data".
#[tokio::test]
async fn refusals_and_reclaims_are_series_before_their_first_event() {
    let server = TestServer::builder().start().await;
    let text = scrape(&server).await;
    for code in [
        "MissingAuthenticationToken",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "RequestExpired",
        "AccessDenied",
    ] {
        assert_eq!(
            sample(
                &text,
                "ackbox_auth_refusals_total",
                &[&format!("code=\"{code}\"")]
            ),
            Some(0.0),
            "{code}"
        );
    }
    // The embedded store's writer returns free pages; PostgreSQL has none.
    if std::env::var(ackbox_testkit::server::STORE_VARIABLE).as_deref() != Ok("postgres") {
        assert_eq!(
            sample(&text, "ackbox_store_reclaim_seconds_count", &[]),
            Some(0.0),
            "{text}"
        );
    }
}

/// Prometheus's own checker (`promtool`, from `ACKBOX_TEST_PROMTOOL`;
/// `.ci/run` provides it): the alert rules parse as rules and PromQL, and a
/// scrape after traffic of every kind follows the exposition format and
/// Prometheus's naming conventions.
#[tokio::test]
async fn promtool_accepts_the_alert_rules_and_a_scrape() {
    let Ok(promtool) = std::env::var("ACKBOX_TEST_PROMTOOL") else {
        eprintln!("skipped: ACKBOX_TEST_PROMTOOL is not set, so promtool checks nothing here");
        return;
    };
    let rules = std::process::Command::new(&promtool)
        .args(["check", "rules"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/alerts.yml"
        ))
        .output()
        .unwrap();
    assert!(
        rules.status.success(),
        "{}{}",
        String::from_utf8_lossy(&rules.stdout),
        String::from_utf8_lossy(&rules.stderr)
    );

    let server = TestServer::builder().start().await;
    let text = scrape_after_traffic_of_every_kind(&server).await;
    let mut check = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut check.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// A queue's counters exist at zero from its creation: a rate over them is
/// zero, not "no data", before anything happened to it.
#[tokio::test]
async fn a_new_queue_has_every_counter_at_zero() {
    let server = TestServer::builder().start().await;
    create_queue(&server.client(), "untouched").await;
    let text = scrape(&server).await;
    for name in [
        "ackbox_messages_sent_total",
        "ackbox_deduplicated_sends_total",
        "ackbox_messages_received_total",
        "ackbox_messages_redelivered_total",
        "ackbox_messages_deleted_total",
        "ackbox_messages_expired_total",
        "ackbox_messages_dead_lettered_total",
        "ackbox_move_task_messages_moved_total",
    ] {
        assert_eq!(
            sample(&text, name, &["queue=\"untouched\""]),
            Some(0.0),
            "{name} of a new queue"
        );
    }
}

/// The `ackbox_` series an expression reads, histogram suffixes dropped.
fn series_in(expression: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expression;
    while let Some(start) = rest.find("ackbox_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let family = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        names.push(family.to_owned());
        rest = &tail[end..];
    }
    names
}

fn documented_series() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/operations.md"
    ))
    .unwrap()
}

/// `deploy/alerts.yml` read rule by rule (`- alert:` starts one): each has
/// an expression over documented series only, a `page` or `ticket`
/// severity and a summary; a server down, dead-lettering now, a slow fsync
/// and a full disk are alerted on, and dead letters that only sit there
/// make a ticket, never a page.
#[test]
fn the_alert_rules_read_documented_series_and_page_only_for_what_is_urgent() {
    let documented = documented_series();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/alerts.yml"
    ))
    .unwrap();
    let mut rules: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.trim_start().strip_prefix("- alert: ") {
            rules.push((name.trim().to_owned(), String::new()));
        } else if let Some((_, body)) = rules.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    assert!(rules.len() >= 8, "{rules:?}");
    let mut severities = std::collections::BTreeMap::new();
    for (name, body) in &rules {
        let severity = if body.contains("severity: page") {
            "page"
        } else if body.contains("severity: ticket") {
            "ticket"
        } else {
            panic!("{name} has no page or ticket severity: {body}")
        };
        assert!(body.contains("expr:"), "{name} has no expression");
        assert!(body.contains("summary:"), "{name} has no summary");
        for series in series_in(body.split("annotations:").next().unwrap()) {
            assert!(
                documented.contains(&format!("`{series}`")),
                "{name} reads {series}, which the broker does not export (docs/operations.md)"
            );
        }
        severities.insert(name.as_str(), (severity, body.as_str()));
    }
    let rule = |name: &str| {
        *severities
            .get(name)
            .unwrap_or_else(|| panic!("no {name} alert"))
    };
    assert_eq!(rule("AckboxDown").0, "page");
    assert!(rule("AckboxDown").1.contains("up{job=\"ackbox\"} == 0"));
    let (severity, body) = rule("AckboxDeadLettering");
    assert_eq!(severity, "page");
    assert!(
        body.contains("increase(ackbox_messages_dead_lettered_total"),
        "{body}"
    );
    assert!(
        rule("AckboxFsyncSlow")
            .1
            .contains("ackbox_store_fsync_seconds_bucket")
    );
    assert_eq!(rule("AckboxDiskFull").0, "page");
    for (name, (severity, body)) in &severities {
        if body.contains("ackbox_dead_letter_queue_messages") {
            assert_eq!(
                *severity, "ticket",
                "{name}: messages sitting in a dead-letter queue are not an emergency"
            );
        }
    }
}

/// `deploy/grafana-dashboard.json`: instance and queue variables every
/// per-queue panel follows, panels for dead-letter inflow and redrives,
/// and documented series only.
#[test]
fn the_grafana_dashboard_filters_by_instance_and_queue_and_reads_documented_series() {
    let documented = documented_series();
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/grafana-dashboard.json"
        ))
        .unwrap(),
    )
    .expect("the dashboard is JSON");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|variable| variable["name"].as_str())
        .collect();
    for wanted in ["datasource", "instance", "queue"] {
        assert!(
            variables.contains(&wanted),
            "no ${wanted} variable: {variables:?}"
        );
    }
    let panels = dashboard["panels"].as_array().unwrap();
    let titles: Vec<&str> = panels
        .iter()
        .filter_map(|panel| panel["title"].as_str())
        .collect();
    for wanted in ["Dead-letter inflow", "Redrive"] {
        assert!(
            titles.iter().any(|title| title.starts_with(wanted)),
            "no {wanted} panel: {titles:?}"
        );
    }
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expression = target["expr"].as_str().unwrap();
            for series in series_in(expression) {
                assert!(
                    documented.contains(&format!("`{series}`")),
                    "panel {} reads {series}, which the broker does not export",
                    panel["title"]
                );
                let per_queue = documented
                    .lines()
                    .find(|line| line.contains(&format!("`{series}`")))
                    .and_then(|line| line.split('|').nth(3))
                    .is_some_and(|labels| labels.contains("queue"));
                if per_queue {
                    assert!(
                        expression.contains("queue=~\"$queue\""),
                        "panel {} ignores the queue variable: {expression}",
                        panel["title"]
                    );
                }
            }
        }
    }
}

/// A deleted queue's series leave `/metrics` with it (its depth gauges
/// would otherwise stay at their last value until a restart); the other
/// queues' stay.
#[tokio::test]
async fn a_deleted_queues_series_leave_with_it() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let gone = create_queue(&client, "gone").await;
    create_queue(&client, "kept").await;
    client
        .send_message()
        .queue_url(&gone)
        .message_body("left behind")
        .send()
        .await
        .unwrap();
    let before = scrape(&server).await;
    assert_eq!(
        sample(
            &before,
            "ackbox_queue_messages",
            &["queue=\"gone\"", "state=\"visible\""]
        ),
        Some(1.0)
    );
    client.delete_queue().queue_url(&gone).send().await.unwrap();
    let after = scrape(&server).await;
    let left: Vec<&str> = after
        .lines()
        .filter(|line| line.contains("queue=\"gone\""))
        .collect();
    assert!(left.is_empty(), "{left:#?}");
    assert_eq!(
        sample(&after, "ackbox_messages_sent_total", &["queue=\"kept\""]),
        Some(0.0)
    );
    assert!(
        after.contains("# HELP ackbox_messages_sent_total"),
        "descriptions stay"
    );
}

/// A topic's counters and each subscription's, after publishes whose
/// count per queue is known: two subscribed queues, one filtering, and one
/// queue deleted under its subscription.
#[tokio::test]
async fn a_topic_and_each_subscription_count_their_copies_and_what_filters_kept_out() {
    let server = TestServer::builder().start().await;
    let (client, sns) = (server.client(), server.sns_client());
    let topic = create_topic(&sns, "orders").await;
    let mut subscriptions = Vec::new();
    for (queue, filter) in [
        ("everything", None),
        ("paid-only", Some(r#"{"status":["paid"]}"#)),
        ("deleted-later", None),
    ] {
        create_queue(&client, queue).await;
        let mut subscribe = sns
            .subscribe()
            .topic_arn(&topic)
            .protocol("sqs")
            .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:{queue}"));
        if let Some(filter) = filter {
            subscribe = subscribe.attributes("FilterPolicy", filter);
        }
        let arn = subscribe.send().await.unwrap().subscription_arn.unwrap();
        subscriptions.push(arn.rsplit(':').next().unwrap().to_owned());
    }
    let publish = |status: &'static str| {
        sns.publish()
            .topic_arn(&topic)
            .message("order")
            .message_attributes(
                "status",
                aws_sdk_sns::types::MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(status)
                    .build()
                    .unwrap(),
            )
            .send()
    };
    for status in ["placed", "paid", "shipped"] {
        publish(status).await.unwrap();
    }
    let deleted = client
        .get_queue_url()
        .queue_name("deleted-later")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    client
        .delete_queue()
        .queue_url(deleted)
        .send()
        .await
        .unwrap();
    publish("paid").await.unwrap();

    let text = scrape(&server).await;
    let topic_label = "topic=\"orders\"";
    for (name, expected) in [
        ("ackbox_topic_messages_published_total", 4.0),
        // 3 + 1 + 3 before the delete, 2 after.
        ("ackbox_topic_messages_delivered_total", 9.0),
        ("ackbox_topic_deliveries_failed_total", 1.0),
    ] {
        assert_eq!(
            sample(&text, name, &[topic_label]),
            Some(expected),
            "{name}"
        );
    }
    let of = |name: &str, subscription: &str| {
        sample(
            &text,
            name,
            &[topic_label, &format!("subscription=\"{subscription}\"")],
        )
    };
    let delivered = "ackbox_subscription_messages_delivered_total";
    let filtered_out = "ackbox_subscription_messages_filtered_out_total";
    assert_eq!(of(delivered, &subscriptions[0]), Some(4.0));
    assert_eq!(
        of(filtered_out, &subscriptions[0]),
        None,
        "it filters nothing"
    );
    assert_eq!(of(delivered, &subscriptions[1]), Some(2.0));
    assert_eq!(of(filtered_out, &subscriptions[1]), Some(2.0));
    assert_eq!(of(delivered, &subscriptions[2]), Some(3.0));
}
