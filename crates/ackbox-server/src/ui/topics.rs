//! The dashboard's topics: every topic, and one topic's subscriptions —
//! where each delivers, whether its endpoint has confirmed it, what it
//! filters, and for a push subscription its backlog (its delivery queue,
//! linked to that queue's page) and its dead-letter queue — its archive,
//! and its replays: started here into a queue, watched, cancelled.

use std::fmt::Write as _;

use ackbox_core::clock::Timestamp;
use ackbox_core::queue_name::QueueName;
use ackbox_core::topic_name::TopicName;
use ackbox_core::utc::{parse_age, parse_rfc3339, rfc3339};
use ackbox_engine::topic::ReplayRequest;
use axum::Form;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Notice, Refusal, back_to, error_page, escape, form_allowed, page, requested_by};
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
    archive_section(&state, &caller, &name, &mut body).await;
    page(name.as_str(), Some(10), &body).into_response()
}

/// The topic's archive, its replays (a cancel button on running ones) and
/// the form that starts one.
async fn archive_section(state: &AppState, caller: &Caller, name: &TopicName, body: &mut String) {
    let engine = &state.engine;
    body.push_str("<h2>Archive</h2>");
    let archive = match engine.topic_archive(name).await {
        Ok(Some(archive)) => archive,
        Ok(None) => {
            body.push_str(
                "<p>No archive: set the topic's ArchivePolicy to keep its publishes for replay.</p>",
            );
            return;
        }
        Err(error) => {
            let _ = write!(
                body,
                "<p class=\"notice error\">{}</p>",
                escape(&error.to_string())
            );
            return;
        }
    };
    let held = engine
        .queue_depth(&archive.queue)
        .await
        .map(|depth| depth.stats.visible + depth.stats.delayed + depth.stats.in_flight)
        .unwrap_or_default();
    let _ = write!(
        body,
        "<p>Keeps every publish {} day(s); holds {held}, since {}.</p>",
        archive.retention_days,
        rfc3339(archive.since)
    );
    let topic_arn = engine.realm().topic_arn(name);
    let replays = engine
        .list_replays(Some(&topic_arn))
        .await
        .unwrap_or_default();
    let writable = !state.ui_read_only && caller.may_perform("StartReplay");
    if !replays.is_empty() {
        body.push_str(
            "<table><tr><th>started</th><th>by</th><th>range</th><th>into</th><th>filter</th>\
             <th>status</th><th class=\"num\">replayed</th><th class=\"num\">skipped</th><th></th></tr>",
        );
        for replay in &replays {
            let cancel = if replay.status == "RUNNING" && writable {
                format!(
                    "<form method=\"post\" action=\"/ui/topics/{}/replay/cancel\">\
                     <input type=\"hidden\" name=\"handle\" value=\"{}\">\
                     <button>Cancel</button></form>",
                    escape(name.as_str()),
                    escape(&replay.handle)
                )
            } else {
                replay
                    .failure_reason
                    .as_deref()
                    .map_or_else(String::new, escape)
            };
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{} .. {}</td><td>{}</td><td><pre>{}</pre></td>\
                 <td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{cancel}</td></tr>",
                rfc3339(replay.started_at),
                escape(&replay.requested_by),
                rfc3339(replay.start),
                rfc3339(replay.end),
                escape(&replay.destination_arn),
                replay
                    .filter_policy
                    .as_deref()
                    .map_or_else(String::new, escape),
                escape(&replay.status),
                replay.replayed,
                replay.skipped,
            );
        }
        body.push_str("</table>");
    }
    if writable {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"/ui/topics/{}/replay\">\
             Replay into queue <input name=\"destination\" required placeholder=\"queue name\"> \
             from <input name=\"from\" required placeholder=\"2h or an RFC 3339 time\"> \
             until <input name=\"until\" placeholder=\"now\"> \
             filter <input name=\"filter\" placeholder='{{\"kind\":[\"placed\"]}}'> \
             <label><input type=\"checkbox\" name=\"raw\"> raw</label> \
             rate <input name=\"rate\" size=\"4\" placeholder=\"500\">/s \
             <button>Start replay</button></form>",
            escape(name.as_str())
        );
    }
}

