//! Topics through the official `aws-sdk-sns` client: fan-out to every
//! subscribed queue in SNS's envelope or raw, the topic and subscription
//! actions, and the errors SNS answers with (invariant 11, ARCHITECTURE.md).

use ackbox_testkit::client::{create_topic, subscribe_queue};
use aws_sdk_sns::types::{MessageAttributeValue as SnsAttribute, PublishBatchRequestEntry, Tag};
use serde_json::Value;

use super::*;

fn sns_code<E: aws_sdk_sns::error::ProvideErrorMetadata + std::fmt::Debug>(
    error: &aws_sdk_sns::error::SdkError<E>,
) -> String {
    match error {
        aws_sdk_sns::error::SdkError::ServiceError(service) => {
            service.err().code().unwrap_or_default().to_owned()
        }
        other => panic!("expected a service error, got {other:?}"),
    }
}

fn sns_message<E: aws_sdk_sns::error::ProvideErrorMetadata + std::fmt::Debug>(
    error: &aws_sdk_sns::error::SdkError<E>,
) -> String {
    match error {
        aws_sdk_sns::error::SdkError::ServiceError(service) => {
            service.err().message().unwrap_or_default().to_owned()
        }
        other => panic!("expected a service error, got {other:?}"),
    }
}

/// Every message visible in the queue, leased for a minute.
pub(super) async fn take_all(
    client: &aws_sdk_sqs::Client,
    url: &str,
) -> Vec<aws_sdk_sqs::types::Message> {
    let mut messages = Vec::new();
    loop {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        if received.messages().is_empty() {
            return messages;
        }
        messages.extend(received.messages().iter().cloned());
    }
}

#[tokio::test]
async fn a_publish_reaches_every_subscribed_queue_in_the_envelope_or_raw() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let topic = create_topic(&sns, "orders").await;
    assert_eq!(topic, "arn:aws:sns:us-east-1:000000000000:orders");
    let wrapped = create(&sqs, "billing").await;
    let raw = create(&sqs, "shipping").await;
    subscribe_queue(&sns, &topic, "billing", false).await;
    subscribe_queue(&sns, &topic, "shipping", true).await;

    let published = sns
        .publish()
        .topic_arn(&topic)
        .subject("order placed")
        .message("{\"order\": 7}")
        .message_attributes(
            "kind",
            SnsAttribute::builder()
                .data_type("String")
                .string_value("card")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let message_id = published.message_id.unwrap();

    let envelopes = take_all(&sqs, &wrapped).await;
    assert_eq!(envelopes.len(), 1);
    let envelope: Value = serde_json::from_str(envelopes[0].body().unwrap()).unwrap();
    assert_eq!(envelope["Type"], "Notification");
    assert_eq!(envelope["MessageId"], message_id.as_str());
    assert_eq!(envelope["TopicArn"], topic.as_str());
    assert_eq!(envelope["Subject"], "order placed");
    assert_eq!(envelope["Message"], "{\"order\": 7}");
    assert_eq!(envelope["MessageAttributes"]["kind"]["Type"], "String");
    assert_eq!(envelope["MessageAttributes"]["kind"]["Value"], "card");
    assert!(
        envelope["Timestamp"].as_str().unwrap().ends_with('Z'),
        "{envelope}"
    );
    assert!(
        envelopes[0]
            .message_attributes()
            .is_none_or(|attributes| attributes.is_empty())
    );

    let raws = take_all(&sqs, &raw).await;
    assert_eq!(raws.len(), 1);
    assert_eq!(raws[0].body(), Some("{\"order\": 7}"));
    let kind = &raws[0].message_attributes().unwrap()["kind"];
    assert_eq!(kind.string_value(), Some("card"));
}

