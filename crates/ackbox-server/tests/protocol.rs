//! The wire contract of both protocols (JSON 1.0 and query), exercised
//! through the router in-process (invariant 6, ARCHITECTURE.md): exact error shapes and
//! headers, malformed and hostile input answered with a 400 and a code, and a
//! server that keeps serving.

use std::sync::Arc;

use ackbox_core::clock::SystemClock;
use ackbox_core::receipt::ReceiptKey;
use ackbox_engine::store::StoreConfig;
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
    let store = ackbox_engine::store::open(&StoreConfig::embedded(dir.path().to_owned()))
        .await
        .unwrap()
        .store;
    let engine = Engine::start(
        EngineConfig::new(ReceiptKey::new([1; 32])),
        store,
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
async fn a_json_request_without_a_target_is_refused() {
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
}

/// A query-protocol request: form-encoded parameters posted to `path`.
async fn query(harness: &Harness, path: &str, form: &str) -> Reply {
    let request = Request::post(path)
        .header("host", "localhost")
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .body(Body::from(form.to_owned()))
        .unwrap();
    call_raw(harness, request).await
}

/// The text of the first `<element>` in an XML reply.
fn element<'a>(xml: &'a str, element: &str) -> Option<&'a str> {
    let open = format!("<{element}>");
    let start = xml.find(&open)? + open.len();
    let length = xml[start..].find(&format!("</{element}>"))?;
    Some(&xml[start..start + length])
}

#[tokio::test]
async fn the_query_protocol_runs_a_message_through_its_whole_life() {
    let harness = harness().await;
    let created = query(
        &harness,
        "/",
        "Action=CreateQueue&Version=2012-11-05&QueueName=orders\
         &Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=45&Tag.1.Key=team&Tag.1.Value=pay",
    )
    .await;
    assert_eq!(created.status, StatusCode::OK);
    assert_eq!(created.content_type.as_deref(), Some("text/xml"));
    let body = String::from_utf8(created.body).unwrap();
    assert!(
        body.starts_with(
            "<?xml version=\"1.0\"?><CreateQueueResponse \
             xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"><CreateQueueResult>"
        ),
        "{body}"
    );
    let request_id = created.request_id.unwrap();
    assert_eq!(element(&body, "RequestId"), Some(request_id.as_str()));
    let url = element(&body, "QueueUrl").unwrap().to_owned();
    assert_eq!(url, "http://localhost/000000000000/orders");

    // Posted to the queue's URL, as query clients may, so no QueueUrl.
    let sent = query(
        &harness,
        "/000000000000/orders",
        "Action=SendMessage&MessageBody=a%3Cb%3E%20%26%0D%0Ac\
         &MessageAttribute.1.Name=kind&MessageAttribute.1.Value.DataType=String\
         &MessageAttribute.1.Value.StringValue=card",
    )
    .await;
    assert_eq!(sent.status, StatusCode::OK);
    let sent = String::from_utf8(sent.body).unwrap();
    assert_eq!(
        element(&sent, "MD5OfMessageBody"),
        Some("d7e7175816cb8d5918b5fbfd6ad331bd"),
        "the MD5 of `a<b> &\\r\\nc`: the form was decoded byte for byte"
    );
    assert!(element(&sent, "MD5OfMessageAttributes").is_some(), "{sent}");

    let received = call_raw(
        &harness,
        Request::get(
            "/?Action=ReceiveMessage&QueueUrl=http%3A%2F%2Flocalhost%2F000000000000%2Forders\
             &AttributeName.1=ApproximateReceiveCount&MessageAttributeName.1=All",
        )
        .body(Body::empty())
        .unwrap(),
    )
    .await;
    assert_eq!(received.status, StatusCode::OK);
    let received = String::from_utf8(received.body).unwrap();
    assert_eq!(element(&received, "Body"), Some("a&lt;b&gt; &amp;&#xD;\nc"));
    assert!(
        received.contains(
            "<Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>"
        ),
        "{received}"
    );
    assert!(
        received.contains(
            "<MessageAttribute><Name>kind</Name><Value><DataType>String</DataType>\
             <StringValue>card</StringValue></Value></MessageAttribute>"
        ),
        "{received}"
    );
    let handle = element(&received, "ReceiptHandle").unwrap();
    let deleted = query(
        &harness,
        "/",
        &format!(
            "Action=DeleteMessageBatch&QueueUrl={url}\
             &DeleteMessageBatchRequestEntry.1.Id=gone&DeleteMessageBatchRequestEntry.1.ReceiptHandle={}\
             &DeleteMessageBatchRequestEntry.2.Id=bad&DeleteMessageBatchRequestEntry.2.ReceiptHandle=nope",
            percent_encode(handle)
        ),
    )
    .await;
    let deleted = String::from_utf8(deleted.body).unwrap();
    assert!(
        deleted.contains(
            "<DeleteMessageBatchResultEntry><Id>gone</Id></DeleteMessageBatchResultEntry>"
        ),
        "{deleted}"
    );
    assert!(
        deleted.contains("<Id>bad</Id><Message>")
            && deleted.contains("<SenderFault>true</SenderFault>"),
        "{deleted}"
    );
    let attributes = query(
        &harness,
        "/",
        &format!(
            "Action=GetQueueAttributes&QueueUrl={url}&AttributeName.1=VisibilityTimeout\
             &AttributeName.2=ApproximateNumberOfMessages&AttributeName.3=ApproximateNumberOfMessagesNotVisible"
        ),
    )
    .await;
    let attributes = String::from_utf8(attributes.body).unwrap();
    for (name, value) in [
        ("VisibilityTimeout", "45"),
        ("ApproximateNumberOfMessages", "0"),
        ("ApproximateNumberOfMessagesNotVisible", "0"),
    ] {
        assert!(
            attributes.contains(&format!(
                "<Attribute><Name>{name}</Name><Value>{value}</Value></Attribute>"
            )),
            "{name}: {attributes}"
        );
    }
    let tags = query(&harness, "/000000000000/orders", "Action=ListQueueTags").await;
    let tags = String::from_utf8(tags.body).unwrap();
    assert!(
        tags.contains("<Tag><Key>team</Key><Value>pay</Value></Tag>"),
        "{tags}"
    );
    let purged = query(&harness, "/000000000000/orders", "Action=PurgeQueue").await;
    assert_eq!(purged.status, StatusCode::OK);
    let purged = String::from_utf8(purged.body).unwrap();
    assert!(
        purged.contains("<PurgeQueueResponse") && !purged.contains("PurgeQueueResult"),
        "actions without output answer with metadata only: {purged}"
    );
}

