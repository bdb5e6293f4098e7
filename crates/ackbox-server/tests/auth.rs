//! SigV4 authentication and per-key permissions, end to end: the official
//! AWS SDK signs, the broker verifies (wrong secrets, unknown keys, old
//! timestamps, presigned URLs) and authorizes every action on the queues it
//! names; the dashboard and `/metrics` take the same keys by Basic auth.

use std::time::{Duration, SystemTime};

use ackbox_server::action::{Action, Service};
use ackbox_testkit::client::{call_json, call_json_signed, call_raw, error_code, queue_arn};
use ackbox_testkit::server::TestServer;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageSystemAttributeName, SendMessageBatchRequestEntry,
};
use base64::Engine as _;
use serde_json::{Value, json};

const ADMIN: (&str, &str) = ("ADMIN", "admin-secret-0123456789");
const ORDERS: (&str, &str) = ("ORDERS", "orders-secret-0123456789");
/// Every action, but only on `orders-*`.
const ORDERS_ANY_ACTION: (&str, &str) = ("ORDERSANY", "orders-any-secret-012345");

const CREDENTIALS: &str = r#"
[[keys]]
access_key_id = "ADMIN"
secret_access_key = "admin-secret-0123456789"
allow_queues = ["*"]
allow_actions = ["*"]

[[keys]]
access_key_id = "ORDERS"
secret_access_key = "orders-secret-0123456789"
allow_queues = ["orders-*"]
allow_actions = ["GetQueueUrl", "ListQueues", "SendMessage", "ReceiveMessage", "DeleteMessage"]

[[keys]]
access_key_id = "ORDERSANY"
secret_access_key = "orders-any-secret-012345"
allow_queues = ["orders-*"]
allow_topics = ["orders-*"]
allow_actions = ["*"]
"#;

async fn secured() -> TestServer {
    TestServer::builder().credentials(CREDENTIALS).start().await
}

fn client(server: &TestServer, (id, secret): (&str, &str)) -> aws_sdk_sqs::Client {
    server.client_with_key(id, secret)
}

#[tokio::test]
async fn a_known_key_sends_receives_and_deletes_on_its_queues() {
    let server = secured().await;
    client(&server, ADMIN)
        .create_queue()
        .queue_name("orders-eu")
        .send()
        .await
        .unwrap();
    let orders = client(&server, ORDERS);
    let url = orders
        .get_queue_url()
        .queue_name("orders-eu")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    orders
        .send_message()
        .queue_url(&url)
        .message_body("one")
        .send()
        .await
        .unwrap();
    // A batch needs the permission of its single form, as in IAM.
    orders
        .send_message_batch()
        .queue_url(&url)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("two")
                .message_body("two")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let received = orders
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::SenderId)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(received.len(), 2);
    for message in &received {
        assert_eq!(
            message.attributes().unwrap()[&MessageSystemAttributeName::SenderId],
            "ORDERS",
            "SenderId names the signing key"
        );
    }
    let entries = received
        .iter()
        .enumerate()
        .map(|(index, message)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(index.to_string())
                .receipt_handle(message.receipt_handle().unwrap())
                .build()
                .unwrap()
        })
        .collect();
    let deleted = orders
        .delete_message_batch()
        .queue_url(&url)
        .set_entries(Some(entries))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.successful().len(), 2);
}

#[tokio::test]
async fn a_wrong_secret_or_an_unknown_key_is_refused_before_anything_happens() {
    let server = secured().await;
    let wrong_secret = client(&server, ("ADMIN", "not-the-admin-secret-000"));
    let error = wrong_secret
        .create_queue()
        .queue_name("q")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(error), "SignatureDoesNotMatch");
    let unknown = client(&server, ("NOBODY", "whatever-secret-0000000"));
    let error = unknown
        .create_queue()
        .queue_name("q")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(error), "InvalidClientTokenId");
    let listed = client(&server, ADMIN).list_queues().send().await.unwrap();
    assert!(
        listed.queue_urls().is_empty(),
        "no refused call created a queue"
    );
    let metrics = call_raw(
        &server.url(),
        "GET",
        "/metrics",
        &[("Authorization", &basic(ADMIN))],
        b"",
    )
    .await;
    let text = String::from_utf8_lossy(&metrics.body);
    for code in ["SignatureDoesNotMatch", "InvalidClientTokenId"] {
        assert!(
            text.contains(&format!("ackbox_auth_refusals_total{{code=\"{code}\"}} ")),
            "refusals are counted by code: {text}"
        );
    }
}

