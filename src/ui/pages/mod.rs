//! The console's pages and actions. Reads go through the same store functions as the API (with
//! an agent token's scope applied in SQL); writes through the same store functions and
//! `usecases`, so a console action is logged and fenced exactly like its API call.
//!
//! One file per page family; what several share (query parameters, links, flash messages, the
//! reason field) is here.

mod dead;
mod instances;
mod login;
mod overview;
mod playground;
mod tasks;

pub use dead::{dead_action, dead_queue};
pub use instances::{instance_action, instance_detail, instances};
pub use login::{login, login_form, login_page, logout};
pub use overview::overview;
pub use playground::playground;
pub use tasks::{task_action, task_detail, tasks};

use std::collections::HashMap;

use axum::extract::FromRequestParts;
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::{AdminForm, UiError};
use crate::domain::task::{MAX_REASON_LEN, parse_timestamp};
use crate::domain::text::{NUL_REFUSED, has_nul, plain_text, without_nul};

/// Rows per list page.
const PAGE: i64 = 50;

type Params = Query;

/// A page's query parameters. Text holding U+0000 is refused here (422 naming the parameter),
/// as the API refuses it: it could never be stored or matched, and must not be echoed. (Path
/// segments holding it are refused for every route before routing.)
pub struct Query(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Query {
    type Rejection = UiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, UiError> {
        let axum::extract::Query(q) =
            axum::extract::Query::<HashMap<String, String>>::from_request_parts(parts, state)
                .await
                .map_err(|e| UiError::bad_request(format!("the query string: {e}")))?;
        if let Some((k, _)) = q.iter().find(|(k, v)| has_nul(k) || has_nul(v)) {
            return Err(UiError::bad_request(format!(
                "{}: {NUL_REFUSED}",
                without_nul(k)
            )));
        }
        Ok(Query(q))
    }
}

/// A query parameter, trimmed; empty counts as absent.
fn param<'a>(q: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    q.get(name).map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// A query parameter that must be an RFC 3339 instant.
fn param_time(q: &HashMap<String, String>, name: &str) -> Result<Option<DateTime<Utc>>, UiError> {
    param(q, name)
        .map(|s| {
            parse_timestamp(s).ok_or_else(|| {
                UiError::bad_request(format!(
                    "{name}: {s:?} is not an RFC 3339 timestamp, e.g. 2026-11-29T08:30:00Z"
                ))
            })
        })
        .transpose()
}

/// A query string from pairs, for links that keep the current filters.
fn query_string(pairs: &[(&str, Option<&str>)]) -> String {
    let mut ser = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if let Some(v) = v {
            ser.append_pair(k, v);
        }
    }
    ser.finish()
}

/// `s` percent-encoded for a path segment or query value (a space as `%20`).
pub(super) fn encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// The message of an action's `done` code, shown on the page it redirects to.
fn flash_text(code: &str) -> &'static str {
    match code {
        "paused" => "Paused: no new windows are created until the task is resumed.",
        "resumed" => "Resumed: the next window is computed from now.",
        "triggered" => "Triggered: a manual window was created.",
        "exists" => "That window already exists; nothing was created.",
        "backfilled" => "Backfill applied.",
        "retried" => "Retried: the instance is PENDING again.",
        "cancelled" => "Cancelled.",
        _ => "Done.",
    }
}

/// The form's `reason` (or `default`): one line of at most `MAX_REASON_LEN` characters without
/// control characters (the rule of the API's hold reason; the console's fields are one line).
fn reason_field(form: &AdminForm, default: &str) -> Result<String, UiError> {
    let reason = form.get("reason").unwrap_or(default).trim().to_owned();
    if !plain_text(&reason, MAX_REASON_LEN) {
        return Err(UiError::bad_request(format!(
            "reason: at most {MAX_REASON_LEN} characters without control characters"
        )));
    }
    Ok(reason)
}

/// A priority as a small label; 0-2 (the urgent end) stand out.
fn priority_label(p: i16) -> Markup {
    html! {
        span.prio.urgent[p <= 2] title="priority: 0 most urgent, 9 least" { (p) }
    }
}
