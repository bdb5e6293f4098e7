//! The dashboard over HTTP: a person's path through a dead-letter queue —
//! see the failures, dry-run a redrive, run it, watch it finish — and the
//! guard rails (typed purge confirmation, read-only mode, escaped content).

use std::time::{Duration, Instant};

use ackbox_core::utc::rfc3339;
use ackbox_testkit::client::{call_json, create_queue};
use ackbox_testkit::server::TestServer;
use ackbox_testkit::webdriver::Browser;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request; returns the status, the `Location` header and the body.
async fn http(
    server: &TestServer,
    method: &str,
    path: &str,
    form: &str,
) -> (u16, Option<String>, String) {
    let authority = server.url().trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let location = head
        .lines()
        .find_map(|line| {
            line.strip_prefix("location: ")
                .or_else(|| line.strip_prefix("Location: "))
        })
        .map(str::to_owned);
    (status, location, body.to_owned())
}

/// A queue `work` whose three messages were dead-lettered by consumers
/// with the reason `CardDeclined`.
async fn dead_lettered(server: &TestServer) -> (String, String) {
    let client = server.client();
    let dlq = create_queue(&client, "work-dlq").await;
    let arn = ackbox_testkit::client::queue_arn(&client, &dlq).await;
    let work = client
        .create_queue()
        .queue_name("work")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":5}}"#),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for body in ["charge 1", "charge 2", "<script>alert(1)</script>"] {
        client
            .send_message()
            .queue_url(&work)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let received = client
        .receive_message()
        .queue_url(&work)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    for message in received.messages() {
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
    (work, dlq)
}

#[tokio::test]
async fn a_dead_letter_queue_can_be_inspected_dry_run_and_redriven_from_the_dashboard() {
    let server = TestServer::builder().start().await;
    let (work, _) = dead_lettered(&server).await;

    let (status, _, list) = http(&server, "GET", "/ui", "").await;
    assert_eq!(status, 200);
    assert!(
        list.contains("href=\"/ui/queues/work-dlq\"") && list.contains("dead-letter queue"),
        "{list}"
    );
    assert!(
        list.contains("<svg class=\"spark\""),
        "a sparkline of the last hour: {list}"
    );

    let (_, _, page) = http(&server, "GET", "/ui/queues/work-dlq", "").await;
    assert!(
        page.contains("CardDeclined") && page.contains("issuer said no"),
        "{page}"
    );
    assert!(page.contains("charge 1"));
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !page.contains("<script>"),
        "bodies are escaped"
    );
    let dlq_url = format!("{}/000000000000/work-dlq", server.url());
    let (_, summary) = call_json(
        &server.url(),
        "AckBox.SummarizeQueue",
        &json!({ "QueueUrl": dlq_url }),
    )
    .await;
    let oldest = summary["Classes"][0]["OldestSentTimestamp"]
        .as_i64()
        .unwrap();
    assert!(
        page.contains(&format!("<td>{}</td>", rfc3339(oldest))),
        "the oldest failure's time, as a person reads it: {page}"
    );

    let (status, location, _) = http(
        &server,
        "POST",
        "/ui/queues/work-dlq/redrive",
        "class=CardDeclined&rate=50&sample=&dry_run=on",
    )
    .await;
    assert_eq!(status, 303);
    let (_, _, after_dry_run) = http(&server, "GET", &location.unwrap(), "").await;
    assert!(
        after_dry_run.contains("Dry run: a redrive would move 3 message(s) now; nothing moved."),
        "{after_dry_run}"
    );

    let (status, location, _) = http(
        &server,
        "POST",
        "/ui/queues/work-dlq/redrive",
        "class=&rate=100&sample=",
    )
    .await;
    assert_eq!(status, 303);
    assert!(
        http(&server, "GET", &location.unwrap(), "")
            .await
            .2
            .contains("Redrive started.")
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, _, page) = http(&server, "GET", "/ui/queues/work-dlq", "").await;
        if page.contains("<td class=\"task-status\">COMPLETED</td>") {
            assert!(page.contains("3 / 3"), "{page}");
            break;
        }
        assert!(Instant::now() < deadline, "the redrive completes: {page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let depth = ackbox_testkit::client::queue_depth(&server.client(), &work).await;
    assert_eq!(depth, 3, "the messages are home");
}

#[tokio::test]
async fn purging_from_the_dashboard_needs_the_queue_name_typed() {
    let server = TestServer::builder().start().await;
    let (_, dlq) = dead_lettered(&server).await;
    let (status, location, _) =
        http(&server, "POST", "/ui/queues/work-dlq/purge", "confirm=work").await;
    assert_eq!(status, 303);
    let (_, _, page) = http(&server, "GET", &location.unwrap(), "").await;
    assert!(page.contains("Not purged"), "{page}");
    assert_eq!(
        ackbox_testkit::client::queue_depth(&server.client(), &dlq).await,
        3
    );
    let (_, location, _) = http(
        &server,
        "POST",
        "/ui/queues/work-dlq/purge",
        "confirm=work-dlq",
    )
    .await;
    assert!(
        http(&server, "GET", &location.unwrap(), "")
            .await
            .2
            .contains("Purged 3 message(s).")
    );
    assert_eq!(
        ackbox_testkit::client::queue_depth(&server.client(), &dlq).await,
        0
    );
}

#[tokio::test]
async fn a_form_posted_from_another_site_is_refused() {
    let server = TestServer::builder().start().await;
    let (_, dlq) = dead_lettered(&server).await;
    let authority = server.url().trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let form = "confirm=work-dlq";
    let request = format!(
        "POST /ui/queues/work-dlq/purge HTTP/1.1\r\nHost: {authority}\r\nOrigin: https://evil.example\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");
    assert_eq!(
        ackbox_testkit::client::queue_depth(&server.client(), &dlq).await,
        3
    );
}

#[tokio::test]
async fn a_read_only_dashboard_shows_everything_and_changes_nothing() {
    let server = TestServer::builder().ui_read_only().start().await;
    let (_, dlq) = dead_lettered(&server).await;
    let (status, _, page) = http(&server, "GET", "/ui/queues/work-dlq", "").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("CardDeclined") && !page.contains("<form"),
        "{page}"
    );
    let (status, _, _) = http(
        &server,
        "POST",
        "/ui/queues/work-dlq/purge",
        "confirm=work-dlq",
    )
    .await;
    assert_eq!(status, 403);
    for (path, form) in [
        ("/ui/queues/work-dlq/redrive", "rate=10"),
        ("/ui/queues/work-dlq/send", "body=hello"),
        ("/ui/queues/work-dlq/delete", "confirm=work-dlq"),
        ("/ui/queues/work-dlq/resume", "handle=x"),
        ("/ui/queues", "name=made-anyway"),
    ] {
        let (status, _, _) = http(&server, "POST", path, form).await;
        assert_eq!(status, 403, "POST {path}");
    }
    let (status, _, _) = http(&server, "GET", "/ui/new-queue", "").await;
    assert_eq!(status, 403);
    let (_, _, list) = http(&server, "GET", "/ui", "").await;
    assert!(!list.contains("new-queue"), "{list}");
    assert_eq!(
        ackbox_testkit::client::queue_depth(&server.client(), &dlq).await,
        3
    );
    let made = server
        .client()
        .get_queue_url()
        .queue_name("made-anyway")
        .send()
        .await;
    assert!(made.is_err(), "{made:?}");
    let (status, _, _) = http(&server, "GET", "/ui/queues/no-such-queue", "").await;
    assert_eq!(status, 404);
}