#[tokio::test]
async fn unsigned_requests_are_refused_and_health_checks_are_not() {
    let server = secured().await;
    let (status, body) = call_json(&server.url(), "AmazonSQS.ListQueues", &json!({})).await;
    assert_eq!(status, 403);
    assert_eq!(
        body["__type"],
        "com.amazon.coral.service#MissingAuthenticationTokenException"
    );
    let health = call_raw(&server.url(), "GET", "/healthz", &[], b"").await;
    assert_eq!(health.status, 200);

    // A push endpoint confirms its subscription by a plain GET of the
    // confirmation's SubscribeURL: the token, not a signature, is the proof.
    // Nothing else goes unsigned.
    let topic = "arn:aws:sns:us-east-1:000000000000:orders-events";
    let confirm = call_raw(
        &server.url(),
        "GET",
        &format!("/?Action=ConfirmSubscription&TopicArn={topic}&Token=forged"),
        &[],
        b"",
    )
    .await;
    let text = |reply: &ackbox_testkit::client::RawReply| {
        String::from_utf8_lossy(&reply.body).into_owned()
    };
    assert_eq!(
        confirm.status,
        404,
        "the topic is looked up: {}",
        text(&confirm)
    );
    assert!(text(&confirm).contains("NotFound"), "{}", text(&confirm));
    let publish = call_raw(
        &server.url(),
        "GET",
        &format!("/?Action=Publish&TopicArn={topic}&Message=m"),
        &[],
        b"",
    )
    .await;
    assert_eq!(publish.status, 403);
    assert!(
        text(&publish).contains("MissingAuthenticationToken"),
        "{}",
        text(&publish)
    );
}

