//! The console's shared limits: the Limits page (each limit's definition and live usage, the
//! busiest keys of a per_key limit, holds, with hold and release for admins) and an instance's
//! "Why is it waiting?" panel. Usage is read with the same [`crate::usecases::limits::usage`] as
//! `/v1/limits`, and the reasons with the same [`crate::store::waiting::waiting_on`] as
//! `GET /v1/instances/{id}`.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::render::{csrf, time};
use super::{AdminForm, Session, UiError, UiResult, page};
use crate::domain::instance::{Instance, InstanceStatus};
use crate::domain::limit::{MAX_HOLD_SECONDS, MAX_KEY_LEN, micros};
use crate::domain::task::MAX_REASON_LEN;
use crate::state::AppState;
use crate::store::limits::{self as store_limits, Limit};
use crate::store::waiting::{Waiting, waiting_on};
use crate::usecases::limits::{self as limits_usecase, HoldRequest};

/// Keys shown at once in a per_key limit's row; the rest (of the busiest the store returns)
/// behind a disclosure.
const KEYS_AT_ONCE: usize = 5;

/// One budget as the page shows it: a key's (or a whole limit's) numbers.
struct Budget {
    key: String,
    running: i64,
    available_rate: Option<i64>,
    held_until: Option<DateTime<Utc>>,
    held_reason: Option<String>,
}

/// A limit with its usage, computed as `/v1/limits` computes its view.
struct Row {
    limit: Limit,
    running: i64,
    /// The limit's one budget (without per_key), or its busiest keys.
    budgets: Vec<Budget>,
    /// Due PENDING instances that draw on it (None: not shown to this token).
    waiting: Option<i64>,
}

/// How many limits the page shows (the first by name); the rest are a `kairos limit list` away.
const SHOWN: i64 = 200;

/// The first [`SHOWN`] limits by name with their usage, and whether there are more.
async fn rows(state: &AppState, with_waiting: bool) -> Result<(Vec<Row>, bool), UiError> {
    let mut limits = store_limits::list_limits(&state.pool, None, SHOWN + 1).await?;
    let more = limits.len() as i64 > SHOWN;
    limits.truncate(SHOWN as usize);
    let gauges = if with_waiting && !limits.is_empty() {
        store_limits::gauges(&state.pool).await?
    } else {
        Vec::new()
    };
    let mut out = Vec::with_capacity(limits.len());
    for limit in limits {
        let usage = crate::usecases::limits::usage(&state.pool, &limit.name).await?;
        let now = micros(usage.now);
        let rate = limit.spec.rate;
        let budget = |k: &store_limits::KeyUsage| Budget {
            key: k.key.clone(),
            running: k.running,
            available_rate: rate.map(|r| r.available(k.tat.map(micros), now)),
            held_until: k.held_until,
            held_reason: k.held_reason.clone(),
        };
        let budgets = if limit.spec.per_key {
            usage.keys.iter().map(budget).collect()
        } else {
            let one = usage.keys.iter().find(|k| k.key.is_empty());
            vec![match one {
                Some(k) => budget(k),
                None => Budget {
                    key: String::new(),
                    running: usage.running,
                    available_rate: rate.map(|r| r.available(None, now)),
                    held_until: None,
                    held_reason: None,
                },
            }]
        };
        let waiting = with_waiting.then(|| {
            gauges
                .iter()
                .find(|g| g.name == limit.name)
                .map_or(0, |g| g.waiting)
        });
        out.push(Row {
            running: usage.running,
            limit,
            budgets,
            waiting,
        });
    }
    Ok((out, more))
}

