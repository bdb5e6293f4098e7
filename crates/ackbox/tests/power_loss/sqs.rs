//! The SQS JSON protocol, one request per connection, where a refused or
//! dropped connection is an answer like any other: the workload runs up to
//! a power cut, and a send that was never answered is simply not
//! acknowledged. No retries, so one send is one message at most.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longer than any request takes on the model disk; a server stuck past it
/// counts as not answering.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What came back: a status and a JSON body, or nothing.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    Status(u16, Value),
    Nothing(String),
}

impl Answer {
    /// The body of a 200.
    pub(crate) fn ok(&self) -> Option<&Value> {
        match self {
            Self::Status(200, body) => Some(body),
            _ => None,
        }
    }

    /// Whether the answer names this SQS error (`__type` ends with it).
    pub(crate) fn is_error(&self, code: &str) -> bool {
        matches!(self, Self::Status(_, body)
            if body["__type"].as_str().is_some_and(|kind| kind.ends_with(code)))
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Status(status, body) => write!(formatter, "{status} {body}"),
            Self::Nothing(why) => write!(formatter, "no answer ({why})"),
        }
    }
}

/// Calls `target` (`AmazonSQS.SendMessage`, `AckBox.PeekMessages`, ...).
pub(crate) async fn call(endpoint: &str, target: &str, body: &Value) -> Answer {
    match tokio::time::timeout(CALL_TIMEOUT, exchange(endpoint, target, body)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(error)) => Answer::Nothing(error.to_string()),
        Err(_) => Answer::Nothing(format!("no answer within {CALL_TIMEOUT:?}")),
    }
}

/// `AmazonSQS.{action}`.
pub(crate) async fn sqs(endpoint: &str, action: &str, body: &Value) -> Answer {
    call(endpoint, &format!("AmazonSQS.{action}"), body).await
}

async fn exchange(endpoint: &str, target: &str, body: &Value) -> std::io::Result<Answer> {
    let authority = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(authority).await?;
    let payload = body.to_string();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: {target}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let Some(head_end) = response.windows(4).position(|window| window == b"\r\n\r\n") else {
        return Ok(Answer::Nothing("a cut-off response".to_owned()));
    };
    let head = String::from_utf8_lossy(&response[..head_end]);
    let Some(status) = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
    else {
        return Ok(Answer::Nothing(format!("not HTTP: {head}")));
    };
    let body = &response[head_end + 4..];
    Ok(match serde_json::from_slice(body) {
        Ok(json) => Answer::Status(status, json),
        Err(_) if body.is_empty() => Answer::Status(status, Value::Null),
        Err(error) => Answer::Nothing(format!("{status} with a body that is not JSON: {error}")),
    })
}
