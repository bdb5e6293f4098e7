//! An SNS push endpoint (`http`/`https` subscription) as a transport: each
//! POST a topic makes is one delivery, answered once the consumer has
//! decided it — so the message runs through the inbox like any other, and
//! a push the topic makes again (after a timeout, a 5xx, a lost answer) is
//! a duplicate, keyed on the notification's `MessageId`.
//!
//! ```no_run
//! # async fn run(pool: sqlx::PgPool, handler: impl ackbox_consumer::Handler<sqlx::Postgres>) -> Result<(), Box<dyn std::error::Error>> {
//! use ackbox_consumer::push::PushEndpoint;
//! use ackbox_consumer::{CancellationToken, Consumer, PgInbox};
//!
//! let (endpoint, transport) = PushEndpoint::new("orders-hook");
//! let app = endpoint.router("/hooks/orders"); // an axum::Router
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
//! tokio::spawn(async move { axum::serve(listener, app).await });
//! let consumer = Consumer::builder("orders").transport(transport).inbox(PgInbox::new(pool)).build()?;
//! consumer.run(handler, CancellationToken::new()).await?;
//! # Ok(()) }
//! ```
//!
//! How the consumer's verdicts reach the topic: an acknowledgement is a
//! `200`; a transient failure a `500` (the topic retries by its delivery
//! policy — the consumer's backoff does not apply, the topic's does); a
//! permanent failure, or a message out of attempts, a `400` whose body is
//! the reason (the topic stops and dead-letters it to the subscription's
//! dead-letter queue, where ackbox keeps the reason); a delivery the
//! consumer gives back unstarted (at shutdown) a `503`. A
//! `SubscriptionConfirmation` is confirmed by a `GET` of its `SubscribeURL`
//! unless the endpoint is told not to ([`PushEndpoint::without_confirming`]).
//!
//! The endpoint does not check SNS's message signatures (ackbox does not
//! sign): put it where only the topic can reach it, or behind a proxy that
//! authenticates the topic.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Failure, TransportError};
use crate::message::{Delivery, Message};
use crate::transport::{QueueSettings, Transport};

/// How long a topic gives an endpoint to answer (SNS: 15 seconds): the
/// lease of a push delivery.
pub const DEFAULT_PUSH_LEASE: Duration = Duration::from_secs(15);
/// How long after a first push SNS may still retry it: its policies are
/// bounded by an hour.
const PUSH_REDELIVERY_HORIZON: Duration = Duration::from_secs(3_600);
/// Posts waiting for the consumer at most.
const BACKLOG: usize = 1_024;
/// Message ids whose attempts are remembered; the oldest are forgotten.
const REMEMBERED_ATTEMPTS: usize = 100_000;

/// How the consumer decided one delivery.
#[derive(Debug)]
enum Verdict {
    Done,
    Retry(Failure),
    DeadLetter(Failure),
    Released,
}

/// Deliveries waiting for their verdict, by token.
type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<Verdict>>>>;

/// The HTTP side: answers the topic's posts. Cheap to clone.
#[derive(Clone)]
pub struct PushEndpoint {
    deliveries: mpsc::Sender<Delivery>,
    waiting: Waiting,
    attempts: Arc<Mutex<Attempts>>,
    tokens: Arc<AtomicU64>,
    lease: Duration,
    confirm: bool,
}

/// The consumer's side: takes the posts as deliveries.
pub struct PushTransport {
    name: String,
    deliveries: tokio::sync::Mutex<mpsc::Receiver<Delivery>>,
    waiting: Waiting,
    lease: Duration,
    dead_letter_queue: bool,
}

/// Pushes per message id, so a handler sees its `receive_count` and the
/// consumer's attempt limit holds across the topic's retries.
#[derive(Default)]
struct Attempts {
    counts: HashMap<String, u32>,
    order: std::collections::VecDeque<String>,
}

impl Attempts {
    fn count(&mut self, message_id: &str) -> u32 {
        if let Some(count) = self.counts.get_mut(message_id) {
            *count += 1;
            return *count;
        }
        if self.order.len() >= REMEMBERED_ATTEMPTS
            && let Some(oldest) = self.order.pop_front()
        {
            self.counts.remove(&oldest);
        }
        self.order.push_back(message_id.to_owned());
        self.counts.insert(message_id.to_owned(), 1);
        1
    }
}

