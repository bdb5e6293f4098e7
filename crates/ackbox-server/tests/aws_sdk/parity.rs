//! Behaviours where a client written against AWS notices any difference,
//! each checked against what AWS answered (the AWS-recorded snapshots of
//! LocalStack's test suite, named per case) or the SQS API reference.

use std::collections::BTreeSet;

use super::*;

/// The `MessageSystemAttributeName` enumeration of the SQS API reference,
/// apart from `All`.
const AWS_SYSTEM_ATTRIBUTES: [&str; 9] = [
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageDeduplicationId",
    "MessageGroupId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
];

async fn create_fifo_queue(client: &aws_sdk_sqs::Client, name: &str) -> String {
    client
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

/// LocalStack `test_receive_message_message_attribute_names_filters`:
/// `Hel.*` returns `Hello` and `Help.Me`, not `General`.
#[tokio::test]
async fn a_message_attribute_prefix_matches_names_that_start_with_it() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_with_lease(&client, "prefixes", 0).await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("msg")
        .message_attributes("Help.Me", string_attribute("Me"))
        .message_attributes("Hello", string_attribute("There"))
        .message_attributes("General", string_attribute("Kenobi"))
        .send()
        .await
        .unwrap();
    for (filter, expected) in [
        (vec!["Hel.*"], vec!["Hello", "Help.Me"]),
        (vec!["All"], vec!["General", "Hello", "Help.Me"]),
        (vec![".*"], vec!["General", "Hello", "Help.Me"]),
        (vec!["Foo", "Hello"], vec!["Hello"]),
        (vec!["Foo", "Help"], vec![]),
    ] {
        let received = client
            .receive_message()
            .queue_url(&url)
            .set_message_attribute_names(Some(filter.iter().map(|name| name.to_string()).collect()))
            .send()
            .await
            .unwrap();
        let names: BTreeSet<&str> = received.messages()[0]
            .message_attributes()
            .map(|attributes| attributes.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            names,
            expected.into_iter().collect::<BTreeSet<_>>(),
            "MessageAttributeNames {filter:?}"
        );
    }
}

/// `All` returns the attributes AWS defines and no others, though ackbox
/// has its own (which come when named).
#[tokio::test]
async fn all_system_attributes_are_the_ones_aws_defines() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_with_lease(&client, "all-system", 0).await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("twice")
        .send()
        .await
        .unwrap();
    // Received once already, the message has a last receive time to show.
    receive_bodies(&client, &url).await;
    let received = client
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let names: BTreeSet<String> = received.messages()[0]
        .attributes()
        .unwrap()
        .keys()
        .map(|name| name.as_str().to_owned())
        .collect();
    let unknown: Vec<&String> = names
        .iter()
        .filter(|name| !AWS_SYSTEM_ATTRIBUTES.contains(&name.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "All returned {unknown:?}, which AWS does not define"
    );
    assert!(
        names.contains("ApproximateFirstReceiveTimestamp"),
        "{names:?}"
    );
    let named = client
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names("AckBoxLastReceiveTimestamp".into())
        .send()
        .await
        .unwrap();
    assert!(
        named.messages()[0]
            .attributes()
            .unwrap()
            .contains_key(&MessageSystemAttributeName::from(
                "AckBoxLastReceiveTimestamp"
            )),
        "ackbox's own attribute, named, did not come"
    );
}

async fn all_queue_attributes(
    client: &aws_sdk_sqs::Client,
    url: &str,
) -> std::collections::HashMap<String, String> {
    client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| (name.as_str().to_owned(), value))
        .collect()
}

