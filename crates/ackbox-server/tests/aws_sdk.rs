//! End-to-end tests with the official `aws-sdk-sqs` client against a real
//! broker on 127.0.0.1: every supported action, and the SQS errors a client
//! branches on (invariants 2, 3 and 6, ARCHITECTURE.md).

use std::time::{Duration, Instant};

use ackbox_core::clock::ManualClock;
use ackbox_core::digest::{md5_of_attributes, md5_of_body};
use ackbox_core::message::{MessageAttributeValue as CoreAttribute, MessageAttributes};
use ackbox_testkit::client::{
    create_queue as create, error_code as code, queue_arn, queue_depth, receive_bodies,
};
use ackbox_testkit::server::TestServer;
use aws_sdk_sqs::error::SdkError;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};

const START: i64 = 1_700_000_000_000;

async fn manual_server() -> (TestServer, ManualClock) {
    let clock = ManualClock::new(START);
    let server = TestServer::builder().clock(clock.clone()).start().await;
    (server, clock)
}

#[tokio::test]
async fn create_get_url_and_list_queues_with_prefix_and_pages() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "orders-1").await;
    assert_eq!(url, format!("{}/000000000000/orders-1", server.url()));
    for name in ["orders-2", "orders-3", "billing"] {
        create(&client, name).await;
    }
    let got = client
        .get_queue_url()
        .queue_name("orders-1")
        .send()
        .await
        .unwrap();
    assert_eq!(got.queue_url(), Some(url.as_str()));

    let all = client.list_queues().send().await.unwrap();
    assert_eq!(all.queue_urls().len(), 4);
    assert!(all.next_token().is_none());

    let first = client
        .list_queues()
        .queue_name_prefix("orders")
        .max_results(2)
        .send()
        .await
        .unwrap();
    assert_eq!(first.queue_urls().len(), 2);
    let token = first.next_token().expect("a second page").to_owned();
    let second = client
        .list_queues()
        .queue_name_prefix("orders")
        .max_results(2)
        .next_token(token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        second.queue_urls(),
        [format!("{}/000000000000/orders-3", server.url())]
    );
    assert!(second.next_token().is_none());

    let missing = client
        .get_queue_url()
        .queue_name("nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(missing), "AWS.SimpleQueueService.NonExistentQueue");
    let bad_page = client
        .list_queues()
        .max_results(1001)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(bad_page), "InvalidParameterValue");
}

#[tokio::test]
async fn create_queue_is_idempotent_but_refuses_different_attributes() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let first = client
        .create_queue()
        .queue_name("q")
        .attributes(QueueAttributeName::VisibilityTimeout, "45")
        .send()
        .await
        .unwrap();
    let again = client
        .create_queue()
        .queue_name("q")
        .attributes(QueueAttributeName::VisibilityTimeout, "45")
        .send()
        .await
        .unwrap();
    assert_eq!(first.queue_url(), again.queue_url());
    let different = client
        .create_queue()
        .queue_name("q")
        .attributes(QueueAttributeName::VisibilityTimeout, "46")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(different), "QueueAlreadyExists");
    let bad_name = client
        .create_queue()
        .queue_name("no spaces")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(bad_name), "InvalidParameterValue");
    // The type and the name must agree.
    let fifo_name_only = client
        .create_queue()
        .queue_name("orders.fifo")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(fifo_name_only), "InvalidParameterValue");
    let fifo_attribute_only = client
        .create_queue()
        .queue_name("orders")
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(fifo_attribute_only), "InvalidParameterValue");
}

#[tokio::test]
async fn deleted_queue_is_gone_and_cannot_be_recreated_for_60_seconds() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = create(&client, "short-lived").await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap();
    client.delete_queue().queue_url(&url).send().await.unwrap();
    let send = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(send), "AWS.SimpleQueueService.NonExistentQueue");
    let recreate = client
        .create_queue()
        .queue_name("short-lived")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(recreate),
        "AWS.SimpleQueueService.QueueDeletedRecently"
    );
    clock.advance_secs(61);
    let url = create(&client, "short-lived").await;
    let attributes = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attributes.attributes().unwrap()[&QueueAttributeName::ApproximateNumberOfMessages],
        "0"
    );
}