/// In a real headless Chromium: open the dashboard, follow the dead-letter
/// queue, start a redrive with its form, watch it complete; the screenshot
/// is kept as a CI artifact. Runs where `ACKBOX_TEST_CHROMEDRIVER` names a
/// chromedriver (`.ci/run` installs Chromium and sets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_a_person_redrives_a_dead_letter_queue() {
    let Some(browser) = browser().await else {
        return;
    };
    let server = TestServer::builder().start().await;
    let (work, _) = dead_lettered(&server).await;
    browser.visit(&format!("{}/ui", server.url())).await;
    assert!(browser.source().await.contains("work-dlq"));
    browser.click("a[href='/ui/queues/work-dlq']").await;
    let page = browser.source().await;
    assert!(
        page.contains("CardDeclined") && page.contains("charge 1"),
        "{page}"
    );
    browser.click("form[action$='/redrive'] button").await;
    // The click may return before the browser has followed the redirect.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = browser.source().await;
        if page.contains("Redrive started.") || page.contains(">COMPLETED<") {
            break;
        }
        assert!(Instant::now() < deadline, "the redrive starts: {page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    loop {
        // The page refreshes itself while a redrive runs; read it as it is.
        let page = browser.source().await;
        if page.contains(">COMPLETED<") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the redrive completes in the browser: {page}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    keep_screenshot(&browser, "dashboard-redrive.png").await;
    assert_eq!(
        ackbox_testkit::client::queue_depth(&server.client(), &work).await,
        3
    );
}

