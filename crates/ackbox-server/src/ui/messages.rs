//! A queue's messages on its page: read page by page without leasing any
//! (`PeekMessages`), and a form that sends one (`SendMessage`).

use std::fmt::Write as _;

use ackbox_core::queue_name::QueueName;
use ackbox_core::utc::rfc3339;
use ackbox_engine::receive::{ACKBOX_SYSTEM_ATTRIBUTE_NAMES, ReceiveRequest};
use ackbox_engine::send::SendEntry;
use axum::Form;
use axum::extract::{Extension, Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{back, escape, target};
use crate::app::AppState;
use crate::auth::Caller;

/// Messages one page shows.
pub(crate) const PAGE_SIZE: i32 = 20;
/// Characters of a body a row shows.
const SHOWN_BODY_CHARS: usize = 300;

/// Where a queue's page starts reading its messages.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Paging {
    /// Only messages stored after this sequence number (the last one the
    /// previous page showed).
    after: Option<i64>,
}

/// The table of the queue's messages from `paging` on, oldest first, with
/// links to the next page and back to the first. A dead-letter queue's
/// rows say where each message came from and why it failed.
pub(crate) async fn section(
    state: &AppState,
    caller: &Caller,
    name: &QueueName,
    dead_letter_queue: bool,
    paging: &Paging,
    body: &mut String,
) {
    let quoted = escape(name.as_str());
    body.push_str(
        "<h2 id=\"messages\">Messages</h2><table class=\"messages\"><tr><th>id</th><th>sent</th>",
    );
    if dead_letter_queue {
        body.push_str("<th>from</th>");
    }
    body.push_str("<th>body</th>");
    if dead_letter_queue {
        body.push_str("<th>failure</th>");
    }
    body.push_str("<th class=\"num\">receives</th></tr>");
    if !caller.may_perform("PeekMessages") {
        body.push_str(
            "<tr><td colspan=\"6\">This key may not read messages (PeekMessages).</td></tr></table>",
        );
        return;
    }
    let request = ReceiveRequest {
        system_attribute_names: std::iter::once("All")
            .chain(ACKBOX_SYSTEM_ATTRIBUTE_NAMES)
            .map(str::to_owned)
            .collect(),
        ..ReceiveRequest::default()
    };
    let after = paging.after.unwrap_or(0).max(0);
    let peeked = state
        .engine
        .peek_messages(name, Some(PAGE_SIZE), after, &request)
        .await
        .unwrap_or_default();
    let realm = state.engine.realm();
    for message in &peeked {
        let attribute = |key: &str| message.attributes.get(key).map_or("", String::as_str);
        let sent = attribute("SentTimestamp")
            .parse::<i64>()
            .map(rfc3339)
            .unwrap_or_default();
        let mut shown: String = message.body.chars().take(SHOWN_BODY_CHARS).collect();
        if message.body.chars().count() > SHOWN_BODY_CHARS {
            shown.push('…');
        }
        let _ = write!(
            body,
            "<tr><td><a class=\"message\" href=\"/ui/queues/{quoted}/messages/{}\">{}</a></td><td>{sent}</td>",
            message.seq,
            escape(&message.message_id)
        );
        if dead_letter_queue {
            let source = realm
                .queue_name_from_arn(attribute("DeadLetterQueueSourceArn"))
                .map(|source| {
                    let source = escape(source.as_str());
                    format!("<a href=\"/ui/queues/{source}\">{source}</a>")
                })
                .unwrap_or_default();
            let _ = write!(body, "<td class=\"source\">{source}</td>");
        }
        let _ = write!(body, "<td><pre>{}</pre></td>", escape(&shown));
        if dead_letter_queue {
            let _ = write!(
                body,
                "<td>{} {}</td>",
                escape(attribute("AckBoxFailureClass")),
                escape(attribute("AckBoxFailureMessage"))
            );
        }
        let _ = write!(
            body,
            "<td class=\"num\">{}</td></tr>",
            escape(attribute("ApproximateReceiveCount"))
        );
    }
    body.push_str("</table>");
    if peeked.is_empty() {
        body.push_str(if after > 0 {
            "<p>No messages after these.</p>"
        } else {
            "<p>No messages.</p>"
        });
    }
    let mut links = Vec::new();
    if after > 0 {
        links.push(format!(
            "<a class=\"first-page\" href=\"/ui/queues/{quoted}#messages\">First page</a>"
        ));
    }
    if let Some(last) = peeked.last().filter(|_| peeked.len() == PAGE_SIZE as usize) {
        links.push(format!(
            "<a class=\"next-page\" href=\"/ui/queues/{quoted}?after={}#messages\">Next {PAGE_SIZE} →</a>",
            last.seq
        ));
    }
    if !links.is_empty() {
        let _ = write!(body, "<p>{}</p>", links.join(" · "));
    }
}

/// The form that sends one message to the queue: its body, and on a FIFO
/// queue its group and (without content-based deduplication) its
/// deduplication id.
pub(crate) fn send_form(name: &QueueName, body: &mut String) {
    let quoted = escape(name.as_str());
    let fifo_fields = if name.is_fifo() {
        "<label>group <input name=\"group_id\" required></label>\
         <label>deduplication id <input name=\"deduplication_id\" placeholder=\"from the body when content-based\"></label>"
    } else {
        ""
    };
    let _ = write!(
        body,
        "<h2>Send a message</h2><form method=\"post\" action=\"/ui/queues/{quoted}/send\" class=\"send\">\
         <p><textarea name=\"body\" rows=\"4\" cols=\"60\" required></textarea></p>{fifo_fields}\
         <button>Send</button></form>"
    );
}

/// The send form.
#[derive(Debug, Deserialize)]
pub(crate) struct SendForm {
    #[serde(default)]
    body: String,
    #[serde(default)]
    group_id: String,
    #[serde(default)]
    deduplication_id: String,
}

/// `POST /ui/queues/{name}/send`: one message, checked as `SendMessage`
/// checks it.
pub(crate) async fn send(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<SendForm>,
) -> Response {
    let name = match target(&state, &caller, "SendMessage", &headers, &name) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    let given = |text: String| (!text.trim().is_empty()).then(|| text.trim().to_owned());
    let entry = SendEntry {
        body: form.body,
        group_id: given(form.group_id),
        deduplication_id: given(form.deduplication_id),
        ..SendEntry::default()
    };
    let sender_id = caller.sender_id(&state.engine.realm().account_id);
    match state.engine.send_message(&name, entry, &sender_id).await {
        Ok(sent) => back(
            &name,
            "notice",
            &format!("Sent message {}.", sent.message_id),
        ),
        Err(error) => back(&name, "error", &error.to_string()),
    }
}
