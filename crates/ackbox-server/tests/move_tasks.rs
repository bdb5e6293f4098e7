//! Message move tasks end to end with the official SDK: redrive a
//! dead-letter queue home or elsewhere, cancel, resume after a restart, and
//! the AWS errors for bad requests. Nothing moves twice, nothing is lost.

use std::time::{Duration, Instant};

use ackbox_testkit::client::{error_code as code, queue_depth as depth};
use ackbox_testkit::server::TestServer;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};

const ACCOUNT_ARN: &str = "arn:aws:sqs:us-east-1:000000000000";

struct Setup {
    source: String,
    dlq: String,
    dlq_arn: String,
}

/// A source queue whose `count` messages all sit in its dead-letter queue.
async fn dead_lettered(client: &Client, count: usize) -> Setup {
    let dlq = client
        .create_queue()
        .queue_name("dlq")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let dlq_arn = format!("{ACCOUNT_ARN}:dlq");
    let source = client
        .create_queue()
        .queue_name("source")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":1}}"#),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for chunk in (0..count).collect::<Vec<_>>().chunks(10) {
        let mut batch = client.send_message_batch().queue_url(&source);
        for index in chunk {
            batch = batch.entries(
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{index}"))
                    .message_body(format!("m{index}"))
                    .build()
                    .unwrap(),
            );
        }
        batch.send().await.unwrap();
    }
    // First receive uses the one allowed receive (lease 0 s); the next moves them.
    while depth(client, &dlq).await < count {
        client
            .receive_message()
            .queue_url(&source)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
    assert_eq!(depth(client, &source).await, 0);
    Setup {
        source,
        dlq,
        dlq_arn,
    }
}

/// Polls ListMessageMoveTasks until the newest task leaves RUNNING.
async fn wait_finished(
    client: &Client,
    dlq_arn: &str,
) -> aws_sdk_sqs::types::ListMessageMoveTasksResultEntry {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let tasks = client
            .list_message_move_tasks()
            .source_arn(dlq_arn)
            .send()
            .await
            .unwrap();
        let newest = tasks.results()[0].clone();
        if newest.status() != Some("RUNNING") || Instant::now() > deadline {
            return newest;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_move_task_redrives_every_message_home_exactly_once() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let setup = dead_lettered(&client, 25).await;
    let handle = client
        .start_message_move_task()
        .source_arn(&setup.dlq_arn)
        .send()
        .await
        .unwrap()
        .task_handle
        .unwrap();
    assert!(!handle.is_empty());
    let finished = wait_finished(&client, &setup.dlq_arn).await;
    assert_eq!(finished.status(), Some("COMPLETED"));
    assert_eq!(finished.approximate_number_of_messages_moved(), 25);
    assert_eq!(finished.approximate_number_of_messages_to_move(), Some(25));
    assert!(
        finished.task_handle().is_none(),
        "a finished task has no handle"
    );
    assert_eq!(depth(&client, &setup.dlq).await, 0);

    let mut bodies = Vec::new();
    loop {
        let received = client
            .receive_message()
            .queue_url(&setup.source)
            .max_number_of_messages(10)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount,
            )
            .send()
            .await
            .unwrap();
        if received.messages().is_empty() {
            break;
        }
        for message in received.messages() {
            assert_eq!(
                message.attributes().unwrap()
                    [&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount],
                "1",
                "a redriven message starts its receives over"
            );
            bodies.push(message.body().unwrap().to_owned());
        }
    }
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 25, "every message came home, once");
}

