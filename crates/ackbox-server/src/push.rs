//! The push worker: posts what topics publish to their `http` and `https`
//! subscriptions, as SNS does, retrying by each subscription's delivery
//! policy.
//!
//! Every push subscription has a delivery queue in the store (the engine's
//! `topic::push`), filled in the same transaction as the rest of a
//! publish's fan-out. The worker leases its messages like any consumer:
//! a 2xx deletes the message; a 5xx, a timeout or a refused connection
//! gives it back for the policy's next wait, with the failure as the
//! reason; a 4xx — the endpoint refusing the message itself — and a spent
//! policy end the delivery: to the subscription's dead-letter queue with
//! the reason, or away. A worker that dies mid-post leaves its lease to
//! expire and the message to be posted again: deliveries are at least once,
//! each with the notification's stable `x-amz-sns-message-id` so the
//! endpoint can deduplicate. Every node runs a worker; leases keep two from
//! posting one message at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ackbox_core::error::ErrorCode;
use ackbox_engine::nack::NackRequest;
use ackbox_engine::receive::{ReceiveRequest, ReceivedMessage};
use ackbox_engine::store::FailureReport;
use ackbox_engine::topic::{
    MESSAGE_ID_ATTRIBUTE, MESSAGE_TYPE_ATTRIBUTE, NOTIFICATION, PushSubscription,
};
use ackbox_engine::{Engine, EngineError};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

/// How long SNS waits for an endpoint's answer.
pub const DEFAULT_PUSH_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the worker looks for new, changed and removed subscriptions.
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(1);
/// How long one receive waits for a delivery to arrive.
const RECEIVE_WAIT_SECONDS: i32 = 2;
/// Deliveries taken from a delivery queue at once.
const RECEIVE_BATCH: i32 = 10;
/// A lease outlasts the post by this much, so that it is not lost while
/// the outcome is written.
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// The most of an endpoint's answer kept as a failure's reason.
const MAX_REASON_BYTES: usize = 1_024;
/// The `User-Agent` SNS posts with.
const USER_AGENT: &str = "Amazon Simple Notification Service Agent";

/// How the worker posts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushConfig {
    /// How long an endpoint has to answer one post.
    pub timeout: Duration,
    /// PEM certificates trusted for `https` endpoints beside the system's
    /// (a private CA's, say).
    pub extra_roots: Option<PathBuf>,
}

impl Default for PushConfig {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_PUSH_TIMEOUT,
            extra_roots: None,
        }
    }
}

/// Why the worker could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The extra roots could not be read.
    #[error("cannot read PEM certificates from {path}")]
    Roots {
        /// The file.
        path: PathBuf,
        /// The PEM error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the TLS setup.
    #[error("cannot set up TLS for https endpoints")]
    Tls {
        /// rustls's reason.
        #[source]
        source: rustls::Error,
    },
}

type HttpsClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// Posts deliveries for every push subscription of the store.
#[derive(Clone)]
pub struct PushWorker {
    engine: Engine,
    client: HttpsClient,
    timeout: Duration,
}

/// How one post ended.
enum Outcome {
    /// 2xx.
    Delivered,
    /// 5xx, 429, a timeout, a connection that failed: worth trying again.
    Failed(FailureReport),
    /// Any other 4xx: the endpoint refuses the message itself.
    Refused(FailureReport),
}

fn report(class: &str, message: String) -> FailureReport {
    FailureReport {
        class: class.to_owned(),
        message,
    }
}

