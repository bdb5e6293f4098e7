//! Topic archives and replays (invariant 13, ARCHITECTURE.md): a topic with
//! an `ArchivePolicy` keeps every publish; `AckBox.StartReplay` and SNS's
//! `ReplayPolicy` deliver a time range of them again, each copy the first
//! delivery's (same `MessageId` and `Timestamp`) marked as a replay.

use std::collections::BTreeMap;

use ackbox_testkit::client::call_json;
use aws_sdk_sns::types::MessageAttributeValue as SnsAttribute;
use serde_json::{Value, json};

use super::topics::take_all;
use super::*;
use ackbox_testkit::client::create_topic;

const MINUTE: i64 = 60_000;

pub(super) fn arn(queue: &str) -> String {
    format!("arn:aws:sqs:us-east-1:000000000000:{queue}")
}

fn kind(value: &str) -> SnsAttribute {
    SnsAttribute::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .unwrap()
}

/// Every message of a FIFO queue with its group, in the order received,
/// each deleted once read (a group is held while one of its messages is
/// leased).
pub(super) async fn take_fifo(
    client: &aws_sdk_sqs::Client,
    url: &str,
) -> Vec<(String, aws_sdk_sqs::types::Message)> {
    let mut messages = Vec::new();
    let mut empty_in_a_row = 0;
    while empty_in_a_row < 2 {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .send()
            .await
            .unwrap();
        if received.messages().is_empty() {
            empty_in_a_row += 1;
            continue;
        }
        empty_in_a_row = 0;
        for message in received.messages() {
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
            let group =
                message.attributes().unwrap()[&MessageSystemAttributeName::MessageGroupId].clone();
            messages.push((group, message.clone()));
        }
    }
    messages
}

pub(super) fn attribute(message: &aws_sdk_sqs::types::Message, name: &str) -> Option<String> {
    message
        .message_attributes()
        .and_then(|attributes| attributes.get(name))
        .and_then(|value| value.string_value())
        .map(str::to_owned)
}

fn envelope(message: &aws_sdk_sqs::types::Message) -> Value {
    serde_json::from_str(message.body().unwrap()).unwrap()
}

pub(super) async fn start_replay(server: &TestServer, request: Value) -> (u16, Value) {
    call_json(&server.url(), "AckBox.StartReplay", &request).await
}

