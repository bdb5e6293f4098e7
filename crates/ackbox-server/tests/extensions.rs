//! ackbox's protocol extensions end to end (invariant 4, ARCHITECTURE.md): NackMessage
//! records why a message failed and dead-letters permanent failures at once;
//! PeekMessages reads a dead-letter queue without touching it; the official
//! SDK reads the failure metadata as system attributes without breaking.

use ackbox_testkit::client::{call_json, create_queue as create};
use ackbox_testkit::server::TestServer;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use serde_json::{Value, json};

/// A source queue with a dead-letter queue after `max_receive_count` receives.
async fn with_dead_letter_queue(client: &Client, max_receive_count: u32) -> (String, String) {
    let dlq = create(client, "failures-dlq").await;
    let dlq_arn = "arn:aws:sqs:us-east-1:000000000000:failures-dlq";
    let source = client
        .create_queue()
        .queue_name("failures")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(
                r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":{max_receive_count}}}"#
            ),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    (source, dlq)
}

async fn receive_handle(client: &Client, url: &str) -> String {
    let received = client
        .receive_message()
        .queue_url(url)
        .send()
        .await
        .unwrap();
    received.messages()[0].receipt_handle().unwrap().to_owned()
}

async fn nack(server: &TestServer, body: Value) -> (u16, Value) {
    call_json(&server.url(), "AckBox.NackMessage", &body).await
}

#[tokio::test]
async fn inv4_a_permanent_nack_dead_letters_at_once_with_its_reason() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let (source, dlq) = with_dead_letter_queue(&client, 5).await;
    let sent = client
        .send_message()
        .queue_url(&source)
        .message_body("charge card 42")
        .send()
        .await
        .unwrap();
    let handle = receive_handle(&client, &source).await;
    let (status, reply) = nack(
        &server,
        json!({
            "QueueUrl": source, "ReceiptHandle": handle, "Permanent": true,
            "Reason": { "Class": "CardDeclined", "Message": "issuer said no" }
        }),
    )
    .await;
    assert_eq!(
        (status, reply["Disposition"].as_str()),
        (200, Some("DeadLettered"))
    );
    assert!(
        client
            .receive_message()
            .queue_url(&source)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty()
    );

    // The official SDK reads the extension attributes as unknown names, intact.
    let class = MessageSystemAttributeName::from("AckBoxFailureClass");
    let message = MessageSystemAttributeName::from("AckBoxFailureMessage");
    let count = MessageSystemAttributeName::from("AckBoxFailureCount");
    let received = client
        .receive_message()
        .queue_url(&dlq)
        .message_system_attribute_names(class.clone())
        .message_system_attribute_names(message.clone())
        .message_system_attribute_names(count.clone())
        .message_system_attribute_names(MessageSystemAttributeName::DeadLetterQueueSourceArn)
        .send()
        .await
        .unwrap();
    let dead = &received.messages()[0];
    assert_eq!(dead.message_id(), sent.message_id());
    let attributes = dead.attributes().unwrap();
    assert_eq!(attributes[&class], "CardDeclined");
    assert_eq!(attributes[&message], "issuer said no");
    assert_eq!(attributes[&count], "1");
    assert_eq!(
        attributes[&MessageSystemAttributeName::DeadLetterQueueSourceArn],
        "arn:aws:sqs:us-east-1:000000000000:failures"
    );
}