impl PushEndpoint {
    /// An endpoint and the transport a consumer takes its deliveries from.
    /// `name` names the subscription in the consumer's logs.
    pub fn new(name: impl Into<String>) -> (Self, PushTransport) {
        Self::with_lease(name, DEFAULT_PUSH_LEASE)
    }

    /// [`PushEndpoint::new`], giving the consumer `lease` to decide a post
    /// before the topic is answered `503`: keep it below the topic's
    /// timeout (ackbox's `--push-timeout-secs`, SNS's 15 seconds), so that
    /// the topic hears the verdict.
    pub fn with_lease(name: impl Into<String>, lease: Duration) -> (Self, PushTransport) {
        let (sender, receiver) = mpsc::channel(BACKLOG);
        let waiting = Waiting::default();
        let endpoint = Self {
            deliveries: sender,
            waiting: Arc::clone(&waiting),
            attempts: Arc::default(),
            tokens: Arc::default(),
            lease,
            confirm: true,
        };
        let transport = PushTransport {
            name: name.into(),
            deliveries: tokio::sync::Mutex::new(receiver),
            waiting,
            lease,
            dead_letter_queue: true,
        };
        (endpoint, transport)
    }

    /// Answers `SubscriptionConfirmation` requests with a `200` without
    /// confirming: the application confirms (`ConfirmSubscription` with the
    /// request's `Token`) itself.
    #[must_use]
    pub fn without_confirming(mut self) -> Self {
        self.confirm = false;
        self
    }

    /// An axum router answering the topic's posts at `path`.
    pub fn router(self, path: &str) -> axum::Router {
        axum::Router::new()
            .route(path, axum::routing::post(answer))
            .with_state(self)
    }

    /// Answers one post: its status and body.
    pub async fn accept(&self, headers: &HeaderMap, body: String) -> (StatusCode, String) {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
        };
        match header("x-amz-sns-message-type") {
            "Notification" => {
                let raw = header("x-amz-sns-rawdelivery").eq_ignore_ascii_case("true");
                self.notification(header("x-amz-sns-message-id"), raw, body)
                    .await
            }
            "SubscriptionConfirmation" if self.confirm => confirm(&body).await,
            "SubscriptionConfirmation" | "UnsubscribeConfirmation" => {
                (StatusCode::OK, String::new())
            }
            other => (
                StatusCode::BAD_REQUEST,
                format!(
                    "x-amz-sns-message-type is {other:?}; a topic's post says Notification, \
                     SubscriptionConfirmation or UnsubscribeConfirmation"
                ),
            ),
        }
    }

    async fn notification(
        &self,
        message_id: &str,
        raw: bool,
        body: String,
    ) -> (StatusCode, String) {
        if message_id.is_empty() {
            return (
                StatusCode::BAD_REQUEST,
                "a notification needs its x-amz-sns-message-id".to_owned(),
            );
        }
        let receive_count = self
            .attempts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .count(message_id);
        let mut message = Message {
            id: message_id.to_owned(),
            body,
            attributes: BTreeMap::new(),
            receive_count,
            group_id: None,
        };
        if !raw {
            message = message.unwrap_sns_envelope();
        }
        let token = self.tokens.fetch_add(1, Ordering::Relaxed).to_string();
        let (verdict, decided) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(token.clone(), verdict);
        let delivery = Delivery {
            message,
            token: token.clone(),
        };
        if self.deliveries.send(delivery).await.is_err() {
            self.forget(&token);
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the consumer has stopped".to_owned(),
            );
        }
        match tokio::time::timeout(self.lease, decided).await {
            Ok(Ok(Verdict::Done)) => (StatusCode::OK, String::new()),
            Ok(Ok(Verdict::Retry(failure))) => {
                (StatusCode::INTERNAL_SERVER_ERROR, describe(&failure))
            }
            Ok(Ok(Verdict::DeadLetter(failure))) => (StatusCode::BAD_REQUEST, describe(&failure)),
            Ok(Ok(Verdict::Released) | Err(_)) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the consumer gave the message back".to_owned(),
            ),
            Err(_) => {
                // The consumer goes on with it; if it commits, the topic's
                // next push of the message is a duplicate.
                self.forget(&token);
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the message was not decided in time".to_owned(),
                )
            }
        }
    }

    fn forget(&self, token: &str) {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(token);
    }
}

