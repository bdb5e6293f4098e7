//! The HTTP application: routes, request ids, body limits, authentication,
//! protocol selection.

use std::sync::{Arc, OnceLock};

use ackbox_core::error::{ErrorCode, SqsError};
use ackbox_engine::Engine;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tracing::Instrument;

use crate::action::{Action, RequestContext};
use crate::auth::sigv4::SignableRequest;
use crate::auth::{Authenticator, BasicAuthFailure, Caller};
use crate::error::{ApiError, REQUEST_ID_HEADER};
use crate::limits::HttpLimits;
use crate::protocol::query::Form;
use crate::protocol::{Parameters, Protocol, json};

/// Shared state of every request.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The queue engine.
    pub engine: Engine,
    /// `scheme://authority` used for queue URLs when a request has no `Host` header.
    pub fallback_base_url: String,
    /// `http` or `https`: the scheme of queue URLs this server hands out.
    pub scheme: &'static str,
    /// The dashboard shows but changes nothing.
    pub ui_read_only: bool,
    /// Recent queue depths, for the dashboard's sparklines.
    pub history: Arc<crate::history::DepthHistory>,
    /// Who may call, and how they prove it.
    pub auth: Arc<Authenticator>,
    /// Body sizes and timeouts (and, for the listener, connection limits).
    pub limits: HttpLimits,
}

impl AppState {
    /// State for `engine` with the defaults of `ackbox serve`: plain HTTP on
    /// `fallback_base_url`, no authentication, default limits.
    pub fn new(engine: Engine, fallback_base_url: impl Into<String>) -> Self {
        Self {
            engine,
            fallback_base_url: fallback_base_url.into(),
            scheme: "http",
            ui_read_only: false,
            history: Arc::default(),
            auth: Arc::new(Authenticator::open()),
            limits: HttpLimits::default(),
        }
    }
}

/// The router: `POST /` (and any path, as SDKs post to queue URLs) for the
/// API, `GET /healthz` for liveness; the dashboard and `/metrics` behind
/// HTTP Basic authentication when credentials are required.
pub fn app(state: AppState) -> Router {
    let behind_basic_auth = Router::new()
        .route("/metrics", get(crate::telemetry::metrics))
        .route("/ui", get(crate::ui::queues))
        .route("/ui/queues/{name}", get(crate::ui::queue))
        .route("/ui/topics", get(crate::ui::topics))
        .route("/ui/topics/{name}", get(crate::ui::topic))
        .route("/ui/topics/{name}/replay", post(crate::ui::replay))
        .route(
            "/ui/topics/{name}/replay/cancel",
            post(crate::ui::cancel_replay),
        )
        .route("/ui/queues/{name}/replay", post(crate::ui::queue_replay))
        .route(
            "/ui/queues/{name}/replay/cancel",
            post(crate::ui::queue_cancel_replay),
        )
        .route("/ui/queues/{name}/redrive", post(crate::ui::redrive))
        .route("/ui/queues/{name}/cancel", post(crate::ui::cancel))
        .route("/ui/queues/{name}/resume", post(crate::ui::resume))
        .route("/ui/queues/{name}/send", post(crate::ui::send))
        .route("/ui/queues/{name}/delete", post(crate::ui::delete))
        .route("/ui/queues", post(crate::ui::create))
        .route("/ui/new-queue", get(crate::ui::new_queue))
        .route(
            "/ui/queues/{name}/messages/{seq}",
            get(crate::ui::message::message),
        )
        .route(
            "/ui/queues/{name}/messages/{seq}/delete",
            post(crate::ui::message::delete),
        )
        .route(
            "/ui/queues/{name}/messages/{seq}/resend",
            post(crate::ui::message::resend),
        )
        .route("/ui/queues/{name}/purge", post(crate::ui::purge))
        .route_layer(middleware::from_fn_with_state(state.clone(), basic_auth));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(behind_basic_auth)
        .fallback(api)
        .with_state(state)
}

/// `ok`, or 503 while the store's disk is full: sends are refused until
/// space is freed (receives, deletes and `/metrics` go on answering what
/// they can), so traffic that can go elsewhere should.
async fn healthz(State(state): State<AppState>) -> Response {
    if state.engine.disk_full() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "degraded: the disk is full; sends are refused until space is freed\n",
        )
            .into_response();
    }
    "ok".into_response()
}

/// Lets a browser or scraper in with an access key id and its secret, and
/// hands the handlers the [`Caller`] they judge permissions by.
async fn basic_auth(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    match state.auth.authenticate_basic(request.headers()) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(failure) => {
            let message = match failure {
                BasicAuthFailure::Missing => {
                    "Sign in with an access key id as user name and its secret access key as password."
                }
                BasicAuthFailure::Invalid => "Unknown access key id or wrong secret access key.",
            };
            (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"ackbox\", charset=\"UTF-8\""),
                )],
                message,
            )
                .into_response()
        }
    }
}

/// The log target of the line every API request ends with.
pub const ACCESS_LOG: &str = "access";