#[tokio::test]
async fn a_transient_nack_retries_after_its_delay_and_counts_failures() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let (source, dlq) = with_dead_letter_queue(&client, 3).await;
    client
        .send_message()
        .queue_url(&source)
        .message_body("flaky")
        .send()
        .await
        .unwrap();
    for attempt in 1..=2 {
        let handle = receive_handle(&client, &source).await;
        let (status, reply) = nack(
            &server,
            json!({ "QueueUrl": source, "ReceiptHandle": handle, "Reason": { "Class": "Timeout", "Message": format!("attempt {attempt}") } }),
        )
        .await;
        assert_eq!(
            (status, reply["Disposition"].as_str()),
            (200, Some("Retried")),
            "attempt {attempt}"
        );
    }
    // `All` is AWS's set; ackbox's own attributes come when named.
    let all = client
        .receive_message()
        .queue_url(&source)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_system_attribute_names("AckBoxFailureCount".into())
        .message_system_attribute_names("AckBoxFailureMessage".into())
        .message_system_attribute_names("AckBoxFirstFailureTimestamp".into())
        .send()
        .await
        .unwrap();
    let attributes = all.messages()[0].attributes().unwrap();
    assert!(attributes.contains_key(&MessageSystemAttributeName::SentTimestamp));
    assert!(
        !attributes.contains_key(&MessageSystemAttributeName::from(
            "AckBoxLastReceiveTimestamp"
        )),
        "All returned an attribute AWS does not have: {attributes:?}"
    );
    assert_eq!(
        attributes[&MessageSystemAttributeName::from("AckBoxFailureCount")],
        "2"
    );
    assert_eq!(
        attributes[&MessageSystemAttributeName::from("AckBoxFailureMessage")],
        "attempt 2"
    );
    assert!(attributes.contains_key(&MessageSystemAttributeName::from(
        "AckBoxFirstFailureTimestamp"
    )));

    // The third lease used the last receive: a nack now dead-letters at once.
    let handle = all.messages()[0].receipt_handle().unwrap();
    let (_, reply) = nack(
        &server,
        json!({ "QueueUrl": source, "ReceiptHandle": handle, "DelaySeconds": 60 }),
    )
    .await;
    assert_eq!(reply["Disposition"], "DeadLettered");
    let (status, peeked) = call_json(
        &server.url(),
        "AckBox.PeekMessages",
        &json!({ "QueueUrl": dlq, "MessageSystemAttributeNames": ["All", "AckBoxFailureClass", "AckBoxLastReceiveTimestamp"] }),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(peeked["Messages"][0]["Body"], "flaky");
    assert_eq!(
        peeked["Messages"][0]["Attributes"]["AckBoxFailureClass"],
        "Timeout"
    );
    assert!(
        peeked["Messages"][0].get("ReceiptHandle").is_none(),
        "a peek leases nothing"
    );
    let attributes = &peeked["Messages"][0]["Attributes"];
    assert_eq!(attributes["ApproximateReceiveCount"], "3");
    let first: i64 = attributes["ApproximateFirstReceiveTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let last: i64 = attributes["AckBoxLastReceiveTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        last >= first,
        "the first and last receive times travel into the dead-letter queue"
    );

    let (status, summary) = call_json(
        &server.url(),
        "AckBox.SummarizeQueue",
        &json!({ "QueueUrl": dlq }),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(summary["Total"], 1);
    assert_eq!(summary["Classes"][0]["Class"], "Timeout");
    assert_eq!(summary["Classes"][0]["ExampleMessage"], "attempt 2");
    // Filtered as a move task would filter (what a redrive's dry run shows).
    for (filter, total) in [
        (json!({"AckBoxFailureClass": "Timeout"}), 1),
        (json!({"AckBoxFailureClass": "Other"}), 0),
        (json!({"AckBoxOlderThanSeconds": 0}), 1),
        (json!({"AckBoxOlderThanSeconds": 3_600}), 0),
    ] {
        let mut request = filter.clone();
        request["QueueUrl"] = json!(dlq);
        let (status, summary) = call_json(&server.url(), "AckBox.SummarizeQueue", &request).await;
        assert_eq!(status, 200);
        assert_eq!(summary["Total"], total, "{filter}");
    }
}

#[tokio::test]
async fn a_nack_with_a_delay_keeps_the_message_back() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let queue = create(&client, "delayed-retry").await;
    client
        .send_message()
        .queue_url(&queue)
        .message_body("later")
        .send()
        .await
        .unwrap();
    let handle = receive_handle(&client, &queue).await;
    let (_, reply) = nack(
        &server,
        json!({ "QueueUrl": queue, "ReceiptHandle": handle, "DelaySeconds": 600 }),
    )
    .await;
    assert_eq!(reply["Disposition"], "Retried");
    assert!(
        client
            .receive_message()
            .queue_url(&queue)
            .send()
            .await
            .unwrap()
            .messages()
            .is_empty()
    );
    let counts = client
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    assert_eq!(
        counts.attributes().unwrap()[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "1"
    );
}

#[tokio::test]
async fn peek_changes_nothing() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let queue = create(&client, "peeked").await;
    for index in 0..3 {
        client
            .send_message()
            .queue_url(&queue)
            .message_body(format!("m{index}"))
            .send()
            .await
            .unwrap();
    }
    for _ in 0..2 {
        let (status, peeked) = call_json(
            &server.url(),
            "AckBox.PeekMessages",
            &json!({ "QueueUrl": queue, "MaxNumberOfMessages": 2 }),
        )
        .await;
        assert_eq!(status, 200);
        let bodies: Vec<&str> = peeked["Messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|message| message["Body"].as_str().unwrap())
            .collect();
        assert_eq!(bodies, ["m0", "m1"]);
    }
    let received = client
        .receive_message()
        .queue_url(&queue)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    assert_eq!(received.messages().len(), 3, "peeking leased nothing");
    let (status, error) = call_json(
        &server.url(),
        "AckBox.PeekMessages",
        &json!({ "QueueUrl": queue, "MaxNumberOfMessages": 101 }),
    )
    .await;
    assert_eq!(
        (status, error["__type"].as_str()),
        (
            400,
            Some("com.amazonaws.sqs#InvalidParameterValueException")
        )
    );
}

#[tokio::test]
async fn bad_nacks_get_sqs_errors_and_change_nothing() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let queue = create(&client, "strict-nacks").await;
    client
        .send_message()
        .queue_url(&queue)
        .message_body("m")
        .send()
        .await
        .unwrap();
    let handle = receive_handle(&client, &queue).await;
    let cases = [
        (
            json!({ "QueueUrl": queue, "ReceiptHandle": handle, "DelaySeconds": 43_201 }),
            "InvalidParameterValueException",
        ),
        (
            json!({ "QueueUrl": queue, "ReceiptHandle": handle, "Reason": { "Class": "" } }),
            "InvalidParameterValueException",
        ),
        (
            json!({ "QueueUrl": queue, "ReceiptHandle": handle, "Reason": { "Class": "x", "Message": "m".repeat(4_097) } }),
            "InvalidParameterValueException",
        ),
        (
            json!({ "QueueUrl": queue, "ReceiptHandle": handle, "Permanent": true }),
            "InvalidParameterValueException",
        ),
        (
            json!({ "QueueUrl": queue, "ReceiptHandle": "garbage" }),
            "ReceiptHandleIsInvalid",
        ),
        (
            json!({ "QueueUrl": queue }),
            "MissingRequiredParameterException",
        ),
    ];
    for (body, expected) in cases {
        let (status, reply) = nack(&server, body.clone()).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(
            reply["__type"].as_str().unwrap().rsplit('#').next(),
            Some(expected),
            "{body}"
        );
    }
    // The lease is untouched by the refused nacks: the message is still in flight.
    let counts = client
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    assert_eq!(
        counts.attributes().unwrap()[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "1"
    );
    client
        .delete_message()
        .queue_url(&queue)
        .receipt_handle(&handle)
        .send()
        .await
        .unwrap();
    let (status, reply) = nack(
        &server,
        json!({ "QueueUrl": queue, "ReceiptHandle": handle }),
    )
    .await;
    assert_eq!(
        (status, reply["__type"].as_str()),
        (
            400,
            Some("com.amazonaws.sqs#InvalidParameterValueException")
        ),
        "a deleted message"
    );
}
