//! Queue archives (invariant 13, ARCHITECTURE.md): a queue with an
//! `AckBoxArchivePolicy` keeps every message it acknowledged, written in
//! the send's transaction; `AckBox.StartReplay` with the queue's ARN as
//! `SourceArn` delivers a time range of them again, as they were sent and
//! marked as a replay.

use serde_json::json;

use super::replay::{arn, attribute, ended, start_replay, take_fifo};
use super::topics::take_all;
use super::*;

const MINUTE: i64 = 60_000;
const WEEK: &str = r#"{"MessageRetentionPeriod":"7"}"#;

fn archive_policy() -> QueueAttributeName {
    QueueAttributeName::from("AckBoxArchivePolicy")
}

/// The URL of the one archive queue, and how many messages it holds.
async fn archive(client: &aws_sdk_sqs::Client) -> (String, usize) {
    let url = client
        .list_queues()
        .queue_name_prefix("ackbox-archive-")
        .send()
        .await
        .unwrap()
        .queue_urls()
        .first()
        .cloned()
        .expect("the queue's archive");
    let held = queue_depth(client, &url).await;
    (url, held)
}

#[tokio::test]
async fn a_queues_archive_keeps_what_was_sent_and_replays_a_range_as_sent_and_marked() {
    let (server, clock) = manual_server().await;
    let sqs = server.client();
    let orders = sqs
        .create_queue()
        .queue_name("orders")
        .attributes(archive_policy(), WEEK)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let kept = sqs
        .get_queue_attributes()
        .queue_url(&orders)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    assert_eq!(
        kept.attributes().unwrap()[&archive_policy()],
        r#"{"MessageRetentionPeriod":"7"}"#
    );
    // Four sends a minute apart, the last two in one batch; placed and
    // cancelled in turn.
    let kind = |index: usize| {
        if index.is_multiple_of(2) {
            "placed"
        } else {
            "cancelled"
        }
    };
    let mut sent_ids = Vec::new();
    for index in 0..2 {
        let sent = sqs
            .send_message()
            .queue_url(&orders)
            .message_body(format!("order-{index}"))
            .message_attributes("kind", string_attribute(kind(index)))
            .send()
            .await
            .unwrap();
        sent_ids.push(sent.message_id.unwrap());
        clock.advance_secs(60);
    }
    let batch = sqs
        .send_message_batch()
        .queue_url(&orders)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("2")
                .message_body("order-2")
                .message_attributes("kind", string_attribute(kind(2)))
                .build()
                .unwrap(),
        )
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("3")
                .message_body("order-3")
                .message_attributes("kind", string_attribute(kind(3)))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    sent_ids.extend(
        batch
            .successful()
            .iter()
            .map(|entry| entry.message_id().to_owned()),
    );
    // The queue's consumers take everything; the archive keeps it all.
    assert_eq!(take_all(&sqs, &orders).await.len(), 4);
    let (archive_url, held) = archive(&sqs).await;
    assert_eq!(held, 4);
    let refused = sqs
        .receive_message()
        .queue_url(&archive_url)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(refused), "InvalidParameterValue");

    // From minute 1 on, the placed ones: order-2 only (1 and 3 passed
    // over), as it was sent, with the send's id and time.
    let rebuild = create(&sqs, "rebuild").await;
    let (status, started) = start_replay(
        &server,
        json!({
            "SourceArn": arn("orders"),
            "DestinationArn": arn("rebuild"),
            "StartTimestamp": START + MINUTE,
            "FilterPolicy": r#"{"kind":["placed"]}"#,
        }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(started["Replay"]["SourceArn"], arn("orders"));
    assert!(started["Replay"].get("TopicArn").is_none(), "{started}");
    let handle = started["Replay"]["TaskHandle"].as_str().unwrap().to_owned();
    let report = ended(&server, &arn("orders"), &handle).await;
    assert_eq!(report["Status"], "COMPLETED", "{report}");
    assert_eq!(report["ApproximateNumberOfMessagesReplayed"], 1, "{report}");
    assert_eq!(report["ApproximateNumberOfMessagesSkipped"], 2, "{report}");
    let replayed = take_all(&sqs, &rebuild).await;
    assert_eq!(replayed.len(), 1);
    let copy = &replayed[0];
    assert_eq!(copy.body(), Some("order-2"));
    assert_eq!(attribute(copy, "kind").as_deref(), Some("placed"));
    assert_eq!(attribute(copy, "ackbox.replay").as_deref(), Some("true"));
    assert_eq!(
        attribute(copy, "ackbox.replay.message_id").as_deref(),
        Some(sent_ids[2].as_str())
    );
    assert_eq!(
        attribute(copy, "ackbox.replay.published_at").as_deref(),
        Some("2023-11-14T22:15:20.000Z")
    );

    // Back into the queue itself, everything: a projection rebuilt.
    let (status, started) = start_replay(
        &server,
        json!({
            "SourceArn": arn("orders"),
            "DestinationArn": arn("orders"),
            "StartTimestamp": 0,
        }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let handle = started["Replay"]["TaskHandle"].as_str().unwrap().to_owned();
    assert_eq!(
        ended(&server, &arn("orders"), &handle).await["Status"],
        "COMPLETED"
    );
    let mut again: Vec<String> = take_all(&sqs, &orders)
        .await
        .iter()
        .map(|message| message.body().unwrap().to_owned())
        .collect();
    again.sort();
    assert_eq!(again, ["order-0", "order-1", "order-2", "order-3"]);
    // A replay into the queue is not archived again.
    assert_eq!(archive(&sqs).await.1, 4);
}

#[tokio::test]
async fn a_fifo_queues_archive_drops_what_the_queue_drops_and_replays_each_group_in_order() {
    let (server, _clock) = manual_server().await;
    let sqs = server.client();
    let fifo_queue = |name: &'static str| {
        sqs.create_queue()
            .queue_name(name)
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(QueueAttributeName::ContentBasedDeduplication, "true")
    };
    let events = fifo_queue("events.fifo")
        .attributes(archive_policy(), WEEK)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for (group, body) in [("a", "a-1"), ("b", "b-1"), ("a", "a-2"), ("a", "a-1")] {
        sqs.send_message()
            .queue_url(&events)
            .message_group_id(group)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    // a-1 sent twice within the window: the queue and its archive each
    // keep it once.
    assert_eq!(take_fifo(&sqs, &events).await.len(), 3);
    assert_eq!(archive(&sqs).await.1, 3);
    let rebuild = fifo_queue("rebuild.fifo")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let (status, started) = start_replay(
        &server,
        json!({
            "SourceArn": arn("events.fifo"),
            "DestinationArn": arn("rebuild.fifo"),
            "StartTimestamp": 0,
        }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let handle = started["Replay"]["TaskHandle"].as_str().unwrap().to_owned();
    assert_eq!(
        ended(&server, &arn("events.fifo"), &handle).await["Status"],
        "COMPLETED"
    );
    let replayed: Vec<(String, String)> = take_fifo(&sqs, &rebuild)
        .await
        .into_iter()
        .map(|(group, message)| (group, message.body().unwrap().to_owned()))
        .collect();
    let of = |wanted: &str| -> Vec<&str> {
        replayed
            .iter()
            .filter(|(group, _)| group == wanted)
            .map(|(_, body)| body.as_str())
            .collect()
    };
    assert_eq!(of("a"), ["a-1", "a-2"]);
    assert_eq!(of("b"), ["b-1"]);
}

#[tokio::test]
async fn archiving_off_keeps_the_archive_and_deleting_the_queue_deletes_it() {
    let server = TestServer::builder().start().await;
    let sqs = server.client();
    let orders = create(&sqs, "orders").await;
    sqs.set_queue_attributes()
        .queue_url(&orders)
        .attributes(archive_policy(), WEEK)
        .send()
        .await
        .unwrap();
    let send = |body: &'static str| {
        sqs.send_message()
            .queue_url(&orders)
            .message_body(body)
            .send()
    };
    send("kept").await.unwrap();
    sqs.set_queue_attributes()
        .queue_url(&orders)
        .attributes(archive_policy(), "")
        .send()
        .await
        .unwrap();
    send("not archived").await.unwrap();
    assert_eq!(archive(&sqs).await.1, 1);
    // Off, the archive still replays.
    create(&sqs, "rebuild").await;
    let (status, started) = start_replay(
        &server,
        json!({
            "SourceArn": arn("orders"),
            "DestinationArn": arn("rebuild"),
            "StartTimestamp": 0,
        }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    // On again: the same archive goes on.
    sqs.set_queue_attributes()
        .queue_url(&orders)
        .attributes(archive_policy(), r#"{"MessageRetentionPeriod":2}"#)
        .send()
        .await
        .unwrap();
    send("archived again").await.unwrap();
    let (archive_url, held) = archive(&sqs).await;
    assert_eq!(held, 2);
    let retention = sqs
        .get_queue_attributes()
        .queue_url(&archive_url)
        .attribute_names(QueueAttributeName::MessageRetentionPeriod)
        .send()
        .await
        .unwrap();
    assert_eq!(
        retention.attributes().unwrap()[&QueueAttributeName::MessageRetentionPeriod],
        (2 * 86_400).to_string()
    );

    sqs.delete_queue().queue_url(&orders).send().await.unwrap();
    let gone = sqs
        .get_queue_attributes()
        .queue_url(&archive_url)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(gone), "AWS.SimpleQueueService.NonExistentQueue");
    let (status, listing) = ackbox_testkit::client::call_json(
        &server.url(),
        "AckBox.ListReplays",
        &json!({"SourceArn": arn("orders")}),
    )
    .await;
    assert_eq!(status, 200, "{listing}");
    assert_eq!(listing["Replays"], json!([]), "the replays went with it");
}

#[tokio::test]
async fn a_queue_keeps_an_archive_a_year_as_sns_does_and_shows_only_sqs_attributes() {
    let server = TestServer::builder().start().await;
    let sqs = server.client();
    let year = r#"{"MessageRetentionPeriod":"365"}"#;
    let orders = sqs
        .create_queue()
        .queue_name("orders")
        .attributes(archive_policy(), year)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let policy = sqs
        .get_queue_attributes()
        .queue_url(&orders)
        .attribute_names(archive_policy())
        .send()
        .await
        .unwrap();
    assert_eq!(policy.attributes().unwrap()[&archive_policy()], year);
    let (archive_url, _) = archive(&sqs).await;
    let shown = sqs
        .get_queue_attributes()
        .queue_url(&archive_url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let shown = shown.attributes().unwrap();
    // A queue keeps a message 14 days at most, and says so; the reaper
    // goes by the archive's year (engine test `archive_retention.rs`).
    assert_eq!(
        shown[&QueueAttributeName::MessageRetentionPeriod],
        "1209600"
    );
    assert!(
        shown
            .keys()
            .all(|name| !name.as_str().starts_with("AckBox")),
        "{shown:?}"
    );
}

#[tokio::test]
async fn archive_policies_and_replays_a_queue_cannot_keep_are_refused_naming_why() {
    let server = TestServer::builder().start().await;
    let sqs = server.client();
    let refused = sqs
        .create_queue()
        .queue_name("orders")
        .attributes(archive_policy(), r#"{"MessageRetentionPeriod":"366"}"#)
        .send()
        .await
        .unwrap_err();
    let message = format!("{:?}", refused.as_service_error());
    assert!(
        message.contains("AckBoxArchivePolicy") && message.contains("from 1 to 365"),
        "{message}"
    );
    let orders = create(&sqs, "orders").await;
    create(&sqs, "elsewhere").await;
    // A queue that keeps no archive has nothing to replay.
    let (status, answer) = start_replay(
        &server,
        json!({
            "SourceArn": arn("orders"),
            "DestinationArn": arn("elsewhere"),
            "StartTimestamp": 0,
        }),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["message"].as_str().is_some_and(
            |text| text.contains("keeps no archive") && text.contains("AckBoxArchivePolicy")
        ),
        "{answer}"
    );
    sqs.set_queue_attributes()
        .queue_url(&orders)
        .attributes(archive_policy(), WEEK)
        .send()
        .await
        .unwrap();
    // An archive keeps no archive of its own.
    let (archive_url, _) = archive(&sqs).await;
    let refused = sqs
        .set_queue_attributes()
        .queue_url(&archive_url)
        .attributes(archive_policy(), WEEK)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(refused), "InvalidAttributeValue");
    // A standard queue's messages have no group to keep in a FIFO queue.
    sqs.create_queue()
        .queue_name("ordered.fifo")
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap();
    let (status, answer) = start_replay(
        &server,
        json!({
            "SourceArn": arn("orders"),
            "DestinationArn": arn("ordered.fifo"),
            "StartTimestamp": 0,
        }),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|text| text.contains("FIFO")),
        "{answer}"
    );
}
