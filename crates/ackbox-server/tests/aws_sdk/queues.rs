//! Queues: creating, finding and listing them, their attributes and tags, deleting and purging them, and what a restart keeps.

use super::*;

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
