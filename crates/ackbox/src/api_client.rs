//! A small AWS JSON 1.0 client for the CLI and the load generator.
//!
//! The CLI needs a handful of calls and the benchmark needs many cheap ones,
//! so this speaks the protocol directly over a pooled HTTP/1.1 client instead
//! of pulling the AWS SDK into the binary.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::http::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// An SQS error answer.
#[derive(Debug, Clone)]
pub(crate) struct SqsErrorReply {
    /// HTTP status.
    pub(crate) status: StatusCode,
    /// The `__type` short name.
    pub(crate) code: String,
    /// The message.
    pub(crate) message: String,
}

impl std::fmt::Display for SqsErrorReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code,
            self.status.as_u16(),
            self.message
        )
    }
}

impl std::error::Error for SqsErrorReply {}

/// A JSON 1.0 client for one endpoint.
#[derive(Debug, Clone)]
pub(crate) struct ApiClient {
    http: Client<HttpConnector, Full<Bytes>>,
    endpoint: Uri,
}

impl ApiClient {
    /// A client for `endpoint` (`http://host:port`).
    pub(crate) fn new(endpoint: &str) -> anyhow::Result<Self> {
        let endpoint: Uri = endpoint
            .parse()
            .map_err(|error| anyhow::anyhow!("--endpoint {endpoint:?} is not a URL: {error}"))?;
        if endpoint.scheme_str() != Some("http") {
            anyhow::bail!("--endpoint must be an http:// URL; got {endpoint}");
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(64)
            .build(connector);
        Ok(Self { http, endpoint })
    }

    /// Calls `action` (`SendMessage`, or a namespaced extension such as
    /// `AckBox.PeekMessages`) with a pre-encoded JSON body; returns status and body.
    pub(crate) async fn call_raw(
        &self,
        action: &str,
        body: Bytes,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let request = Request::post(self.endpoint.clone())
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", target(action))
            .body(Full::new(body))?;
        let response = self.http.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// Calls `action` with `body`; an SQS error answer becomes [`SqsErrorReply`].
    pub(crate) async fn call(&self, action: &str, body: &Value) -> anyhow::Result<Value> {
        let (status, bytes) = self
            .call_raw(action, Bytes::from(serde_json::to_vec(body)?))
            .await?;
        let reply: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)?
        };
        if status.is_success() {
            return Ok(reply);
        }
        let code = reply["__type"]
            .as_str()
            .and_then(|kind| kind.rsplit('#').next())
            .unwrap_or("Unknown")
            .to_owned();
        let message = reply["message"].as_str().unwrap_or_default().to_owned();
        Err(SqsErrorReply {
            status,
            code,
            message,
        }
        .into())
    }

    /// The URL of queue `name`.
    pub(crate) async fn queue_url(&self, name: &str) -> anyhow::Result<String> {
        let reply = self
            .call("GetQueueUrl", &serde_json::json!({ "QueueName": name }))
            .await?;
        reply["QueueUrl"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow::anyhow!("GetQueueUrl answered without a QueueUrl"))
    }
}

/// The `X-Amz-Target` of `action`: SQS's namespace unless the action names
/// its own (`AckBox.PeekMessages`).
fn target(action: &str) -> String {
    if action.contains('.') {
        action.to_owned()
    } else {
        format!("AmazonSQS.{action}")
    }
}

/// Flags shared by every command that talks to a broker.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EndpointArgs {
    /// The broker's URL.
    #[arg(
        long,
        env = "ACKBOX_ENDPOINT",
        default_value = "http://127.0.0.1:9324",
        global = true
    )]
    pub(crate) endpoint: String,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

impl EndpointArgs {
    /// A client for the endpoint.
    pub(crate) fn client(&self) -> anyhow::Result<ApiClient> {
        ApiClient::new(&self.endpoint)
    }
}

/// Parses `KEY=VALUE` flags.
pub(crate) fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}