#[tokio::test]
async fn a_move_task_can_target_another_queue_and_be_cancelled() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let setup = dead_lettered(&client, 40).await;
    let elsewhere = client
        .create_queue()
        .queue_name("elsewhere")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let handle = client
        .start_message_move_task()
        .source_arn(&setup.dlq_arn)
        .destination_arn(format!("{ACCOUNT_ARN}:elsewhere"))
        .max_number_of_messages_per_second(10)
        .send()
        .await
        .unwrap()
        .task_handle
        .unwrap();
    let second = client
        .start_message_move_task()
        .source_arn(&setup.dlq_arn)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(second),
        "InvalidParameterValue",
        "one task per source, refused as AWS refuses it"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let cancelled = client
        .cancel_message_move_task()
        .task_handle(&handle)
        .send()
        .await
        .unwrap();
    let moved = cancelled.approximate_number_of_messages_moved();
    assert!(
        moved < 40,
        "cancelled before the end ({moved} moved at 10/s)"
    );
    let listed = client
        .list_message_move_tasks()
        .source_arn(&setup.dlq_arn)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.results()[0].status(), Some("CANCELLED"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (in_dlq, in_elsewhere) = (
        depth(&client, &setup.dlq).await,
        depth(&client, &elsewhere).await,
    );
    assert_eq!(in_dlq + in_elsewhere, 40, "nothing lost, nothing doubled");
    // A step under way when the cancel came finishes and is counted (on the
    // log store its moves land before its progress): read the count settled.
    let settled = client
        .list_message_move_tasks()
        .source_arn(&setup.dlq_arn)
        .send()
        .await
        .unwrap();
    assert_eq!(
        in_elsewhere as i64,
        settled.results()[0].approximate_number_of_messages_moved()
    );
    assert_eq!(depth(&client, &setup.source).await, 0);
    let again = client
        .cancel_message_move_task()
        .task_handle(&handle)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(again), "ResourceNotFoundException");
}

#[tokio::test]
async fn a_running_task_resumes_after_a_restart() {
    let mut server = TestServer::builder().start().await;
    let client = server.client();
    let setup = dead_lettered(&client, 30).await;
    client
        .start_message_move_task()
        .source_arn(&setup.dlq_arn)
        .max_number_of_messages_per_second(20)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.restart().await;
    let client = server.client();
    let finished = wait_finished(&client, &setup.dlq_arn).await;
    assert_eq!(finished.status(), Some("COMPLETED"));
    assert_eq!(finished.approximate_number_of_messages_moved(), 30);
    assert_eq!(depth(&client, &setup.source).await, 30);
    assert_eq!(depth(&client, &setup.dlq).await, 0);

    // The audit log survives the restart and tells who ran what.
    let (status, history) = ackbox_testkit::client::call_json(
        &server.url(),
        "AckBox.ListMoveTaskHistory",
        &serde_json::json!({ "SourceArn": setup.dlq_arn }),
    )
    .await;
    assert_eq!(status, 200);
    let audit = &history["Tasks"][0];
    assert_eq!(audit["RequestedBy"], "anonymous");
    assert_eq!(audit["Status"], "COMPLETED");
    assert_eq!(audit["MaxNumberOfMessagesPerSecond"], 20);
    assert_eq!(audit["ApproximateNumberOfMessagesMoved"], 30);
    assert!(
        audit["FinishedTimestamp"].as_i64().unwrap() >= audit["StartedTimestamp"].as_i64().unwrap()
    );
}

