//! Invariant 6, by property: whatever JSON a client sends as any action's
//! parameters (as JSON 1.0 or flattened into a query-protocol form), and
//! whatever bytes it sends as a body, the answer is a success or a 4xx in
//! SQS's error shape — never a 5xx, never a panic. The
//! broker keeps its state across cases, so later cases meet the queues,
//! messages and tasks earlier ones made.

use std::sync::{Arc, Mutex};

use ackbox_core::clock::SystemClock;
use ackbox_core::receipt::ReceiptKey;
use ackbox_engine::store::{Durability, StoreConfig};
use ackbox_engine::{Engine, EngineConfig};
use ackbox_server::action::Action;
use ackbox_server::app::{AppState, app};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use tower::ServiceExt;

/// Every member name any action reads, so generated requests reach past
/// "missing parameter" into the handlers.
const FIELDS: &[&str] = &[
    "Reason",
    "QueueUrl",
    "QueueName",
    "Attributes",
    "tags",
    "Tags",
    "TagKeys",
    "MessageBody",
    "DelaySeconds",
    "MessageAttributes",
    "MessageSystemAttributes",
    "MessageDeduplicationId",
    "MessageGroupId",
    "Entries",
    "Id",
    "ReceiptHandle",
    "VisibilityTimeout",
    "MaxNumberOfMessages",
    "WaitTimeSeconds",
    "AttributeNames",
    "MessageAttributeNames",
    "MessageSystemAttributeNames",
    "ReceiveRequestAttemptId",
    "QueueNamePrefix",
    "QueueOwnerAWSAccountId",
    "MaxResults",
    "NextToken",
    "SourceArn",
    "DestinationArn",
    "MaxNumberOfMessagesPerSecond",
    "TaskHandle",
    "AckBoxFailureClass",
    "AckBoxOlderThanSeconds",
    "AckBoxMaxMessages",
    "AckBoxSample",
    "Class",
    "Message",
    "Permanent",
    "Name",
    "TopicArn",
    "TargetArn",
    "PhoneNumber",
    "ResourceArn",
    "SubscriptionArn",
    "Protocol",
    "Endpoint",
    "ReturnSubscriptionArn",
    "Subject",
    "MessageStructure",
    "AttributeName",
    "AttributeValue",
    "PublishBatchRequestEntries",
];

/// Queue attribute names, without `ReceiveMessageWaitTimeSeconds`: a queue
/// that long-polls every receive would make each later case wait 20 s.
const ATTRIBUTES: &[&str] = &[
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "VisibilityTimeout",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
    "All",
    "QueueArn",
    "Policy",
];

const URL: &str = "http://localhost/000000000000/target";
const FIFO_URL: &str = "http://localhost/000000000000/target.fifo";
const DLQ_ARN: &str = "arn:aws:sqs:us-east-1:000000000000:target-dlq";

fn interesting_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(URL.to_owned()),
        Just(FIFO_URL.to_owned()),
        Just("http://localhost/000000000000/target-dlq".to_owned()),
        Just(DLQ_ARN.to_owned()),
        Just("arn:aws:sqs:us-east-1:000000000000:target".to_owned()),
        Just("target".to_owned()),
        Just("target.fifo".to_owned()),
        Just(String::new()),
        Just("String".to_owned()),
        Just("Number".to_owned()),
        Just("Binary".to_owned()),
        Just("All".to_owned()),
        Just("-1".to_owned()),
        Just("99999999999999999999999".to_owned()),
        Just("{\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:target-dlq\",\"maxReceiveCount\":1}".to_owned()),
        Just("AQAAAAAAAAABAAAAAAAAAAEAAAAAAAAAAQ".to_owned()),
        "\\PC{0,40}",
        "[a-zA-Z0-9_.-]{1,90}",
        ".{0,12}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-5i64..50).prop_map(Value::from),
        any::<f64>().prop_map(|number| json!(number)),
        interesting_string().prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        prop::sample::select(FIELDS).prop_map(str::to_owned),
                        prop::sample::select(ATTRIBUTES).prop_map(str::to_owned),
                        Just("DataType".to_owned()),
                        Just("StringValue".to_owned()),
                        Just("BinaryValue".to_owned()),
                        "[a-zA-Z.]{1,12}",
                    ],
                    inner,
                ),
                0..5,
            )
            .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// The members `action` reads.
