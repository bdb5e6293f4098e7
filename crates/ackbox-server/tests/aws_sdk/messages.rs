//! Sending and receiving: attributes and digests byte for byte, refused messages, batches entry by entry, delays and retention.

use super::*;

#[tokio::test]
async fn send_and_receive_carry_attributes_and_digests_exactly() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "digests").await;
    let binary = MessageAttributeValue::builder()
        .data_type("Binary")
        .binary_value(Blob::new(b"Hello binary world!".to_vec()))
        .build()
        .unwrap();
    let number = MessageAttributeValue::builder()
        .data_type("Number.float")
        .string_value("3.25")
        .build()
        .unwrap();
    let sent = client
        .send_message()
        .queue_url(&url)
        .message_body("message")
        .message_attributes("attribName1", string_attribute("attribValue 1"))
        .message_attributes("binaryAttribute", binary)
        .message_attributes("n", number)
        .message_group_id("fair-1")
        .send()
        .await
        .unwrap();
    assert_eq!(
        sent.md5_of_message_body(),
        Some("78e731027d8fd50ed642340b7c9a63b3")
    );
    let mut expected = MessageAttributes::new();
    expected.insert("attribName1".into(), CoreAttribute::string("attribValue 1"));
    expected.insert(
        "binaryAttribute".into(),
        CoreAttribute {
            data_type: "Binary".into(),
            string_value: None,
            binary_value: Some(b"Hello binary world!".to_vec()),
        },
    );
    expected.insert(
        "n".into(),
        CoreAttribute {
            data_type: "Number.float".into(),
            ..CoreAttribute::string("3.25")
        },
    );
    assert_eq!(
        sent.md5_of_message_attributes(),
        md5_of_attributes(&expected).as_deref()
    );

    let received = client
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let message = &received.messages()[0];
    assert_eq!(message.body(), Some("message"));
    assert_eq!(message.message_id(), sent.message_id());
    assert_eq!(message.md5_of_body(), Some(md5_of_body("message").as_str()));
    assert_eq!(
        message.md5_of_message_attributes(),
        sent.md5_of_message_attributes()
    );
    let attributes = message.message_attributes().unwrap();
    assert_eq!(
        attributes["binaryAttribute"]
            .binary_value()
            .unwrap()
            .as_ref(),
        b"Hello binary world!"
    );
    assert_eq!(attributes["n"].string_value(), Some("3.25"));
    let system = message.attributes().unwrap();
    assert_eq!(
        system[&MessageSystemAttributeName::ApproximateReceiveCount],
        "1"
    );
    assert_eq!(
        system[&MessageSystemAttributeName::SenderId],
        "000000000000"
    );
    assert_eq!(
        system[&MessageSystemAttributeName::MessageGroupId],
        "fair-1"
    );
    assert!(
        system[&MessageSystemAttributeName::SentTimestamp]
            .parse::<i64>()
            .unwrap()
            > 0
    );
    assert!(system.contains_key(&MessageSystemAttributeName::ApproximateFirstReceiveTimestamp));

    let only_one = client
        .send_message()
        .queue_url(&url)
        .message_body("b")
        .message_attributes("keep", string_attribute("1"))
        .message_attributes("drop", string_attribute("2"))
        .send()
        .await
        .unwrap();
    let filtered = client
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("keep")
        .send()
        .await
        .unwrap();
    let message = &filtered.messages()[0];
    assert_eq!(message.message_id(), only_one.message_id());
    assert_eq!(message.message_attributes().unwrap().len(), 1);
    let mut kept = MessageAttributes::new();
    kept.insert("keep".into(), CoreAttribute::string("1"));
    assert_eq!(
        message.md5_of_message_attributes(),
        md5_of_attributes(&kept).as_deref()
    );
}

#[tokio::test]
async fn bad_messages_are_refused_with_the_sqs_code() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "strict").await;
    let control = client
        .send_message()
        .queue_url(&url)
        .message_body("bell\u{7}")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(control), "InvalidMessageContents");
    let too_big = client
        .send_message()
        .queue_url(&url)
        .message_body("x".repeat(1_048_577))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(too_big), "InvalidParameterValue");
    let delay = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .delay_seconds(901)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(delay), "InvalidParameterValue");
    let reserved = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_attributes("AWS.reserved", string_attribute("v"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(reserved), "InvalidParameterValue");
    let dedup = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(dedup), "InvalidParameterValue");
    client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::MaximumMessageSize, "1024")
        .send()
        .await
        .unwrap();
    let over_queue_limit = client
        .send_message()
        .queue_url(&url)
        .message_body("x".repeat(1_025))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(over_queue_limit), "InvalidParameterValue");
    client
        .send_message()
        .queue_url(&url)
        .message_body("x".repeat(1_024))
        .send()
        .await
        .unwrap();

    for (max, wait, visibility) in [(11, 0, 30), (0, 0, 30), (1, 21, 30), (1, 0, 43_201)] {
        let error = client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(max)
            .wait_time_seconds(wait)
            .visibility_timeout(visibility)
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            code(error),
            "InvalidParameterValue",
            "max {max} wait {wait} visibility {visibility}"
        );
    }
    let received = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        received.messages().len(),
        1,
        "the valid message is still there"
    );
}

