//! The official AWS SDK, configured for a local ackbox endpoint.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};

/// An `aws-sdk-sqs` client for `endpoint` with dummy credentials, as a user
/// would configure it for a self-hosted broker.
pub fn sqs_client(endpoint: &str) -> Client {
    sqs_client_with_key(endpoint, "test", "test")
}

/// The configuration of a client for `endpoint` signing with the given key.
pub fn sqs_config(
    endpoint: &str,
    access_key_id: &str,
    secret_access_key: &str,
) -> aws_sdk_sqs::config::Builder {
    aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            access_key_id,
            secret_access_key,
            None,
            None,
            "ackbox-testkit",
        ))
        .endpoint_url(endpoint)
}

/// An `aws-sdk-sqs` client for `endpoint` signing with the given key.
pub fn sqs_client_with_key(endpoint: &str, access_key_id: &str, secret_access_key: &str) -> Client {
    Client::from_conf(sqs_config(endpoint, access_key_id, secret_access_key).build())
}

/// An `aws-sdk-sns` client for `endpoint` with dummy credentials: SNS's
/// API is served on the same port as SQS's.
pub fn sns_client(endpoint: &str) -> aws_sdk_sns::Client {
    sns_client_with_key(endpoint, "test", "test")
}

/// An `aws-sdk-sns` client for `endpoint` signing with the given key.
pub fn sns_client_with_key(
    endpoint: &str,
    access_key_id: &str,
    secret_access_key: &str,
) -> aws_sdk_sns::Client {
    let config = aws_sdk_sns::Config::builder()
        .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
        .region(aws_sdk_sns::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sns::config::Credentials::new(
            access_key_id,
            secret_access_key,
            None,
            None,
            "ackbox-testkit",
        ))
        .endpoint_url(endpoint)
        .build();
    aws_sdk_sns::Client::from_conf(config)
}

