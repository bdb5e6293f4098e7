//! The dashboard at `/ui`: server-rendered HTML, no scripts, no CDN — it
//! works offline and in any browser. Topics and their subscriptions
//! (`topics.rs`); queues with their depths, created and deleted
//! (`queue_admin.rs`); a queue's attributes and its messages page by page,
//! and a message sent to it (`messages.rs`); one message, deleted or sent
//! again — a dead letter to its source — (`message.rs`); a dead-letter queue's failure
//! classes; starting (or dry-running), watching, resuming and cancelling a
//! redrive; purging with a typed confirmation; a queue's or topic's archive
//! and its replays (`archive.rs`). With `--ui-read-only` every form is gone
//! and every POST is refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ackbox_core::queue_name::QueueName;
use ackbox_core::utc::rfc3339;
use ackbox_engine::Purge;
use ackbox_engine::store::MoveFilter;
use axum::Form;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::app::AppState;
use crate::auth::Caller;

mod archive;
pub(crate) mod message;
mod messages;
mod queue_admin;
mod topics;

use archive::{ArchiveOf, CancelReplayForm, ReplayForm};
use messages::Paging;
pub(crate) use messages::send;
pub(crate) use queue_admin::{create, delete, new_queue};
pub(crate) use topics::{cancel_replay, replay, topic, topics};

/// Escapes text for HTML element content and attribute values.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:0;color:#1d2433}
header{background:#1d2433;color:#fff;padding:10px 20px}header a{color:#fff;text-decoration:none;font-weight:600}
main{padding:16px 20px}table{border-collapse:collapse;margin:8px 0 20px}td,th{border-bottom:1px solid #dde;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f3f4f8}.num{text-align:right}.dlq{color:#b00020;font-weight:600}.dlq-empty{color:#5b6275}.notice{background:#fff6d5;padding:8px;border:1px solid #e6d38a}
.error{background:#fde2e2;border-color:#e08a8a}form{margin:8px 0 20px}input{margin-right:8px}pre{white-space:pre-wrap;margin:0;max-width:60em}";

fn page(title: &str, refresh_seconds: Option<u32>, body: &str) -> Html<String> {
    let refresh = refresh_seconds.map_or(String::new(), |seconds| {
        format!("<meta http-equiv=\"refresh\" content=\"{seconds}\">")
    });
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} · ackbox</title>{refresh}<style>{STYLE}</style></head>\
         <body><header><a href=\"/ui\">ackbox</a> · <a href=\"/ui\">queues</a> · <a href=\"/ui/topics\">topics</a></header><main><h1>{}</h1>{body}</main></body></html>",
        escape(title),
        escape(title)
    ))
}

fn error_page(status: StatusCode, message: &str) -> Response {
    (
        status,
        page(
            "Error",
            None,
            &format!("<p class=\"notice error\">{}</p>", escape(message)),
        ),
    )
        .into_response()
}

fn seconds(age: f64) -> String {
    if age < 120.0 {
        format!("{age:.0} s")
    } else if age < 7_200.0 {
        format!("{:.0} min", age / 60.0)
    } else {
        format!("{:.1} h", age / 3_600.0)
    }
}

/// `GET /ui`: every queue with its depth.
pub(crate) async fn queues(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(notice): Query<Notice>,
) -> Response {
    if !caller.may_perform("ListQueues") {
        return Refusal::Denied("ListQueues").into_response();
    }
    let mut depths = match state.engine.queue_depths().await {
        Ok(depths) => depths,
        Err(error) => return error_page(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
    };
    depths.retain(|depth| caller.may_use_queue(depth.name.as_str()));
    state.history.note_new(&depths);
    let mut body = notice.render();
    if !state.ui_read_only {
        body.push_str("<p><a class=\"new-queue\" href=\"/ui/new-queue\">Create a queue</a></p>");
    }
    body.push_str(
        "<table><tr><th>queue</th><th class=\"num\">visible</th><th class=\"num\">in flight</th>\
         <th class=\"num\">delayed</th><th class=\"num\">oldest</th><th>last hour</th><th></th></tr>",
    );
    for depth in &depths {
        let name = escape(depth.name.as_str());
        let _ = write!(
            body,
            "<tr><td><a href=\"/ui/queues/{name}\">{name}</a></td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            depth.stats.visible,
            depth.stats.in_flight,
            depth.stats.delayed,
            seconds(depth.oldest_age_seconds()),
            crate::history::sparkline(&state.history.series(depth.name.as_str())),
            // Red only while it holds something to look at.
            match (
                depth.dead_letter_queue,
                depth.stats.visible + depth.stats.in_flight + depth.stats.delayed
            ) {
                (false, _) => "",
                (true, 0) => "<span class=\"dlq-empty\">dead-letter queue</span>",
                (true, _) => "<span class=\"dlq\">dead-letter queue</span>",
            },
        );
    }
    body.push_str("</table>");
    if depths.is_empty() {
        body.push_str("<p>No queues yet.</p>");
    }
    page("Queues", Some(10), &body).into_response()
}

/// A notice carried across a redirect.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Notice {
    notice: Option<String>,
    error: Option<String>,
}