async fn answer(
    State(endpoint): State<PushEndpoint>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    endpoint.accept(&headers, body).await
}

fn describe(failure: &Failure) -> String {
    format!("{}: {}", failure.class, failure.message)
}

/// Confirms a subscription by a `GET` of the request's `SubscribeURL`.
async fn confirm(body: &str) -> (StatusCode, String) {
    let url = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|request| request.get("SubscribeURL")?.as_str().map(str::to_owned));
    let Some(url) = url else {
        return (
            StatusCode::BAD_REQUEST,
            "a SubscriptionConfirmation needs its SubscribeURL".to_owned(),
        );
    };
    let Ok(uri) = url.parse::<axum::http::Uri>() else {
        return (StatusCode::BAD_REQUEST, format!("{url:?} is not a URL"));
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    // The provider is named, not the process default, which is ambiguous
    // when the application links two rustls backends.
    let tls = match rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    {
        Ok(builder) => builder.with_root_certificates(roots).with_no_client_auth(),
        Err(error) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("no TLS to confirm with: {error}"),
            );
        }
    };
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    match client.get(uri).await {
        Ok(response) if response.status().is_success() => {
            tracing::info!(%url, "subscription confirmed");
            (StatusCode::OK, String::new())
        }
        Ok(response) => {
            let status = response.status();
            let reason = response
                .into_body()
                .collect()
                .await
                .map(|body| String::from_utf8_lossy(&body.to_bytes()).into_owned())
                .unwrap_or_default();
            tracing::warn!(%url, %status, %reason, "the topic refused the confirmation");
            // A 500 makes the topic send the request again.
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("confirming answered {status}: {reason}"),
            )
        }
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("confirming at {url} failed: {error}"),
        ),
    }
}

impl PushTransport {
    /// The subscription has no dead-letter queue (`RedrivePolicy`): the
    /// consumer then refuses to start unless told to accept that.
    #[must_use]
    pub fn without_dead_letter_queue(mut self) -> Self {
        self.dead_letter_queue = false;
        self
    }

    fn decide(&self, delivery: &Delivery, verdict: Verdict) {
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&delivery.token);
        // The post may have been answered already (it ran out of time):
        // the topic pushes again, and the inbox decides that push.
        if let Some(waiting) = waiting {
            let _ = waiting.send(verdict);
        }
    }
}

#[async_trait]
impl Transport for PushTransport {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, TransportError> {
        let mut deliveries = self.deliveries.lock().await;
        let mut received = Vec::new();
        match tokio::time::timeout(wait, deliveries.recv()).await {
            Ok(Some(first)) => received.push(first),
            Ok(None) | Err(_) => return Ok(received),
        }
        while received.len() < max {
            match deliveries.try_recv() {
                Ok(delivery) => received.push(delivery),
                Err(_) => break,
            }
        }
        Ok(received)
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), TransportError> {
        self.decide(delivery, Verdict::Done);
        Ok(())
    }

    async fn extend(&self, _delivery: &Delivery, _lease: Duration) -> Result<(), TransportError> {
        // The topic holds the post open: there is no lease to extend.
        Ok(())
    }

    async fn retry(
        &self,
        delivery: &Delivery,
        _delay: Duration,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        self.decide(delivery, Verdict::Retry(failure.clone()));
        Ok(())
    }

    async fn dead_letter(
        &self,
        delivery: &Delivery,
        failure: &Failure,
    ) -> Result<(), TransportError> {
        self.decide(delivery, Verdict::DeadLetter(failure.clone()));
        Ok(())
    }

    async fn release(&self, delivery: &Delivery) -> Result<(), TransportError> {
        self.decide(delivery, Verdict::Released);
        Ok(())
    }

    async fn settings(&self) -> Result<QueueSettings, TransportError> {
        Ok(QueueSettings {
            queue_name: self.name.clone(),
            lease: self.lease,
            max_deliveries: None,
            redelivery_horizon: PUSH_REDELIVERY_HORIZON,
            horizon_explanation: "a topic retries a push for at most an hour".to_owned(),
            dead_letter_queue: self.dead_letter_queue,
            ordered_groups: false,
        })
    }
}
