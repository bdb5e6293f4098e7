//! A fake payment gateway over HTTP that behaves like a real one where it
//! matters: it honours idempotency keys (a repeated key returns the first
//! charge), it can be asked what happened to a key, and — on purpose — it
//! sometimes charges and then answers too late. Its [`Ledger`] counts every
//! charge call, a repeated key included, apart from the charges it made.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ackbox_consumer::effects::{CallError, Lookup};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::Rng;

/// What the gateway saw and did, for the report. It keeps charge *calls*
/// apart from *charges*: a request under an idempotency key it has seen
/// before is a second call (the client did call twice, and a provider that
/// does not deduplicate would have charged twice) but not a second charge.
#[derive(Debug, Default)]
pub struct Ledger {
    book: Mutex<Book>,
    slow_answers: AtomicU64,
}

/// The ledger's counts, under one lock so that calls and charges agree.
#[derive(Debug, Default)]
struct Book {
    /// Charges by idempotency key: (charge id, order id).
    charges: HashMap<String, (String, u64)>,
    /// Charge calls by order id, repeated idempotency keys included.
    calls_per_order: HashMap<u64, u64>,
    /// Every charge call.
    calls: u64,
    /// Calls whose idempotency key had been seen before.
    repeated_key_calls: u64,
}

impl Ledger {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // A panic while the lock is held leaves the counts whole (every
        // update is a single insert or increment), so a poisoned lock is
        // still worth reading.
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a charge call for `order_id` under `idempotency_key`; returns
    /// the charge id — the first one made under that key.
    fn charge(&self, idempotency_key: &str, order_id: u64) -> String {
        let mut book = self.book();
        book.calls += 1;
        *book.calls_per_order.entry(order_id).or_insert(0) += 1;
        if let Some((charge_id, _)) = book.charges.get(idempotency_key) {
            let charge_id = charge_id.clone();
            book.repeated_key_calls += 1;
            return charge_id;
        }
        let charge_id = format!("ch_{}", book.charges.len() + 1);
        book.charges
            .insert(idempotency_key.to_owned(), (charge_id.clone(), order_id));
        charge_id
    }

    fn charge_for_key(&self, idempotency_key: &str) -> Option<String> {
        self.book()
            .charges
            .get(idempotency_key)
            .map(|(charge_id, _)| charge_id.clone())
    }

    /// Charge calls received, repeated idempotency keys included.
    pub fn calls(&self) -> u64 {
        self.book().calls
    }

    /// Charge calls that repeated an idempotency key seen before (answered
    /// with the first charge, not charged again).
    pub fn repeated_key_calls(&self) -> u64 {
        self.book().repeated_key_calls
    }

    /// Charge calls per order id, repeated idempotency keys included.
    pub fn calls_per_order(&self) -> HashMap<u64, u64> {
        self.book().calls_per_order.clone()
    }

    /// Distinct charges made per order id (one per idempotency key).
    pub fn charges_per_order(&self) -> HashMap<u64, u64> {
        let mut per_order = HashMap::new();
        for (_, order_id) in self.book().charges.values() {
            *per_order.entry(*order_id).or_insert(0) += 1;
        }
        per_order
    }

    /// Answers held back on purpose until the client had given up.
    pub fn slow_answers(&self) -> u64 {
        self.slow_answers.load(Ordering::SeqCst)
    }
}

struct Gateway {
    ledger: Arc<Ledger>,
    slow_probability: f64,
    slow_by: Duration,
}

async fn charge(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
    else {
        return (
            StatusCode::BAD_REQUEST,
            "an Idempotency-Key header is required".into(),
        );
    };
    let order_id = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|request| request["order_id"].as_u64());
    let Some(order_id) = order_id else {
        return (StatusCode::BAD_REQUEST, "order_id is required".into());
    };
    // Charged before the answer is delayed: a client that gives up waiting
    // has been charged all the same, which is what makes a timeout ambiguous.
    let charge_id = gateway.ledger.charge(key, order_id);
    if rand::rng().random_bool(gateway.slow_probability) {
        gateway.ledger.slow_answers.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(gateway.slow_by).await;
    }
    (
        StatusCode::OK,
        serde_json::json!({ "id": charge_id }).to_string(),
    )
}

async fn lookup(
    State(gateway): State<Arc<Gateway>>,
    Path(key): Path<String>,
) -> (StatusCode, String) {
    match gateway.ledger.charge_for_key(&key) {
        Some(charge_id) => (
            StatusCode::OK,
            serde_json::json!({ "id": charge_id }).to_string(),
        ),
        None => (StatusCode::NOT_FOUND, String::new()),
    }
}

/// Starts the gateway on 127.0.0.1; returns its address and its ledger.
pub async fn start(
    slow_probability: f64,
    slow_by: Duration,
) -> std::io::Result<(SocketAddr, Arc<Ledger>)> {
    let ledger = Arc::new(Ledger::default());
    let gateway = Arc::new(Gateway {
        ledger: Arc::clone(&ledger),
        slow_probability,
        slow_by,
    });
    let app = Router::new()
        .route("/charges", post(charge))
        .route("/charges/{key}", get(lookup))
        .with_state(gateway);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((address, ledger))
}

/// The application's client of the gateway.
#[derive(Debug, Clone)]
pub struct GatewayClient {
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl GatewayClient {
    /// A client of the gateway at `address`.
    pub fn new(address: SocketAddr) -> Self {
        Self {
            base: format!("http://{address}"),
            http: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Charges `order_id` under `idempotency_key`; returns the charge id.
    /// Any failure after the request may have reached the gateway is
    /// ambiguous: the charge may have happened.
    pub async fn charge(
        &self,
        idempotency_key: String,
        order_id: u64,
        cents: i64,
    ) -> Result<String, CallError> {
        let request = hyper::Request::post(format!("{}/charges", self.base))
            .header("Idempotency-Key", &idempotency_key)
            .body(Full::new(Bytes::from(
                serde_json::json!({ "order_id": order_id, "cents": cents }).to_string(),
            )))
            .map_err(|error| CallError::Rejected(error.to_string()))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|error| CallError::Ambiguous(error.to_string()))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|error| CallError::Ambiguous(error.to_string()))?
            .to_bytes();
        if status.is_client_error() {
            return Err(CallError::Rejected(
                String::from_utf8_lossy(&body).into_owned(),
            ));
        }
        if !status.is_success() {
            return Err(CallError::Ambiguous(format!("gateway answered {status}")));
        }
        serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|reply| reply["id"].as_str().map(str::to_owned))
            .ok_or_else(|| CallError::Ambiguous("a reply without a charge id".into()))
    }

    /// What the gateway knows about `idempotency_key`.
    pub async fn lookup(&self, idempotency_key: &str) -> Lookup {
        let Ok(request) = hyper::Request::get(format!("{}/charges/{idempotency_key}", self.base))
            .body(Full::new(Bytes::new()))
        else {
            return Lookup::StillUnknown;
        };
        let Ok(response) = self.http.request(request).await else {
            return Lookup::StillUnknown;
        };
        let status = response.status();
        let Ok(body) = response.into_body().collect().await else {
            return Lookup::StillUnknown;
        };
        if status == StatusCode::NOT_FOUND {
            return Lookup::NotFound;
        }
        serde_json::from_slice::<serde_json::Value>(&body.to_bytes())
            .ok()
            .and_then(|reply| reply["id"].as_str().map(str::to_owned))
            .map_or(Lookup::StillUnknown, Lookup::Succeeded)
    }
}