impl Notice {
    /// The notice and the error, as the page shows them above its content.
    fn render(&self) -> String {
        let mut html = String::new();
        if let Some(text) = &self.notice {
            let _ = write!(html, "<p class=\"notice\">{}</p>", escape(text));
        }
        if let Some(text) = &self.error {
            let _ = write!(html, "<p class=\"notice error\">{}</p>", escape(text));
        }
        html
    }
}

/// `GET /ui/queues/{name}`: one queue; for a dead-letter queue, its
/// failures, its messages and its redrives.
pub(crate) async fn queue(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Query(notice): Query<Notice>,
    Query(paging): Query<Paging>,
) -> Response {
    let Ok(name) = name.parse::<QueueName>() else {
        return error_page(StatusCode::NOT_FOUND, "No such queue.");
    };
    if !caller.may_use_queue(name.as_str()) || !caller.may_perform("GetQueueAttributes") {
        return Refusal::Denied("GetQueueAttributes").into_response();
    }
    let engine = &state.engine;
    let attributes = match engine
        .get_queue_attributes(&name, &["All".to_owned()])
        .await
    {
        Ok(attributes) => attributes,
        Err(error) => return error_page(StatusCode::NOT_FOUND, &error.to_string()),
    };
    let depth = engine.queue_depth(&name).await.ok();
    let mut body = notice.render();
    if let Some(depth) = &depth {
        let _ = write!(
            body,
            "<p><b>{}</b> visible · <b>{}</b> in flight · <b>{}</b> delayed · oldest {}</p>\
             <p>Depth over the last hour: {}</p>",
            depth.stats.visible,
            depth.stats.in_flight,
            depth.stats.delayed,
            seconds(depth.oldest_age_seconds()),
            crate::history::sparkline(&state.history.series(name.as_str()))
        );
    }
    if let Some(policy) = attributes.get("RedrivePolicy")
        && let Some(target) = serde_json::from_str::<serde_json::Value>(policy)
            .ok()
            .and_then(|policy| policy["deadLetterTargetArn"].as_str().map(str::to_owned))
            .and_then(|arn| engine.realm().queue_name_from_arn(&arn))
    {
        let target = escape(target.as_str());
        let _ = write!(
            body,
            "<p>Dead-letter queue: <a href=\"/ui/queues/{target}\">{target}</a></p>"
        );
    }
    let mut running = false;
    let dead_letter_queue = depth.as_ref().is_some_and(|depth| depth.dead_letter_queue);
    if dead_letter_queue {
        running = dead_letter_sections(&state, &name, &mut body).await;
    }
    messages::section(
        &state,
        &caller,
        &name,
        dead_letter_queue,
        &paging,
        &mut body,
    )
    .await;
    if !state.ui_read_only {
        messages::send_form(&name, &mut body);
    }
    archive::section(&state, &caller, &ArchiveOf::Queue(name.clone()), &mut body).await;
    body.push_str("<h2>Attributes</h2><table>");
    for (key, value) in &attributes {
        let _ = write!(
            body,
            "<tr><th>{}</th><td><pre>{}</pre></td></tr>",
            escape(key),
            escape(value)
        );
    }
    body.push_str("</table>");
    if !state.ui_read_only {
        typed_confirmation_form(
            &name,
            ("purge", "Purge"),
            "Type the queue name to delete every message in it:",
            &mut body,
        );
        typed_confirmation_form(
            &name,
            ("delete", "Delete the queue"),
            "Type the queue name to delete it and every message in it:",
            &mut body,
        );
    }
    page(name.as_str(), running.then_some(2), &body).into_response()
}

