//! The JSON 1.0 wire contract, exercised through the router in-process
//! (DESIGN invariant 6): exact error shapes and headers, malformed and hostile
//! input answered with a 400 and a code, and a server that keeps serving.

use std::sync::Arc;

use ackbox_core::clock::SystemClock;
use ackbox_core::receipt::ReceiptKey;
use ackbox_engine::store::sqlite::{Durability, SqliteStore};
use ackbox_engine::{Engine, EngineConfig};
use ackbox_server::app::{AppState, app};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

struct Harness {
    router: Router,
    _dir: tempfile::TempDir,
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), Durability::Fsync).unwrap();
    let engine = Engine::start(
        EngineConfig::new(ReceiptKey::new([1; 32])),
        Arc::new(store),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let router = app(AppState::new(engine, "http://localhost"));
    Harness { router, _dir: dir }
}

struct Reply {
    status: StatusCode,
    query_error: Option<String>,
    request_id: Option<String>,
    content_type: Option<String>,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

async fn call_raw(harness: &Harness, request: Request<Body>) -> Reply {
    let response = harness.router.clone().oneshot(request).await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    };
    Reply {
        status: response.status(),
        query_error: header("x-amzn-query-error"),
        request_id: header("x-amzn-requestid"),
        content_type: header("content-type"),
        body: response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    }
}

async fn call(harness: &Harness, target: &str, body: impl Into<Body>) -> Reply {
    let request = Request::post("/")
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", target)
        .body(body.into())
        .unwrap();
    call_raw(harness, request).await
}

async fn action(harness: &Harness, name: &str, body: Value) -> Reply {
    call(harness, &format!("AmazonSQS.{name}"), body.to_string()).await
}