#[tokio::test]
async fn bad_move_requests_get_the_aws_errors() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let setup = dead_lettered(&client, 1).await;
    for rate in [0, 501] {
        let error = client
            .start_message_move_task()
            .source_arn(&setup.dlq_arn)
            .max_number_of_messages_per_second(rate)
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(error), "InvalidParameterValue", "rate {rate}");
    }
    let unknown = client
        .start_message_move_task()
        .source_arn(format!("{ACCOUNT_ARN}:nope"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(unknown), "ResourceNotFoundException");
    let not_a_dlq = client
        .start_message_move_task()
        .source_arn(format!("{ACCOUNT_ARN}:source"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(not_a_dlq), "InvalidParameterValue");
    let bad_destination = client
        .start_message_move_task()
        .source_arn(&setup.dlq_arn)
        .destination_arn(format!("{ACCOUNT_ARN}:nope"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(bad_destination), "ResourceNotFoundException");
    let list_unknown = client
        .list_message_move_tasks()
        .source_arn(format!("{ACCOUNT_ARN}:nope"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(list_unknown), "ResourceNotFoundException");
    // What is not a task handle at all is an invalid value; a handle of no
    // task is not found (LocalStack's AWS-validated
    // test_cancel_with_invalid_task_handle and its neighbours).
    let cancel_garbled = client
        .cancel_message_move_task()
        .task_handle("foobared")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(cancel_garbled), "InvalidParameterValue");
    let cancel_unknown = client
        .cancel_message_move_task()
        .task_handle("10f57157-fc38-4da9-a113-4de7e12d05aa")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(cancel_unknown), "ResourceNotFoundException");
    assert_eq!(
        depth(&client, &setup.dlq).await,
        1,
        "refused requests moved nothing"
    );
}

#[tokio::test]
async fn inv2_a_handle_from_before_the_dead_letter_cannot_touch_the_redriven_message() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let dlq = client
        .create_queue()
        .queue_name("dlq")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let source = client
        .create_queue()
        .queue_name("source")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{ACCOUNT_ARN}:dlq","maxReceiveCount":1}}"#),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    client
        .send_message()
        .queue_url(&source)
        .message_body("once")
        .send()
        .await
        .unwrap();
    let first = client
        .receive_message()
        .queue_url(&source)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let old_handle = first.messages()[0].receipt_handle().unwrap().to_owned();
    client
        .receive_message()
        .queue_url(&source)
        .send()
        .await
        .unwrap();
    assert_eq!(depth(&client, &dlq).await, 1);
    client
        .start_message_move_task()
        .source_arn(format!("{ACCOUNT_ARN}:dlq"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        wait_finished(&client, &format!("{ACCOUNT_ARN}:dlq"))
            .await
            .status(),
        Some("COMPLETED")
    );

    // Home again and received afresh: its first receive once more, but under a new handle.
    let again = client
        .receive_message()
        .queue_url(&source)
        .visibility_timeout(30)
        .send()
        .await
        .unwrap();
    let new_handle = again.messages()[0].receipt_handle().unwrap().to_owned();
    assert_ne!(new_handle, old_handle);
    client
        .delete_message()
        .queue_url(&source)
        .receipt_handle(&old_handle)
        .send()
        .await
        .unwrap();
    let stale_change = client
        .change_message_visibility()
        .queue_url(&source)
        .receipt_handle(&old_handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(stale_change), "InvalidParameterValue");
    assert_eq!(
        depth(&client, &source).await,
        1,
        "the stale delete left the message to its new holder"
    );
    client
        .delete_message()
        .queue_url(&source)
        .receipt_handle(&new_handle)
        .send()
        .await
        .unwrap();
    assert_eq!(depth(&client, &source).await, 0);
}

#[tokio::test]
async fn a_sampled_task_pauses_for_review_and_resumes() {
    let server = TestServer::builder().start().await;
    let client = server.client();
    let setup = dead_lettered(&client, 5).await;
    let (status, started) = ackbox_testkit::client::call_json(
        &server.url(),
        "AmazonSQS.StartMessageMoveTask",
        &serde_json::json!({ "SourceArn": setup.dlq_arn, "AckBoxSample": 2 }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let handle = started["TaskHandle"].as_str().unwrap().to_owned();
    let paused = wait_finished(&client, &setup.dlq_arn).await;
    assert_eq!(paused.status(), Some("PAUSED"));
    assert_eq!(
        paused.approximate_number_of_messages_moved(),
        2,
        "the sample"
    );
    assert_eq!(
        paused.task_handle(),
        Some(handle.as_str()),
        "a paused task keeps its handle"
    );
    assert!(
        paused
            .failure_reason()
            .unwrap_or_default()
            .contains("review")
    );
    assert_eq!(depth(&client, &setup.source).await, 2);
    let second = client
        .start_message_move_task()
        .source_arn(&setup.dlq_arn)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code(second),
        "InvalidParameterValue",
        "a paused task still owns its source"
    );

    let (status, resumed) = ackbox_testkit::client::call_json(
        &server.url(),
        "AckBox.ResumeMessageMoveTask",
        &serde_json::json!({ "TaskHandle": handle }),
    )
    .await;
    assert_eq!(
        (status, resumed["SourceArn"].as_str()),
        (200, Some(setup.dlq_arn.as_str()))
    );
    let finished = wait_finished(&client, &setup.dlq_arn).await;
    assert_eq!(finished.status(), Some("COMPLETED"));
    assert_eq!(finished.approximate_number_of_messages_moved(), 5);
    assert_eq!(depth(&client, &setup.source).await, 5);
    let (status, again) = ackbox_testkit::client::call_json(
        &server.url(),
        "AckBox.ResumeMessageMoveTask",
        &serde_json::json!({ "TaskHandle": handle }),
    )
    .await;
    assert_eq!(
        (status, again["__type"].as_str()),
        (404, Some("com.amazonaws.sqs#ResourceNotFoundException"))
    );
}