fn fields(action: Action) -> &'static [&'static str] {
    match action {
        Action::CreateQueue => &["QueueName", "Attributes", "tags"],
        Action::GetQueueUrl => &["QueueName", "QueueOwnerAWSAccountId"],
        Action::ListQueues => &["QueueNamePrefix", "MaxResults", "NextToken"],
        Action::DeleteQueue | Action::PurgeQueue => &["QueueUrl"],
        Action::SummarizeQueue => &["QueueUrl", "AckBoxFailureClass", "AckBoxOlderThanSeconds"],
        Action::GetQueueAttributes => &["QueueUrl", "AttributeNames"],
        Action::SetQueueAttributes => &["QueueUrl", "Attributes"],
        Action::TagQueue => &["QueueUrl", "Tags"],
        Action::UntagQueue => &["QueueUrl", "TagKeys"],
        Action::ListQueueTags => &["QueueUrl"],
        Action::ListDeadLetterSourceQueues => &["QueueUrl", "MaxResults", "NextToken"],
        Action::SendMessage => &[
            "QueueUrl",
            "MessageBody",
            "DelaySeconds",
            "MessageAttributes",
            "MessageSystemAttributes",
            "MessageDeduplicationId",
            "MessageGroupId",
        ],
        Action::SendMessageBatch
        | Action::DeleteMessageBatch
        | Action::ChangeMessageVisibilityBatch => &["QueueUrl", "Entries"],
        Action::ReceiveMessage => &[
            "QueueUrl",
            "MaxNumberOfMessages",
            "VisibilityTimeout",
            "WaitTimeSeconds",
            "AttributeNames",
            "MessageSystemAttributeNames",
            "MessageAttributeNames",
            "ReceiveRequestAttemptId",
        ],
        Action::DeleteMessage => &["QueueUrl", "ReceiptHandle"],
        Action::ChangeMessageVisibility => &["QueueUrl", "ReceiptHandle", "VisibilityTimeout"],
        Action::StartMessageMoveTask => &[
            "SourceArn",
            "DestinationArn",
            "MaxNumberOfMessagesPerSecond",
            "AckBoxFailureClass",
            "AckBoxOlderThanSeconds",
            "AckBoxMaxMessages",
            "AckBoxSample",
        ],
        Action::ListMessageMoveTasks | Action::ListMoveTaskHistory => &["SourceArn", "MaxResults"],
        Action::CancelMessageMoveTask | Action::ResumeMessageMoveTask => &["TaskHandle"],
        Action::NackMessage => &[
            "QueueUrl",
            "ReceiptHandle",
            "DelaySeconds",
            "Reason",
            "Permanent",
        ],
        Action::PeekMessages => &[
            "QueueUrl",
            "MaxNumberOfMessages",
            "MessageSystemAttributeNames",
            "MessageAttributeNames",
        ],
        Action::CreateTopic => &["Name", "Attributes", "Tags"],
        Action::DeleteTopic | Action::GetTopicAttributes => &["TopicArn"],
        Action::ListTopics | Action::ListSubscriptions => &["NextToken"],
        Action::ListSubscriptionsByTopic => &["TopicArn", "NextToken"],
        Action::SetTopicAttributes => &["TopicArn", "AttributeName", "AttributeValue"],
        Action::Subscribe => &[
            "TopicArn",
            "Protocol",
            "Endpoint",
            "Attributes",
            "ReturnSubscriptionArn",
        ],
        Action::ConfirmSubscription => &["TopicArn", "Token", "AuthenticateOnUnsubscribe"],
        Action::Unsubscribe | Action::GetSubscriptionAttributes => &["SubscriptionArn"],
        Action::SetSubscriptionAttributes => {
            &["SubscriptionArn", "AttributeName", "AttributeValue"]
        }
        Action::Publish => &[
            "TopicArn",
            "TargetArn",
            "PhoneNumber",
            "Message",
            "Subject",
            "MessageStructure",
            "MessageAttributes",
            "MessageGroupId",
            "MessageDeduplicationId",
        ],
        Action::PublishBatch => &["TopicArn", "PublishBatchRequestEntries"],
        Action::TagResource => &["ResourceArn", "Tags"],
        Action::UntagResource => &["ResourceArn", "TagKeys"],
        Action::ListTagsForResource => &["ResourceArn"],
        Action::StartReplay => &[
            "TopicArn",
            "DestinationArn",
            "StartTimestamp",
            "EndTimestamp",
            "FilterPolicy",
            "RawMessageDelivery",
            "MaxNumberOfMessagesPerSecond",
        ],
        Action::ListReplays => &["TopicArn"],
        Action::CancelReplay => &["TopicArn", "TaskHandle"],
    }
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => (0i64..12).prop_map(Value::from),
        2 => (-2i64..2_000_000).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
    ]
}