/// A horizontal bar of `used` out of `total`, as inline SVG (the page's CSP allows no inline
/// styles): green, orange from 80 %, red when full.
fn bar(used: i64, total: i64, w: f64) -> Markup {
    let frac = if total > 0 {
        (used as f64 / total as f64).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let class = if used >= total {
        "bar-full"
    } else if frac >= 0.8 {
        "bar-high"
    } else {
        "bar-ok"
    };
    html! {
        svg.bar width=(w) height="10" viewBox={ "0 0 " (w) " 10" } role="img"
            aria-label={ (used) " of " (total) " in use" } {
            rect.bar-bg x="0" y="0" width=(w) height="10" rx="3" {}
            @if frac > 0.0 {
                rect class=(class) x="0" y="0" width=(format!("{:.1}", w * frac)) height="10" rx="3" {}
            }
        }
    }
}

fn concurrency_cell(limit: &Limit, running: i64) -> Markup {
    // Units are held (and counted) only for a limit with a concurrency.
    match limit.spec.concurrency {
        Some(c) if limit.spec.per_key => html! {
            div { strong.num { (running) } " units in use over all keys" }
            div.muted { "at most " (c) " per key" }
        },
        Some(c) => html! {
            (bar(running, c, 120.0))
            div.usage { strong.num { (running) } " / " (c) " in use" }
        },
        None => html! { span.muted { "no concurrency cap" } },
    }
}

fn rate_cell(row: &Row) -> Markup {
    let Some(r) = row.limit.spec.rate else {
        return html! { span.muted { "—" } };
    };
    html! {
        div { (r.count) " per " (r.per_seconds) " s" @if r.burst > 0 { ", burst " (r.burst) } }
        @if row.limit.spec.per_key {
            div.muted { "per key" }
        } @else if let Some(a) = row.budgets.first().and_then(|b| b.available_rate) {
            div class={ "usage" @if a == 0 { " exhausted" } } {
                strong.num { (a) } " of " (r.burst + 1) " starts available now"
            }
        }
    }
}

fn hold_text(b: &Budget) -> Markup {
    html! {
        @if let Some(until) = b.held_until {
            span.badge.s-failed { "held" } " until " (time(until))
            @if let Some(r) = &b.held_reason { div.reason { (r) } }
        }
    }
}

fn release_form(session: &Session, name: &str, key: Option<&str>) -> Markup {
    html! {
        form.inline method="post" action={ "/ui/limits/" (super::pages::encode(name)) "/release" } {
            (csrf(&session.csrf))
            @if let Some(k) = key { input type="hidden" name="key" value=(k); }
            button.release.small type="submit" { "Release" }
        }
    }
}

fn held_cell(session: &Session, row: &Row) -> Markup {
    let name = &row.limit.name;
    if row.limit.spec.per_key {
        let held: Vec<&Budget> = row
            .budgets
            .iter()
            .filter(|b| b.held_until.is_some())
            .collect();
        return html! {
            @if held.is_empty() { span.muted { "—" } }
            @for b in held {
                div.held-key {
                    code { (b.key) } " " (hold_text(b))
                    @if session.is_admin() { (release_form(session, name, Some(&b.key))) }
                }
            }
        };
    }
    match row.budgets.first().filter(|b| b.held_until.is_some()) {
        Some(b) => html! {
            (hold_text(b))
            @if session.is_admin() { (release_form(session, name, None)) }
        },
        None => html! { span.muted { "—" } },
    }
}

fn key_row(limit: &Limit, b: &Budget) -> Markup {
    html! {
        tr data-key=(b.key) {
            td { code { (b.key) } }
            td {
                @match limit.spec.concurrency {
                    Some(c) => { (bar(b.running, c, 60.0)) " " span.num { (b.running) "/" (c) } },
                    None => { span.muted { "—" } },
                }
            }
            @if let Some(r) = limit.spec.rate {
                td { span.num { (b.available_rate.unwrap_or(0)) } " of " (r.burst + 1) }
            }
            td { @if b.held_until.is_some() { span.badge.s-failed { "held" } } }
        }
    }
}

fn keys_cell(row: &Row) -> Markup {
    if !row.limit.spec.per_key {
        return html! { span.muted { "one budget" } };
    }
    if row.budgets.is_empty() {
        return html! { span.muted { "no key has run or been held yet" } };
    }
    let limit = &row.limit;
    let head = html! {
        thead { tr {
            th { "key" } th { "in use" }
            @if limit.spec.rate.is_some() { th { "starts now" } }
            th {}
        } }
    };
    let (first, rest) = row.budgets.split_at(row.budgets.len().min(KEYS_AT_ONCE));
    html! {
        table.keys {
            (head)
            tbody { @for b in first { (key_row(limit, b)) } }
        }
        @if !rest.is_empty() {
            details.more-keys {
                summary { (rest.len()) " more keys" }
                table.keys { tbody { @for b in rest { (key_row(limit, b)) } } }
            }
        }
    }
}

fn hold_form(session: &Session, limit: &Limit) -> Markup {
    html! {
        details.hold {
            summary { "Hold…" }
            form method="post" action={ "/ui/limits/" (super::pages::encode(&limit.name)) "/hold" } {
                (csrf(&session.csrf))
                label { "seconds " input type="number" name="seconds" min="1" max=(MAX_HOLD_SECONDS) value="300" required; }
                @if limit.spec.per_key {
                    label { "key " input type="text" name="key" maxlength=(MAX_KEY_LEN) required; }
                }
                label { "reason " input type="text" name="reason" placeholder="held by operator" maxlength=(MAX_REASON_LEN); }
                button.hold type="submit" { "Hold" }
            }
        }
    }
}

pub async fn limits_page(
    session: Session,
    State(state): State<AppState>,
    super::pages::Query(q): super::pages::Query,
) -> UiResult {
    // The waiting counts are cluster-wide: a token limited to some agents does not see them.
    let with_waiting = session.principal.readable_agents().is_none();
    let (rows, more) = rows(&state, with_waiting).await?;
    let flash = q.get("done").map(|d| match d.as_str() {
        "held" => "Held: nothing that draws on it starts until the hold ends or is released.",
        "released" => "Released: what waited on the hold may start at the next claim.",
        _ => "Done.",
    });
    let body = html! {
        h1 { "Limits" }
        p.muted {
            "Shared budgets that tasks of any agent draw on (" code { "execution.limits" } "). "
            "In use: concurrency units held by RUNNING instances. Starts available: what the rate allows right now (at most burst + 1). "
            "A held limit (by an operator, or by an agent's throttled attempt) starts nothing until the hold ends. "
            "Define limits with " code { "kairos limit apply" } " or " code { "PUT /v1/limits/{name}" } "."
        }
        @if let Some(f) = flash { p.flash #flash { (f) } }
        @if more {
            p.flash #more-limits {
                "Showing the first " (SHOWN) " limits by name; " code { "kairos limit list" }
                " or " code { "GET /v1/limits" } " (paged) lists every one."
            }
        }
        table.grid #limits {
            thead { tr {
                th { "limit" } th { "concurrency" } th { "rate" }
                @if with_waiting { th title="PENDING instances due now that draw on the limit (whatever holds them back)" { "waiting" } }
                th { "held" } th { "keys (busiest first)" }
            } }
            tbody {
                @for row in &rows {
                    @let name = &row.limit.name;
                    tr id={ "limit-" (name) } data-limit=(name) {
                        td {
                            strong { (name) }
                            div.muted { "version " (row.limit.version) @if row.limit.spec.per_key { " · per key" } }
                            @if session.is_admin() { (hold_form(&session, &row.limit)) }
                        }
                        td.concurrency { (concurrency_cell(&row.limit, row.running)) }
                        td.rate { (rate_cell(row)) }
                        @if let Some(w) = row.waiting {
                            td.waiting {
                                @if w > 0 { strong.num { (w) } " due" } @else { span.muted { "0" } }
                            }
                        }
                        td.held { (held_cell(&session, row)) }
                        td.keys-cell { (keys_cell(row)) }
                    }
                }
                @if rows.is_empty() {
                    tr { td colspan="6" .muted { "No limits are defined." } }
                }
            }
        }
    };
    Ok(page(&session, "/ui/limits", "Limits", body))
}

