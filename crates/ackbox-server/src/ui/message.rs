//! One message on a page of its own: its whole body and every attribute,
//! deleting it, and sending it (edited or not) to a queue — its source
//! queue, for a dead letter — with the original deleted after.
//!
//! Both act on the message as the page saw it, after that many receives: a
//! consumer that received it since holds a newer lease, and the message
//! stays for it. Sending then deleting is two steps: were the server to stop
//! between them, the message would be in both queues, never in neither.

use std::fmt::Write as _;

use ackbox_core::queue_name::QueueName;
use ackbox_engine::PeekedDelete;
use ackbox_engine::receive::{ACKBOX_SYSTEM_ATTRIBUTE_NAMES, MessageView, ReceiveRequest};
use ackbox_engine::send::SendEntry;
use axum::Form;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Notice, Refusal, back, back_to, error_page, escape, page, target};
use crate::app::AppState;
use crate::auth::Caller;

/// The message `seq` of queue `name`, every attribute of it, unless it is
/// gone.
async fn peek_one(state: &AppState, name: &QueueName, seq: i64) -> Option<MessageView> {
    let request = ReceiveRequest {
        system_attribute_names: std::iter::once("All")
            .chain(ACKBOX_SYSTEM_ATTRIBUTE_NAMES)
            .map(str::to_owned)
            .collect(),
        message_attribute_names: vec!["All".to_owned()],
        ..ReceiveRequest::default()
    };
    state
        .engine
        .peek_messages(name, Some(1), seq - 1, &request)
        .await
        .ok()?
        .into_iter()
        .find(|message| message.seq == seq)
}

/// Where the page of message `seq` of queue `name` is.
fn message_path(name: &QueueName, seq: i64) -> String {
    format!("/ui/queues/{}/messages/{seq}", name.as_str())
}

/// `GET /ui/queues/{name}/messages/{seq}`.
pub(crate) async fn message(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((name, seq)): Path<(String, i64)>,
    Query(notice): Query<Notice>,
) -> Response {
    let Ok(name) = name.parse::<QueueName>() else {
        return error_page(StatusCode::NOT_FOUND, "No such queue.");
    };
    if !caller.may_use_queue(name.as_str()) || !caller.may_perform("PeekMessages") {
        return Refusal::Denied("PeekMessages").into_response();
    }
    let Some(message) = peek_one(&state, &name, seq).await else {
        return error_page(
            StatusCode::NOT_FOUND,
            "No such message: it was deleted, moved or expired.",
        );
    };
    let attribute = |key: &str| message.attributes.get(key).map_or("", String::as_str);
    let quoted = escape(name.as_str());
    let mut body = notice.render();
    let _ = write!(
        body,
        "<p>In <a href=\"/ui/queues/{quoted}\">{quoted}</a></p><h2>Body</h2><pre class=\"body\">{}</pre>",
        escape(&message.body)
    );
    body.push_str("<h2>Attributes</h2><table>");
    for (key, value) in &message.attributes {
        let _ = write!(
            body,
            "<tr><th>{}</th><td><pre>{}</pre></td></tr>",
            escape(key),
            escape(value)
        );
    }
    body.push_str("</table>");
    if !message.message_attributes.is_empty() {
        body.push_str(
            "<h2>Message attributes</h2><table><tr><th>name</th><th>type</th><th>value</th></tr>",
        );
        for (key, value) in &message.message_attributes {
            let shown = match (&value.string_value, &value.binary_value) {
                (Some(text), _) => escape(text),
                (None, Some(bytes)) => format!("({} bytes)", bytes.len()),
                (None, None) => String::new(),
            };
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td><pre>{shown}</pre></td></tr>",
                escape(key),
                escape(&value.data_type)
            );
        }
        body.push_str("</table>");
    }
    if !state.ui_read_only {
        let path = message_path(&name, seq);
        let receive_count = escape(attribute("ApproximateReceiveCount"));
        // A dead letter goes home by default; anything else to its own queue.
        let destination = state
            .engine
            .realm()
            .queue_name_from_arn(attribute("DeadLetterQueueSourceArn"))
            .unwrap_or_else(|| name.clone());
        let group = escape(attribute("MessageGroupId"));
        let _ = write!(
            body,
            "<h2>Send it again</h2><form method=\"post\" action=\"{path}/resend\" class=\"resend\">\
             <input type=\"hidden\" name=\"receive_count\" value=\"{receive_count}\">\
             <p><textarea name=\"body\" rows=\"6\" cols=\"80\">{}</textarea></p>\
             <label>to queue <input name=\"to\" value=\"{}\"></label>\
             <label>group (FIFO) <input name=\"group_id\" value=\"{group}\"></label>\
             <label><input name=\"delete_original\" type=\"checkbox\" value=\"on\" checked>then delete this one</label>\
             <button>Send</button></form>\
             <h2>Delete it</h2><form method=\"post\" action=\"{path}/delete\" class=\"delete-message\">\
             <input type=\"hidden\" name=\"receive_count\" value=\"{receive_count}\">\
             <button>Delete this message</button></form>",
            escape(&message.body),
            escape(destination.as_str()),
        );
    }
    page(&message.message_id, None, &body).into_response()
}