#[tokio::test]
async fn query_errors_are_xml_with_query_codes_that_name_the_field() {
    let harness = harness().await;
    let cases = [
        (
            "Action=GetQueueUrl&QueueName=nope",
            "AWS.SimpleQueueService.NonExistentQueue",
            "The specified queue does not exist for this wsdl version.",
        ),
        (
            "Action=Explode",
            "InvalidAction",
            "The action Explode is not valid for this web service.",
        ),
        (
            "Version=2012-11-05",
            "MissingParameter",
            "The request must contain the parameter Action.",
        ),
        (
            "Action=CreateQueue",
            "MissingParameter",
            "The request must contain the parameter QueueName.",
        ),
        (
            "Action=ReceiveMessage&QueueUrl=q&MaxNumberOfMessages=ten",
            "InvalidParameterValue",
            "Value for parameter MaxNumberOfMessages is invalid. Reason: \"ten\" is not a number.",
        ),
        (
            "Action=CreateQueue&QueueName=x&Attribute.1.Value=30",
            "MissingParameter",
            "The request must contain the parameter Attribute.1.Name.",
        ),
    ];
    for (form, code, message) in cases {
        let reply = query(&harness, "/", form).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{form}");
        assert_eq!(reply.content_type.as_deref(), Some("text/xml"), "{form}");
        let body = String::from_utf8(reply.body).unwrap();
        assert_eq!(element(&body, "Type"), Some("Sender"), "{form}: {body}");
        assert_eq!(element(&body, "Code"), Some(code), "{form}: {body}");
        assert_eq!(element(&body, "Message"), Some(message), "{form}: {body}");
        assert_eq!(
            element(&body, "RequestId"),
            reply.request_id.as_deref(),
            "{form}"
        );
    }
}

fn percent_encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
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