/// `POST /ui/limits/{name}/hold` (`seconds`, `key`, `reason`) and `…/release` (`key`): the
/// same checks and store calls as `POST /v1/limits/{name}/hold` and `/release`.
pub async fn limit_action(
    State(state): State<AppState>,
    Path((name, action)): Path<(String, String)>,
    form: AdminForm,
) -> UiResult {
    let key = form.get("key").map(str::trim).map(str::to_owned);
    let by = format!("console:{}", form.session.principal.label);
    match action.as_str() {
        "hold" => {
            let seconds = form
                .get("seconds")
                .and_then(|s| s.trim().parse::<i64>().ok())
                .ok_or_else(|| {
                    UiError::bad_request(format!(
                        "seconds: an integer from 1 to {MAX_HOLD_SECONDS}"
                    ))
                })?;
            let req = HoldRequest {
                seconds,
                key,
                reason: form.get("reason").map(str::trim).map(str::to_owned),
            };
            limits_usecase::hold(&state.pool, &name, req, &by).await?;
            Ok(Redirect::to(&format!("/ui/limits?done=held#limit-{name}")).into_response())
        }
        "release" => {
            limits_usecase::release(&state.pool, &name, key.as_deref(), &by).await?;
            Ok(Redirect::to(&format!("/ui/limits?done=released#limit-{name}")).into_response())
        }
        other => Err(UiError::not_found(format!("no limit action {other:?}"))),
    }
}

/// A short label for a waiting reason.
fn reason_label(reason: &str) -> &'static str {
    match reason {
        "available_at" => "not due yet",
        "retry_backoff" => "retry backoff",
        "limit_concurrency" => "limit full",
        "limit_rate" => "limit rate used up",
        "limit_held" => "limit held",
        "concurrency_limit" => "task concurrency_limit",
        "task_paused" => "task paused",
        "circuit_open" => "circuit open",
        "no_agent" => "no agent claiming",
        _ => "waiting",
    }
}

/// "Why is it waiting?" for a PENDING or FAILED instance (nothing for other statuses).
pub async fn waiting_panel(state: &AppState, inst: &Instance) -> Result<Markup, UiError> {
    if !matches!(
        inst.status,
        InstanceStatus::Pending | InstanceStatus::Failed
    ) {
        return Ok(html! {});
    }
    let absent = std::time::Duration::from_secs(state.claims.agent_absent_seconds.unsigned_abs());
    let reasons: Vec<Waiting> = waiting_on(&state.pool, inst, absent).await?;
    Ok(html! {
        section.panel.waiting #waiting {
            h2 { "Why is it waiting?" }
            @if reasons.is_empty() {
                p #waiting-none {
                    "Nothing holds it back now: it starts with the next claim (or push) of agent "
                    code { (inst.agent_id) } "."
                }
            } @else {
                ul.waiting-reasons {
                    @for w in &reasons {
                        li data-reason=(w.reason) {
                            span class={ "badge w-" (w.reason) } title=(w.reason) { (reason_label(w.reason)) }
                            " " span.detail { (w.detail) }
                            @if let Some(l) = &w.limit {
                                " " a href={ "/ui/limits#limit-" (l) } { "limit " (l) " →" }
                            }
                        }
                    }
                }
            }
        }
    })
}