fn short_string() -> impl Strategy<Value = String> {
    prop_oneof!["[a-zA-Z0-9_.-]{1,12}", interesting_string(),]
}

fn message_attributes() -> impl Strategy<Value = Value> {
    let attribute = prop_oneof![
        4 => ("[a-zA-Z0-9 ]{1,20}").prop_map(|text| json!({"DataType": "String", "StringValue": text})),
        2 => (-1_000i64..1_000).prop_map(|number| json!({"DataType": "Number", "StringValue": number.to_string()})),
        2 => Just(json!({"DataType": "Binary", "BinaryValue": "aGVsbG8="})),
        1 => (
            prop_oneof![Just("Number.float".to_owned()), Just("String".to_owned()), short_string()],
            prop::option::of(short_string()),
            prop::option::of(short_string()),
        )
            .prop_map(|(data_type, string, binary)| {
                let mut value = json!({ "DataType": data_type });
                if let Some(string) = string {
                    value["StringValue"] = json!(string);
                }
                if let Some(binary) = binary {
                    value["BinaryValue"] = json!(binary);
                }
                value
            }),
    ];
    prop::collection::btree_map(
        prop_oneof![3 => "[a-zA-Z][a-zA-Z0-9_-]{0,10}", 1 => short_string()],
        attribute,
        0..4,
    )
    .prop_map(|map| json!(map))
}

fn entries() -> impl Strategy<Value = Value> {
    let entry = (
        prop_oneof![6 => "[a-zA-Z0-9_-]{1,10}", 1 => short_string()],
        "\\PC{0,30}",
        prop_oneof![Just(HANDLE.to_owned()), short_string()],
        number(),
        prop_oneof![Just(None), short_string().prop_map(Some)],
    )
        .prop_map(|(id, body, handle, seconds, group)| {
            let mut entry = json!({
                "Id": id,
                "MessageBody": body,
                "ReceiptHandle": handle,
                "VisibilityTimeout": seconds,
                "DelaySeconds": seconds,
            });
            if let Some(group) = group {
                entry["MessageGroupId"] = json!(group.clone());
                entry["MessageDeduplicationId"] = json!(group);
            }
            entry
        });
    prop::collection::vec(entry, 0..12).prop_map(Value::Array)
}