/// Failure classes, the redrive form and the move tasks of a dead-letter
/// queue; `true` while a task runs (the page then refreshes).
async fn dead_letter_sections(state: &AppState, name: &QueueName, body: &mut String) -> bool {
    let engine = &state.engine;
    let quoted = escape(name.as_str());
    body.push_str("<h2>Failures</h2><table><tr><th>class</th><th class=\"num\">messages</th><th>oldest sent</th><th>example</th></tr>");
    let classes = engine
        .failure_classes(name, None, None)
        .await
        .unwrap_or_default();
    for class in &classes {
        let label = if class.class.is_empty() {
            "(no reason recorded)"
        } else {
            &class.class
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td><pre>{}</pre></td></tr>",
            escape(label),
            class.count,
            rfc3339(class.oldest_sent_at),
            escape(class.example.as_deref().unwrap_or(""))
        );
    }
    body.push_str("</table>");
    if !state.ui_read_only {
        let mut options = String::from("<option value=\"\">every class</option>");
        for class in classes.iter().filter(|class| !class.class.is_empty()) {
            let class = escape(&class.class);
            let _ = write!(options, "<option value=\"{class}\">{class}</option>");
        }
        let _ = write!(
            body,
            "<h2>Redrive</h2><form method=\"post\" action=\"/ui/queues/{quoted}/redrive\">\
             <label>class <select name=\"class\">{options}</select></label>\
             <label>rate/s <input name=\"rate\" type=\"number\" min=\"1\" max=\"500\" value=\"50\"></label>\
             <label>sample <input name=\"sample\" type=\"number\" min=\"1\" placeholder=\"all\"></label>\
             <label><input name=\"dry_run\" type=\"checkbox\" value=\"on\">dry run</label>\
             <button>Start redrive</button></form>"
        );
    }
    let arn = engine.realm().queue_arn(name);
    let tasks = engine
        .list_message_move_tasks(&arn, Some(10))
        .await
        .unwrap_or_default();
    let mut running = false;
    if !tasks.is_empty() {
        body.push_str("<h2>Redrives</h2><table><tr><th>status</th><th class=\"num\">moved</th><th>started by</th><th>why</th><th></th></tr>");
        for task in &tasks {
            running |= task.status == "RUNNING";
            let action = match (&task.handle, state.ui_read_only) {
                (Some(handle), false) => {
                    let button = |verb: &str, label: &str| {
                        format!(
                            "<form method=\"post\" action=\"/ui/queues/{quoted}/{verb}\" class=\"{verb}\"><input type=\"hidden\" name=\"handle\" value=\"{}\"><button>{label}</button></form>",
                            escape(handle)
                        )
                    };
                    let resume = if task.status == "PAUSED" {
                        button("resume", "Resume")
                    } else {
                        String::new()
                    };
                    resume + &button("cancel", "Cancel")
                }
                _ => String::new(),
            };
            let _ = write!(
                body,
                "<tr><td class=\"task-status\">{}</td><td class=\"num\">{} / {}</td><td>{}</td><td>{}</td><td>{action}</td></tr>",
                escape(&task.status),
                task.moved,
                task.to_move,
                escape(&task.requested_by),
                escape(task.failure_reason.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</table>");
    }
    running
}

/// The redrive form.
#[derive(Debug, Deserialize)]
pub(crate) struct RedriveForm {
    #[serde(default)]
    class: String,
    #[serde(default)]
    rate: String,
    #[serde(default)]
    sample: String,
    #[serde(default)]
    dry_run: Option<String>,
}

fn back(name: &QueueName, key: &str, message: &str) -> Response {
    back_to(&format!("/ui/queues/{}", name.as_str()), key, message)
}

/// Back to the dashboard page `path`, with a notice or an error to show.
fn back_to(path: &str, key: &str, message: &str) -> Response {
    let mut query = BTreeMap::new();
    query.insert(key, message);
    let encoded = serde_urlencoded::to_string(query).unwrap_or_default();
    Redirect::to(&format!("{path}?{encoded}")).into_response()
}

/// Why a form was not acted on.
enum Refusal {
    ReadOnly,
    CrossSite,
    NoSuchQueue,
    NoSuchTopic,
    /// The key lacks this permission, or the queue is outside its patterns.
    Denied(&'static str),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Self::ReadOnly => error_page(
                StatusCode::FORBIDDEN,
                "This dashboard is read-only (--ui-read-only).",
            ),
            Self::CrossSite => error_page(
                StatusCode::FORBIDDEN,
                "Refused: the form was posted from another site. Use the dashboard itself.",
            ),
            Self::NoSuchQueue => error_page(StatusCode::NOT_FOUND, "No such queue."),
            Self::NoSuchTopic => error_page(StatusCode::NOT_FOUND, "No such topic."),
            Self::Denied(permission) => error_page(
                StatusCode::FORBIDDEN,
                &format!(
                    "Access denied: this access key may not {permission} here (see its \
                     allow_actions, allow_queues and allow_topics)."
                ),
            ),
        }
    }
}

/// The queue a form acts on, if this dashboard may act at all
/// ([`form_allowed`]) and the caller on that queue.
fn target(
    state: &AppState,
    caller: &Caller,
    permission: &'static str,
    headers: &HeaderMap,
    name: &str,
) -> Result<QueueName, Refusal> {
    form_allowed(state, headers)?;
    let name = name
        .parse::<QueueName>()
        .map_err(|_| Refusal::NoSuchQueue)?;
    if !caller.may_use_queue(name.as_str()) || !caller.may_perform(permission) {
        return Err(Refusal::Denied(permission));
    }
    Ok(name)
}

/// `POST /ui/queues/{name}/replay`: a replay of the queue's archive.
pub(crate) async fn queue_replay(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<ReplayForm>,
) -> Response {
    match target(&state, &caller, "StartReplay", &headers, &name) {
        Ok(name) => archive::start(&state, &caller, &headers, &ArchiveOf::Queue(name), form).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// `POST /ui/queues/{name}/replay/cancel`.
pub(crate) async fn queue_cancel_replay(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<CancelReplayForm>,
) -> Response {
    match target(&state, &caller, "CancelReplay", &headers, &name) {
        Ok(name) => archive::cancel(&state, &ArchiveOf::Queue(name), form).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// Whether this dashboard acts on forms at all, and on this one. A browser
/// names the site a form came from in `Origin`; a form posted from another
/// site (a page trying to purge your queues) is refused.
fn form_allowed(state: &AppState, headers: &HeaderMap) -> Result<(), Refusal> {
    if state.ui_read_only {
        return Err(Refusal::ReadOnly);
    }
    if let Some(origin) = headers
        .get(header::ORIGIN)
        .and_then(|origin| origin.to_str().ok())
    {
        let host = headers
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .unwrap_or_default();
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if origin_host != host {
            return Err(Refusal::CrossSite);
        }
    }
    Ok(())
}

/// `POST /ui/queues/{name}/redrive`.
pub(crate) async fn redrive(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<RedriveForm>,
) -> Response {
    let name = match target(&state, &caller, "StartMessageMoveTask", &headers, &name) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    let number = |text: &str| text.trim().parse::<i64>().ok();
    let class = (!form.class.is_empty()).then(|| form.class.clone());
    if form.dry_run.is_some() {
        let classes = state
            .engine
            .failure_classes(&name, class.as_deref(), None)
            .await
            .unwrap_or_default();
        let matching: i64 = classes.iter().map(|counted| counted.count).sum();
        let limited = number(&form.sample).map_or(matching, |sample| matching.min(sample));
        return back(
            &name,
            "notice",
            &format!("Dry run: a redrive would move {limited} message(s) now; nothing moved."),
        );
    }
    let filter = MoveFilter {
        class,
        sample: number(&form.sample),
        ..MoveFilter::default()
    };
    let rate = number(&form.rate).and_then(|rate| i32::try_from(rate).ok());
    let arn = state.engine.realm().queue_arn(&name);
    match state
        .engine
        .start_message_move_task(&arn, None, rate, filter, &requested_by(&caller))
        .await
    {
        Ok(_) => back(&name, "notice", "Redrive started."),
        Err(error) => back(&name, "error", &error.to_string()),
    }
}

/// Who the audit log names for a redrive started here.
fn requested_by(caller: &Caller) -> String {
    match caller {
        Caller::Anonymous => "dashboard".to_owned(),
        Caller::Key(key) => format!("dashboard:{}", key.access_key_id),
    }
}

/// The form naming one move task: cancel it, or resume it after its sample.
#[derive(Debug, Deserialize)]
pub(crate) struct TaskForm {
    handle: String,
}

/// Whether the task `handle` redrives the queue `name`. A handle posted
/// under one queue must be that queue's task, or a key allowed on one queue
/// could cancel or resume another's redrive.
async fn is_task_of(state: &AppState, name: &QueueName, handle: &str) -> bool {
    let arn = state.engine.realm().queue_arn(name);
    matches!(state.engine.move_task(handle).await, Ok(Some(task)) if task.source_arn == arn)
}

/// `POST /ui/queues/{name}/resume`: a redrive paused after its sample goes on.
pub(crate) async fn resume(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<TaskForm>,
) -> Response {
    let name = match target(&state, &caller, "ResumeMessageMoveTask", &headers, &name) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    if !is_task_of(&state, &name, &form.handle).await {
        return back(&name, "error", "No such redrive of this queue.");
    }
    match state.engine.resume_message_move_task(&form.handle).await {
        Ok(_) => back(&name, "notice", "Redrive resumed."),
        Err(error) => back(&name, "error", &error.to_string()),
    }
}

/// `POST /ui/queues/{name}/cancel`.
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<TaskForm>,
) -> Response {
    let name = match target(&state, &caller, "CancelMessageMoveTask", &headers, &name) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    if !is_task_of(&state, &name, &form.handle).await {
        return back(&name, "error", "No such redrive of this queue.");
    }
    match state.engine.cancel_message_move_task(&form.handle).await {
        Ok(moved) => back(
            &name,
            "notice",
            &format!("Redrive cancelled after moving {moved} message(s)."),
        ),
        Err(error) => back(&name, "error", &error.to_string()),
    }
}

/// A form acting on the whole queue, posted to `/ui/queues/{name}/{action}`
/// (`action` also its class) only once the queue's name is typed in: what a
/// slip of the mouse must not do.
fn typed_confirmation_form(
    name: &QueueName,
    (action, heading): (&str, &str),
    prompt: &str,
    body: &mut String,
) {
    let quoted = escape(name.as_str());
    let _ = write!(
        body,
        "<h2>{heading}</h2><form method=\"post\" action=\"/ui/queues/{quoted}/{action}\" class=\"{action}\">\
         <label>{prompt} <input name=\"confirm\" autocomplete=\"off\"></label>\
         <button>{heading}</button></form>"
    );
}

/// What a [`typed_confirmation_form`] posts.
#[derive(Debug, Deserialize)]
pub(crate) struct ConfirmForm {
    #[serde(default)]
    confirm: String,
}

impl ConfirmForm {
    /// Whether the queue's name was typed exactly.
    fn confirms(&self, name: &QueueName) -> bool {
        self.confirm.trim() == name.as_str()
    }
}

/// `POST /ui/queues/{name}/purge`: only with the queue's name typed in.
pub(crate) async fn purge(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<ConfirmForm>,
) -> Response {
    let name = match target(&state, &caller, "PurgeQueue", &headers, &name) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    if !form.confirms(&name) {
        return back(
            &name,
            "error",
            "Not purged: type the queue's name exactly to confirm.",
        );
    }
    match state.engine.purge_queue(&name).await {
        Ok(Purge {
            deleted,
            rest_swept: false,
        }) => back(&name, "notice", &format!("Purged {deleted} message(s).")),
        Ok(Purge {
            deleted,
            rest_swept: true,
        }) => back(
            &name,
            "notice",
            &format!(
                "Purged {deleted} message(s); the rest of those sent before the purge go within seconds."
            ),
        ),
        Err(error) => back(&name, "error", &error.to_string()),
    }
}
