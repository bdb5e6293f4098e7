//! A small AWS JSON 1.0 client for the CLI and the load generator.
//!
//! The CLI needs a handful of calls and the benchmark needs many cheap ones,
//! so this speaks the protocol directly over a pooled HTTP/1.1 client (with
//! TLS for `https://` endpoints, and SigV4 when given a key) instead of
//! pulling the AWS SDK into the binary.

use std::path::{Path, PathBuf};

use ackbox_core::clock::{Clock, SystemClock};
use ackbox_server::auth::sigv4::{SignableRequest, SigningParams, sign_headers};
use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::http::{HeaderValue, Request, StatusCode, Uri};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
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

/// The key a client signs its requests with (SigV4).
#[derive(Clone)]
pub(crate) struct SigningKey {
    access_key_id: String,
    secret_access_key: String,
    region: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("access_key_id", &self.access_key_id)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// A JSON 1.0 client for one endpoint.
#[derive(Debug, Clone)]
pub(crate) struct ApiClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    endpoint: Uri,
    /// `host[:port]` of the endpoint, as sent (and signed) in `Host`.
    authority: String,
    /// `None`: requests go unsigned (an open broker).
    key: Option<SigningKey>,
}

impl ApiClient {
    /// A client for `endpoint` (`http://` or `https://host:port`), signing
    /// with `key` if given; for HTTPS it trusts the system's certificate
    /// authorities and `authority` (a PEM file), if given.
    pub(crate) fn new(
        endpoint: &str,
        key: Option<SigningKey>,
        authority: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let endpoint: Uri = endpoint
            .parse()
            .map_err(|error| anyhow::anyhow!("--endpoint {endpoint:?} is not a URL: {error}"))?;
        if !matches!(endpoint.scheme_str(), Some("http" | "https")) {
            anyhow::bail!("--endpoint must be an http:// or https:// URL; got {endpoint}");
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(authority)?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(64)
            .build(connector);
        let authority = endpoint
            .authority()
            .map(|authority| authority.as_str().to_owned())
            .ok_or_else(|| anyhow::anyhow!("--endpoint {endpoint} names no host"))?;
        Ok(Self {
            http,
            endpoint,
            authority,
            key,
        })
    }

    /// Calls `action` (`SendMessage`, or a namespaced extension such as
    /// `AckBox.PeekMessages`) with a pre-encoded JSON body; returns status and body.
    pub(crate) async fn call_raw(
        &self,
        action: &str,
        body: Bytes,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let mut request = Request::post(self.endpoint.clone())
            .header("host", &self.authority)
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", target(action))
            .body(Full::new(body.clone()))?;
        if let Some(key) = &self.key {
            let headers = request.headers().clone();
            let (amz_date, authorization) = sign_headers(
                &SignableRequest {
                    method: "POST",
                    path: request.uri().path(),
                    query: request.uri().query().unwrap_or_default(),
                    headers: &headers,
                    body: &body,
                },
                SigningParams {
                    access_key_id: &key.access_key_id,
                    secret_access_key: &key.secret_access_key,
                    region: &key.region,
                    now: SystemClock.now(),
                },
            );
            request
                .headers_mut()
                .insert("x-amz-date", HeaderValue::from_str(&amz_date)?);
            request
                .headers_mut()
                .insert("authorization", HeaderValue::from_str(&authorization)?);
        }
        let response = self.http.request(request).await.with_context(|| {
            format!(
                "cannot reach the broker at {} (is `ackbox serve` running there? set --endpoint \
                 or ACKBOX_ENDPOINT)",
                self.endpoint
            )
        })?;
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

/// TLS settings trusting the system's authorities and `authority`.
fn tls_config(authority: Option<&Path>) -> anyhow::Result<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let mut roots = rustls::RootCertStore::empty();
    // Unreadable system certificates are skipped: `--ca-cert` may be all
    // that is needed.
    let (_, _) = roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = authority {
        for certificate in CertificateDer::pem_file_iter(path)
            .with_context(|| format!("reading --ca-cert {}", path.display()))?
        {
            let certificate =
                certificate.with_context(|| format!("parsing --ca-cert {}", path.display()))?;
            roots
                .add(certificate)
                .with_context(|| format!("trusting --ca-cert {}", path.display()))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
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

/// Flags shared by every command that talks to a broker, listed apart from
/// each command's own in `--help`.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Connection")]
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
    /// Sign requests (SigV4) with this access key id, for a broker started
    /// with `--auth sigv4`.
    #[arg(
        long,
        env = "AWS_ACCESS_KEY_ID",
        global = true,
        requires = "secret_access_key"
    )]
    pub(crate) access_key_id: Option<String>,
    /// The secret of `--access-key-id`.
    #[arg(
        long,
        env = "AWS_SECRET_ACCESS_KEY",
        global = true,
        hide_env_values = true,
        requires = "access_key_id"
    )]
    pub(crate) secret_access_key: Option<String>,
    /// The region requests are signed for: the broker's `--region`.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1", global = true)]
    pub(crate) region: String,
    /// A PEM certificate authority to trust, besides the system's, for an
    /// `https://` endpoint.
    #[arg(long, env = "ACKBOX_CA_CERT", global = true)]
    pub(crate) ca_cert: Option<PathBuf>,
}

impl EndpointArgs {
    /// A client for the endpoint, signing when a key is given.
    pub(crate) fn client(&self) -> anyhow::Result<ApiClient> {
        self.client_for(&self.endpoint)
    }

    /// A client for another node of the same installation, with the same
    /// keys and trust.
    pub(crate) fn client_for(&self, endpoint: &str) -> anyhow::Result<ApiClient> {
        let key = match (&self.access_key_id, &self.secret_access_key) {
            (Some(access_key_id), Some(secret_access_key)) => Some(SigningKey {
                access_key_id: access_key_id.clone(),
                secret_access_key: secret_access_key.clone(),
                region: self.region.clone(),
            }),
            _ => None,
        };
        ApiClient::new(endpoint, key, self.ca_cert.as_deref())
    }
}

/// Parses `KEY=VALUE` flags.
pub(crate) fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}