#[tokio::test]
async fn queue_attributes_round_trip_and_bad_values_are_refused() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "attrs").await;
    client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::DelaySeconds, "5")
        .attributes(QueueAttributeName::MessageRetentionPeriod, "600")
        .send()
        .await
        .unwrap();
    let all = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let attributes = all.attributes().unwrap();
    assert_eq!(attributes[&QueueAttributeName::DelaySeconds], "5");
    assert_eq!(
        attributes[&QueueAttributeName::MessageRetentionPeriod],
        "600"
    );
    assert_eq!(attributes[&QueueAttributeName::VisibilityTimeout], "30");
    assert_eq!(
        attributes[&QueueAttributeName::QueueArn],
        "arn:aws:sqs:us-east-1:000000000000:attrs"
    );
    assert!(attributes.contains_key(&QueueAttributeName::CreatedTimestamp));
    assert!(attributes.contains_key(&QueueAttributeName::ApproximateNumberOfMessagesDelayed));

    let out_of_range = client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::VisibilityTimeout, "43201")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(out_of_range), "InvalidAttributeValue");
    let unknown = client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::from("Colour"), "blue")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(unknown), "InvalidAttributeName");
    let unchanged = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .send()
        .await
        .unwrap();
    assert_eq!(
        unchanged.attributes().unwrap()[&QueueAttributeName::VisibilityTimeout],
        "30"
    );
}

#[tokio::test]
async fn tags_are_added_listed_and_removed() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = client
        .create_queue()
        .queue_name("tagged")
        .tags("team", "payments")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    client
        .tag_queue()
        .queue_url(&url)
        .tags("env", "prod")
        .send()
        .await
        .unwrap();
    let tags = client
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    let tags = tags.tags().unwrap();
    assert_eq!(tags.get("team").map(String::as_str), Some("payments"));
    assert_eq!(tags.get("env").map(String::as_str), Some("prod"));
    client
        .untag_queue()
        .queue_url(&url)
        .tag_keys("team")
        .send()
        .await
        .unwrap();
    let tags = client
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(tags.tags().unwrap().len(), 1);
}

fn string_attribute(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .unwrap()
}

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
async fn inv3_visibility_is_a_lease_that_can_be_extended_shortened_and_ended() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = create(&client, "leases").await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("job")
        .send()
        .await
        .unwrap();
    let first = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(10)
        .send()
        .await
        .unwrap();
    let handle = first.messages()[0].receipt_handle().unwrap().to_owned();
    assert!(
        client
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty()
    );

    clock.advance_secs(9);
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(20)
        .send()
        .await
        .unwrap();
    clock.advance_secs(19);
    assert!(
        client
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty(),
        "extended lease holds"
    );
    clock.advance_secs(2);
    let second = client
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .unwrap();
    let message = &second.messages()[0];
    assert_eq!(
        message.attributes().unwrap()[&MessageSystemAttributeName::ApproximateReceiveCount],
        "2"
    );
    let new_handle = message.receipt_handle().unwrap().to_owned();
    assert_ne!(new_handle, handle, "each receive issues a new handle");

    let stale = client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(5)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(stale), "InvalidParameterValue");
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&new_handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let third = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        third.messages().len(),
        1,
        "visibility 0 releases the message at once"
    );
    let third_handle = third.messages()[0].receipt_handle().unwrap().to_owned();
    clock.advance_secs(31);
    let expired = client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&third_handle)
        .visibility_timeout(5)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(expired), "AWS.SimpleQueueService.MessageNotInflight");

    client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&third_handle)
        .send()
        .await
        .unwrap();
    client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&third_handle)
        .send()
        .await
        .unwrap();
    clock.advance_secs(60);
    assert!(
        client
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty(),
        "deleted stays deleted"
    );
}