#[tokio::test]
async fn queue_does_not_exist_matches_the_aws_example_exactly() {
    let harness = harness().await;
    let reply = action(&harness, "GetQueueUrl", json!({ "QueueName": "nope" })).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.query_error.as_deref(),
        Some("AWS.SimpleQueueService.NonExistentQueue;Sender")
    );
    assert_eq!(
        reply.content_type.as_deref(),
        Some("application/x-amz-json-1.0")
    );
    assert!(reply.request_id.as_ref().is_some_and(|id| !id.is_empty()));
    assert_eq!(
        reply.json(),
        json!({ "__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "The specified queue does not exist." })
    );
}

#[tokio::test]
async fn malformed_requests_get_a_code_not_a_crash() {
    let harness = harness().await;
    let cases: Vec<(&str, &[u8], &str)> = vec![
        (
            "AmazonSQS.CreateQueue",
            b"{",
            "com.amazon.coral.service#SerializationException",
        ),
        (
            "AmazonSQS.CreateQueue",
            b"[1,2,3]",
            "com.amazonaws.sqs#InvalidParameterValueException",
        ),
        (
            "AmazonSQS.CreateQueue",
            b"{}",
            "com.amazonaws.sqs#MissingRequiredParameterException",
        ),
        (
            "AmazonSQS.CreateQueue",
            br#"{"QueueName": 7}"#,
            "com.amazonaws.sqs#InvalidParameterValueException",
        ),
        (
            "AmazonSQS.ReceiveMessage",
            br#"{"QueueUrl":"q","MaxNumberOfMessages":"ten"}"#,
            "com.amazonaws.sqs#InvalidParameterValueException",
        ),
        (
            "AmazonSQS.ReceiveMessage",
            br#"{"QueueUrl":"q","MaxNumberOfMessages":99999999999}"#,
            "com.amazonaws.sqs#InvalidParameterValueException",
        ),
        (
            "AmazonSQS.SendMessage",
            b"\xff\xfe\x00garbage",
            "com.amazon.coral.service#SerializationException",
        ),
        (
            "AmazonSQS.Explode",
            b"{}",
            "com.amazon.coral.service#UnknownOperationException",
        ),
        (
            "DynamoDB_20120810.GetItem",
            b"{}",
            "com.amazon.coral.service#UnknownOperationException",
        ),
    ];
    for (target, body, expected) in cases {
        let reply = call(&harness, target, body.to_vec()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{target} {body:?}");
        assert_eq!(
            reply.json()["__type"],
            expected,
            "{target} {:?}",
            String::from_utf8_lossy(body)
        );
        assert!(
            !reply.json()["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
        );
    }
    let wrong_type = action(
        &harness,
        "ReceiveMessage",
        json!({ "QueueUrl": "q", "MaxNumberOfMessages": "ten" }),
    )
    .await;
    assert!(
        wrong_type.json()["message"]
            .as_str()
            .unwrap()
            .contains("MaxNumberOfMessages")
    );
    let missing = action(&harness, "SendMessage", json!({ "QueueUrl": "q" })).await;
    assert_eq!(
        missing.json()["message"],
        "The request must contain the parameter MessageBody."
    );

    // Still serving, and still correct, after all of that.
    let created = action(&harness, "CreateQueue", json!({ "QueueName": "after" })).await;
    assert_eq!(created.status, StatusCode::OK);
    let url = created.json()["QueueUrl"].as_str().unwrap().to_owned();
    assert_eq!(url, "http://localhost/000000000000/after");
    let sent = action(
        &harness,
        "SendMessage",
        json!({ "QueueUrl": url, "MessageBody": "still alive" }),
    )
    .await;
    assert_eq!(sent.status, StatusCode::OK);
    let received = action(&harness, "ReceiveMessage", json!({ "QueueUrl": url })).await;
    assert_eq!(received.json()["Messages"][0]["Body"], "still alive");
}

#[tokio::test]
async fn missing_target_and_other_methods_are_refused() {
    let harness = harness().await;
    let no_target = Request::post("/")
        .header("content-type", "application/x-amz-json-1.0")
        .body(Body::from("{}"))
        .unwrap();
    let reply = call_raw(&harness, no_target).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.json()["__type"],
        "com.amazon.coral.service#UnknownOperationException"
    );
    let get = call_raw(
        &harness,
        Request::get("/?Action=ListQueues")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(get.status, StatusCode::BAD_REQUEST);
    assert!(
        String::from_utf8(get.body)
            .unwrap()
            .contains("<Code>InvalidAction</Code>")
    );
}

#[tokio::test]
async fn query_protocol_requests_get_an_xml_error_that_says_why() {
    let harness = harness().await;
    let request = Request::post("/")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("Action=ListQueues&Version=2012-11-05"))
        .unwrap();
    let reply = call_raw(&harness, request).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let body = String::from_utf8(reply.body).unwrap();
    assert!(body.contains("<Code>InvalidAction</Code>"), "{body}");
    assert!(body.contains("JSON 1.0"), "{body}");
}

#[tokio::test]
async fn healthz_answers() {
    let harness = harness().await;
    let reply = call_raw(
        &harness,
        Request::get("/healthz").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, b"ok");
}

#[tokio::test]
async fn batch_error_entries_use_query_codes_and_sender_fault() {
    let harness = harness().await;
    let url = action(&harness, "CreateQueue", json!({ "QueueName": "b" }))
        .await
        .json()["QueueUrl"]
        .clone();
    let reply = action(
        &harness,
        "SendMessageBatch",
        json!({ "QueueUrl": url, "Entries": [
            { "Id": "ok", "MessageBody": "fine" },
            { "Id": "bad", "MessageBody": "fine", "DelaySeconds": -1 },
            { "Id": "empty" }
        ]}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = reply.json();
    assert_eq!(body["Successful"].as_array().unwrap().len(), 1);
    assert_eq!(body["Successful"][0]["Id"], "ok");
    assert_eq!(
        body["Successful"][0]["MD5OfMessageBody"],
        "fff25994ee3941b225ba898fd17d186f"
    );
    let failed = body["Failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|entry| entry["SenderFault"] == true));
    let failures: Vec<(&str, &str)> = failed
        .iter()
        .map(|entry| {
            (
                entry["Id"].as_str().unwrap(),
                entry["Code"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        failures,
        [
            ("bad", "InvalidParameterValue"),
            ("empty", "MissingParameter")
        ],
        "request order"
    );
}