#[tokio::test]
async fn a_signature_more_than_five_minutes_old_or_ahead_is_refused() {
    let server = secured().await;
    for (offset, expected) in [
        (-600i64, "Signature expired: "),
        (600, "Signature not yet current: "),
    ] {
        let signed_at = if offset < 0 {
            SystemTime::now() - Duration::from_secs(offset.unsigned_abs())
        } else {
            SystemTime::now() + Duration::from_secs(offset.unsigned_abs())
        };
        let config = ackbox_testkit::client::sqs_config(&server.url(), ADMIN.0, ADMIN.1)
            .time_source(aws_smithy_async::time::StaticTimeSource::new(signed_at))
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .build();
        let error = aws_sdk_sqs::Client::from_conf(config)
            .list_queues()
            .send()
            .await
            .unwrap_err();
        let message = aws_sdk_sqs::error::ProvideErrorMetadata::message(&error)
            .unwrap_or_default()
            .to_owned();
        assert_eq!(error_code(error), "SignatureDoesNotMatch");
        assert!(message.starts_with(expected), "{message}");
    }
    // Within the skew is fine: clocks are never exactly equal.
    let config = ackbox_testkit::client::sqs_config(&server.url(), ADMIN.0, ADMIN.1)
        .time_source(aws_smithy_async::time::StaticTimeSource::new(
            SystemTime::now() - Duration::from_secs(200),
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(config)
        .list_queues()
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn an_action_outside_the_keys_permissions_is_access_denied() {
    let server = secured().await;
    let url = client(&server, ADMIN)
        .create_queue()
        .queue_name("orders-eu")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let orders = client(&server, ORDERS);
    let error = orders
        .purge_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err();
    let message = aws_sdk_sqs::error::ProvideErrorMetadata::message(&error)
        .unwrap_or_default()
        .to_owned();
    assert_eq!(error_code(error), "AccessDenied");
    assert!(
        message.contains("ORDERS is not authorized to perform: sqs:PurgeQueue on resource: arn:aws:sqs:us-east-1:000000000000:orders-eu"),
        "{message}"
    );
    let error = orders
        .delete_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(error), "AccessDenied");
    let error = orders
        .create_queue()
        .queue_name("orders-new")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(error), "AccessDenied");
    assert!(
        client(&server, ADMIN)
            .get_queue_url()
            .queue_name("orders-eu")
            .send()
            .await
            .is_ok(),
        "the queue is still there"
    );
}

#[tokio::test]
async fn a_queue_outside_the_keys_patterns_is_access_denied_and_not_listed() {
    let server = secured().await;
    let admin = client(&server, ADMIN);
    let mut urls = Vec::new();
    for name in ["orders-eu", "orders-us", "payments"] {
        urls.push(
            admin
                .create_queue()
                .queue_name(name)
                .send()
                .await
                .unwrap()
                .queue_url
                .unwrap(),
        );
    }
    let orders = client(&server, ORDERS);
    let error = orders
        .send_message()
        .queue_url(&urls[2])
        .message_body("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(error), "AccessDenied");
    let error = orders
        .get_queue_url()
        .queue_name("payments")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(error), "AccessDenied");
    let listed = orders.list_queues().send().await.unwrap();
    assert_eq!(listed.queue_urls(), &urls[..2], "payments is not listed");
    let all = admin.list_queues().send().await.unwrap();
    assert_eq!(all.queue_urls().len(), 3);
}

/// A request of `action` whose every queue is `payments` (outside
/// `orders-*`); `handle` is a move task of `payments-dlq`.
fn request_naming_payments(action: Action, url: &str, arn: &str, handle: &str) -> Value {
    let dlq_arn = arn.replace(":payments", ":payments-dlq");
    let entry =
        json!([{"Id": "e", "ReceiptHandle": "x", "MessageBody": "b", "VisibilityTimeout": 1}]);
    match action {
        Action::CreateQueue | Action::GetQueueUrl => json!({"QueueName": "payments"}),
        Action::ListQueues => json!({}),
        Action::StartMessageMoveTask | Action::ListMessageMoveTasks => {
            json!({"SourceArn": dlq_arn})
        }
        Action::ListMoveTaskHistory => json!({"SourceArn": dlq_arn}),
        Action::CancelMessageMoveTask | Action::ResumeMessageMoveTask => {
            json!({"TaskHandle": handle})
        }
        Action::SendMessageBatch
        | Action::DeleteMessageBatch
        | Action::ChangeMessageVisibilityBatch => json!({"QueueUrl": url, "Entries": entry}),
        Action::TagQueue => json!({"QueueUrl": url, "Tags": {"a": "b"}}),
        Action::UntagQueue => json!({"QueueUrl": url, "TagKeys": ["a"]}),
        Action::SetQueueAttributes => {
            json!({"QueueUrl": url, "Attributes": {"DelaySeconds": "1"}})
        }
        Action::SendMessage => json!({"QueueUrl": url, "MessageBody": "b"}),
        Action::StartReplay | Action::ListReplays | Action::CancelReplay => json!({
            "TopicArn": "arn:aws:sns:us-east-1:000000000000:payments",
            "DestinationArn": arn,
            "StartTimestamp": 0,
            "TaskHandle": handle
        }),
        Action::DeleteMessage | Action::ChangeMessageVisibility | Action::NackMessage => {
            json!({"QueueUrl": url, "ReceiptHandle": "x", "VisibilityTimeout": 1})
        }
        _ if action.service() == Service::Sns => request_naming_payments_topic(action),
        _ => json!({"QueueUrl": url}),
    }
}

/// A request of the SNS `action` whose topic is `payments` (outside the
/// key's `allow_topics`).
fn request_naming_payments_topic(action: Action) -> Value {
    let topic = "arn:aws:sns:us-east-1:000000000000:payments";
    let subscription = format!("{topic}:00000000-0000-0000-0000-000000000000");
    match action {
        Action::CreateTopic => json!({"Name": "payments"}),
        Action::ListTopics | Action::ListSubscriptions => json!({}),
        Action::Unsubscribe | Action::GetSubscriptionAttributes => {
            json!({"SubscriptionArn": subscription})
        }
        Action::SetSubscriptionAttributes => json!({
            "SubscriptionArn": subscription,
            "AttributeName": "RawMessageDelivery",
            "AttributeValue": "true"
        }),
        Action::SetTopicAttributes => {
            json!({"TopicArn": topic, "AttributeName": "DisplayName", "AttributeValue": "x"})
        }
        Action::Subscribe => json!({"TopicArn": topic, "Protocol": "sqs"}),
        Action::ConfirmSubscription => json!({"TopicArn": topic, "Token": "t"}),
        Action::Publish => json!({"TopicArn": topic, "Message": "m"}),
        Action::PublishBatch => json!({
            "TopicArn": topic,
            "PublishBatchRequestEntries": [{"Id": "e", "Message": "m"}]
        }),
        Action::TagResource | Action::UntagResource | Action::ListTagsForResource => {
            json!({"ResourceArn": topic, "Tags": [], "TagKeys": []})
        }
        _ => json!({"TopicArn": topic}),
    }
}

#[tokio::test]
async fn every_action_is_checked_against_every_queue_it_names() {
    let server = secured().await;
    let admin = client(&server, ADMIN);
    let dlq_url = admin
        .create_queue()
        .queue_name("payments-dlq")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let dlq_arn = queue_arn(&admin, &dlq_url).await;
    let url = admin
        .create_queue()
        .queue_name("payments")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3}).to_string(),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = queue_arn(&admin, &url).await;
    let handle = admin
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .send()
        .await
        .unwrap()
        .task_handle
        .unwrap();
    let (id, secret) = ORDERS_ANY_ACTION;
    for &action in Action::ALL {
        let target = action.target();
        let body = request_naming_payments(action, &url, &arn, &handle);
        let reply = call_json_signed(&server.url(), target, &body, id, secret).await;
        if action == Action::ListQueues {
            assert_eq!(reply.status, 200, "{target}");
            assert_eq!(
                reply.json()["QueueUrls"],
                json!([]),
                "payments is not listed"
            );
            continue;
        }
        if matches!(action, Action::ListTopics | Action::ListSubscriptions) {
            assert_eq!(
                reply.status, 200,
                "{target}: listings show what the key may see"
            );
            continue;
        }
        assert_eq!(reply.status, 403, "{target}: {}", reply.json());
        assert_eq!(
            reply.header("x-amzn-query-error"),
            Some("AccessDenied;Sender"),
            "{target}"
        );
    }
    // Its own topics it may use.
    let own_topic = call_json_signed(
        &server.url(),
        "SNS_20100331.CreateTopic",
        &json!({"Name": "orders-events"}),
        id,
        secret,
    )
    .await;
    assert_eq!(own_topic.status, 200, "{}", own_topic.json());
    // The same requests by a key allowed everywhere get past authorization.
    let allowed = call_json_signed(
        &server.url(),
        "AmazonSQS.GetQueueAttributes",
        &json!({"QueueUrl": url}),
        ADMIN.0,
        ADMIN.1,
    )
    .await;
    assert_eq!(allowed.status, 200);
    let history = call_json_signed(
        &server.url(),
        "AckBox.ListMoveTaskHistory",
        &json!({}),
        id,
        secret,
    )
    .await;
    assert_eq!(history.status, 200);
    assert_eq!(
        history.json()["Tasks"],
        json!([]),
        "the audit log hides other queues' tasks"
    );
}