fn send_entry(id: &str, body: &str) -> SendMessageBatchRequestEntry {
    SendMessageBatchRequestEntry::builder()
        .id(id)
        .message_body(body)
        .build()
        .unwrap()
}

#[tokio::test]
async fn batches_succeed_and_fail_entry_by_entry() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "batches").await;
    let sent = client
        .send_message_batch()
        .queue_url(&url)
        .entries(send_entry("a", "one"))
        .entries(send_entry("b", "two"))
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("c")
                .message_body("three")
                .delay_seconds(1_000)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(sent.successful().len(), 2);
    assert_eq!(sent.failed().len(), 1);
    assert_eq!(sent.failed()[0].id(), "c");
    assert_eq!(sent.failed()[0].code(), "InvalidParameterValue");
    assert!(sent.failed()[0].sender_fault());

    let received = client
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    assert_eq!(received.messages().len(), 2);
    let handles: Vec<&str> = received
        .messages()
        .iter()
        .map(|message| message.receipt_handle().unwrap())
        .collect();

    let changed = client
        .change_message_visibility_batch()
        .queue_url(&url)
        .entries(
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id("x")
                .receipt_handle(handles[0])
                .visibility_timeout(60)
                .build()
                .unwrap(),
        )
        .entries(
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id("y")
                .receipt_handle("garbage")
                .visibility_timeout(60)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(changed.successful().len(), 1);
    assert_eq!(changed.failed()[0].code(), "ReceiptHandleIsInvalid");

    let deleted = client
        .delete_message_batch()
        .queue_url(&url)
        .entries(
            DeleteMessageBatchRequestEntry::builder()
                .id("x")
                .receipt_handle(handles[0])
                .build()
                .unwrap(),
        )
        .entries(
            DeleteMessageBatchRequestEntry::builder()
                .id("y")
                .receipt_handle(handles[1])
                .build()
                .unwrap(),
        )
        .entries(
            DeleteMessageBatchRequestEntry::builder()
                .id("z")
                .receipt_handle("garbage")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.successful().len(), 2);
    assert_eq!(deleted.failed()[0].id(), "z");

    let empty = client
        .send_message_batch()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(empty), "AWS.SimpleQueueService.EmptyBatchRequest");
    let mut eleven = client.send_message_batch().queue_url(&url);
    for index in 0..11 {
        eleven = eleven.entries(send_entry(&format!("e{index}"), "x"));
    }
    assert_eq!(
        code(eleven.send().await.unwrap_err()),
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
    );
    let duplicate = client
        .send_message_batch()
        .queue_url(&url)
        .entries(send_entry("same", "1"))
        .entries(send_entry("same", "2"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(duplicate),
        "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
    );
    let bad_id = client
        .send_message_batch()
        .queue_url(&url)
        .entries(send_entry("no way", "1"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(bad_id), "AWS.SimpleQueueService.InvalidBatchEntryId");
    let body = "x".repeat(110_000);
    let mut too_long = client.send_message_batch().queue_url(&url);
    for index in 0..10 {
        too_long = too_long.entries(send_entry(&format!("e{index}"), &body));
    }
    assert_eq!(
        code(too_long.send().await.unwrap_err()),
        "AWS.SimpleQueueService.BatchRequestTooLong"
    );
}

#[tokio::test]
async fn delays_per_queue_and_per_message_hold_messages_back() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = client
        .create_queue()
        .queue_name("delayed")
        .attributes(QueueAttributeName::DelaySeconds, "5")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body("queue-delay")
        .send()
        .await
        .unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body("own-delay")
        .delay_seconds(10)
        .send()
        .await
        .unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body("no-delay")
        .delay_seconds(0)
        .send()
        .await
        .unwrap();
    let bodies =
        |output: aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput| -> Vec<String> {
            output
                .messages()
                .iter()
                .map(|message| message.body().unwrap().to_owned())
                .collect()
        };
    assert_eq!(
        bodies(
            client
                .receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .send()
                .await
                .unwrap()
        ),
        ["no-delay"]
    );
    let counts = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .unwrap();
    assert_eq!(
        counts.attributes().unwrap()[&QueueAttributeName::ApproximateNumberOfMessagesDelayed],
        "2"
    );
    clock.advance_secs(5);
    assert_eq!(
        bodies(
            client
                .receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .send()
                .await
                .unwrap()
        ),
        ["queue-delay"]
    );
    clock.advance_secs(5);
    assert_eq!(
        bodies(
            client
                .receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .send()
                .await
                .unwrap()
        ),
        ["own-delay"]
    );
}

#[tokio::test]
async fn messages_past_retention_are_dropped() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = client
        .create_queue()
        .queue_name("brief")
        .attributes(QueueAttributeName::MessageRetentionPeriod, "60")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body("old")
        .send()
        .await
        .unwrap();
    clock.advance_secs(30);
    client
        .send_message()
        .queue_url(&url)
        .message_body("young")
        .send()
        .await
        .unwrap();
    clock.advance_secs(31);
    assert_eq!(receive_bodies(&client, &url).await, ["young"]);
}