#[tokio::test]
async fn inv2_a_stale_handle_cannot_delete_a_message_someone_else_holds() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = create(&client, "contended").await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("job")
        .send()
        .await
        .unwrap();
    let first = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(5)
        .send()
        .await
        .unwrap();
    let stale = first.messages()[0].receipt_handle().unwrap().to_owned();
    clock.advance_secs(6);
    let second = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(30)
        .send()
        .await
        .unwrap();
    let current = second.messages()[0].receipt_handle().unwrap().to_owned();

    // SQS answers success for a stale handle, but the new holder keeps the message.
    client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&stale)
        .send()
        .await
        .unwrap();
    clock.advance_secs(31);
    let again = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.messages().len(),
        1,
        "the message survived the stale delete"
    );
    let latest = again.messages()[0].receipt_handle().unwrap();
    client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(latest)
        .send()
        .await
        .unwrap();
    clock.advance_secs(31);
    assert!(
        client
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty()
    );
    let _ = current;
}

#[tokio::test]
async fn forged_garbled_and_foreign_receipt_handles_are_invalid() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let first = create(&client, "first").await;
    let second = create(&client, "second").await;
    client
        .send_message()
        .queue_url(&first)
        .message_body("x")
        .send()
        .await
        .unwrap();
    let received = client
        .receive_message()
        .queue_url(&first)
        .send()
        .await
        .unwrap();
    let handle = received.messages()[0].receipt_handle().unwrap();
    let foreign = client
        .delete_message()
        .queue_url(&second)
        .receipt_handle(handle)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(foreign), "ReceiptHandleIsInvalid");
    let mut forged = handle.to_owned();
    forged.replace_range(4..5, if &forged[4..5] == "A" { "B" } else { "A" });
    let forged = client
        .delete_message()
        .queue_url(&first)
        .receipt_handle(forged)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(forged), "ReceiptHandleIsInvalid");
    let garbage = client
        .delete_message()
        .queue_url(&first)
        .receipt_handle("garbage")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(garbage), "ReceiptHandleIsInvalid");
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

#[tokio::test]
async fn long_poll_returns_as_soon_as_a_message_arrives() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "long-poll").await;
    let poller = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let output = client
                .receive_message()
                .queue_url(url)
                .wait_time_seconds(20)
                .send()
                .await
                .unwrap();
            (output.messages().len(), started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("wake up")
        .send()
        .await
        .unwrap();
    let (count, waited) = poller.await.unwrap();
    assert_eq!(count, 1);
    assert!(
        waited < Duration::from_secs(10),
        "the poller woke on the send, not on its 20 s timeout ({waited:?})"
    );

    let started = Instant::now();
    let empty = client
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(empty.messages().is_empty());
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "an empty long poll waits its full time"
    );
}

#[tokio::test]
async fn long_poll_wakes_when_a_lease_is_released() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "released").await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("m")
        .send()
        .await
        .unwrap();
    let held = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(600)
        .send()
        .await
        .unwrap();
    let handle = held.messages()[0].receipt_handle().unwrap().to_owned();
    let poller = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            client
                .receive_message()
                .queue_url(url)
                .wait_time_seconds(20)
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .expect("woken before 10 s")
        .unwrap();
    assert_eq!(output.messages().len(), 1);
}

#[tokio::test]
async fn purge_empties_the_queue_once_per_minute() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = create(&client, "purged").await;
    for index in 0..3 {
        client
            .send_message()
            .queue_url(&url)
            .message_body(format!("m{index}"))
            .send()
            .await
            .unwrap();
    }
    client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    client.purge_queue().queue_url(&url).send().await.unwrap();
    let again = client
        .purge_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err();
    let SdkError::ServiceError(context) = &again else {
        panic!("service error expected")
    };
    assert_eq!(context.raw().status().as_u16(), 403);
    assert_eq!(code(again), "AWS.SimpleQueueService.PurgeQueueInProgress");
    clock.advance_secs(3_600);
    assert!(
        client
            .receive_message()
            .queue_url(&url)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty(),
        "in-flight messages were purged too"
    );
    client.purge_queue().queue_url(&url).send().await.unwrap();
}