#[tokio::test]
async fn topics_and_subscriptions_are_listed_described_changed_and_removed() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let topic = create_topic(&sns, "events").await;
    assert_eq!(
        create_topic(&sns, "events").await,
        topic,
        "CreateTopic is idempotent"
    );
    let other = sns
        .create_topic()
        .name("events")
        .attributes("DisplayName", "something else")
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&other), "InvalidParameter");
    create_topic(&sns, "alerts").await;
    let topics: Vec<String> = sns
        .list_topics()
        .send()
        .await
        .unwrap()
        .topics()
        .iter()
        .filter_map(|topic| topic.topic_arn().map(str::to_owned))
        .collect();
    assert_eq!(
        topics,
        [
            "arn:aws:sns:us-east-1:000000000000:alerts",
            "arn:aws:sns:us-east-1:000000000000:events"
        ]
    );

    sns.set_topic_attributes()
        .topic_arn(&topic)
        .attribute_name("DisplayName")
        .attribute_value("Events")
        .send()
        .await
        .unwrap();
    let queue = create(&sqs, "listener").await;
    let subscription = subscribe_queue(&sns, &topic, "listener", false).await;
    assert_eq!(
        subscribe_queue(&sns, &topic, "listener", false).await,
        subscription,
        "the same subscription again is the same subscription"
    );
    let attributes = sns
        .get_topic_attributes()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(attributes["DisplayName"], "Events");
    assert_eq!(attributes["SubscriptionsConfirmed"], "1");
    assert_eq!(attributes["TopicArn"], topic);
    assert!(attributes.contains_key("Policy"));

    let listed = sns.list_subscriptions().send().await.unwrap();
    assert_eq!(listed.subscriptions().len(), 1);
    let by_topic = sns
        .list_subscriptions_by_topic()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap();
    let entry = &by_topic.subscriptions()[0];
    assert_eq!(entry.subscription_arn(), Some(subscription.as_str()));
    assert_eq!(entry.protocol(), Some("sqs"));
    assert_eq!(
        entry.endpoint(),
        Some("arn:aws:sqs:us-east-1:000000000000:listener")
    );

    sns.set_subscription_attributes()
        .subscription_arn(&subscription)
        .attribute_name("RawMessageDelivery")
        .attribute_value("true")
        .send()
        .await
        .unwrap();
    let described = sns
        .get_subscription_attributes()
        .subscription_arn(&subscription)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(described["RawMessageDelivery"], "true");
    assert_eq!(described["TopicArn"], topic);
    sns.publish()
        .topic_arn(&topic)
        .message("raw now")
        .send()
        .await
        .unwrap();
    let bodies: Vec<String> = take_all(&sqs, &queue)
        .await
        .iter()
        .map(|message| message.body().unwrap().to_owned())
        .collect();
    assert_eq!(bodies, ["raw now"]);

    sns.tag_resource()
        .resource_arn(&topic)
        .tags(
            Tag::builder()
                .key("team")
                .value("payments")
                .build()
                .unwrap(),
        )
        .tags(Tag::builder().key("tier").value("1").build().unwrap())
        .send()
        .await
        .unwrap();
    sns.untag_resource()
        .resource_arn(&topic)
        .tag_keys("tier")
        .send()
        .await
        .unwrap();
    let tags = sns
        .list_tags_for_resource()
        .resource_arn(&topic)
        .send()
        .await
        .unwrap();
    let tags: Vec<(&str, &str)> = tags
        .tags()
        .iter()
        .map(|tag| (tag.key(), tag.value()))
        .collect();
    assert_eq!(tags, [("team", "payments")]);

    sns.unsubscribe()
        .subscription_arn(&subscription)
        .send()
        .await
        .unwrap();
    sns.publish()
        .topic_arn(&topic)
        .message("nobody listens")
        .send()
        .await
        .unwrap();
    assert!(
        take_all(&sqs, &queue).await.is_empty(),
        "an unsubscribed queue gets nothing"
    );

    sns.delete_topic().topic_arn(&topic).send().await.unwrap();
    sns.delete_topic().topic_arn(&topic).send().await.unwrap();
    let gone = sns
        .get_topic_attributes()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&gone), "NotFound");
    let publish_gone = sns
        .publish()
        .topic_arn(&topic)
        .message("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&publish_gone), "NotFound");
}