/// Waits for the replay `handle` of `source`'s archive to end; its last
/// report.
pub(super) async fn ended(server: &TestServer, source: &str, handle: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, listing) = call_json(
            &server.url(),
            "AckBox.ListReplays",
            &json!({"SourceArn": source}),
        )
        .await;
        assert_eq!(status, 200, "{listing}");
        let replay = listing["Replays"]
            .as_array()
            .unwrap()
            .iter()
            .find(|replay| replay["TaskHandle"] == handle)
            .cloned()
            .expect("the replay is listed");
        if replay["Status"] != "RUNNING" {
            return replay;
        }
        assert!(
            Instant::now() < deadline,
            "the replay never ended: {replay}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_archived_time_range_replays_into_a_queue_as_first_delivered_and_marked() {
    let (server, clock) = manual_server().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let topic = ackbox_testkit::client::archived_topic(&sns, "orders", 7, &[]).await;
    let attributes = sns
        .get_topic_attributes()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(
        attributes.get("BeginningArchiveTime").map(String::as_str),
        Some("2023-11-14T22:13:20.000Z")
    );
    let live = create(&sqs, "live").await;
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(arn("live"))
        .send()
        .await
        .unwrap();
    // Six publishes a minute apart, placed and cancelled in turn.
    for index in 0..6 {
        sns.publish()
            .topic_arn(&topic)
            .message(format!("order-{index}"))
            .message_attributes(
                "kind",
                kind(if index % 2 == 0 {
                    "placed"
                } else {
                    "cancelled"
                }),
            )
            .send()
            .await
            .unwrap();
        clock.advance_secs(60);
    }
    let first: BTreeMap<String, Value> = take_all(&sqs, &live)
        .await
        .iter()
        .map(|message| {
            let envelope = envelope(message);
            (envelope["Message"].as_str().unwrap().to_owned(), envelope)
        })
        .collect();
    assert_eq!(first.len(), 6);

    // The archive is a queue nothing receives from.
    let archive = sqs
        .list_queues()
        .queue_name_prefix("ackbox-archive-")
        .send()
        .await
        .unwrap()
        .queue_urls()
        .first()
        .cloned()
        .expect("the topic's archive queue");
    let refused = sqs
        .receive_message()
        .queue_url(&archive)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(refused), "InvalidParameterValue");

    // Minutes 1 to 4, the placed ones only: orders 2 and 4 (1 and 3 are
    // passed over), in the envelope with the first delivery's id and time.
    let rebuild = create(&sqs, "rebuild").await;
    let (status, started) = start_replay(
        &server,
        json!({
            "TopicArn": topic,
            "DestinationArn": arn("rebuild"),
            "StartTimestamp": START + MINUTE,
            "EndTimestamp": START + 4 * MINUTE,
            "FilterPolicy": r#"{"kind":["placed"]}"#,
        }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let handle = started["Replay"]["TaskHandle"].as_str().unwrap().to_owned();
    let report = ended(&server, &topic, &handle).await;
    assert_eq!(report["Status"], "COMPLETED", "{report}");
    assert_eq!(report["ApproximateNumberOfMessagesReplayed"], 2);
    assert_eq!(report["ApproximateNumberOfMessagesSkipped"], 2);
    assert_eq!(report["RequestedBy"], "anonymous");
    let mut replayed = take_all(&sqs, &rebuild).await;
    replayed.sort_by_key(|message| envelope(message)["Message"].as_str().unwrap().to_owned());
    let bodies: Vec<_> = replayed
        .iter()
        .map(|message| envelope(message)["Message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(bodies, ["order-2", "order-4"]);
    for message in &replayed {
        let envelope = envelope(message);
        let original = &first[envelope["Message"].as_str().unwrap()];
        assert_eq!(envelope["MessageId"], original["MessageId"]);
        assert_eq!(envelope["Timestamp"], original["Timestamp"]);
        assert_eq!(envelope["MessageAttributes"], original["MessageAttributes"]);
        assert_eq!(attribute(message, "ackbox.replay").as_deref(), Some("true"));
        assert_eq!(
            attribute(message, "ackbox.replay.message_id").as_deref(),
            original["MessageId"].as_str()
        );
        assert_eq!(
            attribute(message, "ackbox.replay.published_at").as_deref(),
            original["Timestamp"].as_str()
        );
    }

    // Everything, raw: the messages alone with their own attributes.
    let raw = create(&sqs, "raw").await;
    let (status, started) = start_replay(
        &server,
        json!({
            "TopicArn": topic,
            "DestinationArn": arn("raw"),
            "StartTimestamp": 0,
            "RawMessageDelivery": true,
            "MaxNumberOfMessagesPerSecond": 50,
        }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let handle = started["Replay"]["TaskHandle"].as_str().unwrap().to_owned();
    assert_eq!(ended(&server, &topic, &handle).await["Status"], "COMPLETED");
    let mut raw_copies = take_all(&sqs, &raw).await;
    raw_copies.sort_by_key(|message| message.body().unwrap().to_owned());
    assert_eq!(
        raw_copies
            .iter()
            .map(|message| message.body().unwrap())
            .collect::<Vec<_>>(),
        [
            "order-0", "order-1", "order-2", "order-3", "order-4", "order-5"
        ]
    );
    assert_eq!(
        attribute(&raw_copies[1], "kind").as_deref(),
        Some("cancelled")
    );
    assert_eq!(
        attribute(&raw_copies[1], "ackbox.replay").as_deref(),
        Some("true")
    );
    assert_eq!(
        take_all(&sqs, &live).await.len(),
        0,
        "the subscriber got nothing again"
    );

    // What is refused, and why.
    for (request, names) in [
        (
            json!({"TopicArn": topic, "DestinationArn": arn("raw"),
                   "StartTimestamp": START + 2 * MINUTE, "EndTimestamp": START}),
            "StartTime",
        ),
        (
            json!({"TopicArn": topic, "DestinationArn": arn("nowhere"), "StartTimestamp": 0}),
            "does not exist",
        ),
        (
            json!({"TopicArn": topic, "DestinationArn": arn("raw"), "StartTimestamp": 0,
                   "MaxNumberOfMessagesPerSecond": 501}),
            "MaxNumberOfMessagesPerSecond",
        ),
        (
            json!({"TopicArn": topic, "DestinationArn": arn("raw"), "StartTimestamp": 0,
                   "FilterPolicy": "{\"kind\": 7}"}),
            "FilterPolicy",
        ),
    ] {
        let (status, error) = start_replay(&server, request).await;
        assert_eq!(status, 400, "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(names),
            "{error}"
        );
    }
    let refused = sns
        .set_topic_attributes()
        .topic_arn(&topic)
        .attribute_name("ArchivePolicy")
        .attribute_value(r#"{"MessageRetentionPeriod":"366"}"#)
        .send()
        .await
        .unwrap_err();
    assert!(
        format!("{refused:?}").contains("from 1 to 365"),
        "{refused:?}"
    );

    // Turning the archive off drops it; there is nothing left to replay.
    sns.set_topic_attributes()
        .topic_arn(&topic)
        .attribute_name("ArchivePolicy")
        .attribute_value("")
        .send()
        .await
        .unwrap();
    assert_eq!(
        sqs.list_queues()
            .queue_name_prefix("ackbox-archive-")
            .send()
            .await
            .unwrap()
            .queue_urls()
            .len(),
        0
    );
    let (status, error) = start_replay(
        &server,
        json!({"TopicArn": topic, "DestinationArn": arn("raw"), "StartTimestamp": 0}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        error["message"].as_str().unwrap().contains("ArchivePolicy"),
        "{error}"
    );
    let plain = create_topic(&sns, "plain").await;
    let (status, error) = start_replay(
        &server,
        json!({"TopicArn": plain, "DestinationArn": arn("raw"), "StartTimestamp": 0}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        error["message"].as_str().unwrap().contains("no archive"),
        "{error}"
    );
}

#[tokio::test]
async fn a_replay_policy_replays_to_a_fifo_subscription_in_group_order_past_its_dedup_window() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let topic = sns
        .create_topic()
        .name("ledger.fifo")
        .attributes("FifoTopic", "true")
        .attributes("ArchivePolicy", r#"{"MessageRetentionPeriod":1}"#)
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let url = sqs
        .create_queue()
        .queue_name("books.fifo")
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let subscription = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(arn("books.fifo"))
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    // Entry 3 is published twice: the archive, a FIFO queue too, keeps it
    // once, as the subscriber does.
    for index in [0, 1, 2, 3, 3, 4, 5, 6, 7] {
        sns.publish()
            .topic_arn(&topic)
            .message(format!("entry-{index}"))
            .message_group_id(format!("account-{}", index % 2))
            .message_deduplication_id(format!("entry-{index}"))
            .send()
            .await
            .unwrap();
    }
    assert_eq!(take_fifo(&sqs, &url).await.len(), 8);

    // Within the queue's five-minute deduplication window: the replay's
    // copies carry its own deduplication ids, so all eight arrive again.
    sns.set_subscription_attributes()
        .subscription_arn(&subscription)
        .attribute_name("ReplayPolicy")
        .attribute_value(r#"{"PointType":"Timestamp","StartingPoint":"2000-01-01T00:00:00.000Z"}"#)
        .send()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = sns
            .get_subscription_attributes()
            .subscription_arn(&subscription)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap()
            .get("ReplayStatus")
            .cloned();
        if status.as_deref() == Some("Completed") {
            break;
        }
        assert_eq!(status.as_deref(), Some("In progress"));
        assert!(Instant::now() < deadline, "the replay never completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut by_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (group, message) in take_fifo(&sqs, &url).await {
        assert_eq!(
            attribute(&message, "ackbox.replay").as_deref(),
            Some("true")
        );
        by_group
            .entry(group)
            .or_default()
            .push(message.body().unwrap().to_owned());
    }
    assert_eq!(
        by_group,
        BTreeMap::from([
            (
                "account-0".to_owned(),
                vec![
                    "entry-0".into(),
                    "entry-2".into(),
                    "entry-4".into(),
                    "entry-6".into()
                ]
            ),
            (
                "account-1".to_owned(),
                vec![
                    "entry-1".into(),
                    "entry-3".into(),
                    "entry-5".into(),
                    "entry-7".into()
                ]
            ),
        ]),
        "every entry again, each group in order"
    );
    let refused = sns
        .set_subscription_attributes()
        .subscription_arn(&subscription)
        .attribute_name("ReplayPolicy")
        .attribute_value(r#"{"PointType":"Timestamp","StartingPoint":"last tuesday"}"#)
        .send()
        .await
        .unwrap_err();
    assert!(format!("{refused:?}").contains("RFC 3339"), "{refused:?}");
}