/// Keeps a screenshot of what the browser shows, as `name`, with the CI
/// artifacts.
async fn keep_screenshot(browser: &Browser, name: &str) {
    let screenshot = browser.screenshot().await;
    assert!(screenshot.starts_with(b"\x89PNG"), "a PNG screenshot");
    let artifacts = std::env::var("ACKBOX_ARTIFACTS_DIR")
        .unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    std::fs::create_dir_all(&artifacts).unwrap();
    let path = std::path::Path::new(&artifacts).join(name);
    std::fs::write(&path, screenshot).unwrap();
    eprintln!("screenshot: {}", path.display());
}

/// The page once it shows `needle`: a click may return before the browser
/// has followed the form's redirect.
async fn page_showing(browser: &Browser, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = browser.source().await;
        if page.contains(needle) {
            return page;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed {needle:?}: {page}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A browser for the dashboard, when `ACKBOX_TEST_CHROMEDRIVER` names a
/// ChromeDriver (`.ci/run` sets it).
async fn browser() -> Option<Browser> {
    let Ok(driver) = std::env::var("ACKBOX_TEST_CHROMEDRIVER") else {
        eprintln!(
            "skipped: ACKBOX_TEST_CHROMEDRIVER is not set, so the dashboard is not tested in a browser here"
        );
        return None;
    };
    Some(Browser::start(&driver).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_a_person_creates_a_queue_sends_pages_through_it_and_deletes_it() {
    let Some(browser) = browser().await else {
        return;
    };
    let server = TestServer::builder().start().await;
    browser.visit(&format!("{}/ui", server.url())).await;
    browser.click("a.new-queue").await;
    page_showing(&browser, "New queue").await;
    browser.type_into("input[name='name']", "orders").await;
    browser.click("form.create button").await;
    page_showing(&browser, "Queue created.").await;
    keep_screenshot(&browser, "dashboard-queue-created.png").await;

    browser
        .type_into("textarea[name='body']", "order <1>")
        .await;
    browser.click("form.send button").await;
    page_showing(&browser, "Sent message").await;
    keep_screenshot(&browser, "dashboard-message-sent.png").await;
    let client = server.client();
    let url = client
        .get_queue_url()
        .queue_name("orders")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for index in 2..=25 {
        client
            .send_message()
            .queue_url(&url)
            .message_body(format!("order {index}."))
            .send()
            .await
            .unwrap();
    }

    // Twenty to a page, oldest first; the next page goes on after the last.
    browser
        .visit(&format!("{}/ui/queues/orders", server.url()))
        .await;
    let first = page_showing(&browser, "Next 20").await;
    assert!(first.contains("order &lt;1&gt;"), "{first}");
    assert!(
        first.contains("order 20.") && !first.contains("order 21."),
        "{first}"
    );
    browser.click("a.next-page").await;
    let second = page_showing(&browser, "First page").await;
    assert!(
        (21..=25).all(|index| second.contains(&format!("order {index}.")))
            && !second.contains("order 20.")
            && !second.contains("Next 20"),
        "{second}"
    );
    keep_screenshot(&browser, "dashboard-queue-messages.png").await;
    assert_eq!(
        ackbox_testkit::client::queue_depth(&client, &url).await,
        25,
        "browsing leased nothing"
    );

    browser
        .type_into("form.delete input[name='confirm']", "orders")
        .await;
    browser.click("form.delete button").await;
    page_showing(&browser, "Deleted queue orders.").await;
    keep_screenshot(&browser, "dashboard-queue-deleted.png").await;
    let gone = client.get_queue_url().queue_name("orders").send().await;
    assert!(gone.is_err(), "the queue is gone: {gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_a_sample_redrive_pauses_for_review_and_is_resumed() {
    let Some(browser) = browser().await else {
        return;
    };
    let server = TestServer::builder().start().await;
    let (work, _) = dead_lettered(&server).await;
    browser
        .visit(&format!("{}/ui/queues/work-dlq", server.url()))
        .await;
    // Each message says where it came from.
    let page = page_showing(&browser, "CardDeclined").await;
    assert!(
        page.contains("<a href=\"/ui/queues/work\">work</a>"),
        "{page}"
    );
    browser.type_into("input[name='sample']", "1").await;
    browser.click("form[action$='/redrive'] button").await;
    page_showing(&browser, ">PAUSED<").await;
    assert_eq!(
        ackbox_testkit::client::queue_depth(&server.client(), &work).await,
        1,
        "the sample moved, the rest waits for review"
    );
    browser.click("form.resume button").await;
    page_showing(&browser, ">COMPLETED<").await;
    keep_screenshot(&browser, "dashboard-redrive-resumed.png").await;
    assert_eq!(
        ackbox_testkit::client::queue_depth(&server.client(), &work).await,
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_a_dead_letter_is_read_edited_sent_home_and_another_deleted() {
    let Some(browser) = browser().await else {
        return;
    };
    let server = TestServer::builder().start().await;
    let (work, dlq) = dead_lettered(&server).await;
    browser
        .visit(&format!("{}/ui/queues/work-dlq", server.url()))
        .await;
    page_showing(&browser, "CardDeclined").await;
    browser.click("a.message").await;
    let page = page_showing(&browser, "Send it again").await;
    assert!(
        page.contains("issuer said no") && page.contains("AckBoxFailureClass"),
        "every attribute is on the message's page: {page}"
    );
    keep_screenshot(&browser, "dashboard-message.png").await;
    // Fixed and sent home: to its source queue, which the form names.
    browser
        .type_into("form.resend textarea[name='body']", " (fixed)")
        .await;
    browser.click("form.resend button").await;
    page_showing(&browser, "the original is deleted").await;
    keep_screenshot(&browser, "dashboard-message-sent-home.png").await;
    let client = server.client();
    let home = client
        .receive_message()
        .queue_url(&work)
        .send()
        .await
        .unwrap();
    let bodies: Vec<&str> = home
        .messages()
        .iter()
        .filter_map(|message| message.body())
        .collect();
    assert!(
        matches!(bodies[..], [body] if body.strip_suffix(" (fixed)").is_some_and(|sent| {
            ["charge 1", "charge 2", "<script>alert(1)</script>"].contains(&sent)
        })),
        "the dead letter, as edited, is home: {bodies:?}"
    );
    assert_eq!(ackbox_testkit::client::queue_depth(&client, &dlq).await, 2);

    browser.click("a.message").await;
    page_showing(&browser, "Delete this message").await;
    browser.click("form.delete-message button").await;
    page_showing(&browser, "Message deleted.").await;
    keep_screenshot(&browser, "dashboard-message-deleted.png").await;
    assert_eq!(ackbox_testkit::client::queue_depth(&client, &dlq).await, 1);
}

/// The dashboard deletes a message as its page saw it: once a consumer
/// has received it since, the message is the consumer's and stays.
#[tokio::test]
async fn a_message_received_since_its_page_was_read_is_not_deleted_from_under_its_consumer() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_queue(&client, "orders").await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("order 1")
        .send()
        .await
        .unwrap();
    let (_, _, page) = http(&server, "GET", "/ui/queues/orders", "").await;
    let link = page
        .split("href=\"")
        .filter_map(|rest| rest.split('"').next())
        .find(|href| href.starts_with("/ui/queues/orders/messages/"))
        .unwrap_or_else(|| panic!("no message link: {page}"))
        .to_owned();
    let (_, _, message) = http(&server, "GET", &link, "").await;
    assert!(message.contains("order 1"), "{message}");
    // Read with 0 receives; a consumer takes it now.
    let received = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(60)
        .send()
        .await
        .unwrap();
    assert_eq!(received.messages().len(), 1);
    let (status, location, _) = http(
        &server,
        "POST",
        &format!("{link}/delete"),
        "receive_count=0",
    )
    .await;
    assert_eq!(status, 303);
    assert!(
        location
            .as_deref()
            .is_some_and(|to| to.contains("received+it+since")),
        "{location:?}"
    );
    assert_eq!(
        ackbox_testkit::client::queue_depth(&client, &url).await,
        1,
        "the consumer's message stays"
    );
    let (_, location, _) = http(
        &server,
        "POST",
        &format!("{link}/delete"),
        "receive_count=1",
    )
    .await;
    assert!(
        location
            .as_deref()
            .is_some_and(|to| to.contains("Message+deleted")),
        "{location:?}"
    );
    assert_eq!(ackbox_testkit::client::queue_depth(&client, &url).await, 0);
}

#[tokio::test]
async fn topics_show_each_subscription_its_state_and_a_push_backlog() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    create_queue(&sqs, "billing").await;
    create_queue(&sqs, "hooks-dlq").await;
    let topic = sns
        .create_topic()
        .name("orders")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:billing")
        .attributes("FilterPolicy", r#"{"kind":["card"]}"#)
        .send()
        .await
        .unwrap();
    // Nothing listens there: the confirmation request waits in the backlog.
    let push = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("http")
        .endpoint("http://127.0.0.1:9/hook?a=1&b=2")
        .attributes(
            "RedrivePolicy",
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:hooks-dlq"}"#,
        )
        .return_subscription_arn(true)
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    let id = push.rsplit(':').next().unwrap();

    let (status, _, list) = http(&server, "GET", "/ui/topics", "").await;
    assert_eq!(status, 200);
    assert!(list.contains("href=\"/ui/topics/orders\""), "{list}");
    let (status, _, page) = http(&server, "GET", "/ui/topics/orders", "").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("arn:aws:sqs:us-east-1:000000000000:billing"),
        "{page}"
    );
    assert!(
        page.contains("{&quot;kind&quot;:[&quot;card&quot;]}"),
        "{page}"
    );
    assert!(page.contains("pending confirmation"), "{page}");
    assert!(
        page.contains("http://127.0.0.1:9/hook?a=1&amp;b=2"),
        "escaped: {page}"
    );
    assert!(
        page.contains(&format!("href=\"/ui/queues/ackbox-push-{id}\"")),
        "the backlog links to the delivery queue: {page}"
    );
    assert!(page.contains("href=\"/ui/queues/hooks-dlq\""), "{page}");
    let (status, _, _) = http(&server, "GET", "/ui/topics/nowhere", "").await;
    assert_eq!(status, 404);
}

/// A topic's archive and its replays on the dashboard: the archive's size,
/// a replay started with the form (filter, raw), its audit row, a bad time
/// refused naming what it takes, a running replay cancelled with its button.
#[tokio::test]
async fn a_topics_archive_is_replayed_watched_and_cancelled_from_the_dashboard() {
    let server = TestServer::builder().start().await;
    let sqs = server.client();
    let rebuild = create_queue(&sqs, "rebuild").await;
    ackbox_testkit::client::archived_topic(
        &server.sns_client(),
        "orders",
        2,
        &[("o-1", "placed"), ("o-2", "cancelled"), ("o-3", "placed")],
    )
    .await;
    let (status, _, page) = http(&server, "GET", "/ui/topics/orders", "").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("Keeps every publish 2 day(s); holds 3"),
        "{page}"
    );
    assert!(page.contains("Start replay"), "{page}");

    let form = "destination=rebuild&from=1h&filter=%7B%22kind%22%3A%5B%22placed%22%5D%7D&raw=on";
    let (status, location, _) = http(&server, "POST", "/ui/topics/orders/replay", form).await;
    assert_eq!(status, 303);
    let location = location.unwrap();
    assert!(location.contains("notice=Replay"), "{location}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let page = loop {
        let (_, _, page) = http(&server, "GET", "/ui/topics/orders", "").await;
        if page.contains("<td>COMPLETED</td>") {
            break page;
        }
        assert!(Instant::now() < deadline, "the replay completes: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        page.contains("<td>dashboard</td>")
            && page.contains("<td class=\"num\">2</td><td class=\"num\">1</td>"),
        "{page}"
    );
    let mut bodies = ackbox_testkit::client::receive_bodies(&sqs, &rebuild).await;
    bodies.sort_unstable();
    assert_eq!(bodies, ["o-1", "o-3"]);

    let (_, location, _) = http(
        &server,
        "POST",
        "/ui/topics/orders/replay",
        "destination=rebuild&from=yesterday",
    )
    .await;
    assert!(
        location.unwrap().contains("RFC+3339"),
        "a bad time is named"
    );

    // One a second: still running when cancelled.
    start_and_cancel_a_slow_replay(&server, "/ui/topics/orders").await;
    let (_, _, page) = http(&server, "GET", "/ui/topics/orders", "").await;
    assert!(page.contains("<td>CANCELLED</td>"), "{page}");
}

/// A queue's archive on its page: what it keeps, a replay started with the
/// form into another queue and its audit row, a running one cancelled; a
/// queue without an archive shows no archive section.
#[tokio::test]
async fn a_queues_archive_is_replayed_and_cancelled_from_its_page() {
    let server = TestServer::builder().start().await;
    let sqs = server.client();
    let orders = sqs
        .create_queue()
        .queue_name("orders")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::from("AckBoxArchivePolicy"),
            r#"{"MessageRetentionPeriod":"3"}"#,
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let rebuild = create_queue(&sqs, "rebuild").await;
    for body in ["o-1", "o-2"] {
        sqs.send_message()
            .queue_url(&orders)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let (_, _, page) = http(&server, "GET", "/ui/queues/rebuild", "").await;
    assert!(!page.contains("<h2>Archive</h2>"), "{page}");
    let (status, _, page) = http(&server, "GET", "/ui/queues/orders", "").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("Keeps every message sent 3 day(s); holds 2"),
        "{page}"
    );
    assert!(!page.contains("name=\"raw\""), "messages come back as sent");

    let (status, location, _) = http(
        &server,
        "POST",
        "/ui/queues/orders/replay",
        "destination=rebuild&from=1h",
    )
    .await;
    assert_eq!(status, 303);
    assert!(location.unwrap().contains("notice=Replay"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let page = loop {
        let (_, _, page) = http(&server, "GET", "/ui/queues/orders", "").await;
        if page.contains("<td>COMPLETED</td>") {
            break page;
        }
        assert!(Instant::now() < deadline, "the replay completes: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(page.contains("<td class=\"num\">2</td>"), "{page}");
    let mut bodies = ackbox_testkit::client::receive_bodies(&sqs, &rebuild).await;
    bodies.sort_unstable();
    assert_eq!(bodies, ["o-1", "o-2"]);

    start_and_cancel_a_slow_replay(&server, "/ui/queues/orders").await;
}

/// From the page at `page` (a topic's or a queue's), a replay of the last
/// hour into `rebuild` at one message a second — still running — is
/// started, then cancelled with its row's button.
async fn start_and_cancel_a_slow_replay(server: &TestServer, page: &str) {
    let (_, location, _) = http(
        server,
        "POST",
        &format!("{page}/replay"),
        "destination=rebuild&from=1h&rate=1",
    )
    .await;
    assert!(location.unwrap().contains("notice=Replay"));
    let (_, _, shown) = http(server, "GET", page, "").await;
    let handle = shown
        .split("name=\"handle\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a running replay has a cancel button")
        .to_owned();
    let (_, location, _) = http(
        server,
        "POST",
        &format!("{page}/replay/cancel"),
        &format!("handle={handle}"),
    )
    .await;
    assert!(
        location.unwrap().contains("notice=Replay+cancelled"),
        "the replay is cancelled"
    );
}

/// The list marks a dead-letter queue red only while it holds something;
/// a queue too new for a depth sample says so instead of a blank.
#[tokio::test]
async fn an_empty_dead_letter_queue_is_not_red_and_a_new_queue_says_it_has_no_samples() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let dlq = create_queue(&client, "quiet-dlq").await;
    let arn = ackbox_testkit::client::queue_arn(&client, &dlq).await;
    client
        .create_queue()
        .queue_name("quiet")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":3}}"#),
        )
        .send()
        .await
        .unwrap();
    let (_, _, page) = http(&server, "GET", "/ui/queues/quiet", "").await;
    assert!(
        page.contains("Depth over the last hour: no samples yet"),
        "{page}"
    );
    let (_, _, list) = http(&server, "GET", "/ui", "").await;
    assert!(
        list.contains("<span class=\"dlq-empty\">dead-letter queue</span>")
            && !list.contains("<span class=\"dlq\">"),
        "{list}"
    );
    client
        .send_message()
        .queue_url(&dlq)
        .message_body("failed")
        .send()
        .await
        .unwrap();
    let (_, _, list) = http(&server, "GET", "/ui", "").await;
    assert!(
        list.contains("<span class=\"dlq\">dead-letter queue</span>"),
        "{list}"
    );
}