/// The delete form: the receive count the page saw.
#[derive(Debug, Deserialize)]
pub(crate) struct DeleteForm {
    #[serde(default)]
    receive_count: i64,
}

/// `POST /ui/queues/{name}/messages/{seq}/delete`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path((name, seq)): Path<(String, i64)>,
    Form(form): Form<DeleteForm>,
) -> Response {
    let name = match target(&state, &caller, "DeleteMessage", &headers, &name) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    match state
        .engine
        .delete_as_peeked(&name, seq, form.receive_count)
        .await
    {
        Ok(PeekedDelete::Deleted) => back(&name, "notice", "Message deleted."),
        Ok(PeekedDelete::AlreadyGone) => back(&name, "notice", "The message was gone already."),
        Ok(PeekedDelete::ReceivedSince) => back_to(
            &message_path(&name, seq),
            "error",
            "Not deleted: a consumer received it since this page was read; it is theirs now.",
        ),
        Err(error) => back_to(&message_path(&name, seq), "error", &error.to_string()),
    }
}

/// The resend form.
#[derive(Debug, Deserialize)]
pub(crate) struct ResendForm {
    #[serde(default)]
    receive_count: i64,
    #[serde(default)]
    body: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    group_id: String,
    #[serde(default)]
    delete_original: Option<String>,
}

/// `POST /ui/queues/{name}/messages/{seq}/resend`: the body as edited,
/// with the original's message attributes, to the queue named; then, if
/// asked, the original deleted.
pub(crate) async fn resend(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path((name, seq)): Path<(String, i64)>,
    Form(form): Form<ResendForm>,
) -> Response {
    let delete_original = form.delete_original.is_some();
    let source = match target(
        &state,
        &caller,
        if delete_original {
            "DeleteMessage"
        } else {
            "PeekMessages"
        },
        &headers,
        &name,
    ) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    let destination = match target(&state, &caller, "SendMessage", &headers, form.to.trim()) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    let here = message_path(&source, seq);
    let Some(original) = peek_one(&state, &source, seq).await else {
        return back(
            &source,
            "error",
            "Not sent: the message was deleted, moved or expired.",
        );
    };
    let group_id = form.group_id.trim();
    let entry = SendEntry {
        body: form.body,
        attributes: original.message_attributes,
        group_id: (!group_id.is_empty()).then(|| group_id.to_owned()),
        ..SendEntry::default()
    };
    let sender_id = caller.sender_id(&state.engine.realm().account_id);
    let sent = match state
        .engine
        .send_message(&destination, entry, &sender_id)
        .await
    {
        Ok(sent) => sent,
        Err(error) => return back_to(&here, "error", &format!("Not sent: {error}")),
    };
    let sent_note = format!(
        "Sent as message {} to {}",
        sent.message_id,
        destination.as_str()
    );
    if !delete_original {
        return back(&source, "notice", &format!("{sent_note}."));
    }
    match state
        .engine
        .delete_as_peeked(&source, seq, form.receive_count)
        .await
    {
        Ok(PeekedDelete::Deleted | PeekedDelete::AlreadyGone) => back(
            &source,
            "notice",
            &format!("{sent_note}; the original is deleted."),
        ),
        Ok(PeekedDelete::ReceivedSince) => back(
            &source,
            "error",
            &format!(
                "{sent_note}, but the original was not deleted: a consumer received it since."
            ),
        ),
        Err(error) => back(
            &source,
            "error",
            &format!("{sent_note}, but the original was not deleted: {error}"),
        ),
    }
}