/// A value of roughly the type `field` takes; every so often any value.
fn field_value(field: &'static str) -> BoxedStrategy<Value> {
    let typed: BoxedStrategy<Value> = match field {
        "QueueName" => prop_oneof![
            Just(json!("target")),
            Just(json!("target.fifo")),
            Just(json!("scratch")),
            Just(json!("scratch.fifo")),
            short_string().prop_map(Value::from),
        ]
        .boxed(),
        "QueueUrl" => prop_oneof![
            3 => Just(json!(URL)),
            3 => Just(json!(FIFO_URL)),
            1 => Just(json!("http://localhost/000000000000/target-dlq")),
            1 => interesting_string().prop_map(Value::from),
        ]
        .boxed(),
        "MessageBody" | "Class" | "Message" => "\\PC{0,60}".prop_map(Value::from).boxed(),
        "ReceiptHandle" => prop_oneof![
            3 => Just(json!(HANDLE)),
            1 => short_string().prop_map(Value::from),
        ]
        .boxed(),
        "TaskHandle" => prop_oneof![
            3 => Just(json!(TASK)),
            1 => short_string().prop_map(Value::from),
        ]
        .boxed(),
        // A long poll is a wait, not a failure; keep every case quick.
        "WaitTimeSeconds" => prop_oneof![
            8 => Just(json!(0)),
            1 => Just(json!(-1)),
            1 => Just(json!(21)),
        ]
        .boxed(),
        "Permanent" => any::<bool>().prop_map(Value::from).boxed(),
        "Attributes" => prop::collection::btree_map(
            prop::sample::select(ATTRIBUTES).prop_map(str::to_owned),
            prop_oneof![
                number().prop_map(|number| Value::from(number.to_string())),
                Just(json!("true")),
                Just(json!("false")),
                Just(json!("messageGroup")),
                Just(json!("perMessageGroupId")),
                interesting_string().prop_map(Value::from),
            ],
            0..4,
        )
        .prop_map(|map| json!(map))
        .boxed(),
        "tags" | "Tags" => prop::collection::btree_map(short_string(), short_string(), 0..4)
            .prop_map(|map| json!(map))
            .boxed(),
        "TagKeys" | "AttributeNames" | "MessageSystemAttributeNames"
        | "MessageAttributeNames" => prop::collection::vec(
            prop_oneof![
                prop::sample::select(ATTRIBUTES).prop_map(str::to_owned),
                Just("All".to_owned()),
                Just(".*".to_owned()),
                short_string(),
            ],
            0..4,
        )
        .prop_map(|names| json!(names))
        .boxed(),
        "MessageAttributes" => message_attributes().boxed(),
        "MessageSystemAttributes" => prop_oneof![
            3 => Just(json!({})),
            1 => Just(json!({"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}})),
            1 => message_attributes(),
        ]
        .boxed(),
        "Entries" => entries().boxed(),
        "Reason" => (short_string(), "\\PC{0,40}")
            .prop_map(|(class, message)| json!({"Class": class, "Message": message}))
            .boxed(),
        "TopicArn" | "TargetArn" | "ResourceArn" => prop_oneof![
            3 => Just(json!(TOPIC_ARN)),
            1 => Just(json!("arn:aws:sns:us-east-1:000000000000:nowhere")),
            1 => interesting_string().prop_map(Value::from),
        ]
        .boxed(),
        "SubscriptionArn" => prop_oneof![
            2 => Just(json!(format!("{TOPIC_ARN}:00000000-0000-0000-0000-000000000000"))),
            1 => interesting_string().prop_map(Value::from),
        ]
        .boxed(),
        "Name" => prop_oneof![
            Just(json!("topic")),
            Just(json!("topic.fifo")),
            short_string().prop_map(Value::from),
        ]
        .boxed(),
        "Protocol" => prop_oneof![
            3 => Just(json!("sqs")),
            1 => short_string().prop_map(Value::from),
        ]
        .boxed(),
        "Endpoint" => prop_oneof![
            3 => Just(json!("arn:aws:sqs:us-east-1:000000000000:target")),
            1 => Just(json!(DLQ_ARN)),
            1 => interesting_string().prop_map(Value::from),
        ]
        .boxed(),
        "Subject" | "MessageStructure" | "AttributeName" | "AttributeValue" | "PhoneNumber" => {
            prop_oneof![
                Just(json!("json")),
                Just(json!("RawMessageDelivery")),
                Just(json!("DisplayName")),
                Just(json!("true")),
                interesting_string().prop_map(Value::from),
            ]
            .boxed()
        }
        "PublishBatchRequestEntries" => prop::collection::vec(
            ("[a-zA-Z0-9_-]{1,10}", "\\PC{0,30}")
                .prop_map(|(id, message)| json!({"Id": id, "Message": message})),
            0..12,
        )
        .prop_map(Value::Array)
        .boxed(),
        "SourceArn" | "DestinationArn" => prop_oneof![
            3 => Just(json!(DLQ_ARN)),
            1 => interesting_string().prop_map(Value::from),
        ]
        .boxed(),
        "MessageGroupId" | "MessageDeduplicationId" | "ReceiveRequestAttemptId"
        | "QueueNamePrefix" | "NextToken" | "QueueOwnerAWSAccountId" | "AckBoxFailureClass" => {
            short_string().prop_map(Value::from).boxed()
        }
        _ => number().boxed(),
    };
    prop_oneof![24 => typed, 1 => value()].boxed()
}

/// A topic every case may publish to; `target` is subscribed to it.
const TOPIC_ARN: &str = "arn:aws:sns:us-east-1:000000000000:topic";

/// Stands for a receipt handle the broker really issued, when it has.
const HANDLE: &str = "$HANDLE";
/// Stands for a move task handle the broker really issued, when it has.
const TASK: &str = "$TASK";

fn request(action: Action) -> BoxedStrategy<Value> {
    let members: Vec<BoxedStrategy<Option<(&'static str, Value)>>> = fields(action)
        .iter()
        .map(|&field| {
            // The queues every case relies on stay; only scratch queues
            // (which CreateQueue cases make) are deleted.
            let value = if action == Action::DeleteQueue {
                prop_oneof![
                    Just(json!("http://localhost/000000000000/scratch")),
                    Just(json!("http://localhost/000000000000/scratch.fifo")),
                    "[a-z]{1,8}".prop_map(Value::from),
                ]
                .boxed()
            } else {
                field_value(field)
            };
            prop_oneof![
                1 => Just(None),
                12 => value.prop_map(move |value| Some((field, value))),
            ]
            .boxed()
        })
        .collect();
    let strays = prop::collection::vec((prop::sample::select(FIELDS), value()), 0..2)
        .prop_filter("strays are rare", |strays| {
            strays.is_empty() || strays.len() == 1
        });
    (members, strays)
        .prop_map(|(members, strays)| {
            let mut object = Map::new();
            for (name, value) in members.into_iter().flatten() {
                object.insert(name.to_owned(), value);
            }
            for (name, value) in strays {
                if name != "WaitTimeSeconds" {
                    object.insert(name.to_owned(), value);
                }
            }
            Value::Object(object)
        })
        .boxed()
}

fn action_and_request() -> impl Strategy<Value = (Action, Value)> {
    // Sends and receives weigh more: they make the messages, handles and
    // dead letters the other actions then work on.
    let weighted: Vec<Action> = Action::ALL
        .iter()
        .flat_map(|&action| {
            let weight = match action {
                Action::SendMessage | Action::SendMessageBatch | Action::ReceiveMessage => 6,
                _ => 1,
            };
            std::iter::repeat_n(action, weight)
        })
        .collect();
    prop::sample::select(weighted).prop_flat_map(|action| (Just(action), request(action)))
}

struct Harness {
    router: Router,
    /// Receipt and task handles from earlier answers, newest last; what
    /// [`HANDLE`] and [`TASK`] stand for.
    issued: Mutex<Issued>,
    _dir: tempfile::TempDir,
}

#[derive(Default)]
struct Issued {
    receipts: Vec<String>,
    tasks: Vec<String>,
}

impl Issued {
    fn harvest(&mut self, reply: &Value) {
        match reply {
            Value::Object(members) => {
                for (name, value) in members {
                    match (name.as_str(), value) {
                        ("ReceiptHandle", Value::String(handle)) => {
                            self.receipts.push(handle.clone());
                        }
                        ("TaskHandle", Value::String(handle)) => self.tasks.push(handle.clone()),
                        _ => self.harvest(value),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| self.harvest(item)),
            _ => {}
        }
        self.keep_recent();
    }

    fn keep_recent(&mut self) {
        for pool in [&mut self.receipts, &mut self.tasks] {
            let excess = pool.len().saturating_sub(64);
            pool.drain(..excess);
        }
    }

    /// Replaces the placeholders with issued handles, picked by `seed`.
    fn substitute(&self, value: &mut Value, seed: usize) {
        match value {
            Value::String(text) => {
                let pool = match text.as_str() {
                    HANDLE => &self.receipts,
                    TASK => &self.tasks,
                    _ => return,
                };
                if let Some(handle) = pool.get(pool.len().saturating_sub(1 + seed % 8)) {
                    *text = handle.clone();
                }
            }
            Value::Array(items) => items
                .iter_mut()
                .enumerate()
                .for_each(|(index, item)| self.substitute(item, seed + index)),
            Value::Object(members) => members
                .values_mut()
                .for_each(|member| self.substitute(member, seed)),
            _ => {}
        }
    }
}

impl Harness {
    /// Puts handles the broker really issued where the case has placeholders.
    fn substitute_handles(&self, parameters: &mut Value) {
        let seed = parameters.to_string().len();
        self.issued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .substitute(parameters, seed);
    }
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = ackbox_engine::store::open(&StoreConfig {
        durability: Durability::Relaxed {
            sync_interval: std::time::Duration::from_secs(1),
        },
        ..StoreConfig::embedded(dir.path().to_owned())
    })
    .await
    .unwrap()
    .store;
    let engine = Engine::start(
        EngineConfig::new(ReceiptKey::new([3; 32])),
        store,
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    engine
        .create_queue("target-dlq", &Default::default(), &Default::default())
        .await
        .unwrap();
    engine
        .create_queue("target", &Default::default(), &Default::default())
        .await
        .unwrap();
    let fifo = [("FifoQueue".to_owned(), "true".to_owned())].into();
    engine
        .create_queue("target.fifo", &fifo, &Default::default())
        .await
        .unwrap();
    engine
        .create_topic("topic", &Default::default(), &Default::default())
        .await
        .unwrap();
    engine
        .subscribe(
            TOPIC_ARN,
            "sqs",
            Some("arn:aws:sqs:us-east-1:000000000000:target"),
            &Default::default(),
            "http://localhost",
        )
        .await
        .unwrap();
    Harness {
        router: app(AppState::new(engine, "http://localhost")),
        issued: Mutex::default(),
        _dir: dir,
    }
}

/// How a case's request travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// AWS JSON 1.0: the action in `X-Amz-Target`, the parameters as JSON.
    Json,
    /// The query protocol: `Action=…` and the parameters, form-encoded.
    Query,
}

/// Sends one request; checks the answer's shape; the failure, if any.
async fn check(harness: &Harness, action: Action, wire: Wire, body: Vec<u8>) -> Result<(), String> {
    let target = action.target();
    let request = match wire {
        Wire::Json => Request::post("/")
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", target),
        Wire::Query => {
            Request::post("/").header("content-type", "application/x-www-form-urlencoded")
        }
    };
    let response = harness
        .router
        .clone()
        .oneshot(request.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let query_error = response
        .headers()
        .get("x-amzn-query-error")
        .map(|value| value.to_str().unwrap_or_default().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    if wire == Wire::Query {
        return check_xml(harness, action, status, &String::from_utf8_lossy(&body));
    }
    let reply: Value = serde_json::from_slice(&body)
        .map_err(|error| format!("{target}: {status} with a body that is not JSON ({error})"))?;
    if status == StatusCode::OK {
        harness
            .issued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .harvest(&reply);
        return Ok(());
    }
    if !status.is_client_error() {
        return Err(format!("{target}: {status} {reply}"));
    }
    let shaped = reply["__type"]
        .as_str()
        .is_some_and(|kind| kind.contains('#'))
        && reply["message"]
            .as_str()
            .is_some_and(|text| !text.is_empty())
        && query_error.is_some_and(|header| header.ends_with(";Sender"));
    if shaped {
        Ok(())
    } else {
        Err(format!(
            "{target}: {status} without the SQS error shape: {reply}"
        ))
    }
}

/// A query-protocol answer: the action's response document, or an
/// `ErrorResponse` from the sender's fault with a code and a message.
fn check_xml(
    harness: &Harness,
    action: Action,
    status: StatusCode,
    xml: &str,
) -> Result<(), String> {
    let name = action.name();
    if status == StatusCode::OK {
        if !xml.starts_with(&format!("<?xml version=\"1.0\"?><{name}Response ")) {
            return Err(format!("{name}: 200 without its response document: {xml}"));
        }
        let mut issued = harness
            .issued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        issued.receipts.extend(elements(xml, "ReceiptHandle"));
        issued.tasks.extend(elements(xml, "TaskHandle"));
        issued.keep_recent();
        return Ok(());
    }
    let shaped = status.is_client_error()
        && xml.contains("<ErrorResponse ")
        && elements(xml, "Type") == ["Sender"]
        && elements(xml, "Code").iter().all(|code| !code.is_empty())
        && !elements(xml, "Message").is_empty();
    if shaped {
        Ok(())
    } else {
        Err(format!(
            "{name}: {status} without the SQS error shape: {xml}"
        ))
    }
}

/// The text of every `<element>` in `xml`.
fn elements(xml: &str, element: &str) -> Vec<String> {
    let open = format!("<{element}>");
    let close = format!("</{element}>");
    xml.match_indices(&open)
        .filter_map(|(start, _)| {
            let text = &xml[start + open.len()..];
            text.find(&close).map(|end| text[..end].to_owned())
        })
        .collect()
}

/// A JSON request as the query protocol carries it: lists and maps
/// flattened under their query names (`AttributeName.1`,
/// `Attribute.1.Name`/`Attribute.1.Value`, `SendMessageBatchRequestEntry.1.Id`).
fn query_form(action: Action, parameters: &Value) -> Vec<u8> {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("Action", action.name());
    if let Value::Object(members) = parameters {
        for (name, value) in members {
            query_member(&mut form, action, "", name, value);
        }
    }
    form.finish().into_bytes()
}

fn query_member(
    form: &mut form_urlencoded::Serializer<'_, String>,
    action: Action,
    prefix: &str,
    name: &str,
    value: &Value,
) {
    let entries = format!("{}RequestEntry", action.name());
    let (query_name, map_key) = match name {
        "AttributeNames" => ("AttributeName", None),
        "MessageAttributeNames" => ("MessageAttributeName", None),
        "MessageSystemAttributeNames" => ("MessageSystemAttributeName", None),
        "TagKeys" => ("TagKey", None),
        "Entries" => (entries.as_str(), None),
        "Attributes" => ("Attribute", Some("Name")),
        "MessageAttributes" => ("MessageAttribute", Some("Name")),
        "MessageSystemAttributes" => ("MessageSystemAttribute", Some("Name")),
        "Tags" | "tags" => ("Tag", Some("Key")),
        other => (other, None),
    };
    let path = format!("{prefix}{query_name}");
    match (value, map_key) {
        (Value::Object(map), Some(key)) => {
            for (index, (map_name, map_value)) in map.iter().enumerate() {
                let entry = format!("{path}.{}", index + 1);
                form.append_pair(&format!("{entry}.{key}"), map_name);
                query_value(form, action, &format!("{entry}.Value"), map_value);
            }
        }
        _ => query_value(form, action, &path, value),
    }
}

fn query_value(
    form: &mut form_urlencoded::Serializer<'_, String>,
    action: Action,
    path: &str,
    value: &Value,
) {
    match value {
        Value::Null => {}
        Value::String(text) => {
            form.append_pair(path, text);
        }
        Value::Bool(_) | Value::Number(_) => {
            form.append_pair(path, &value.to_string());
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                query_value(form, action, &format!("{path}.{}", index + 1), item);
            }
        }
        Value::Object(members) => {
            for (name, member) in members {
                query_member(form, action, &format!("{path}."), name, member);
            }
        }
    }
}

/// Runs `cases` requests drawn from `strategy` against one broker; each
/// case turns its value into an action and a body with `request`.
fn every_answer_is_well_formed<S: Strategy>(
    cases: u32,
    strategy: S,
    wire: Wire,
    request: impl Fn(&Harness, S::Value) -> (Action, Vec<u8>),
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let harness = runtime.block_on(harness());
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(cases);
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    runner
        .run(&strategy, |value| {
            let (action, body) = request(&harness, value);
            runtime
                .block_on(check(&harness, action, wire, body))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

#[test]
fn inv6_any_json_parameters_to_any_action_get_success_or_an_sqs_client_error() {
    every_answer_is_well_formed(
        2_000,
        action_and_request(),
        Wire::Json,
        |harness, (action, mut parameters)| {
            harness.substitute_handles(&mut parameters);
            (action, serde_json::to_vec(&parameters).unwrap())
        },
    );
}

#[test]
fn inv6_any_query_parameters_to_any_action_get_success_or_an_sqs_client_error() {
    every_answer_is_well_formed(
        1_000,
        action_and_request(),
        Wire::Query,
        |harness, (action, mut parameters)| {
            harness.substitute_handles(&mut parameters);
            (action, query_form(action, &parameters))
        },
    );
}

#[test]
fn inv6_any_bytes_as_a_body_get_an_sqs_client_error_or_success() {
    every_answer_is_well_formed(
        500,
        (
            prop::sample::select(Action::ALL),
            prop::collection::vec(any::<u8>(), 0..200),
        ),
        Wire::Json,
        |_, (action, body)| (action, body),
    );
}