#[tokio::test]
async fn inv2_restart_recovers_queues_attributes_tags_and_messages() {
    let (mut server, clock) = manual_server().await;
    let client = server.client();
    let url = client
        .create_queue()
        .queue_name("durable")
        .attributes(QueueAttributeName::VisibilityTimeout, "40")
        .tags("owner", "ops")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body("waiting")
        .send()
        .await
        .unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body("in-flight")
        .send()
        .await
        .unwrap();
    let held = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    let held_body = held.messages()[0].body().unwrap().to_owned();
    let held_handle = held.messages()[0].receipt_handle().unwrap().to_owned();

    server.restart().await;
    let client = server.client();
    let attributes = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let attributes = attributes.attributes().unwrap();
    assert_eq!(attributes[&QueueAttributeName::VisibilityTimeout], "40");
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessages],
        "1"
    );
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "1"
    );
    let tags = client
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(tags.tags().unwrap()["owner"], "ops");

    // The lease survives the restart, and so does the handle's key.
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&held_handle)
        .visibility_timeout(40)
        .send()
        .await
        .unwrap();
    let visible = client
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    assert_eq!(visible.messages().len(), 1);
    assert_ne!(visible.messages()[0].body().unwrap(), held_body);
    clock.advance_secs(41);
    let bodies = receive_bodies(&client, &url).await;
    assert!(
        bodies.contains(&held_body),
        "the in-flight message is receivable after its lease: {bodies:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn queue_wait_time_attribute_makes_every_receive_a_long_poll() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = client
        .create_queue()
        .queue_name("patient")
        .attributes(QueueAttributeName::ReceiveMessageWaitTimeSeconds, "20")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let poller = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            client
                .receive_message()
                .queue_url(url)
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !poller.is_finished(),
        "a receive without WaitTimeSeconds waits the queue's 20 s"
    );
    client
        .send_message()
        .queue_url(&url)
        .message_body("arrived")
        .send()
        .await
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .expect("woken by the send")
        .unwrap();
    assert_eq!(output.messages()[0].body(), Some("arrived"));
    let started = Instant::now();
    let immediate = client
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(0)
        .send()
        .await
        .unwrap();
    assert!(immediate.messages().is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "WaitTimeSeconds=0 overrides the queue default"
    );
}

fn redrive_policy(dlq_arn: &str, max_receive_count: u32) -> String {
    format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":{max_receive_count}}}"#)
}

#[tokio::test]
async fn inv4_a_message_received_too_often_moves_to_the_dead_letter_queue_intact() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let dlq = create(&client, "orders-dlq").await;
    let dlq_arn = queue_arn(&client, &dlq).await;
    let source = client
        .create_queue()
        .queue_name("orders")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            redrive_policy(&dlq_arn, 2),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let sent = client
        .send_message()
        .queue_url(&source)
        .message_body("poison")
        .message_attributes("kind", string_attribute("order"))
        .send()
        .await
        .unwrap();
    for attempt in 1..=2 {
        let received = client
            .receive_message()
            .queue_url(&source)
            .visibility_timeout(5)
            .send()
            .await
            .unwrap();
        assert_eq!(
            received.messages().len(),
            1,
            "receive {attempt} is within maxReceiveCount"
        );
        clock.advance_secs(6);
    }
    let third = client
        .receive_message()
        .queue_url(&source)
        .send()
        .await
        .unwrap();
    assert!(
        third.messages().is_empty(),
        "the third receive would exceed maxReceiveCount: the message moved"
    );

    let dead = client
        .receive_message()
        .queue_url(&dlq)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let message = &dead.messages()[0];
    assert_eq!(message.message_id(), sent.message_id());
    assert_eq!(message.body(), Some("poison"));
    assert_eq!(
        message.md5_of_message_attributes(),
        sent.md5_of_message_attributes()
    );
    assert_eq!(
        message.message_attributes().unwrap()["kind"].string_value(),
        Some("order")
    );
    let system = message.attributes().unwrap();
    assert_eq!(
        system[&MessageSystemAttributeName::DeadLetterQueueSourceArn],
        "arn:aws:sqs:us-east-1:000000000000:orders"
    );
    assert_eq!(
        system[&MessageSystemAttributeName::SentTimestamp],
        START.to_string(),
        "SentTimestamp is the original send"
    );
    assert_eq!(
        system[&MessageSystemAttributeName::ApproximateFirstReceiveTimestamp],
        START.to_string(),
        "the first receive time travels with the message"
    );
    assert_eq!(
        system[&MessageSystemAttributeName::ApproximateReceiveCount],
        "3",
        "the receive count carries on in the dead-letter queue"
    );

    let sources = client
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .unwrap();
    assert_eq!(sources.queue_urls(), std::slice::from_ref(&source));
    let counts = client
        .get_queue_attributes()
        .queue_url(&source)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let counts = counts.attributes().unwrap();
    assert_eq!(
        counts[&QueueAttributeName::ApproximateNumberOfMessages],
        "0"
    );
    assert_eq!(
        counts[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "0"
    );
    assert_eq!(
        counts[&QueueAttributeName::RedrivePolicy],
        redrive_policy(&dlq_arn, 2)
    );
}