fn presigned_uri(server: &TestServer, body: &str, signed_at: SystemTime, expires: u64) -> String {
    use aws_sigv4::http_request::{
        SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
    };
    let identity =
        aws_credential_types::Credentials::new(ADMIN.0, ADMIN.1, None, None, "test").into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(expires));
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("sqs")
        .time(signed_at)
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let url = format!("{}/", server.url());
    let headers = [
        ("content-type", "application/x-amz-json-1.0"),
        ("x-amz-target", "AmazonSQS.CreateQueue"),
    ];
    let signable = SignableRequest::new(
        "POST",
        &url,
        headers.into_iter(),
        SignableBody::Bytes(body.as_bytes()),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let query: Vec<String> = instructions
        .params()
        .iter()
        .map(|(name, value)| {
            format!(
                "{name}={}",
                percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC)
            )
        })
        .collect();
    format!("/?{}", query.join("&"))
}

#[tokio::test]
async fn a_presigned_url_works_until_it_expires() {
    let server = secured().await;
    let body = r#"{"QueueName":"presigned"}"#;
    let headers = [
        ("Content-Type", "application/x-amz-json-1.0"),
        ("X-Amz-Target", "AmazonSQS.CreateQueue"),
    ];
    let fresh = presigned_uri(&server, body, SystemTime::now(), 300);
    let reply = call_raw(&server.url(), "POST", &fresh, &headers, body.as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", reply.json());
    assert!(
        reply.json()["QueueUrl"]
            .as_str()
            .unwrap()
            .ends_with("/presigned")
    );
    let other_body = r#"{"QueueName":"tampered"}"#;
    let tampered = call_raw(
        &server.url(),
        "POST",
        &fresh,
        &headers,
        other_body.as_bytes(),
    )
    .await;
    assert_eq!(tampered.status, 403, "the body is covered by the signature");
    let expired = presigned_uri(
        &server,
        body,
        SystemTime::now() - Duration::from_secs(120),
        60,
    );
    let reply = call_raw(&server.url(), "POST", &expired, &headers, body.as_bytes()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.header("x-amzn-query-error"),
        Some("RequestExpired;Sender")
    );
}

fn basic((id, secret): (&str, &str)) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"))
    )
}