/// `All` on a new queue: the keys AWS returns for its kind (the SQS API
/// reference's GetQueueAttributes example; SQS-managed encryption is on by
/// default since 2022), no more and no fewer.
#[tokio::test]
async fn all_queue_attributes_are_the_keys_aws_returns_for_the_queue_kind() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let standard_keys = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesDelayed",
        "ApproximateNumberOfMessagesNotVisible",
        "CreatedTimestamp",
        "DelaySeconds",
        "LastModifiedTimestamp",
        "MaximumMessageSize",
        "MessageRetentionPeriod",
        "QueueArn",
        "ReceiveMessageWaitTimeSeconds",
        "SqsManagedSseEnabled",
        "VisibilityTimeout",
    ];
    let standard = create(&client, "plain").await;
    let attributes = all_queue_attributes(&client, &standard).await;
    assert_eq!(
        attributes
            .keys()
            .map(String::as_str)
            .collect::<BTreeSet<_>>(),
        standard_keys.into_iter().collect()
    );
    assert_eq!(attributes["SqsManagedSseEnabled"], "true");

    let fifo = create_fifo_queue(&client, "plain.fifo").await;
    let fifo_keys: BTreeSet<&str> = standard_keys
        .into_iter()
        .chain([
            "ContentBasedDeduplication",
            "DeduplicationScope",
            "FifoQueue",
            "FifoThroughputLimit",
        ])
        .collect();
    let attributes = all_queue_attributes(&client, &fifo).await;
    assert_eq!(
        attributes
            .keys()
            .map(String::as_str)
            .collect::<BTreeSet<_>>(),
        fifo_keys
    );
}

/// The encryption attributes are validated and echoed: a KMS key turns
/// SQS-managed encryption off and brings its reuse period (300 s by
/// default, 60..86,400).
#[tokio::test]
async fn encryption_attributes_are_validated_and_echoed() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = client
        .create_queue()
        .queue_name("encrypted")
        .attributes(QueueAttributeName::KmsMasterKeyId, "alias/aws/sqs")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let attributes = all_queue_attributes(&client, &url).await;
    assert_eq!(attributes["KmsMasterKeyId"], "alias/aws/sqs");
    assert_eq!(attributes["KmsDataKeyReusePeriodSeconds"], "300");
    assert_eq!(attributes["SqsManagedSseEnabled"], "false");
    client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::KmsDataKeyReusePeriodSeconds, "600")
        .send()
        .await
        .unwrap();
    assert_eq!(
        all_queue_attributes(&client, &url).await["KmsDataKeyReusePeriodSeconds"],
        "600"
    );
    for (name, value) in [
        (QueueAttributeName::KmsDataKeyReusePeriodSeconds, "59"),
        (QueueAttributeName::SqsManagedSseEnabled, "maybe"),
    ] {
        let refused = client
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(name.clone(), value)
            .send()
            .await
            .unwrap_err();
        let message = format!("{refused:?}");
        assert_eq!(code(refused), "InvalidAttributeValue", "{name:?}={value}");
        assert!(message.contains(name.as_str()), "{message}");
    }
}

/// A queue's type is fixed at creation: SetQueueAttributes does not know
/// `FifoQueue` (AWS: `InvalidAttributeName`, "Unknown Attribute FifoQueue.").
#[tokio::test]
async fn setting_fifo_queue_on_an_existing_queue_is_an_unknown_attribute() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let standard = create(&client, "typed").await;
    let fifo = create_fifo_queue(&client, "typed.fifo").await;
    for (url, value) in [(&standard, "true"), (&standard, "false"), (&fifo, "true")] {
        let refused = client
            .set_queue_attributes()
            .queue_url(url)
            .attributes(QueueAttributeName::FifoQueue, value)
            .send()
            .await
            .unwrap_err();
        let service = refused.as_service_error().unwrap();
        assert_eq!(service.meta().code(), Some("InvalidAttributeName"));
        assert_eq!(
            service.meta().message(),
            Some("Unknown Attribute FifoQueue.")
        );
    }
}

/// Newer AWS SDKs (Go v2, C++) send `x-amzn-query-mode: true` and read the
/// error's query code from `x-amzn-query-error` (the Smithy
/// `awsQueryCompatible` protocol tests): the header is answered, and the
/// JSON error keeps its shape.
#[tokio::test]
async fn query_mode_requests_get_query_compatible_errors() {
    let server = TestServer::builder().start().await;
    let body = br#"{"QueueName":"missing"}"#;
    let reply = ackbox_testkit::client::call_raw(
        &server.url(),
        "POST",
        "/",
        &[
            ("Content-Type", "application/x-amz-json-1.0"),
            ("X-Amz-Target", "AmazonSQS.GetQueueUrl"),
            ("x-amzn-query-mode", "true"),
        ],
        body,
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.header("x-amzn-query-error"),
        Some("AWS.SimpleQueueService.NonExistentQueue;Sender")
    );
    assert_eq!(
        reply.json()["__type"],
        "com.amazonaws.sqs#QueueDoesNotExist"
    );
}