async fn api(State(state): State<AppState>, request: Request) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let (parts, body) = request.into_parts();
    let protocol = Protocol::of(&parts.headers);
    let span = tracing::info_span!(
        "request",
        %request_id,
        action = tracing::field::Empty,
        queue = tracing::field::Empty,
        principal = tracing::field::Empty
    );
    // Known once the body is read (query requests name it there); kept
    // outside the request's future so a timed-out request is still counted
    // under its action.
    let action = OnceLock::new();
    let mut response = async {
        let started = std::time::Instant::now();
        let response = match tokio::time::timeout(
            state.limits.request_timeout,
            respond(&state, &parts, body, protocol, &request_id, &action),
        )
        .await
        {
            Ok(response) => response,
            Err(_) => ApiError::Sqs(SqsError::new(
                ErrorCode::ServiceUnavailable,
                format!(
                    "The request did not finish within {} s; it may or may not have taken \
                     effect. Please retry.",
                    state.limits.request_timeout.as_secs()
                ),
            ))
            .render(protocol, &request_id),
        };
        let action_name = action
            .get()
            .map_or("unknown", |action: &Action| action.name());
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
            // The access log: one line per request, under its own target so
            // that `ACKBOX_LOG=info,access=off` silences it alone.
            tracing::info!(
                target: ACCESS_LOG,
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

/// Reads the body within its limits, authenticates the caller and runs the
/// action, answering in the request's protocol.
async fn respond(
    state: &AppState,
    parts: &Parts,
    body: Body,
    protocol: Protocol,
    request_id: &str,
    action_seen: &OnceLock<Action>,
) -> Response {
    let body = match read_body(&parts.headers, body, &state.limits).await {
        Ok(body) => body,
        Err(error) => {
            // The rest of the body is not read; the connection cannot carry
            // another request.
            let mut response = ApiError::Sqs(error).render(protocol, request_id);
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
    };
    let base_url = base_url(&parts.headers, state.scheme, &state.fallback_base_url);
    let signable = SignableRequest {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or_default(),
        headers: &parts.headers,
        body: &body,
    };
    let authentication =
        state
            .auth
            .authenticate(&signable, state.engine.now(), &state.engine.realm().region);
    let (parameters, action) = match protocol {
        Protocol::Json => {
            let action = json::target(&parts.headers).and_then(str::parse::<Action>);
            (Parameters::Json(body), action)
        }
        Protocol::Query(_) => {
            let mut form = Form::parse(parts.uri.query().unwrap_or_default(), &body);
            // Query clients may post to the queue's URL instead of naming it.
            if parts.uri.path() != "/" {
                form.set_default("QueueUrl", format!("{base_url}{}", parts.uri.path()));
            }
            let action = form.action();
            (Parameters::Query(form), action)
        }
    };
    let protocol = match &action {
        Ok(action) => protocol.for_service(action.service()),
        Err(_) => protocol,
    };
    let caller = match authentication {
        Ok(caller) => caller,
        // An endpoint confirms its subscription by a GET of the
        // confirmation's SubscribeURL, unsigned: the token is the proof.
        Err(error)
            if error.code == ErrorCode::MissingAuthenticationToken
                && matches!(action, Ok(Action::ConfirmSubscription)) =>
        {
            Caller::Anonymous
        }
        Err(error) => {
            crate::telemetry::auth_refused(error.code);
            return ApiError::Sqs(error).render(protocol, request_id);
        }
    };
    if let Ok(action) = action {
        let _ = action_seen.set(action);
        tracing::Span::current().record("action", action.name());
    }
    tracing::Span::current().record("principal", caller.principal());
    let sender_id = caller.sender_id(&state.engine.realm().account_id);
    let context = RequestContext {
        base_url,
        sender_id,
        caller,
        engine: state.engine.clone(),
        request_id: request_id.to_owned(),
    };
    let result = match action {
        Ok(action) => action.run(&context, parameters).await,
        Err(error) => Err(ApiError::Sqs(error)),
    };
    result.unwrap_or_else(|error| error.render(protocol, request_id))
}

/// The whole body, if it fits the cap and arrives in time. A declared
/// `Content-Length` over the cap is refused before a byte of the body is read.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limits: &HttpLimits,
) -> Result<Bytes, SqsError> {
    let cap = limits.max_body_bytes;
    let too_large = |length: Option<u64>| {
        SqsError::new(
            ErrorCode::RequestEntityTooLarge,
            match length {
                Some(length) => format!(
                    "The request body is {length} bytes; this server accepts at most {cap} \
                     bytes (--max-body-bytes)."
                ),
                None => format!(
                    "The request body is larger than {cap} bytes, the most this server accepts \
                     (--max-body-bytes)."
                ),
            },
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if let Some(length) = declared
        && length > cap as u64
    {
        return Err(too_large(Some(length)));
    }
    match tokio::time::timeout(limits.body_timeout, axum::body::to_bytes(body, cap)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(error)) => {
            let over_cap = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            Err(if over_cap {
                too_large(None)
            } else {
                SqsError::new(
                    ErrorCode::SerializationException,
                    "The request body could not be read to its end.",
                )
            })
        }
        Err(_) => Err(SqsError::new(
            ErrorCode::RequestTimeout,
            format!(
                "The request body did not arrive within {} ms (--body-timeout-ms).",
                limits.body_timeout.as_millis()
            ),
        )),
    }
}

/// This server's URL as the client reached it (its `Host`), else `fallback`.
pub(crate) fn base_url(headers: &HeaderMap, scheme: &str, fallback: &str) -> String {
    headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .filter(|host| !host.is_empty() && host.bytes().all(|byte| byte.is_ascii_graphic()))
        .map_or_else(|| fallback.to_owned(), |host| format!("{scheme}://{host}"))
}
