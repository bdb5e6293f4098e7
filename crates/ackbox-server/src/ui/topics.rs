//! The dashboard's topics: every topic, and one topic's subscriptions —
//! where each delivers, whether its endpoint has confirmed it, what it
//! filters, and for a push subscription its backlog (its delivery queue,
//! linked to that queue's page) and its dead-letter queue — its archive,
//! and its replays: started here into a queue, watched, cancelled.

use std::fmt::Write as _;

use ackbox_core::topic_name::TopicName;
use axum::Form;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::archive::{ArchiveOf, CancelReplayForm, ReplayForm, cancel, section, start};
use super::{Notice, Refusal, error_page, escape, form_allowed, page};
use crate::app::AppState;
use crate::auth::Caller;

/// `GET /ui/topics`: every topic the caller may use.
pub(crate) async fn topics(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    if !caller.may_perform("ListTopics") {
        return Refusal::Denied("ListTopics").into_response();
    }
    let arns = match state.engine.list_topics().await {
        Ok(arns) => arns,
        Err(error) => return error_page(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
    };
    let mut body = String::from("<table><tr><th>topic</th><th>kind</th></tr>");
    let mut shown = 0;
    for arn in arns {
        let Some(name) = arn
            .rsplit(':')
            .next()
            .filter(|name| caller.may_use_topic(name))
        else {
            continue;
        };
        shown += 1;
        let kind = if name.ends_with(".fifo") {
            "FIFO"
        } else {
            "standard"
        };
        let name = escape(name);
        let _ = write!(
            body,
            "<tr><td><a href=\"/ui/topics/{name}\">{name}</a></td><td>{kind}</td></tr>"
        );
    }
    body.push_str("</table>");
    if shown == 0 {
        body.push_str("<p>No topics yet.</p>");
    }
    page("Topics", Some(10), &body).into_response()
}

/// `GET /ui/topics/{name}`: one topic's subscriptions, archive and replays.
pub(crate) async fn topic(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Query(notice): Query<Notice>,
) -> Response {
    let Ok(name) = name.parse::<TopicName>() else {
        return error_page(StatusCode::NOT_FOUND, "No such topic.");
    };
    if !caller.may_use_topic(name.as_str()) || !caller.may_perform("ListSubscriptionsByTopic") {
        return Refusal::Denied("ListSubscriptionsByTopic").into_response();
    }
    let engine = &state.engine;
    let subscriptions = match engine.topic_subscriptions(&name).await {
        Ok(subscriptions) => subscriptions,
        Err(error) => return error_page(StatusCode::NOT_FOUND, &error.to_string()),
    };
    let mut body = notice.render();
    let _ = write!(
        body,
        "<p>{}</p><table><tr><th>protocol</th><th>endpoint</th><th>state</th><th>delivery</th>\
         <th>filter policy</th><th class=\"num\">backlog</th><th>dead-letter queue</th></tr>",
        escape(&engine.realm().topic_arn(&name))
    );
    for subscription in &subscriptions {
        let state = if subscription.pending_confirmation {
            "pending confirmation"
        } else {
            "confirmed"
        };
        let delivery = if subscription.raw_message_delivery {
            "raw"
        } else {
            "envelope"
        };
        let filter = subscription
            .filter_policy
            .as_deref()
            .map_or_else(String::new, escape);
        let backlog = match &subscription.delivery_queue {
            Some(queue) => match engine.queue_depth(queue).await {
                Ok(depth) => format!(
                    "<a href=\"/ui/queues/{queue}\">{} waiting, {} being posted</a>",
                    depth.stats.visible + depth.stats.delayed,
                    depth.stats.in_flight
                ),
                Err(_) => "its delivery queue is gone".to_owned(),
            },
            None => String::new(),
        };
        let dead_letter_queue = subscription
            .dead_letter_queue
            .as_ref()
            .map_or_else(String::new, |queue| {
                format!("<a href=\"/ui/queues/{queue}\">{queue}</a>")
            });
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{state}</td><td>{delivery}</td><td><pre>{filter}</pre></td>\
             <td class=\"num\">{backlog}</td><td>{dead_letter_queue}</td></tr>",
            escape(&subscription.protocol),
            escape(&subscription.endpoint),
        );
    }
    body.push_str("</table>");
    if subscriptions.is_empty() {
        body.push_str("<p>No subscriptions: a publish is stored nowhere.</p>");
    }
    section(&state, &caller, &ArchiveOf::Topic(name.clone()), &mut body).await;
    page(name.as_str(), Some(10), &body).into_response()
}

/// The topic a topic form acts on, if the caller may `permission` there.
fn topic_target(
    state: &AppState,
    caller: &Caller,
    permission: &'static str,
    headers: &HeaderMap,
    name: &str,
) -> Result<TopicName, Refusal> {
    form_allowed(state, headers)?;
    let name = name
        .parse::<TopicName>()
        .map_err(|_| Refusal::NoSuchTopic)?;
    if !caller.may_use_topic(name.as_str()) || !caller.may_perform(permission) {
        return Err(Refusal::Denied(permission));
    }
    Ok(name)
}

/// `POST /ui/topics/{name}/replay`: a replay into a queue.
pub(crate) async fn replay(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<ReplayForm>,
) -> Response {
    match topic_target(&state, &caller, "StartReplay", &headers, &name) {
        Ok(name) => start(&state, &caller, &headers, &ArchiveOf::Topic(name), form).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// `POST /ui/topics/{name}/replay/cancel`.
pub(crate) async fn cancel_replay(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<CancelReplayForm>,
) -> Response {
    match topic_target(&state, &caller, "CancelReplay", &headers, &name) {
        Ok(name) => cancel(&state, &ArchiveOf::Topic(name), form).await,
        Err(refusal) => refusal.into_response(),
    }
}
