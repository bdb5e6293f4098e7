//! The official AWS SDK, configured for a local ackbox endpoint.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};

/// An `aws-sdk-sqs` client for `endpoint` with dummy credentials, as a user
/// would configure it for a self-hosted broker.
pub fn sqs_client(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            "test",
            "test",
            None,
            None,
            "ackbox-testkit",
        ))
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(config)
}

/// One plain HTTP/1.1 request with an optional JSON body; the reply's JSON,
/// or `None` when nothing (or no JSON) answered.
pub async fn call_http(
    endpoint: &str,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Option<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(authority).await.ok()?;
    let payload = body.map(ToString::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    // Some servers (chromedriver) keep the connection open whatever the
    // request says: read the head, then exactly Content-Length bytes.
    let mut response = Vec::new();
    let mut chunk = [0u8; 8_192];
    let head_end = loop {
        if let Some(end) = response.windows(4).position(|window| window == b"\r\n\r\n") {
            break end + 4;
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        response.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&response[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())?;
    while response.len() < head_end + length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        response.extend_from_slice(&chunk[..read]);
    }
    serde_json::from_slice(&response[head_end..head_end + length]).ok()
}

/// Calls an action the AWS SDK does not know (ackbox's `AckBox.*`
/// extensions) with a raw AWS JSON 1.0 request; returns the status and body.
///
/// # Panics
/// When the endpoint cannot be reached or answers with something that is
/// not HTTP with a JSON body: a test cannot go on then.
pub async fn call_json(
    endpoint: &str,
    target: &str,
    body: &serde_json::Value,
) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("the broker accepts connections");
    let payload = body.to_string();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: {target}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the request is sent");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .expect("the response is read");
    let text = String::from_utf8(response).expect("a UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("an HTTP status line");
    let json = if body.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(body).expect("a JSON body")
    };
    (status, json)
}

/// The error code the SDK reports for a failed call: for SQS, the
/// query-compatible code (`AWS.SimpleQueueService.NonExistentQueue`, …).
///
/// # Panics
/// When the call did not fail with a service error (a timeout, say).
pub fn error_code<E, R>(error: aws_sdk_sqs::error::SdkError<E, R>) -> String
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::fmt::Debug,
    R: std::fmt::Debug,
{
    match error {
        aws_sdk_sqs::error::SdkError::ServiceError(context) => {
            context.err().code().unwrap_or("<none>").to_owned()
        }
        other => panic!("expected a service error, got {other:?}"),
    }
}

/// Creates a queue with default attributes; returns its URL.
///
/// # Panics
/// When the queue cannot be created.
pub async fn create_queue(client: &Client, name: &str) -> String {
    client
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("CreateQueue succeeds")
        .queue_url
        .expect("CreateQueue returns a URL")
}

/// A queue's ARN.
///
/// # Panics
/// When the attributes cannot be read.
pub async fn queue_arn(client: &Client, url: &str) -> String {
    use aws_sdk_sqs::types::QueueAttributeName;
    client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("GetQueueAttributes succeeds")
        .attributes
        .and_then(|mut attributes| attributes.remove(&QueueAttributeName::QueueArn))
        .expect("a QueueArn")
}

/// Visible plus in-flight messages of a queue.
///
/// # Panics
/// When the attributes cannot be read.
pub async fn queue_depth(client: &Client, url: &str) -> usize {
    use aws_sdk_sqs::types::QueueAttributeName;
    let output = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("GetQueueAttributes succeeds");
    let attributes = output.attributes().expect("attributes are returned");
    [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .map(|name| attributes[name].parse::<usize>().expect("a count"))
    .sum()
}