#[tokio::test]
async fn redrive_policies_are_validated_when_set() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let source = create(&client, "source").await;
    let source_arn = queue_arn(&client, &source).await;
    let missing = "arn:aws:sqs:us-east-1:000000000000:nowhere";
    let set = |policy: String| {
        client
            .set_queue_attributes()
            .queue_url(&source)
            .attributes(QueueAttributeName::RedrivePolicy, policy)
            .send()
    };

    assert_eq!(
        code(set(redrive_policy(missing, 3)).await.unwrap_err()),
        "InvalidParameterValue",
        "unknown DLQ"
    );
    assert_eq!(
        code(set(redrive_policy(&source_arn, 3)).await.unwrap_err()),
        "InvalidParameterValue",
        "DLQ = source"
    );
    let dlq = create(&client, "dlq").await;
    let dlq_arn = queue_arn(&client, &dlq).await;
    for count in [0, 1001] {
        assert_eq!(
            code(set(redrive_policy(&dlq_arn, count)).await.unwrap_err()),
            "InvalidParameterValue",
            "maxReceiveCount {count}"
        );
    }
    assert_eq!(
        code(set("{not json".to_owned()).await.unwrap_err()),
        "InvalidParameterValue"
    );

    let allow = |policy: &str| {
        client
            .set_queue_attributes()
            .queue_url(&dlq)
            .attributes(QueueAttributeName::RedriveAllowPolicy, policy)
            .send()
    };
    allow(r#"{"redrivePermission":"denyAll"}"#).await.unwrap();
    assert_eq!(
        code(set(redrive_policy(&dlq_arn, 3)).await.unwrap_err()),
        "InvalidParameterValue",
        "denyAll refuses"
    );
    allow(r#"{"redrivePermission":"byQueue","sourceQueueArns":["arn:aws:sqs:us-east-1:000000000000:other"]}"#).await.unwrap();
    assert_eq!(
        code(set(redrive_policy(&dlq_arn, 3)).await.unwrap_err()),
        "InvalidParameterValue",
        "byQueue without us refuses"
    );
    allow(&format!(
        r#"{{"redrivePermission":"byQueue","sourceQueueArns":["{source_arn}"]}}"#
    ))
    .await
    .unwrap();
    set(redrive_policy(&dlq_arn, 3)).await.unwrap();
    assert_eq!(
        code(
            allow(r#"{"redrivePermission":"byQueue"}"#)
                .await
                .unwrap_err()
        ),
        "InvalidParameterValue"
    );

    // The empty string removes the policy.
    set(String::new()).await.unwrap();
    let attributes = client
        .get_queue_attributes()
        .queue_url(&source)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    assert!(
        !attributes
            .attributes()
            .unwrap()
            .contains_key(&QueueAttributeName::RedrivePolicy)
    );
    let sources = client
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .unwrap();
    assert!(sources.queue_urls().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_deeper_than_one_transaction_empties_the_queue_within_seconds_and_keeps_later_sends()
 {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create(&client, "deep").await;
    let total = ackbox_engine::PURGE_AT_ONCE as usize + 1_500;
    ackbox_testkit::client::send_numbered(&client, &url, total, |index| {
        SendMessageBatchRequestEntry::builder()
            .id(format!("m{index}"))
            .message_body(format!("before {index}"))
            .build()
            .unwrap()
    })
    .await;
    let depth = || queue_depth(&client, &url);
    assert_eq!(depth().await, total);
    client.purge_queue().queue_url(&url).send().await.unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body("after")
        .send()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while depth().await > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(depth().await, 1, "the sweeper finished the purge");
    assert_eq!(
        receive_bodies(&client, &url).await,
        ["after"],
        "a send after the purge is kept"
    );
}