/// The replay form.
#[derive(Debug, Deserialize)]
pub(crate) struct ReplayForm {
    destination: String,
    from: String,
    #[serde(default)]
    until: String,
    #[serde(default)]
    filter: String,
    #[serde(default)]
    raw: Option<String>,
    #[serde(default)]
    rate: String,
}

/// A time from the form: an RFC 3339 time, or an age before `now`.
fn point(field: &str, text: &str, now: Timestamp) -> Result<Timestamp, String> {
    let text = text.trim();
    parse_rfc3339(text)
        .or_else(|| parse_age(text).ok().map(|age| now - i64::from(age) * 1_000))
        .ok_or_else(|| {
            format!("{field} {text:?} is neither an RFC 3339 time (2026-12-07T10:00:00Z) nor an age (2h).")
        })
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
    let name = match topic_target(&state, &caller, "StartReplay", &headers, &name) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    let page_path = format!("/ui/topics/{}", name.as_str());
    let Ok(destination) = form.destination.trim().parse::<QueueName>() else {
        return back_to(
            &page_path,
            "error",
            &format!("{:?} is not a queue name.", form.destination.trim()),
        );
    };
    if !caller.may_use_queue(destination.as_str()) {
        return Refusal::Denied("StartReplay").into_response();
    }
    let engine = &state.engine;
    let now = engine.now();
    let range = point("from", &form.from, now).and_then(|start| {
        let end = (!form.until.trim().is_empty())
            .then(|| point("until", &form.until, now))
            .transpose()?;
        Ok((start, end))
    });
    let (start, end) = match range {
        Ok(range) => range,
        Err(reason) => return back_to(&page_path, "error", &reason),
    };
    let rate = form.rate.trim();
    let Ok(rate) = (!rate.is_empty()).then(|| rate.parse::<i64>()).transpose() else {
        return back_to(
            &page_path,
            "error",
            &format!("rate {rate:?} is not a number."),
        );
    };
    let request = ReplayRequest {
        source_arn: engine.realm().topic_arn(&name),
        destination_arn: engine.realm().queue_arn(&destination),
        start,
        end,
        filter_policy: Some(form.filter.trim().to_owned()).filter(|filter| !filter.is_empty()),
        raw_message_delivery: form.raw.is_some(),
        rate,
        requested_by: requested_by(&caller),
        endpoint: crate::app::base_url(&headers, state.scheme, &state.fallback_base_url),
    };
    match engine.start_replay(request).await {
        Ok(replay) => back_to(
            &page_path,
            "notice",
            &format!("Replay {} started into {destination}.", replay.handle),
        ),
        Err(error) => back_to(&page_path, "error", &error.to_string()),
    }
}

/// The replay cancel form.
#[derive(Debug, Deserialize)]
pub(crate) struct CancelReplayForm {
    handle: String,
}

/// `POST /ui/topics/{name}/replay/cancel`.
pub(crate) async fn cancel_replay(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<CancelReplayForm>,
) -> Response {
    let name = match topic_target(&state, &caller, "CancelReplay", &headers, &name) {
        Ok(name) => name,
        Err(refusal) => return refusal.into_response(),
    };
    let page_path = format!("/ui/topics/{}", name.as_str());
    let topic_arn = state.engine.realm().topic_arn(&name);
    match state.engine.cancel_replay(&topic_arn, &form.handle).await {
        Ok(replay) => back_to(
            &page_path,
            "notice",
            &format!("Replay cancelled after replaying {}.", replay.replayed),
        ),
        Err(error) => back_to(&page_path, "error", &error.to_string()),
    }
}
