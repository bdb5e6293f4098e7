//! Creating a queue (with a dead-letter queue, if asked) and deleting one
//! with its name typed in, from the dashboard.

use std::collections::BTreeMap;

use ackbox_core::queue_name::QueueName;
use axum::Form;
use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{ConfirmForm, Notice, Refusal, back, back_to, form_allowed, page, target};
use crate::app::AppState;
use crate::auth::Caller;

/// `GET /ui/new-queue`: the form (on a page of its own: the queue list
/// refreshes itself, which would wipe what is being typed).
pub(crate) async fn new_queue(
    State(state): State<AppState>,
    Query(notice): Query<Notice>,
) -> Response {
    if state.ui_read_only {
        return Refusal::ReadOnly.into_response();
    }
    page(
        "New queue",
        None,
        &(notice.render()
            + "<form method=\"post\" action=\"/ui/queues\" class=\"create\">\
         <p><label>name <input name=\"name\" required pattern=\"[A-Za-z0-9_-]{1,75}(\\.fifo)?\"></label> \
         (ending in <code>.fifo</code> makes a FIFO queue)</p>\
         <p><label>dead-letter queue <input name=\"dead_letter_queue\" placeholder=\"an existing queue's name\"></label>\
         <label>after <input name=\"max_receives\" type=\"number\" min=\"1\" max=\"1000\" value=\"5\"> receives</label></p>\
         <button>Create</button></form>"),
    )
    .into_response()
}

/// The create form.
#[derive(Debug, Deserialize)]
pub(crate) struct CreateForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    dead_letter_queue: String,
    #[serde(default)]
    max_receives: String,
}

/// `POST /ui/queues`: a queue as `CreateQueue` makes it; a name ending in
/// `.fifo` makes a FIFO queue, and a dead-letter queue named becomes its
/// `RedrivePolicy`.
pub(crate) async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Form(form): Form<CreateForm>,
) -> Response {
    if let Err(refusal) = form_allowed(&state, &headers) {
        return refusal.into_response();
    }
    let name = form.name.trim();
    if !caller.may_use_queue(name) || !caller.may_perform("CreateQueue") {
        return Refusal::Denied("CreateQueue").into_response();
    }
    let mut attributes = BTreeMap::new();
    if name.ends_with(".fifo") {
        attributes.insert("FifoQueue".to_owned(), "true".to_owned());
    }
    let dead_letter_queue = form.dead_letter_queue.trim();
    if !dead_letter_queue.is_empty() {
        let Ok(dead_letter_queue) = dead_letter_queue.parse::<QueueName>() else {
            return back_to(
                "/ui/new-queue",
                "error",
                &format!("{dead_letter_queue:?} is not a queue name."),
            );
        };
        let policy = serde_json::json!({
            "deadLetterTargetArn": state.engine.realm().queue_arn(&dead_letter_queue),
            "maxReceiveCount": form.max_receives.trim(),
        });
        attributes.insert("RedrivePolicy".to_owned(), policy.to_string());
    }
    match state
        .engine
        .create_queue(name, &attributes, &BTreeMap::new())
        .await
    {
        Ok(created) => back(&created, "notice", "Queue created."),
        Err(error) => back_to("/ui/new-queue", "error", &error.to_string()),
    }
}

/// `POST /ui/queues/{name}/delete`: only with the queue's name typed in.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<ConfirmForm>,
) -> Response {
    let name = match target(&state, &caller, "DeleteQueue", &headers, &name) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    if !form.confirms(&name) {
        return back(
            &name,
            "error",
            "Not deleted: type the queue's name exactly to confirm.",
        );
    }
    match state.engine.delete_queue(&name).await {
        Ok(()) => back_to(
            "/ui",
            "notice",
            &format!("Deleted queue {}.", name.as_str()),
        ),
        Err(error) => back(&name, "error", &error.to_string()),
    }
}
