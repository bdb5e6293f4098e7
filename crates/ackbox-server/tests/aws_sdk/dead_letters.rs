//! Dead-letter queues: a message received too often moves intact, and redrive policies are checked when set.

use super::*;

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
