//! FIFO queues end to end with the official `aws-sdk-sqs` client (ARCHITECTURE.md
//! invariant 5): per-group order, group locking, the deduplication window,
//! receive attempts, expired handles and FIFO dead-letter queues.

use std::collections::HashMap;

use ackbox_core::clock::ManualClock;
use ackbox_testkit::client::{error_code as code, receive_bodies};
use ackbox_testkit::server::TestServer;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{
    Message, MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry,
};

const START: i64 = 1_700_000_000_000;

async fn manual_server() -> (TestServer, ManualClock) {
    let clock = ManualClock::new(START);
    let server = TestServer::builder().clock(clock.clone()).start().await;
    (server, clock)
}

async fn create_fifo(client: &Client, name: &str, extra: &[(QueueAttributeName, &str)]) -> String {
    let mut request = client
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::FifoQueue, "true");
    for (attribute, value) in extra {
        request = request.attributes(attribute.clone(), *value);
    }
    request
        .send()
        .await
        .expect("CreateQueue succeeds")
        .queue_url
        .expect("a queue URL")
}

async fn send(
    client: &Client,
    url: &str,
    body: &str,
    group: &str,
    dedup: &str,
) -> (String, String) {
    let sent = client
        .send_message()
        .queue_url(url)
        .message_body(body)
        .message_group_id(group)
        .message_deduplication_id(dedup)
        .send()
        .await
        .expect("SendMessage succeeds");
    (
        sent.message_id.expect("a message id"),
        sent.sequence_number
            .expect("a FIFO send has a sequence number"),
    )
}

async fn receive(client: &Client, url: &str, max: i32, visibility: i32) -> Vec<Message> {
    client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(max)
        .visibility_timeout(visibility)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .expect("ReceiveMessage succeeds")
        .messages
        .unwrap_or_default()
}

fn bodies(messages: &[Message]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|message| message.body())
        .collect()
}

fn system(message: &Message, name: MessageSystemAttributeName) -> &str {
    message
        .attributes()
        .and_then(|attributes| attributes.get(&name))
        .map_or("", String::as_str)
}

async fn delete(client: &Client, url: &str, message: &Message) {
    client
        .delete_message()
        .queue_url(url)
        .receipt_handle(message.receipt_handle().expect("a handle"))
        .send()
        .await
        .expect("DeleteMessage succeeds");
}

#[tokio::test]
async fn fifo_attributes_are_validated_echoed_and_fixed_at_creation() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_fifo(
        &client,
        "orders.fifo",
        &[(QueueAttributeName::ContentBasedDeduplication, "true")],
    )
    .await;
    let attributes = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(attributes[&QueueAttributeName::FifoQueue], "true");
    assert_eq!(
        attributes[&QueueAttributeName::ContentBasedDeduplication],
        "true"
    );
    assert_eq!(attributes[&QueueAttributeName::DeduplicationScope], "queue");
    assert_eq!(
        attributes[&QueueAttributeName::FifoThroughputLimit],
        "perQueue"
    );
    // Creating it again with the same attributes is a no-op.
    let again = create_fifo(
        &client,
        "orders.fifo",
        &[(QueueAttributeName::ContentBasedDeduplication, "true")],
    )
    .await;
    assert_eq!(again, url);

    let type_change = client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::FifoQueue, "false")
        .send()
        .await
        .unwrap_err();
    // A queue's type is given at its creation only; afterwards AWS does not
    // know the attribute.
    assert_eq!(type_change.message(), Some("Unknown Attribute FifoQueue."));
    assert_eq!(code(type_change), "InvalidAttributeName");

    let lone_high_throughput = client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::FifoThroughputLimit, "perMessageGroupId")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(lone_high_throughput), "InvalidAttributeValue");
    client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::FifoThroughputLimit, "perMessageGroupId")
        .attributes(QueueAttributeName::DeduplicationScope, "messageGroup")
        .send()
        .await
        .expect("high-throughput mode is both settings together");

    let standard = client
        .create_queue()
        .queue_name("plain")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let fifo_only = client
        .set_queue_attributes()
        .queue_url(&standard)
        .attributes(QueueAttributeName::ContentBasedDeduplication, "true")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(fifo_only), "InvalidAttributeName");
}