#[tokio::test]
async fn a_publish_batch_answers_each_entry_and_stores_the_valid_ones() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let topic = create_topic(&sns, "batches").await;
    let queue = create(&sqs, "batch-listener").await;
    subscribe_queue(&sns, &topic, "batch-listener", true).await;
    let entry = |id: &str, message: &str| {
        PublishBatchRequestEntry::builder()
            .id(id)
            .message(message)
            .build()
            .unwrap()
    };
    let answer = sns
        .publish_batch()
        .topic_arn(&topic)
        .publish_batch_request_entries(entry("a", "first"))
        .publish_batch_request_entries(
            PublishBatchRequestEntry::builder()
                .id("bad")
                .message("second")
                .subject("\nnot a subject")
                .build()
                .unwrap(),
        )
        .publish_batch_request_entries(entry("c", "third"))
        .send()
        .await
        .unwrap();
    let successful: Vec<&str> = answer.successful().iter().filter_map(|e| e.id()).collect();
    assert_eq!(successful, ["a", "c"]);
    assert_eq!(answer.failed().len(), 1);
    assert_eq!(answer.failed()[0].id(), "bad");
    assert_eq!(answer.failed()[0].code(), "InvalidParameter");
    assert!(answer.failed()[0].message().unwrap().contains("Subject"));
    let mut bodies: Vec<String> = take_all(&sqs, &queue)
        .await
        .iter()
        .map(|message| message.body().unwrap().to_owned())
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["first", "third"]);

    let empty = sns
        .publish_batch()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&empty), "EmptyBatchRequest");
    let twice = sns
        .publish_batch()
        .topic_arn(&topic)
        .publish_batch_request_entries(entry("same", "one"))
        .publish_batch_request_entries(entry("same", "two"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&twice), "BatchEntryIdsNotDistinct");
    let mut eleven = sns.publish_batch().topic_arn(&topic);
    for index in 0..11 {
        eleven = eleven.publish_batch_request_entries(entry(&format!("e{index}"), "many"));
    }
    let eleven = eleven.send().await.unwrap_err();
    assert_eq!(sns_code(&eleven), "TooManyEntriesInBatchRequest");
}

#[tokio::test]
async fn a_copy_one_queue_would_refuse_is_stored_in_no_queue() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let topic = create_topic(&sns, "all-or-none").await;
    let small = sqs
        .create_queue()
        .queue_name("small")
        .attributes(QueueAttributeName::MaximumMessageSize, "1024")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let large = create(&sqs, "large").await;
    subscribe_queue(&sns, &topic, "small", true).await;
    subscribe_queue(&sns, &topic, "large", true).await;
    let refused = sns
        .publish()
        .topic_arn(&topic)
        .message("x".repeat(2_000))
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&refused), "InvalidParameter");
    assert!(
        sns_message(&refused).contains("small"),
        "{}",
        sns_message(&refused)
    );
    assert!(take_all(&sqs, &small).await.is_empty());
    assert!(take_all(&sqs, &large).await.is_empty(), "all or none");

    // A subscribed queue that is deleted takes nothing; the others still do.
    sqs.delete_queue().queue_url(&small).send().await.unwrap();
    sns.publish()
        .topic_arn(&topic)
        .message("after the delete")
        .send()
        .await
        .unwrap();
    let bodies: Vec<String> = take_all(&sqs, &large)
        .await
        .iter()
        .map(|message| message.body().unwrap().to_owned())
        .collect();
    assert_eq!(bodies, ["after the delete"]);
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_parameter() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let bad_name = sns
        .create_topic()
        .name("has space")
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&bad_name), "InvalidParameter");
    assert!(
        sns_message(&bad_name).contains("Name"),
        "{}",
        sns_message(&bad_name)
    );

    let topic = create_topic(&sns, "strict").await;
    let protocol = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("carrier-pigeon")
        .endpoint("coop")
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&protocol), "InvalidParameter");
    assert!(sns_message(&protocol).contains("Protocol"));
    let endpoint = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("not-an-arn")
        .send()
        .await
        .unwrap_err();
    assert!(
        sns_message(&endpoint).contains("Endpoint"),
        "{}",
        sns_message(&endpoint)
    );
    sqs.create_queue()
        .queue_name("ordered.fifo")
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap();
    let fifo = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:ordered.fifo")
        .send()
        .await
        .unwrap_err();
    assert!(
        sns_message(&fifo).contains("FIFO"),
        "{}",
        sns_message(&fifo)
    );

    sns.set_topic_attributes()
        .topic_arn(&topic)
        .attribute_name("MaximumMessageSize")
        .attribute_value("1024")
        .send()
        .await
        .unwrap();
    let long = sns
        .publish()
        .topic_arn(&topic)
        .message("y".repeat(1_025))
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&long), "InvalidParameter");
    assert!(
        sns_message(&long).contains("1024"),
        "{}",
        sns_message(&long)
    );
    let too_small = sns
        .set_topic_attributes()
        .topic_arn(&topic)
        .attribute_name("MaximumMessageSize")
        .attribute_value("12")
        .send()
        .await
        .unwrap_err();
    assert!(
        sns_message(&too_small).contains("1024"),
        "{}",
        sns_message(&too_small)
    );

    let missing = sns
        .publish()
        .topic_arn("arn:aws:sns:us-east-1:000000000000:nowhere")
        .message("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&missing), "NotFound");
    let structure = sns
        .publish()
        .topic_arn(&topic)
        .message_structure("json")
        .message("{\"sqs\": \"only\"}")
        .send()
        .await
        .unwrap_err();
    assert!(
        sns_message(&structure).contains("default"),
        "{}",
        sns_message(&structure)
    );
}