impl PushWorker {
    /// A worker over `engine` posting as `config` says.
    pub fn new(engine: Engine, config: &PushConfig) -> Result<Self, PushError> {
        let mut roots = rustls::RootCertStore::empty();
        // Certificates the system has but rustls cannot parse are skipped,
        // as every rustls client does.
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if let Some(path) = &config.extra_roots {
            let roots_error = |source| PushError::Roots {
                path: path.clone(),
                source,
            };
            for certificate in CertificateDer::pem_file_iter(path).map_err(roots_error)? {
                roots
                    .add(certificate.map_err(roots_error)?)
                    .map_err(|source| PushError::Tls { source })?;
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|source| PushError::Tls { source })?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            engine,
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout: config.timeout,
        })
    }

    /// Runs until `stop`: one task per push subscription, started, updated
    /// and stopped as subscriptions come, change and go.
    pub async fn run(self, stop: CancellationToken) {
        let mut running: HashMap<String, (watch::Sender<PushSubscription>, JoinHandle<()>)> =
            HashMap::new();
        let mut discovery = tokio::time::interval(DISCOVERY_INTERVAL);
        discovery.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = discovery.tick() => {}
            }
            let subscriptions = match self.engine.push_subscriptions().await {
                Ok(subscriptions) => subscriptions,
                Err(error) => {
                    tracing::warn!(%error, "cannot list push subscriptions; trying again");
                    continue;
                }
            };
            running.retain(|arn, (_, task)| {
                let kept = !task.is_finished()
                    && subscriptions
                        .iter()
                        .any(|subscription| &subscription.subscription_arn == arn);
                if !kept {
                    task.abort();
                }
                kept
            });
            for subscription in subscriptions {
                match running.get(&subscription.subscription_arn) {
                    Some((settings, _)) => {
                        settings.send_if_modified(|current| {
                            let changed = *current != subscription;
                            *current = subscription.clone();
                            changed
                        });
                    }
                    None => {
                        let arn = subscription.subscription_arn.clone();
                        let (settings, watched) = watch::channel(subscription);
                        let task = tokio::spawn(self.clone().deliver(watched, stop.clone()));
                        running.insert(arn, (settings, task));
                    }
                }
            }
        }
        for (_, (_, task)) in running {
            task.abort();
        }
    }

    /// Delivers one subscription's queue until `stop` or until the
    /// subscription's delivery queue is gone.
    async fn deliver(
        self,
        subscription: watch::Receiver<PushSubscription>,
        stop: CancellationToken,
    ) {
        let lease = self.timeout + LEASE_MARGIN;
        loop {
            let current = subscription.borrow().clone();
            let request = ReceiveRequest {
                max_number_of_messages: Some(RECEIVE_BATCH),
                visibility_timeout: Some(i32::try_from(lease.as_secs()).unwrap_or(i32::MAX)),
                wait_time_seconds: Some(RECEIVE_WAIT_SECONDS),
                system_attribute_names: vec!["ApproximateReceiveCount".to_owned()],
                message_attribute_names: vec!["All".to_owned()],
                receive_request_attempt_id: None,
            };
            let received = tokio::select! {
                () = stop.cancelled() => return,
                received = self.engine.receive_messages(&current.queue, &request) => received,
            };
            let messages = match received {
                Ok(messages) => messages,
                Err(EngineError::Sqs(error)) if error.code == ErrorCode::QueueDoesNotExist => {
                    return;
                }
                Err(error) => {
                    tracing::warn!(queue = %current.queue, %error, "cannot take push deliveries; trying again");
                    tokio::time::sleep(DISCOVERY_INTERVAL).await;
                    continue;
                }
            };
            let subscription = Arc::new(current);
            match subscription.policy.max_receives_per_second {
                Some(rate) => {
                    let spacing = Duration::from_secs(1) / rate.max(1);
                    for message in messages {
                        let started = tokio::time::Instant::now();
                        self.settle(&subscription, message).await;
                        tokio::time::sleep_until(started + spacing).await;
                    }
                }
                None => {
                    let mut posts = JoinSet::new();
                    for message in messages {
                        let (worker, subscription) = (self.clone(), Arc::clone(&subscription));
                        posts.spawn(async move { worker.settle(&subscription, message).await });
                    }
                    while posts.join_next().await.is_some() {}
                }
            }
        }
    }

    /// Posts one delivery and records how it went.
    async fn settle(&self, subscription: &PushSubscription, message: ReceivedMessage) {
        let attempt: u32 = message
            .attributes
            .get("ApproximateReceiveCount")
            .and_then(|count| count.parse().ok())
            .unwrap_or(1);
        let outcome = self.post(subscription, &message).await;
        let (failure, retry_after) = match outcome {
            Outcome::Delivered => {
                count(subscription, "delivered");
                if let Err(error) = self
                    .engine
                    .delete_message(&subscription.queue, &message.receipt_handle)
                    .await
                {
                    // The lease runs out and the endpoint gets it again: at
                    // least once.
                    tracing::warn!(queue = %subscription.queue, %error, "a delivered message could not be deleted");
                }
                return;
            }
            Outcome::Failed(failure) => {
                let retry = subscription.policy.retry.delay_before(attempt);
                (failure, retry)
            }
            Outcome::Refused(failure) => (failure, None),
        };
        tracing::info!(
            subscription = %subscription.subscription_arn,
            attempt,
            class = %failure.class,
            reason = %failure.message,
            "a push delivery failed"
        );
        let result = match retry_after {
            Some(delay) => {
                count(subscription, "retried");
                self.nack(subscription, &message, failure, delay, false)
                    .await
            }
            None if subscription.dead_letter_queue => {
                match self
                    .nack(subscription, &message, failure, Duration::ZERO, true)
                    .await
                {
                    Ok(()) => {
                        count(subscription, "dead_lettered");
                        Ok(())
                    }
                    // The dead-letter queue is gone since it was set.
                    Err(error) => {
                        tracing::warn!(subscription = %subscription.subscription_arn, %error, "a push delivery cannot be dead-lettered");
                        self.discard(subscription, &message).await
                    }
                }
            }
            None => self.discard(subscription, &message).await,
        };
        if let Err(error) = result {
            tracing::warn!(queue = %subscription.queue, %error, "a failed push delivery could not be settled; its lease runs out");
        }
    }

    /// Drops a delivery that failed for good with nowhere to go, as SNS
    /// drops it.
    async fn discard(
        &self,
        subscription: &PushSubscription,
        message: &ReceivedMessage,
    ) -> Result<(), EngineError> {
        count(subscription, "discarded");
        tracing::warn!(
            subscription = %subscription.subscription_arn,
            message_id = %message.message_id,
            "a push delivery failed for good and has no dead-letter queue (RedrivePolicy): it \
             is dropped, as SNS drops it"
        );
        self.engine
            .delete_message(&subscription.queue, &message.receipt_handle)
            .await
    }

    async fn nack(
        &self,
        subscription: &PushSubscription,
        message: &ReceivedMessage,
        failure: FailureReport,
        delay: Duration,
        permanent: bool,
    ) -> Result<(), EngineError> {
        self.engine
            .nack_message(
                &subscription.queue,
                &message.receipt_handle,
                NackRequest {
                    delay_seconds: i32::try_from(delay.as_secs()).unwrap_or(i32::MAX),
                    reason: Some(failure),
                    permanent,
                },
            )
            .await
            .map(drop)
    }

    /// One post of `message` to the subscription's endpoint, as SNS makes it.
    async fn post(&self, subscription: &PushSubscription, message: &ReceivedMessage) -> Outcome {
        let attribute = |name: &str| {
            message
                .message_attributes
                .get(name)
                .and_then(|value| value.string_value.clone())
                .unwrap_or_default()
        };
        let message_type = attribute(MESSAGE_TYPE_ATTRIBUTE);
        let mut request = hyper::Request::post(&subscription.endpoint)
            .header(
                hyper::header::CONTENT_TYPE,
                &subscription.policy.content_type,
            )
            .header(hyper::header::USER_AGENT, USER_AGENT)
            .header("x-amz-sns-message-type", &message_type)
            .header("x-amz-sns-message-id", attribute(MESSAGE_ID_ATTRIBUTE))
            .header("x-amz-sns-topic-arn", &subscription.topic_arn);
        if message_type == NOTIFICATION {
            request = request.header("x-amz-sns-subscription-arn", &subscription.subscription_arn);
            if subscription.raw_message_delivery {
                request = request.header("x-amz-sns-rawdelivery", "true");
            }
        }
        let request = match request.body(Full::new(Bytes::from(message.body.clone()))) {
            Ok(request) => request,
            Err(error) => {
                return Outcome::Refused(report(
                    "push.request",
                    format!(
                        "no request can be made for {}: {error}",
                        subscription.endpoint
                    ),
                ));
            }
        };
        let answer = tokio::time::timeout(self.timeout, async {
            let response = self.client.request(request).await?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_REASON_BYTES)
                .collect()
                .await
                .map(|body| String::from_utf8_lossy(&body.to_bytes()).into_owned())
                .unwrap_or_default();
            Ok::<_, hyper_util::client::legacy::Error>((status, body))
        })
        .await;
        match answer {
            Ok(Ok((status, _))) if status.is_success() => Outcome::Delivered,
            Ok(Ok((status, body))) => {
                let failure = report(
                    &format!("http.{}", status.as_u16()),
                    format!(
                        "{} answered {status}: {}",
                        subscription.endpoint,
                        body.trim()
                    ),
                );
                // A 429 asks for later, as a 5xx does; any other 4xx refuses
                // the message itself.
                if status.is_client_error() && status != hyper::StatusCode::TOO_MANY_REQUESTS {
                    Outcome::Refused(failure)
                } else {
                    Outcome::Failed(failure)
                }
            }
            Ok(Err(error)) => Outcome::Failed(report(
                "http.connection",
                format!("posting to {} failed: {error}", subscription.endpoint),
            )),
            Err(_) => Outcome::Failed(report(
                "http.timeout",
                format!(
                    "{} did not answer within {} ms",
                    subscription.endpoint,
                    self.timeout.as_millis()
                ),
            )),
        }
    }
}

/// Counts one delivery's outcome for its subscription.
fn count(subscription: &PushSubscription, outcome: &'static str) {
    metrics::counter!(
        "ackbox_push_deliveries_total",
        "topic" => subscription.topic_arn.rsplit(':').next().unwrap_or_default().to_owned(),
        "subscription" => subscription.subscription_arn.rsplit(':').next().unwrap_or_default().to_owned(),
        "outcome" => outcome
    )
    .increment(1);
}
