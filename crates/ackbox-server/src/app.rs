//! The HTTP application: routes, request ids, protocol selection, serving
//! with graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;

use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_engine::Engine;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tracing::Instrument;

use crate::action::{Action, RequestContext};
use crate::error::{ApiError, REQUEST_ID_HEADER};
use crate::protocol::json;

/// Largest request body read. Above SQS's 1 MiB payload limit because JSON
/// escaping can grow a legal body; the payload limits themselves are checked
/// by the engine after decoding.
pub const MAX_REQUEST_BODY: usize = 8 * 1_048_576;

/// Shared state of every request.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The queue engine.
    pub engine: Engine,
    /// `scheme://authority` used for queue URLs when a request has no `Host` header.
    pub fallback_base_url: String,
    /// The dashboard shows but changes nothing.
    pub ui_read_only: bool,
    /// Recent queue depths, for the dashboard's sparklines.
    pub history: std::sync::Arc<crate::history::DepthHistory>,
}

/// The router: `POST /` (and any path, as SDKs post to queue URLs) for the
/// API, `GET /healthz` for liveness.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(crate::telemetry::metrics))
        .route("/ui", get(crate::ui::queues))
        .route("/ui/queues/{name}", get(crate::ui::queue))
        .route("/ui/queues/{name}/redrive", post(crate::ui::redrive))
        .route("/ui/queues/{name}/cancel", post(crate::ui::cancel))
        .route("/ui/queues/{name}/purge", post(crate::ui::purge))
        .fallback(api)
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn api(State(state): State<AppState>, request: Request) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let (parts, body) = request.into_parts();
    let action = json::target(&parts.headers).and_then(str::parse::<Action>);
    let action_name = action.as_ref().map_or("unknown", |action| action.name());
    let span = tracing::debug_span!(
        "request",
        %request_id,
        action = %action_name,
        queue = tracing::field::Empty
    );
    let mut response = async {
        // Query-protocol clients also use GET with the action in the query
        // string; they get the same explanation in the XML shape they parse.
        if parts.method != Method::POST || !json::is_json_request(&parts.headers) {
            return query_protocol_not_supported();
        }
        let Ok(body) = axum::body::to_bytes(body, MAX_REQUEST_BODY).await else {
            return ApiError::Sqs(SqsError::invalid_value(format!(
                "The request body is larger than {MAX_REQUEST_BODY} bytes or could not be read."
            )))
            .into_response();
        };
        let context = RequestContext {
            base_url: base_url(&parts.headers, &state.fallback_base_url),
            sender_id: state.engine.realm().account_id.clone(),
            // Requests carry no verified identity until SigV4 lands.
            principal: "anonymous".to_owned(),
            engine: state.engine.clone(),
        };
        let started = std::time::Instant::now();
        let result = match action {
            Ok(action) => action.run_json(&context, &body).await,
            Err(error) => Err(ApiError::Sqs(error)),
        };
        let response = result.unwrap_or_else(IntoResponse::into_response);
        crate::telemetry::request_finished(action_name, response.status(), started.elapsed());
        let status = response.status();
        let outcome = crate::telemetry::outcome(status);
        let duration_ms = started.elapsed().as_secs_f64() * 1_000.0;
        // Client errors are the client's business; server errors are ours.
        if status.is_server_error() {
            tracing::error!(
                status = status.as_u16(),
                outcome,
                duration_ms,
                "request finished"
            );
        } else {
            tracing::debug!(
                status = status.as_u16(),
                outcome,
                duration_ms,
                "request finished"
            );
        }
        response
    }
    .instrument(span)
    .await;
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

fn base_url(headers: &HeaderMap, fallback: &str) -> String {
    headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .filter(|host| !host.is_empty() && host.bytes().all(|byte| byte.is_ascii_graphic()))
        .map_or_else(|| fallback.to_owned(), |host| format!("http://{host}"))
}

/// The query protocol (form-encoded `Action=…`) is not served yet; say so in
/// the XML error shape such clients parse.
fn query_protocol_not_supported() -> Response {
    let error = SqsError::new(
        ErrorCode::UnknownOperation,
        "This server speaks the AWS JSON 1.0 protocol only; configure the client for JSON \
         (Content-Type: application/x-amz-json-1.0).",
    );
    let body = format!(
        "<?xml version=\"1.0\"?><ErrorResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">\
         <Error><Type>Sender</Type><Code>{}</Code><Message>{}</Message><Detail/></Error>\
         <RequestId>{}</RequestId></ErrorResponse>",
        error.code.query_code(),
        error.message,
        uuid::Uuid::new_v4()
    );
    let mut response = (StatusCode::BAD_REQUEST, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/xml"));
    response
}

/// Serves `app(state)` on `listener` until `shutdown` resolves, then ends long
/// polls, lets in-flight requests finish, and flushes and closes the engine.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), crate::ServerError> {
    let engine = state.engine.clone();
    let stop_waiting = engine.shutdown_token();
    let local: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(address = ?local, "serving the SQS API");
    let served = axum::serve(crate::telemetry::CountingListener(listener), app(state))
        .with_graceful_shutdown(async move {
            shutdown.await;
            // Long polls return empty now instead of holding shutdown for 20 s.
            stop_waiting.cancel();
        })
        .await;
    let closed = engine.shutdown().await;
    served.map_err(|source| crate::ServerError::Serve { source })?;
    closed.map_err(|source| crate::ServerError::Close { source })?;
    tracing::info!("store flushed and closed");
    Ok(())
}