#[tokio::test]
async fn filter_policies_pick_what_each_subscription_takes() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let topic = create_topic(&sns, "filtered").await;
    let by_attribute = create(&sqs, "card-payments").await;
    let by_body = create(&sqs, "big-orders").await;
    let everything = create(&sqs, "everything").await;
    let card = subscribe_queue(&sns, &topic, "card-payments", true).await;
    sns.set_subscription_attributes()
        .subscription_arn(&card)
        .attribute_name("FilterPolicy")
        .attribute_value(r#"{"method": ["card"], "amount": [{"numeric": [">=", 100]}]}"#)
        .send()
        .await
        .unwrap();
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:big-orders")
        .attributes("RawMessageDelivery", "true")
        .attributes("FilterPolicyScope", "MessageBody")
        .attributes(
            "FilterPolicy",
            r#"{"order": {"total": [{"numeric": [">", 1000]}]}}"#,
        )
        .send()
        .await
        .unwrap();
    subscribe_queue(&sns, &topic, "everything", true).await;
    let attribute = |data_type: &str, value: &str| {
        SnsAttribute::builder()
            .data_type(data_type)
            .string_value(value)
            .build()
            .unwrap()
    };
    for (message, method, amount) in [
        (r#"{"order": {"total": 5000}}"#, "card", "150"),
        (r#"{"order": {"total": 20}}"#, "card", "99"),
        (r#"{"order": {"total": 2000}}"#, "cash", "500"),
    ] {
        sns.publish()
            .topic_arn(&topic)
            .message(message)
            .message_attributes("method", attribute("String", method))
            .message_attributes("amount", attribute("Number", amount))
            .send()
            .await
            .unwrap();
    }
    let bodies = |messages: Vec<aws_sdk_sqs::types::Message>| {
        let mut bodies: Vec<String> = messages
            .iter()
            .map(|message| message.body().unwrap().to_owned())
            .collect();
        bodies.sort();
        bodies
    };
    assert_eq!(
        bodies(take_all(&sqs, &by_attribute).await),
        [r#"{"order": {"total": 5000}}"#]
    );
    assert_eq!(
        bodies(take_all(&sqs, &by_body).await),
        [
            r#"{"order": {"total": 2000}}"#,
            r#"{"order": {"total": 5000}}"#
        ]
    );
    assert_eq!(take_all(&sqs, &everything).await.len(), 3);

    let bad = sns
        .set_subscription_attributes()
        .subscription_arn(&card)
        .attribute_name("FilterPolicy")
        .attribute_value(r#"{"method": "card"}"#)
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&bad), "InvalidParameter");
    assert!(
        sns_message(&bad).contains("FilterPolicy"),
        "{}",
        sns_message(&bad)
    );
    let scope = sns
        .set_subscription_attributes()
        .subscription_arn(&card)
        .attribute_name("FilterPolicyScope")
        .attribute_value("Headers")
        .send()
        .await
        .unwrap_err();
    assert!(
        sns_message(&scope).contains("FilterPolicyScope"),
        "{}",
        sns_message(&scope)
    );
}

/// Receives and deletes until the FIFO queue is empty; the bodies in the
/// order received (a FIFO queue hands out a group's next messages only
/// after its earlier ones are deleted).
async fn drain_fifo(client: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let mut bodies = Vec::new();
    loop {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        if received.messages().is_empty() {
            return bodies;
        }
        for message in received.messages() {
            bodies.push(message.body().unwrap().to_owned());
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
}

/// The messages of `group` (`g1-…` bodies) in the order they appear.
fn of_group<'a>(bodies: &'a [String], group: &str) -> Vec<&'a str> {
    bodies
        .iter()
        .map(String::as_str)
        .filter(|body| body.starts_with(group))
        .collect()
}

#[tokio::test]
async fn a_fifo_topic_keeps_each_groups_order_and_deduplicates_in_every_queue() {
    let server = TestServer::builder().start().await;
    let (sqs, sns) = (server.client(), server.sns_client());
    let unmarked = sns
        .create_topic()
        .name("orders.fifo")
        .send()
        .await
        .unwrap_err();
    assert_eq!(sns_code(&unmarked), "InvalidParameter");
    assert!(
        sns_message(&unmarked).contains("FifoTopic"),
        "{}",
        sns_message(&unmarked)
    );
    let topic = sns
        .create_topic()
        .name("orders.fifo")
        .attributes("FifoTopic", "true")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let attributes = sns
        .get_topic_attributes()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(attributes["FifoTopic"], "true");
    assert_eq!(attributes["ContentBasedDeduplication"], "false");

    let mut urls = Vec::new();
    for name in ["billing.fifo", "shipping.fifo"] {
        urls.push(
            sqs.create_queue()
                .queue_name(name)
                .attributes(QueueAttributeName::FifoQueue, "true")
                .send()
                .await
                .unwrap()
                .queue_url
                .unwrap(),
        );
    }
    subscribe_queue(&sns, &topic, "billing.fifo", true).await;
    subscribe_queue(&sns, &topic, "shipping.fifo", false).await;
    create(&sqs, "plain").await;
    let standard = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:plain")
        .send()
        .await
        .unwrap_err();
    assert!(
        sns_message(&standard).contains("standard queue"),
        "{}",
        sns_message(&standard)
    );

    let no_group = sns
        .publish()
        .topic_arn(&topic)
        .message("x")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap_err();
    assert!(sns_message(&no_group).contains("MessageGroupId"));
    let no_deduplication = sns
        .publish()
        .topic_arn(&topic)
        .message("x")
        .message_group_id("g1")
        .send()
        .await
        .unwrap_err();
    assert!(
        sns_message(&no_deduplication).contains("MessageDeduplicationId"),
        "{}",
        sns_message(&no_deduplication)
    );

    // Two groups interleaved, each publish retried once: every queue gets
    // each message once, in its group's order.
    let mut sequence_numbers = Vec::new();
    for index in 0..6 {
        for group in ["g1", "g2"] {
            for _attempt in 0..2 {
                let published = sns
                    .publish()
                    .topic_arn(&topic)
                    .message(format!("{group}-{index}"))
                    .message_group_id(group)
                    .message_deduplication_id(format!("{group}-{index}"))
                    .send()
                    .await
                    .unwrap();
                sequence_numbers.push(published.sequence_number.unwrap());
            }
        }
    }
    for pair in sequence_numbers.chunks(2) {
        assert_eq!(
            pair[0], pair[1],
            "a duplicate answers with the first's number"
        );
    }
    assert!(sequence_numbers.windows(2).all(|pair| pair[0] <= pair[1]));

    // With content-based deduplication, a batch's repeated message is one.
    sns.set_topic_attributes()
        .topic_arn(&topic)
        .attribute_name("ContentBasedDeduplication")
        .attribute_value("true")
        .send()
        .await
        .unwrap();
    let entries = ["g1-6", "g1-7", "g1-6"]
        .iter()
        .enumerate()
        .map(|(id, body)| {
            PublishBatchRequestEntry::builder()
                .id(id.to_string())
                .message(*body)
                .message_group_id("g1")
                .build()
                .unwrap()
        });
    let batch = sns
        .publish_batch()
        .topic_arn(&topic)
        .set_publish_batch_request_entries(Some(entries.collect()))
        .send()
        .await
        .unwrap();
    assert_eq!(batch.successful().len(), 3);

    let raw = drain_fifo(&sqs, &urls[0]).await;
    let expected_g1: Vec<String> = (0..8).map(|index| format!("g1-{index}")).collect();
    let expected_g2: Vec<String> = (0..6).map(|index| format!("g2-{index}")).collect();
    assert_eq!(of_group(&raw, "g1"), expected_g1);
    assert_eq!(of_group(&raw, "g2"), expected_g2);
    assert_eq!(raw.len(), 14);
    let wrapped: Vec<String> = drain_fifo(&sqs, &urls[1])
        .await
        .iter()
        .map(|envelope| {
            let envelope: Value = serde_json::from_str(envelope).unwrap();
            envelope["Message"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(of_group(&wrapped, "g1"), expected_g1);
    assert_eq!(of_group(&wrapped, "g2"), expected_g2);
    assert_eq!(wrapped.len(), 14);

    let standard_topic = create_topic(&sns, "plain-topic").await;
    let misplaced = sns
        .publish()
        .topic_arn(&standard_topic)
        .message("x")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap_err();
    assert!(sns_message(&misplaced).contains("MessageDeduplicationId"));
    let unsettable = sns
        .set_topic_attributes()
        .topic_arn(&standard_topic)
        .attribute_name("ContentBasedDeduplication")
        .attribute_value("true")
        .send()
        .await
        .unwrap_err();
    assert!(
        sns_message(&unsettable).contains("FIFO topics only"),
        "{}",
        sns_message(&unsettable)
    );
}