#[tokio::test]
async fn fifo_sends_are_checked_as_sqs_checks_them() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_fifo(&client, "checks.fifo", &[]).await;

    let no_group = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        no_group.message(),
        Some("The request must contain the parameter MessageGroupId.")
    );
    assert_eq!(code(no_group), "MissingParameter");

    let no_dedup = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        no_dedup.message(),
        Some(
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"
        )
    );
    assert_eq!(code(no_dedup), "InvalidParameterValue");

    let delayed = client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .message_deduplication_id("d")
        .delay_seconds(2)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        delayed.message(),
        Some(
            "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."
        )
    );
    // A per-message delay of zero is no delay, and allowed.
    client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .message_deduplication_id("d0")
        .delay_seconds(0)
        .send()
        .await
        .expect("DelaySeconds 0 is accepted");

    for (group, dedup, parameter) in [
        ("has space", "d", "MessageGroupId"),
        (&"g".repeat(129) as &str, "d", "MessageGroupId"),
        ("g", "", "MessageDeduplicationId"),
        ("g", "tab\there", "MessageDeduplicationId"),
    ] {
        let error = client
            .send_message()
            .queue_url(&url)
            .message_body("x")
            .message_group_id(group)
            .message_deduplication_id(dedup)
            .send()
            .await
            .unwrap_err();
        let message = error.message().unwrap_or_default().to_owned();
        assert!(
            message.contains(parameter) && message.contains("1 to 128"),
            "{message}"
        );
        assert_eq!(code(error), "InvalidParameterValue");
    }

    // An entry without a group fails the whole batch, as on AWS (LocalStack's
    // AWS-validated test_send_batch_missing_message_group_id_for_fifo_queue),
    // and so does one without a deduplication id on a queue that does not
    // derive one (test_send_batch_missing_deduplication_id_for_fifo_queue).
    let grouped = SendMessageBatchRequestEntry::builder()
        .id("grouped")
        .message_body("ok")
        .message_group_id("g")
        .message_deduplication_id("batch-ok")
        .build()
        .unwrap();
    for (missing, expected) in [
        (
            SendMessageBatchRequestEntry::builder()
                .id("ungrouped")
                .message_body("no group")
                .message_deduplication_id("batch-no-group")
                .build()
                .unwrap(),
            "The request must contain the parameter MessageGroupId.",
        ),
        (
            SendMessageBatchRequestEntry::builder()
                .id("undeduplicated")
                .message_body("no deduplication id")
                .message_group_id("g")
                .build()
                .unwrap(),
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly",
        ),
    ] {
        let error = client
            .send_message_batch()
            .queue_url(&url)
            .entries(grouped.clone())
            .entries(missing)
            .send()
            .await
            .unwrap_err();
        let service = error.as_service_error().unwrap();
        assert_eq!(service.code(), Some("InvalidParameterValue"));
        assert_eq!(service.message(), Some(expected));
    }
    assert!(
        !receive_bodies(&client, &url)
            .await
            .contains(&"ok".to_owned()),
        "a refused batch stored its valid entry"
    );

    let standard = client
        .create_queue()
        .queue_name("standard")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let dedup_on_standard = client
        .send_message()
        .queue_url(&standard)
        .message_body("x")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(dedup_on_standard), "InvalidParameterValue");
}