#[tokio::test]
async fn the_dashboard_and_metrics_take_the_same_keys_and_permissions() {
    let server = secured().await;
    let admin = client(&server, ADMIN);
    for name in ["orders-eu", "payments"] {
        admin.create_queue().queue_name(name).send().await.unwrap();
    }
    let url = server.url();
    for path in ["/ui", "/metrics", "/ui/queues/orders-eu"] {
        let reply = call_raw(&url, "GET", path, &[], b"").await;
        assert_eq!(reply.status, 401, "{path}");
        assert!(
            reply
                .header("www-authenticate")
                .unwrap()
                .starts_with("Basic")
        );
        let wrong = basic(("ADMIN", "not-the-admin-secret-000"));
        let reply = call_raw(&url, "GET", path, &[("Authorization", &wrong)], b"").await;
        assert_eq!(reply.status, 401, "{path} with a wrong secret");
    }
    let admin_auth = basic(ADMIN);
    let metrics = call_raw(
        &url,
        "GET",
        "/metrics",
        &[("Authorization", &admin_auth)],
        b"",
    )
    .await;
    assert_eq!(metrics.status, 200);
    let orders_auth = basic(ORDERS_ANY_ACTION);
    let page = call_raw(&url, "GET", "/ui", &[("Authorization", &orders_auth)], b"").await;
    assert_eq!(page.status, 200);
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        html.contains("orders-eu") && !html.contains("payments"),
        "{html}"
    );
    let page = call_raw(
        &url,
        "GET",
        "/ui/queues/payments",
        &[("Authorization", &orders_auth)],
        b"",
    )
    .await;
    assert_eq!(page.status, 403);
    let purge = |key: (&'static str, &'static str), queue: &'static str| {
        let url = url.clone();
        async move {
            let authorization = basic(key);
            let headers = [
                ("Authorization", authorization.as_str()),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ];
            let path = format!("/ui/queues/{queue}/purge");
            let body = format!("confirm={queue}");
            call_raw(&url, "POST", &path, &headers, body.as_bytes())
                .await
                .status
        }
    };
    assert_eq!(
        purge(ORDERS_ANY_ACTION, "payments").await,
        403,
        "a key cannot purge a queue outside its patterns"
    );
    assert_eq!(
        purge(ORDERS, "orders-eu").await,
        403,
        "a key without PurgeQueue cannot purge"
    );
    assert_eq!(purge(ADMIN, "orders-eu").await, 303, "the admin may purge");
}

#[tokio::test]
async fn reloaded_credentials_admit_new_keys_and_drop_removed_ones() {
    let server = secured().await;
    let path = server.data_dir().join("credentials.toml");
    let rotated = r#"
[[keys]]
access_key_id = "ADMIN2"
secret_access_key = "rotated-admin-secret-0123"
allow_queues = ["*"]
allow_actions = ["*"]
"#;
    std::fs::write(&path, rotated).unwrap();
    assert_eq!(server.running().authenticator().reload().unwrap(), 1);
    client(&server, ("ADMIN2", "rotated-admin-secret-0123"))
        .list_queues()
        .send()
        .await
        .unwrap();
    let error = client(&server, ADMIN)
        .list_queues()
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(error), "InvalidClientTokenId");
}