/// Creates topic `name` keeping an archive of its publishes for `days`
/// days, then publishes each `(message, kind)` with a `kind` string
/// attribute (what replay filters pick by); the topic's ARN.
///
/// # Panics
/// When a call fails: the test cannot go on.
pub async fn archived_topic(
    sns: &aws_sdk_sns::Client,
    name: &str,
    days: u32,
    publishes: &[(&str, &str)],
) -> String {
    let topic = sns
        .create_topic()
        .name(name)
        .attributes(
            "ArchivePolicy",
            format!(r#"{{"MessageRetentionPeriod":"{days}"}}"#),
        )
        .send()
        .await
        .expect("CreateTopic with an ArchivePolicy")
        .topic_arn
        .expect("a topic ARN");
    for (message, kind) in publishes {
        sns.publish()
            .topic_arn(&topic)
            .message(*message)
            .message_attributes(
                "kind",
                aws_sdk_sns::types::MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(*kind)
                    .build()
                    .expect("a string attribute"),
            )
            .send()
            .await
            .expect("Publish");
    }
    topic
}

/// An `aws-sdk-sqs` client for an `https://` endpoint that trusts only the
/// certificate authority `authority_pem`.
pub fn https_sqs_client(
    endpoint: &str,
    authority_pem: &str,
    access_key_id: &str,
    secret_access_key: &str,
) -> Client {
    use aws_smithy_http_client::tls::{self, TlsContext, TrustStore, rustls_provider::CryptoMode};
    let trust = TrustStore::empty().with_pem_certificate(authority_pem.as_bytes());
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(
            TlsContext::builder()
                .with_trust_store(trust)
                .build()
                .expect("a TLS context"),
        )
        .build_https();
    Client::from_conf(
        sqs_config(endpoint, access_key_id, secret_access_key)
            .http_client(http)
            .build(),
    )
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

/// A raw HTTP/1.1 exchange's answer.
#[derive(Debug, Clone)]
pub struct RawReply {
    /// The status code.
    pub status: u16,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl RawReply {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON (`Null` when empty).
    ///
    /// # Panics
    /// When the body is not JSON.
    pub fn json(&self) -> serde_json::Value {
        if self.body.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&self.body).expect("a JSON body")
        }
    }
}

/// Sends one request with `Connection: close` (plus a `Host` and a
/// `Content-Length`) over plain HTTP and reads the whole answer.
///
/// # Panics
/// When the endpoint cannot be reached or answers with something that is not HTTP.
pub async fn call_raw(
    endpoint: &str,
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawReply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("the broker accepts connections");
    let mut request = format!(
        "{method} {path_and_query} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).await.expect("the request is sent");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .expect("the response is read");
    let head_end = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("an HTTP response");
    let head = String::from_utf8_lossy(&response[..head_end]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .expect("an HTTP status line");
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    RawReply {
        status,
        headers,
        body: response[head_end + 4..].to_vec(),
    }
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
    let reply = call_raw(
        endpoint,
        "POST",
        "/",
        &[
            ("Content-Type", "application/x-amz-json-1.0"),
            ("X-Amz-Target", target),
        ],
        body.to_string().as_bytes(),
    )
    .await;
    (reply.status, reply.json())
}

/// As [`call_json`], signed with SigV4 by the given key (region `us-east-1`).
///
/// # Panics
/// As [`call_json`].
pub async fn call_json_signed(
    endpoint: &str,
    target: &str,
    body: &serde_json::Value,
    access_key_id: &str,
    secret_access_key: &str,
) -> RawReply {
    use ackbox_core::clock::Clock;
    use ackbox_server::auth::sigv4::{SignableRequest, SigningParams, sign_headers};
    use axum::http::{HeaderMap, HeaderValue};

    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let payload = body.to_string();
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("host", authority),
        ("content-type", "application/x-amz-json-1.0"),
        ("x-amz-target", target),
    ] {
        headers.insert(name, HeaderValue::from_str(value).expect("a header value"));
    }
    let (amz_date, authorization) = sign_headers(
        &SignableRequest {
            method: "POST",
            path: "/",
            query: "",
            headers: &headers,
            body: payload.as_bytes(),
        },
        SigningParams {
            access_key_id,
            secret_access_key,
            region: "us-east-1",
            now: ackbox_core::clock::SystemClock.now(),
        },
    );
    call_raw(
        endpoint,
        "POST",
        "/",
        &[
            ("Content-Type", "application/x-amz-json-1.0"),
            ("X-Amz-Target", target),
            ("X-Amz-Date", &amz_date),
            ("Authorization", &authorization),
        ],
        payload.as_bytes(),
    )
    .await
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

/// Creates a standard topic with default attributes; returns its ARN.
///
/// # Panics
/// When the topic cannot be created.
pub async fn create_topic(sns: &aws_sdk_sns::Client, name: &str) -> String {
    sns.create_topic()
        .name(name)
        .send()
        .await
        .expect("CreateTopic succeeds")
        .topic_arn
        .expect("CreateTopic returns an ARN")
}

/// Subscribes queue `name` (of the default account and region) to
/// `topic`, its messages raw or in SNS's envelope; the subscription's ARN.
///
/// # Panics
/// When the subscription is refused.
pub async fn subscribe_queue(
    sns: &aws_sdk_sns::Client,
    topic: &str,
    name: &str,
    raw: bool,
) -> String {
    let mut request = sns
        .subscribe()
        .topic_arn(topic)
        .protocol("sqs")
        .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:{name}"));
    if raw {
        request = request.attributes("RawMessageDelivery", "true");
    }
    request
        .send()
        .await
        .expect("Subscribe succeeds")
        .subscription_arn
        .expect("Subscribe returns an ARN")
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

/// Receives up to 10 messages without waiting and returns their bodies.
///
/// # Panics
/// When the receive fails.
pub async fn receive_bodies(client: &Client, url: &str) -> Vec<String> {
    client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("ReceiveMessage succeeds")
        .messages()
        .iter()
        .map(|message| message.body().expect("a body").to_owned())
        .collect()
}

/// Sends messages `0..total` to a queue in batches of ten, eight batches in
/// flight at once (a deep queue in a second or two); `entry` builds the
/// batch entry of message `index`.
///
/// # Panics
/// When a batch or any of its entries fails.
pub async fn send_numbered<F>(client: &Client, url: &str, total: usize, entry: F)
where
    F: Fn(usize) -> aws_sdk_sqs::types::SendMessageBatchRequestEntry + Send + Sync + 'static,
{
    const SENDERS: usize = 8;
    const BATCH: usize = 10;
    let entry = std::sync::Arc::new(entry);
    let mut senders = tokio::task::JoinSet::new();
    for sender in 0..SENDERS {
        let (client, url, entry) = (client.clone(), url.to_owned(), entry.clone());
        senders.spawn(async move {
            for first in (sender * BATCH..total).step_by(SENDERS * BATCH) {
                let entries = (first..(first + BATCH).min(total))
                    .map(|index| entry(index))
                    .collect();
                let sent = client
                    .send_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .expect("SendMessageBatch succeeds");
                assert!(sent.failed().is_empty(), "{:?}", sent.failed());
            }
        });
    }
    while let Some(done) = senders.join_next().await {
        done.expect("a sender finishes");
    }
}