#[tokio::test]
async fn inv5_groups_are_delivered_in_order_and_locked_while_in_flight() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = create_fifo(&client, "order.fifo", &[]).await;
    for (index, body) in ["a1", "b1", "a2", "c1", "a3", "b2"].iter().enumerate() {
        let group = &body[..1];
        send(&client, &url, body, group, &format!("dedup-{index}")).await;
    }
    let first = receive(&client, &url, 2, 30).await;
    assert_eq!(
        bodies(&first),
        ["a1", "a2"],
        "one group's messages, in order"
    );
    assert_eq!(
        system(&first[0], MessageSystemAttributeName::MessageGroupId),
        "a"
    );
    let second = receive(&client, &url, 10, 30).await;
    assert_eq!(
        bodies(&second),
        ["b1", "b2", "c1"],
        "group a is locked; others proceed"
    );
    assert!(receive(&client, &url, 10, 30).await.is_empty());

    // Deleting a1 leaves a2 in flight: a3 must still wait.
    delete(&client, &url, &first[0]).await;
    assert!(receive(&client, &url, 10, 30).await.is_empty());
    // Visibility 0 on a2 returns the group's head, a2, before a3.
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(first[1].receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let retried = receive(&client, &url, 10, 30).await;
    assert_eq!(bodies(&retried), ["a2", "a3"]);
    assert_eq!(
        system(
            &retried[0],
            MessageSystemAttributeName::ApproximateReceiveCount
        ),
        "2"
    );

    // When the leases end, each group's head comes back first; groups that
    // unlock together go oldest head first.
    clock.advance_secs(31);
    let expired = receive(&client, &url, 10, 30).await;
    assert_eq!(bodies(&expired), ["b1", "b2", "a2", "a3", "c1"]);

    // Sequence numbers are strings of digits that grow in send order.
    let sequence: Vec<u128> = expired
        .iter()
        .map(|message| {
            system(message, MessageSystemAttributeName::SequenceNumber)
                .parse()
                .unwrap()
        })
        .collect();
    let mut by_send_order = sequence.clone();
    by_send_order.sort_unstable();
    assert_eq!(
        by_send_order,
        [
            sequence[0],
            sequence[2],
            sequence[4],
            sequence[3],
            sequence[1]
        ]
    );
}

#[tokio::test]
async fn inv5_duplicates_within_five_minutes_return_the_first_send() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = create_fifo(
        &client,
        "dedup.fifo",
        &[(QueueAttributeName::ContentBasedDeduplication, "true")],
    )
    .await;
    let first = send(&client, &url, "pay 10", "acct-1", "payment-1").await;
    let repeat = send(&client, &url, "pay 10 (retried)", "acct-2", "payment-1").await;
    assert_eq!(repeat, first, "same MessageId and SequenceNumber");
    // Content-based: the body's SHA-256 is the id.
    let by_content = client
        .send_message()
        .queue_url(&url)
        .message_body("same body")
        .message_group_id("acct-1")
        .send()
        .await
        .unwrap();
    let by_content_again = client
        .send_message()
        .queue_url(&url)
        .message_body("same body")
        .message_group_id("acct-1")
        .send()
        .await
        .unwrap();
    assert_eq!(by_content.message_id(), by_content_again.message_id());
    assert_eq!(
        by_content.sequence_number(),
        by_content_again.sequence_number()
    );

    let received = receive(&client, &url, 10, 30).await;
    assert_eq!(
        bodies(&received),
        ["pay 10", "same body"],
        "nothing enqueued twice"
    );
    assert_eq!(
        system(
            &received[0],
            MessageSystemAttributeName::MessageDeduplicationId
        ),
        "payment-1"
    );
    assert_eq!(
        system(&received[0], MessageSystemAttributeName::SequenceNumber),
        first.1
    );
    for message in &received {
        delete(&client, &url, message).await;
    }
    // The window survives the delete …
    clock.advance_secs(299);
    assert_eq!(
        send(&client, &url, "pay 10", "acct-1", "payment-1").await,
        first
    );
    assert!(receive(&client, &url, 10, 30).await.is_empty());
    // … and ends five minutes after the first send.
    clock.advance_secs(2);
    let after_window = send(&client, &url, "pay 10", "acct-1", "payment-1").await;
    assert_ne!(after_window.0, first.0);
    assert!(after_window.1 > first.1, "{after_window:?} after {first:?}");

    // PurgeQueue clears the window.
    client.purge_queue().queue_url(&url).send().await.unwrap();
    let after_purge = send(&client, &url, "pay 10", "acct-1", "payment-1").await;
    assert_ne!(after_purge.0, after_window.0);
    assert_eq!(bodies(&receive(&client, &url, 10, 30).await), ["pay 10"]);

    // With per-group scope, one id in two groups is two messages.
    let scoped = create_fifo(
        &client,
        "scoped.fifo",
        &[
            (QueueAttributeName::DeduplicationScope, "messageGroup"),
            (QueueAttributeName::FifoThroughputLimit, "perMessageGroupId"),
        ],
    )
    .await;
    let in_a = send(&client, &scoped, "A", "group-a", "same-id").await;
    let in_b = send(&client, &scoped, "B", "group-b", "same-id").await;
    assert_ne!(in_a.0, in_b.0);
    assert_eq!(
        send(&client, &scoped, "A again", "group-a", "same-id").await,
        in_a
    );
    let mut got = bodies(&receive(&client, &scoped, 10, 30).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    got.sort();
    assert_eq!(got, ["A", "B"]);
}

