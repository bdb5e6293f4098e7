//! An archive on the dashboard, a topic's or a queue's: what it keeps, its
//! replays (a cancel button on running ones) and the form that starts one
//! into a queue; and what those forms do.

use std::fmt::Write as _;

use ackbox_core::attributes::ARCHIVE_POLICY as QUEUE_ARCHIVE_POLICY;
use ackbox_core::clock::Timestamp;
use ackbox_core::queue_name::QueueName;
use ackbox_core::topic_name::TopicName;
use ackbox_core::utc::{parse_age, parse_rfc3339, rfc3339};
use ackbox_engine::EngineError;
use ackbox_engine::topic::{ARCHIVE_POLICY, ArchiveView, ReplayRequest};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Refusal, back_to, escape, requested_by};
use crate::app::AppState;
use crate::auth::Caller;

/// Whose archive a page shows.
pub(super) enum ArchiveOf {
    Topic(TopicName),
    Queue(QueueName),
}

impl ArchiveOf {
    /// Its dashboard page, where the forms post under.
    fn page(&self) -> String {
        match self {
            Self::Topic(name) => format!("/ui/topics/{name}"),
            Self::Queue(name) => format!("/ui/queues/{name}"),
        }
    }

    fn arn(&self, state: &AppState) -> String {
        let realm = state.engine.realm();
        match self {
            Self::Topic(name) => realm.topic_arn(name),
            Self::Queue(name) => realm.queue_arn(name),
        }
    }

    async fn archive(&self, state: &AppState) -> Result<Option<ArchiveView>, EngineError> {
        match self {
            Self::Topic(name) => state.engine.topic_archive(name).await,
            Self::Queue(name) => state.engine.queue_archive(name).await,
        }
    }

    /// What it keeps, and the attribute that asks it to.
    fn keeps(&self) -> (&'static str, &'static str) {
        match self {
            Self::Topic(_) => ("publish", ARCHIVE_POLICY),
            Self::Queue(_) => ("message sent", QUEUE_ARCHIVE_POLICY),
        }
    }
}

/// The archive's section of its owner's page. A queue without an archive
/// shows none (most never keep one); a topic's page says how to start one.
pub(super) async fn section(state: &AppState, caller: &Caller, of: &ArchiveOf, body: &mut String) {
    let engine = &state.engine;
    let (kept, policy) = of.keeps();
    let archive = match of.archive(state).await {
        Ok(Some(archive)) => archive,
        Ok(None) => {
            if let ArchiveOf::Topic(_) = of {
                let _ = write!(
                    body,
                    "<h2>Archive</h2><p>No archive: set the topic's {policy} to keep its \
                     publishes for replay.</p>"
                );
            }
            return;
        }
        Err(error) => {
            let _ = write!(
                body,
                "<h2>Archive</h2><p class=\"notice error\">{}</p>",
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
        "<h2>Archive</h2><p>Keeps every {kept} {} day(s); holds {held}, since {}.</p>",
        archive.retention_days,
        rfc3339(archive.since)
    );
    let replays = engine
        .list_replays(Some(&of.arn(state)))
        .await
        .unwrap_or_default();
    let writable = !state.ui_read_only && caller.may_perform("StartReplay");
    let page = escape(&of.page());
    if !replays.is_empty() {
        body.push_str(
            "<table><tr><th>started</th><th>by</th><th>range</th><th>into</th><th>filter</th>\
             <th>status</th><th class=\"num\">replayed</th><th class=\"num\">skipped</th><th></th></tr>",
        );
        for replay in &replays {
            let cancel = if replay.status == "RUNNING" && writable {
                format!(
                    "<form method=\"post\" action=\"{page}/replay/cancel\">\
                     <input type=\"hidden\" name=\"handle\" value=\"{}\">\
                     <button>Cancel</button></form>",
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
        // A queue's archive gives its messages back as sent: no envelope
        // to leave out.
        let raw = match of {
            ArchiveOf::Topic(_) => "<label><input type=\"checkbox\" name=\"raw\"> raw</label> ",
            ArchiveOf::Queue(_) => "",
        };
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{page}/replay\">\
             Replay into queue <input name=\"destination\" required placeholder=\"queue name\"> \
             from <input name=\"from\" required placeholder=\"2h or an RFC 3339 time\"> \
             until <input name=\"until\" placeholder=\"now\"> \
             filter <input name=\"filter\" placeholder='{{\"kind\":[\"placed\"]}}'> \
             {raw}rate <input name=\"rate\" size=\"4\" placeholder=\"500\">/s \
             <button>Start replay</button></form>"
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

/// Starts the replay `form` asks for, of `of`'s archive, back on its page.
pub(super) async fn start(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    of: &ArchiveOf,
    form: ReplayForm,
) -> Response {
    let page_path = of.page();
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
        source_arn: of.arn(state),
        destination_arn: engine.realm().queue_arn(&destination),
        start,
        end,
        filter_policy: Some(form.filter.trim().to_owned()).filter(|filter| !filter.is_empty()),
        raw_message_delivery: form.raw.is_some(),
        rate,
        requested_by: requested_by(caller),
        endpoint: crate::app::base_url(headers, state.scheme, &state.fallback_base_url),
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

/// Cancels the replay `form` names, of `of`'s archive, back on its page.
pub(super) async fn cancel(state: &AppState, of: &ArchiveOf, form: CancelReplayForm) -> Response {
    let page_path = of.page();
    match state
        .engine
        .cancel_replay(&of.arn(state), &form.handle)
        .await
    {
        Ok(replay) => back_to(
            &page_path,
            "notice",
            &format!("Replay cancelled after replaying {}.", replay.replayed),
        ),
        Err(error) => back_to(&page_path, "error", &error.to_string()),
    }
}