#[tokio::test]
async fn fifo_handles_expire_with_their_lease() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let url = create_fifo(&client, "leases.fifo", &[]).await;
    send(&client, &url, "m", "g", "d").await;
    let received = receive(&client, &url, 1, 5).await;
    clock.advance_secs(6);
    let handle = received[0].receipt_handle().unwrap();
    let expired = client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(handle)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        expired.message(),
        Some(format!("Value {handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.").as_str())
    );
    assert_eq!(code(expired), "InvalidParameterValue");
    // The message stays, and is delivered again.
    let again = receive(&client, &url, 1, 5).await;
    assert_eq!(bodies(&again), ["m"]);
    // Extending a lease keeps its handle valid.
    client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(again[0].receipt_handle().unwrap())
        .visibility_timeout(60)
        .send()
        .await
        .unwrap();
    clock.advance_secs(30);
    let batch = client
        .delete_message_batch()
        .queue_url(&url)
        .entries(
            aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                .id("current")
                .receipt_handle(again[0].receipt_handle().unwrap())
                .build()
                .unwrap(),
        )
        .entries(
            aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                .id("stale")
                .receipt_handle(handle)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    // The stale handle comes after the delete in the batch: its message is
    // gone, and deleting a gone message is harmless.
    assert_eq!(batch.successful().len(), 2, "{:?}", batch.failed());
    assert!(receive(&client, &url, 1, 5).await.is_empty());
}

#[tokio::test]
async fn a_retried_receive_attempt_returns_the_same_messages_and_handles() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_fifo(&client, "attempts.fifo", &[]).await;
    for (index, group) in ["a", "b", "c"].iter().enumerate() {
        send(&client, &url, group, group, &index.to_string()).await;
    }
    let attempt = |id: &str| {
        client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(2)
            .receive_request_attempt_id(id)
            .send()
    };
    let first = attempt("attempt-1").await.unwrap().messages.unwrap();
    let retried = attempt("attempt-1").await.unwrap().messages.unwrap();
    assert_eq!(first, retried);
    let other = attempt("attempt-2").await.unwrap().messages.unwrap();
    assert_eq!(bodies(&other), ["c"]);
    let bad = attempt("no spaces allowed").await.unwrap_err();
    assert_eq!(code(bad), "InvalidParameterValue");
}

#[tokio::test]
async fn fifo_dead_letter_queues_must_be_fifo_and_keep_group_order() {
    let (server, clock) = manual_server().await;
    let client = server.client();
    let standard_dlq = client
        .create_queue()
        .queue_name("plain-dlq")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let dlq = create_fifo(&client, "dlq.fifo", &[]).await;
    let arn = |url: &str| {
        let (client, url) = (client.clone(), url.to_owned());
        async move { ackbox_testkit::client::queue_arn(&client, &url).await }
    };
    let policy =
        |target: &str| format!(r#"{{"deadLetterTargetArn":"{target}","maxReceiveCount":1}}"#);
    let mismatched = client
        .create_queue()
        .queue_name("work.fifo")
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            policy(&arn(&standard_dlq).await),
        )
        .send()
        .await
        .unwrap_err();
    assert!(
        mismatched
            .message()
            .unwrap_or_default()
            .contains("Dead-letter queue must be same type of queue as the source."),
        "{mismatched:?}"
    );
    let url = create_fifo(
        &client,
        "work.fifo",
        &[(QueueAttributeName::RedrivePolicy, &policy(&arn(&dlq).await))],
    )
    .await;
    send(&client, &url, "poison", "g", "1").await;
    send(&client, &url, "next", "g", "2").await;
    assert_eq!(bodies(&receive(&client, &url, 1, 5).await), ["poison"]);
    clock.advance_secs(6);
    let next = receive(&client, &url, 1, 5).await;
    assert_eq!(
        bodies(&next),
        ["next"],
        "the poison head moved out of the way"
    );
    let dead = receive(&client, &dlq, 10, 5).await;
    assert_eq!(bodies(&dead), ["poison"]);
    assert_eq!(
        system(&dead[0], MessageSystemAttributeName::MessageGroupId),
        "g"
    );
    assert_eq!(
        system(&dead[0], MessageSystemAttributeName::MessageDeduplicationId),
        "1"
    );
    assert_eq!(
        system(
            &dead[0],
            MessageSystemAttributeName::DeadLetterQueueSourceArn
        ),
        arn(&url).await
    );

    // Redrive: only to a queue of the same type; home, it joins the tail of
    // its group.
    let to_standard = client
        .start_message_move_task()
        .source_arn(arn(&dlq).await)
        .destination_arn(arn(&standard_dlq).await)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(to_standard), "InvalidParameterValue");
    delete(&client, &url, &next[0]).await;
    send(&client, &url, "after", "g", "3").await;
    // The dead-letter queue's receive above holds "poison" until its lease ends.
    clock.advance_secs(6);
    client
        .start_message_move_task()
        .source_arn(arn(&dlq).await)
        .send()
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while client
        .list_message_move_tasks()
        .source_arn(arn(&dlq).await)
        .send()
        .await
        .unwrap()
        .results()[0]
        .status()
        == Some("RUNNING")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the move task finishes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        bodies(&receive(&client, &url, 10, 5).await),
        ["after", "poison"]
    );
}

#[tokio::test]
async fn fifo_order_and_the_dedup_window_survive_a_restart() {
    let mut server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_fifo(&client, "durable.fifo", &[]).await;
    let mut first_sends = HashMap::new();
    for index in 0..6 {
        let group = format!("g{}", index % 2);
        let sent = send(
            &client,
            &url,
            &format!("{group}-{index}"),
            &group,
            &index.to_string(),
        )
        .await;
        first_sends.insert(index, sent);
    }
    let leased = receive(&client, &url, 3, 60).await;
    assert_eq!(bodies(&leased), ["g0-0", "g0-2", "g0-4"]);
    server.restart().await;
    let client = server.client();
    // The lease held across the restart: g0 stays locked, g1 is free.
    assert_eq!(
        bodies(&receive(&client, &url, 10, 60).await),
        ["g1-1", "g1-3", "g1-5"]
    );
    for (index, first) in first_sends {
        let group = format!("g{}", index % 2);
        let again = send(&client, &url, "retry", &group, &index.to_string()).await;
        assert_eq!(again, first, "the dedup window survived the restart");
    }
    for message in &leased {
        delete(&client, &url, message).await;
    }
    assert!(receive(&client, &url, 10, 60).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_deeper_than_one_transaction_clears_the_window_at_once_and_sweeps_the_rest() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let url = create_fifo(&client, "deep.fifo", &[]).await;
    let total = ackbox_engine::PURGE_AT_ONCE as usize + 1_500;
    ackbox_testkit::client::send_numbered(&client, &url, total, |index| {
        SendMessageBatchRequestEntry::builder()
            .id(format!("m{index}"))
            .message_body(format!("before {index}"))
            .message_group_id(format!("g{}", index % 4))
            .message_deduplication_id(format!("m{index}"))
            .build()
            .unwrap()
    })
    .await;
    let depth = || ackbox_testkit::client::queue_depth(&client, &url);
    assert_eq!(depth().await, total);
    client.purge_queue().queue_url(&url).send().await.unwrap();
    // The purge cleared the window: an id first sent before it, its entry
    // not swept yet, is a new message.
    let after = send(&client, &url, "after", "g0", "m0").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while depth().await > 1 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(depth().await, 1, "the sweeper finished the purge");
    let received = receive(&client, &url, 10, 30).await;
    assert_eq!(
        bodies(&received),
        ["after"],
        "a send after the purge is kept"
    );
    assert_eq!(
        send(&client, &url, "after (retried)", "g0", "m0").await,
        after,
        "the window holds what was sent after the purge"
    );
}
