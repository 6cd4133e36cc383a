//! The console's pages and actions. Reads go through the same store functions as the API (with
//! an agent token's scope applied in SQL); writes through the same shared functions, so a
//! console action is logged and fenced exactly like its API call.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use maud::{Markup, html};
use uuid::Uuid;

use super::render::{self, csrf, status, time, time_opt};
use super::{AdminForm, Session, UiError, UiResult, page};
use crate::domain::instance::{Instance, InstanceStatus};
use crate::domain::schedule::{CronSchedule, Schedule};
use crate::domain::task::{MAX_REASON_LEN, Overlap, Task, TriggerSpec, parse_timestamp};
use crate::domain::text::{NUL_REFUSED, has_nul, without_nul};
use crate::state::AppState;
use crate::store::instances::{self as store_instances, Backfill, ManualTrigger, Reprocess};
use crate::store::{self, console, events, tasks as store_tasks};
use crate::usecases::cursor::{instance_cursor, parse_instance_cursor};
use crate::usecases::instances::operator_move;
use crate::usecases::tasks::{
    MAX_BACKFILL_WINDOWS, not_found_task, run_backfill, task_trace, visible_task,
};

/// Rows per list page.
const PAGE: i64 = 50;
/// Windows in a task list's strip.
const STRIP: i64 = 30;
/// Windows in a task's timeline.
const TIMELINE: i64 = 240;
/// Fire times shown on a task page and in the playground.
const FIRES: usize = 10;

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

fn param<'a>(q: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    q.get(name).map(|s| s.trim()).filter(|s| !s.is_empty())
}

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

// ---------------------------------------------------------------------------------------------
// Login.

/// The login form; `csrf` is the value of its double-submit cookie.
pub fn login_page(message: Option<&str>, csrf: &str) -> Response {
    super::bare_page(
        "Log in",
        html! {
            div.panel.login {
                h1 { "Log in to kairos" }
                p { "Paste an API token. Viewer tokens see everything read-only; admin tokens can act; agent tokens see their agents." }
                @if let Some(m) = message { p.flash.bad #flash { (m) } }
                form method="post" action="/ui/login" {
                    input type="hidden" name="csrf" value=(csrf);
                    label for="token" { "Token" }
                    input #token type="password" name="token" autocomplete="current-password" required autofocus;
                    button #login type="submit" { "Log in" }
                }
            }
        },
    )
}

pub async fn login_form(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    if state.tokens.is_empty() {
        return Redirect::to("/ui/").into_response();
    }
    super::login_form_response(&headers, None, axum::http::StatusCode::OK)
}

pub async fn login(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Err(e) = super::check_same_origin(&headers) {
        return e.into_response();
    }
    let fields = super::parse_form(&body);
    super::login_response(&state, &headers, &fields)
}

/// Logging out needs no admin role, only a same-origin form with the session's CSRF token; a
/// request without a session just lands on the login page.
pub async fn logout(
    headers: axum::http::HeaderMap,
    form: Result<super::SessionForm, UiError>,
) -> Response {
    match form {
        Ok(_) | Err(UiError::Login) => super::logout_response(&headers),
        Err(e) => e.into_response(),
    }
}

// ---------------------------------------------------------------------------------------------
// Overview.

pub async fn overview(session: Session, State(state): State<AppState>) -> UiResult {
    if let Some(agents) = session.principal.readable_agents() {
        // The sampled numbers are cluster-wide: a token limited to some agents does not see them.
        let body = html! {
            h1 { "Overview" }
            p #scoped {
                "This token sees the agents " (agents.join(", ")) " only; cluster-wide counts and lag are for admin and viewer tokens. "
                a href="/ui/tasks" { "Your tasks" } ", " a href="/ui/instances" { "their instances" } " and " a href="/ui/dead" { "their DEAD queue" } "."
            }
        };
        return Ok(page(&session, "/ui/", "Overview", body));
    }
    let now = store::now(&state.pool).await?;
    let gauges = console::gauges(&state.pool).await?;
    let minutes = console::minutes_since(&state.pool, now - chrono::Duration::hours(1)).await?;
    let gauge = |name: &str| gauges.iter().find(|g| g.name == name);
    let sampled_at = gauges.iter().map(|g| g.sampled_at).max();
    let loops = state.heartbeats.snapshot();
    let last_hour =
        |f: fn(&console::Minute) -> i32| minutes.iter().map(|m| i64::from(f(m))).sum::<i64>();
    let body = html! {
        h1 { "Overview" }
        p.muted {
            "Node " code { (state.node_id) } ". Counts sampled "
            @match sampled_at { Some(t) => { (time(t)) }, None => { "not yet (the stats loop samples every few seconds)" } }
            "; the charts cover windows scheduled in the last hour."
        }
        section.cards {
            @for s in InstanceStatus::ALL {
                @let name = format!("instances.{}", s.as_str());
                div class={ "card s-" (s.as_str().to_ascii_lowercase()) } {
                    div.label { (s.as_str()) }
                    div.value #{ "count-" (s.as_str()) } {
                        @match gauge(&name) {
                            Some(g) => { @if !g.exact { "≈" } (g.value) },
                            None => { "—" },
                        }
                    }
                    @if s == InstanceStatus::Dead {
                        a href="/ui/dead" { "open the DEAD queue" }
                    } @else {
                        a href={ "/ui/instances?status=" (s.as_str()) } { "list" }
                    }
                }
            }
        }
        section.cards {
            div.card { div.label { "Tasks" } div.value { (gauge("tasks").map_or(0, |g| g.value)) } a href="/ui/tasks" { "list" } }
            div.card { div.label { "Paused" } div.value { (gauge("tasks.paused").map_or(0, |g| g.value)) } a href="/ui/tasks?paused=true" { "list" } }
            div.card class=[(gauge("tasks.circuit_open").is_some_and(|g| g.value > 0)).then_some("s-dead")] {
                div.label { "Open circuit breakers" }
                div.value #count-circuits { (gauge("tasks.circuit_open").map_or(0, |g| g.value)) }
                a href="/ui/tasks?paused=true" { "paused tasks" }
            }
            div.card { div.label { "Last hour: scheduled" } div.value { (last_hour(|m| m.windows)) } }
            div.card { div.label { "succeeded" } div.value { (last_hour(|m| m.succeeded)) } }
            div.card { div.label { "skipped" } div.value { (last_hour(|m| m.skipped)) } }
        }
        section.charts {
            (render::lag_chart(&minutes))
            (render::windows_chart(&minutes))
        }
        section {
            h2 { "Loops on this node" }
            table.grid {
                thead { tr { th { "loop" } th { "last tick" } th { "state" } } }
                tbody {
                    @for (name, age, ok) in &loops {
                        tr {
                            td { code { (name) } }
                            td { (format!("{age:.1} s ago")) }
                            td { @if *ok { span.badge.s-success { "ready" } } @else { span.badge.s-dead { "stale" } } }
                        }
                    }
                }
            }
        }
    };
    Ok(page(&session, "/ui/", "Overview", body))
}

// ---------------------------------------------------------------------------------------------
// Tasks.

fn trigger_summary(t: &TriggerSpec) -> String {
    match t {
        TriggerSpec::Cron { expr, timezone } => format!("cron {expr} {timezone}"),
        TriggerSpec::Interval { every_seconds, .. } => format!("every {every_seconds} s"),
        TriggerSpec::Once { at } => format!("once at {}", at.format("%Y-%m-%d %H:%M:%S UTC")),
        TriggerSpec::After { task, .. } => format!("after {} succeeds", task.as_str()),
        TriggerSpec::Manual => "manual".to_owned(),
    }
}

fn task_zone(t: &Task) -> Tz {
    match &t.spec.trigger {
        TriggerSpec::Cron { timezone, .. } => timezone.parse().unwrap_or(Tz::UTC),
        _ => Tz::UTC,
    }
}

fn next_fire(t: &Task) -> Markup {
    match t.next_fire_at {
        Some(at) => {
            let tz = task_zone(t);
            html! {
                div { (render::zoned(at, tz)) }
                @if tz != Tz::UTC { div.muted { (time(at)) } }
            }
        }
        None => html! { span.muted { "—" } },
    }
}

pub async fn tasks(session: Session, State(state): State<AppState>, Query(q): Params) -> UiResult {
    let paused = match param(&q, "paused") {
        None | Some("any") => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            return Err(UiError::bad_request(format!(
                "paused: {other:?} is not true, false or any"
            )));
        }
    };
    let trigger_type = param(&q, "type").filter(|t| *t != "any");
    if let Some(t) = trigger_type
        && !["cron", "interval", "once", "after", "manual"].contains(&t)
    {
        return Err(UiError::bad_request(format!(
            "type: {t:?} is not a trigger type"
        )));
    }
    let filter = store_tasks::TaskFilter {
        agent_id: param(&q, "agent").map(str::to_owned),
        agents_in: session.principal.readable_agents().map(<[String]>::to_vec),
        paused,
        trigger_type: trigger_type.map(str::to_owned),
        after_id: param(&q, "after").map(str::to_owned),
        limit: PAGE + 1,
    };
    let mut tasks = store_tasks::list_tasks(&state.pool, &filter).await?;
    let more = tasks.len() as i64 > PAGE;
    tasks.truncate(PAGE as usize);
    let ids: Vec<String> = tasks
        .iter()
        .map(|t| t.spec.id.as_str().to_owned())
        .collect();
    let strips = console::recent_windows(&state.pool, &ids, STRIP).await?;
    let next_link = more.then(|| {
        query_string(&[
            ("agent", param(&q, "agent")),
            ("paused", param(&q, "paused")),
            ("type", param(&q, "type")),
            ("after", tasks.last().map(|t| t.spec.id.as_str())),
        ])
    });
    let body = html! {
        h1 { "Tasks" }
        form.filters method="get" action="/ui/tasks" {
            label { "Agent " input type="text" name="agent" value=[param(&q, "agent")]; }
            label { "Paused "
                select name="paused" {
                    @for v in ["any", "true", "false"] {
                        option value=(v) selected[param(&q, "paused").unwrap_or("any") == v] { (v) }
                    }
                }
            }
            label { "Trigger "
                select name="type" {
                    @for v in ["any", "cron", "interval", "once", "after", "manual"] {
                        option value=(v) selected[param(&q, "type").unwrap_or("any") == v] { (v) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        table.grid #tasks {
            thead { tr { th { "task" } th { "agent" } th { "trigger" } th { "next fire (task zone / UTC)" } th { "state" } th { "last " (STRIP) " windows" } } }
            tbody {
                @for t in &tasks {
                    @let id = t.spec.id.as_str();
                    tr data-task-id=(id) {
                        td { a href={ "/ui/tasks/" (id) } { (id) } }
                        td { (t.spec.agent_id) }
                        td { code { (trigger_summary(&t.spec.trigger)) } }
                        td { (next_fire(t)) }
                        td {
                            @if t.paused { span.badge.s-failed title=[t.paused_reason.as_deref()] { "paused" } } @else { span.badge.s-success { "active" } }
                        }
                        td { (render::strip(strips.get(id).map_or(&[][..], |v| &v[..]))) }
                    }
                }
                @if tasks.is_empty() { tr { td colspan="6" .muted { "No tasks match." } } }
            }
        }
        @if let Some(next) = next_link { p { a.next href={ "/ui/tasks?" (next) } { "Next page →" } } }
    };
    Ok(page(&session, "/ui/tasks", "Tasks", body))
}

async fn readable_task(state: &AppState, session: &Session, id: &str) -> Result<Task, UiError> {
    let task = store_tasks::get_task(&state.pool, id)
        .await
        .map_err(|e| not_found_task(e, id))?;
    if !session.principal.may_read(&task.spec.agent_id) {
        return Err(UiError::not_found(format!("no task with id {id:?}")));
    }
    Ok(task)
}

/// The next fire times of a task with the DST rule that shaped each, if any.
fn upcoming(task: &Task, from: DateTime<Utc>) -> Vec<(DateTime<Utc>, Option<String>)> {
    let Ok(schedule) = task.spec.trigger.schedule() else {
        return Vec::new();
    };
    let fires = schedule.upcoming(from, FIRES);
    match &schedule {
        Schedule::Cron(c) => annotate(c, &fires),
        _ => fires.into_iter().map(|t| (t, None)).collect(),
    }
}

fn annotate(c: &CronSchedule, fires: &[DateTime<Utc>]) -> Vec<(DateTime<Utc>, Option<String>)> {
    fires
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let prev = i.checked_sub(1).and_then(|p| fires.get(p)).copied();
            (*t, c.dst_note(prev, *t).map(|n| n.describe()))
        })
        .collect()
}

/// The fire times in the zone and in UTC; with `jitter` (a task id and its
/// `trigger.jitter_seconds` > 0), also the instant each window becomes claimable, as the trigger
/// loop will make it (the same offset on every replica).
fn fire_table(
    tz: Tz,
    fires: &[(DateTime<Utc>, Option<String>)],
    jitter: Option<(&str, i64)>,
) -> Markup {
    let jitter = jitter.filter(|(_, j)| *j > 0);
    html! {
        table.grid #fire-times {
            thead { tr {
                th { "#" } th { "in " (tz.name()) } th { "UTC" }
                @if jitter.is_some() { th { "claimable (jittered, UTC)" } }
                th { "DST" }
            } }
            tbody {
                @for (i, (t, note)) in fires.iter().enumerate() {
                    tr class=[note.as_ref().map(|_| "dst")] {
                        td { (i + 1) }
                        td.local { (render::zoned(*t, tz)) }
                        td { (time(*t)) }
                        @if let Some((task_id, j)) = jitter {
                            td.jittered { (time(crate::domain::jitter::available_at(
                                task_id,
                                &crate::domain::schedule::window_key(*t),
                                *t,
                                j,
                            ))) }
                        }
                        td { @if let Some(n) = note { span.dst-note { (n) } } }
                    }
                }
            }
        }
    }
}

pub async fn task_detail(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Params,
) -> UiResult {
    let task = readable_task(&state, &session, &id).await?;
    let spec_json = visible_task(&task, &session.principal)?;
    let now = store::now(&state.pool).await?;
    let fires = upcoming(&task, now);
    let tz = task_zone(&task);
    let windows = console::recent_windows(&state.pool, std::slice::from_ref(&id), TIMELINE)
        .await?
        .remove(&id)
        .unwrap_or_default();
    let flash = param(&q, "done");
    let body = html! {
        h1 { "Task " code { (id) } }
        @if let Some(done) = flash { p.flash #flash { (flash_text(done)) } }
        div.columns {
            section.panel {
                h2 { "State" }
                dl {
                    dt { "agent" } dd { (task.spec.agent_id) }
                    dt { "trigger" } dd { code { (trigger_summary(&task.spec.trigger)) } }
                    dt { "priority" } dd #task-priority {
                        (priority_label(task.spec.execution.priority))
                        " " span.muted { "(0 most urgent, 9 least)" }
                    }
                    dt { "state" } dd #task-state {
                        @if task.paused { span.badge.s-failed { "paused" } " " (task.paused_reason.as_deref().unwrap_or("")) }
                        @else { span.badge.s-success { "active" } }
                    }
                    dt { "next fire" } dd { (next_fire(&task)) }
                    dt { "consecutive failures" } dd { (task.consecutive_failures) }
                    dt { "version" } dd { (task.version) }
                    dt { "updated" } dd { (time(task.updated_at)) }
                }
                p { a href={ "/ui/instances?task_id=" (id) } { "All instances of this task →" } }
                @if session.is_admin() { (task_actions(&session, &task, now)) }
            }
            section.panel {
                h2 { "Next " (FIRES) " fire times" }
                @if fires.is_empty() { p.muted { "This trigger has no upcoming windows of its own." } }
                @else { (fire_table(tz, &fires, Some((id.as_str(), task.spec.jitter_seconds)))) }
            }
        }
        section.panel {
            h2 { "Windows timeline" }
            p.muted { "The last " (windows.len()) " windows, oldest on the left; hover a cell for status, attempt, lag and skip reason, click it for the instance." }
            div.timeline #timeline { (render::strip(&windows)) }
            ul.legend {
                @for s in InstanceStatus::ALL { li { span class={ "swatch cell s-" (s.as_str().to_ascii_lowercase()) } {} (s.as_str()) } }
            }
        }
        section.panel {
            h2 { "Definition" }
            (render::json_block(&spec_json))
        }
    };
    Ok(page(&session, "/ui/tasks", &format!("Task {id}"), body))
}

fn task_actions(session: &Session, task: &Task, now: DateTime<Utc>) -> Markup {
    let id = task.spec.id.as_str();
    let day_ago = (now - chrono::Duration::days(1))
        .format("%Y-%m-%dT%H:00:00Z")
        .to_string();
    let hour = now.format("%Y-%m-%dT%H:00:00Z").to_string();
    html! {
        div.actions {
            @if task.paused {
                form method="post" action={ "/ui/tasks/" (id) "/resume" } {
                    (csrf(&session.csrf))
                    button #resume type="submit" { "Resume" }
                }
            } @else {
                form #pause-form method="post" action={ "/ui/tasks/" (id) "/pause" } {
                    (csrf(&session.csrf))
                    input type="text" name="reason" placeholder="reason (optional)" maxlength=(MAX_REASON_LEN);
                    button #pause type="submit" { "Pause" }
                }
            }
            form method="post" action={ "/ui/tasks/" (id) "/trigger" } {
                (csrf(&session.csrf))
                button #trigger type="submit" { "Trigger now" }
            }
        }
        details.backfill {
            summary { "Backfill…" }
            form #backfill-form method="post" action={ "/ui/tasks/" (id) "/backfill-preview" } {
                (csrf(&session.csrf))
                label { "from " input type="text" name="from" value=(day_ago) required; }
                label { "to " input type="text" name="to" value=(hour) required; }
                label { "overlap "
                    select name="overlap" {
                        option value="" { "the task's" }
                        @for (name, _) in Overlap::NAMES { option value=(name) { (name) } }
                    }
                }
                label { "reprocess "
                    select name="reprocess" { option value="none" { "none" } option value="failed" { "failed" } }
                }
                button #backfill-preview type="submit" { "Preview (dry run)" }
            }
        }
    }
}

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

fn reason_field(form: &AdminForm, default: &str) -> Result<String, UiError> {
    let reason = form.get("reason").unwrap_or(default).trim().to_owned();
    if reason.len() > MAX_REASON_LEN || reason.chars().any(char::is_control) {
        return Err(UiError::bad_request(format!(
            "reason: at most {MAX_REASON_LEN} bytes without control characters"
        )));
    }
    Ok(reason)
}

fn backfill_request(form: &AdminForm, dry_run: bool) -> Result<Backfill, UiError> {
    let stamp = |name: &str| -> Result<DateTime<Utc>, UiError> {
        let raw = form
            .get(name)
            .ok_or_else(|| UiError::bad_request(format!("{name}: is required")))?;
        parse_timestamp(raw.trim()).ok_or_else(|| {
            UiError::bad_request(format!(
                "{name}: {raw:?} is not an RFC 3339 timestamp, e.g. 2026-11-29T08:30:00Z"
            ))
        })
    };
    let overlap = match form.get("overlap") {
        None => None,
        Some(o) => Some(Overlap::parse(o).ok_or_else(|| {
            UiError::bad_request(format!("overlap: {o:?} is not skip, queue or replace"))
        })?),
    };
    let reprocess = match form.get("reprocess") {
        None | Some("none") => Reprocess::None,
        Some("failed") => Reprocess::Failed,
        Some(o) => {
            return Err(UiError::bad_request(format!(
                "reprocess: {o:?} is not none or failed"
            )));
        }
    };
    Ok(Backfill {
        from: stamp("from")?,
        to: stamp("to")?,
        dry_run,
        max_windows: MAX_BACKFILL_WINDOWS,
        overlap,
        reprocess,
        priority: None,
    })
}

pub async fn task_action(
    State(state): State<AppState>,
    Path((id, action)): Path<(String, String)>,
    form: AdminForm,
) -> UiResult {
    let back = |code: &str| {
        Redirect::to(&format!("/ui/tasks/{}?done={code}", encode(&id))).into_response()
    };
    match action.as_str() {
        "pause" => {
            let reason = reason_field(&form, "paused by operator")?;
            store_tasks::pause_task(&state.pool, &id, &reason)
                .await
                .map_err(|e| not_found_task(e, &id))?;
            tracing::info!(task_id = %id, reason = %reason, principal = %form.session.principal.label, "task paused (console)");
            Ok(back("paused"))
        }
        "resume" => {
            let task = store_tasks::resume_task(&state.pool, &id)
                .await
                .map_err(|e| not_found_task(e, &id))?;
            tracing::info!(task_id = %id, next_fire_at = ?task.next_fire_at, principal = %form.session.principal.label, "task resumed (console)");
            Ok(back("resumed"))
        }
        "trigger" => {
            let trigger = ManualTrigger {
                window_key: None,
                run_at: None,
                delay_seconds: None,
                context: None,
                priority: None,
                trace: None,
            };
            let (created, inst) =
                store_instances::trigger_instance(&state.pool, &id, &trigger, "operator")
                    .await
                    .map_err(|e| not_found_task(e, &id))?;
            if created {
                state.spans.window(
                    inst.id,
                    &inst.task_id,
                    &inst.window_key,
                    inst.trace.as_ref(),
                    task_trace(&state.pool, &state.spans, &id).await.as_ref(),
                    inst.created_at,
                );
            }
            tracing::info!(task_id = %id, window_key = %inst.window_key, instance_id = %inst.id, created, "manual run (console)");
            Ok(back(if created { "triggered" } else { "exists" }))
        }
        "backfill-preview" | "backfill" => {
            let dry_run = action == "backfill-preview";
            let req = backfill_request(&form, dry_run)?;
            let report =
                run_backfill(&state.pool, &state.spans, state.retention_days, &id, &req).await?;
            if !dry_run {
                return Ok(back("backfilled"));
            }
            Ok(backfill_preview(&form, &id, &req, &report))
        }
        other => Err(UiError::not_found(format!("no task action {other:?}"))),
    }
}

fn backfill_preview(
    form: &AdminForm,
    id: &str,
    req: &Backfill,
    report: &store_instances::BackfillReport,
) -> Response {
    let keep = ["from", "to", "overlap", "reprocess"];
    let body = html! {
        h1 { "Backfill preview: " code { (id) } }
        p #backfill-summary {
            (report.windows.len()) " windows from " (time(req.from)) " to " (time(req.to)) ": "
            (report.created) " would be created (" (report.skipped) " of them skipped by the overlap policy), "
            (report.existing) " exist already"
            @if report.reprocessed > 0 { ", " (report.reprocessed) " would be retried" }
            "."
        }
        form method="post" action={ "/ui/tasks/" (id) "/backfill" } {
            (csrf(&form.session.csrf))
            @for k in keep { @if let Some(v) = form.get(k) { input type="hidden" name=(k) value=(v); } }
            button #backfill-apply type="submit" { "Apply this backfill" }
            " "
            a href={ "/ui/tasks/" (encode(id)) } { "Cancel" }
        }
        table.grid {
            thead { tr { th { "window" } th { "outcome" } } }
            tbody { @for (k, o) in &report.windows { tr { td { code { (k) } } td { (o) } } } }
        }
    };
    page(&form.session, "/ui/tasks", "Backfill preview", body)
}

pub(super) fn encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

// ---------------------------------------------------------------------------------------------
// Instances.

fn instance_filter(
    session: &Session,
    q: &HashMap<String, String>,
    statuses: Vec<InstanceStatus>,
) -> Result<store_instances::InstanceFilter, UiError> {
    let from = param_time(q, "from")?;
    let to = param_time(q, "to")?;
    let priority = param_priority(q)?;
    if param(q, "window_key").is_some() && param(q, "task_id").is_none() {
        // A window key is unique per task: across tasks it has no index, and a time range
        // (scheduled from/to) answers "what ran at 08:30" on the time index instead.
        return Err(UiError::bad_request(
            "window_key: choose a task as well (a window is unique per task); to see every \
             task's windows at one time, filter by scheduled from/to instead",
        ));
    }
    Ok(store_instances::InstanceFilter {
        task_id: param(q, "task_id").map(str::to_owned),
        agent_id: param(q, "agent_id").map(str::to_owned),
        agents_in: session.principal.readable_agents().map(<[String]>::to_vec),
        statuses,
        window_key: param(q, "window_key").map(str::to_owned),
        priority,
        from,
        to,
        before: param(q, "cursor").map(parse_instance_cursor).transpose()?,
        limit: PAGE + 1,
    })
}

/// The `priority` filter: 0-9, or any priority when absent, empty or `any`.
fn param_priority(q: &HashMap<String, String>) -> Result<Option<i16>, UiError> {
    match param(q, "priority") {
        None | Some("any") => Ok(None),
        Some(p) => match p.parse::<i16>() {
            Ok(n) if (0..=9).contains(&n) => Ok(Some(n)),
            _ => Err(UiError::bad_request(format!(
                "priority: {p:?} is not a priority (an integer from 0, the most urgent, to 9)"
            ))),
        },
    }
}

/// A priority as a small label; 0-2 (the urgent end) stand out.
fn priority_label(p: i16) -> Markup {
    html! {
        span.prio.urgent[p <= 2] title="priority: 0 most urgent, 9 least" { (p) }
    }
}

/// One page of instances and the link query of the next page, keeping the filters.
async fn instance_page(
    state: &AppState,
    q: &HashMap<String, String>,
    filter: &store_instances::InstanceFilter,
) -> Result<(Vec<Instance>, Option<String>), UiError> {
    let mut items = store_instances::list_instances(&state.pool, filter).await?;
    let next = if items.len() as i64 > PAGE {
        items.truncate(PAGE as usize);
        let cursor = items.last().map(instance_cursor);
        let keep: Vec<(&str, Option<&str>)> = [
            "task_id",
            "agent_id",
            "status",
            "priority",
            "window_key",
            "from",
            "to",
        ]
        .iter()
        .map(|k| (*k, param(q, k)))
        .chain([("cursor", cursor.as_deref())])
        .collect();
        Some(query_string(&keep))
    } else {
        None
    };
    Ok((items, next))
}

pub async fn instances(
    session: Session,
    State(state): State<AppState>,
    Query(q): Params,
) -> UiResult {
    let statuses = match param(&q, "status") {
        None | Some("any") => Vec::new(),
        Some(s) => s
            .split(',')
            .map(|p| p.trim().parse::<InstanceStatus>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| UiError::bad_request(format!("status: {m}")))?,
    };
    let filter = instance_filter(&session, &q, statuses)?;
    let (items, next) = instance_page(&state, &q, &filter).await?;
    let body = html! {
        h1 { "Instances" }
        form.filters method="get" action="/ui/instances" {
            label { "Task " input type="text" name="task_id" value=[param(&q, "task_id")]; }
            label { "Status "
                select name="status" {
                    option value="any" { "any" }
                    @for s in InstanceStatus::ALL {
                        option value=(s.as_str()) selected[param(&q, "status") == Some(s.as_str())] { (s.as_str()) }
                    }
                }
            }
            label { "Priority "
                select name="priority" {
                    option value="any" { "any" }
                    @for p in 0..=9i16 {
                        option value=(p) selected[filter.priority == Some(p)] {
                            (p) @if p == 0 { " (most urgent)" } @else if p == 9 { " (least)" }
                        }
                    }
                }
            }
            label { "Window " input type="text" name="window_key" value=[param(&q, "window_key")]; }
            label { "Scheduled from " input type="text" name="from" placeholder="2026-11-29T00:00:00Z" value=[param(&q, "from")]; }
            label { "to " input type="text" name="to" placeholder="2026-11-30T00:00:00Z" value=[param(&q, "to")]; }
            button type="submit" { "Filter" }
        }
        (instance_table(&items, false))
        @if let Some(n) = next { p { a.next href={ "/ui/instances?" (n) } { "Next page →" } } }
    };
    Ok(page(&session, "/ui/instances", "Instances", body))
}

/// Instances as a table; with `select`, a checkbox and action buttons per row (the DEAD
/// queue's bulk form).
fn instance_table(items: &[Instance], select: bool) -> Markup {
    html! {
        table.grid #instances {
            thead { tr {
                @if select { th { input #select-all type="checkbox" title="select all" hidden; } }
                th { "scheduled" } th { "task" } th { "window" } th { "status" } th title="0 most urgent, 9 least" { "priority" } th { "attempt" } th { "worker" } th { "finished" } th { "error / reason" }
                @if select { th {} }
            } }
            tbody {
                @for i in items {
                    tr data-instance-id=(i.id) {
                        @if select { td { input type="checkbox" name="ids" value=(i.id); } }
                        td { a href={ "/ui/instances/" (i.id) } { (time(i.scheduled_at)) } }
                        td { a href={ "/ui/tasks/" (encode(&i.task_id)) } { (i.task_id) } }
                        td { code { (i.window_key) } }
                        td { (status(i.status.as_str())) }
                        td.priority { (priority_label(i.priority)) }
                        td { (i.attempt) "/" (i.max_attempts) }
                        td { (i.worker_id.as_deref().unwrap_or("")) }
                        td { (time_opt(i.finished_at)) }
                        td.reason {
                            @if let Some(k) = &i.error_kind { span.kind { (k) } " " }
                            (i.error.as_deref().or(i.skip_reason.as_deref()).map(|e| truncate(e, 120)).unwrap_or_default())
                        }
                        @if select {
                            td.row-actions {
                                button.retry-one type="submit" name="only" value={ (i.id) ":retry" } { "Retry" }
                                @if i.status == InstanceStatus::Failed {
                                    " "
                                    button.cancel-one.danger type="submit" name="only" value={ (i.id) ":cancel" } { "Cancel" }
                                }
                            }
                        }
                    }
                }
                @if items.is_empty() { tr { td colspan="11" .muted { "No instances match." } } }
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

async fn readable_instance(
    state: &AppState,
    session: &Session,
    raw: &str,
) -> Result<Instance, UiError> {
    let missing = || UiError::not_found(format!("no instance with id {raw:?}"));
    let id = Uuid::parse_str(raw).map_err(|_| missing())?;
    let inst = match store_instances::get_instance(&state.pool, id).await {
        Ok(i) => i,
        Err(store::Error::NotFound) => return Err(missing()),
        Err(e) => return Err(e.into()),
    };
    if !session.principal.may_read(&inst.agent_id) {
        return Err(missing());
    }
    Ok(inst)
}

pub async fn instance_detail(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Params,
) -> UiResult {
    let inst = readable_instance(&state, &session, &id).await?;
    let evs = events::list_events(&state.pool, inst.id).await?;
    let waiting = super::limits::waiting_panel(&state, &inst).await?;
    let retryable = matches!(
        inst.status,
        InstanceStatus::Dead
            | InstanceStatus::Failed
            | InstanceStatus::Cancelled
            | InstanceStatus::Skipped
    );
    let cancellable = matches!(
        inst.status,
        InstanceStatus::Pending | InstanceStatus::Running | InstanceStatus::Failed
    );
    let body = html! {
        h1 { "Instance " code { (inst.id) } }
        @if let Some(done) = param(&q, "done") { p.flash #flash { (flash_text(done)) } }
        (waiting)
        div.columns {
            section.panel {
                dl {
                    dt { "task" } dd { a href={ "/ui/tasks/" (encode(&inst.task_id)) } { (inst.task_id) } }
                    dt { "window" } dd { code { (inst.window_key) } }
                    dt { "status" } dd #status { (status(inst.status.as_str())) }
                    dt { "priority" } dd #priority {
                        (priority_label(inst.priority)) " "
                        a.muted href={ "/ui/instances?priority=" (inst.priority) } { "same priority →" }
                    }
                    dt { "source" } dd { (format!("{:?}", inst.source).to_ascii_lowercase()) }
                    dt { "attempt" } dd { (inst.attempt) " of " (inst.max_attempts) }
                    dt { "scheduled" } dd { (time(inst.scheduled_at)) }
                    dt { "available" } dd { (time(inst.available_at)) }
                    dt { "started" } dd { (time_opt(inst.started_at)) }
                    dt { "finished" } dd { (time_opt(inst.finished_at)) }
                    dt { "worker" } dd { (inst.worker_id.as_deref().unwrap_or("—")) }
                    dt { "lease expires" } dd { (time_opt(inst.lease_expires_at)) }
                    dt { "idempotency key" } dd { code { (inst.idempotency_key) } }
                    @if let Some(up) = inst.upstream_instance_id {
                        dt { "upstream" } dd { a href={ "/ui/instances/" (up) } { (up) } }
                    }
                    @if let Some(r) = &inst.skip_reason { dt { "skip reason" } dd { (r) } }
                }
                @if session.is_admin() && (retryable || cancellable) {
                    div.actions {
                        @if retryable {
                            form method="post" action={ "/ui/instances/" (inst.id) "/retry" } {
                                (csrf(&session.csrf))
                                input type="text" name="reason" placeholder="reason (optional)" maxlength=(MAX_REASON_LEN);
                                button #retry type="submit" { "Retry" }
                            }
                        }
                        @if cancellable {
                            form method="post" action={ "/ui/instances/" (inst.id) "/cancel" } {
                                (csrf(&session.csrf))
                                input type="text" name="reason" placeholder="reason (optional)" maxlength=(MAX_REASON_LEN);
                                button #cancel.danger type="submit" { "Cancel" }
                            }
                        }
                    }
                }
            }
            section.panel {
                h2 { "Events" }
                ol.events #events {
                    @for e in &evs {
                        li {
                            (time(e.at)) " "
                            @if let Some(f) = e.from { (status(f.as_str())) " → " }
                            (status(e.to.as_str()))
                            " attempt " (e.attempt) " by " code { (e.actor) }
                            @if let Some(r) = &e.reason { div.reason { (r) } }
                        }
                    }
                }
            }
        }
        @if inst.error.is_some() || inst.error_kind.is_some() {
            section.panel {
                h2 { "Error" @if let Some(k) = &inst.error_kind { " (" (k) ")" } }
                pre.json #error-text { (inst.error.as_deref().unwrap_or("")) }
            }
        }
        @if let Some(r) = &inst.result {
            section.panel { h2 { "Result" } (render::json_block(r)) }
        }
    };
    Ok(page(&session, "/ui/instances", "Instance", body))
}

pub async fn instance_action(
    State(state): State<AppState>,
    Path((id, action)): Path<(String, String)>,
    form: AdminForm,
) -> UiResult {
    let retry = match action.as_str() {
        "retry" => true,
        "cancel" => false,
        other => return Err(UiError::not_found(format!("no instance action {other:?}"))),
    };
    let uuid = Uuid::parse_str(&id)
        .map_err(|_| UiError::not_found(format!("no instance with id {id:?}")))?;
    let reason = reason_field(
        &form,
        if retry {
            "retried by operator"
        } else {
            "cancelled by operator"
        },
    )?;
    operator_move(&state.pool, uuid, retry, &reason, None).await?;
    let code = if retry { "retried" } else { "cancelled" };
    Ok(Redirect::to(&format!("/ui/instances/{uuid}?done={code}")).into_response())
}

// ---------------------------------------------------------------------------------------------
// The DEAD queue.

pub async fn dead_queue(
    session: Session,
    State(state): State<AppState>,
    Query(q): Params,
) -> UiResult {
    // FAILED instances wait for an automatic retry; they are listed too because they are the
    // ones a cancel can still stop (DEAD is final: only a retry moves it, openapi.yaml).
    let filter = instance_filter(
        &session,
        &q,
        vec![InstanceStatus::Dead, InstanceStatus::Failed],
    )?;
    let (items, next) = instance_page(&state, &q, &filter).await?;
    let outcome = match (param(&q, "action"), param(&q, "ok"), param(&q, "failed")) {
        (Some(a), Some(ok), failed) => {
            let verb = if a == "retry" { "retried" } else { "cancelled" };
            let ok: u32 = ok.parse().unwrap_or(0);
            let failed: u32 = failed.and_then(|f| f.parse().ok()).unwrap_or(0);
            Some(if failed > 0 {
                let why = if a == "retry" {
                    "no longer DEAD or FAILED, or not found"
                } else {
                    "DEAD is final and only a retry moves it; or no longer FAILED"
                };
                format!("{ok} {verb}; {failed} could not be ({why}).")
            } else {
                format!("{ok} {verb}.")
            })
        }
        _ => None,
    };
    let body = html! {
        h1 { "DEAD queue" }
        p.muted {
            "Instances that used up their attempts or failed fatally (DEAD), and failed ones waiting for their next attempt (FAILED), newest first. "
            "Retry gives one more attempt now (PENDING). Cancel stops a FAILED instance from retrying; DEAD is final, so only a retry moves it."
        }
        @if let Some(o) = outcome { p.flash #flash { (o) } }
        form.filters method="get" action="/ui/dead" {
            label { "Task " input type="text" name="task_id" value=[param(&q, "task_id")]; }
            button type="submit" { "Filter" }
        }
        @if session.is_admin() {
            form #dead-form method="post" action="/ui/dead" {
                (csrf(&session.csrf))
                div.actions {
                    input type="text" name="reason" placeholder="reason (optional)" maxlength=(MAX_REASON_LEN);
                    button #retry-selected type="submit" name="action" value="retry" { "Retry selected" }
                    button #cancel-selected.danger type="submit" name="action" value="cancel" { "Cancel selected (FAILED)" }
                }
                (instance_table(&items, true))
            }
        } @else {
            (instance_table(&items, false))
        }
        @if let Some(n) = next { p { a.next href={ "/ui/dead?" (n) } { "Next page →" } } }
    };
    Ok(page(&session, "/ui/dead", "DEAD queue", body))
}

/// Most instances one bulk action moves.
const MAX_BULK: usize = 500;

pub async fn dead_action(State(state): State<AppState>, form: AdminForm) -> UiResult {
    let (ids, action): (Vec<&str>, &str) = match form.get("only").and_then(|o| o.split_once(':')) {
        Some((id, action)) => (vec![id], action),
        None => (form.all("ids"), form.get("action").unwrap_or("")),
    };
    let retry = match action {
        "retry" => true,
        "cancel" => false,
        other => {
            return Err(UiError::bad_request(format!(
                "action: {other:?} is not retry or cancel"
            )));
        }
    };
    if ids.is_empty() {
        return Err(UiError::bad_request("ids: select at least one instance"));
    }
    if ids.len() > MAX_BULK {
        return Err(UiError::bad_request(format!(
            "ids: at most {MAX_BULK} at once"
        )));
    }
    let reason = reason_field(
        &form,
        if retry {
            "retried by operator"
        } else {
            "cancelled by operator"
        },
    )?;
    let (mut ok, mut failed) = (0u32, 0u32);
    for raw in ids {
        let Ok(id) = Uuid::parse_str(raw) else {
            failed += 1;
            continue;
        };
        match operator_move(&state.pool, id, retry, &reason, None).await {
            Ok(_) => ok += 1,
            Err(e) if e.status().is_client_error() => {
                tracing::info!(instance_id = %id, reason = %e.detail(), "console bulk action skipped an instance");
                failed += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let action = if retry { "retry" } else { "cancel" };
    Ok(Redirect::to(&format!("/ui/dead?action={action}&ok={ok}&failed={failed}")).into_response())
}

// ---------------------------------------------------------------------------------------------
// The cron playground.

pub async fn playground(
    session: Session,
    State(state): State<AppState>,
    Query(q): Params,
) -> UiResult {
    let expr = param(&q, "expr").unwrap_or("30 8 * * *");
    let zone = param(&q, "tz").unwrap_or("Asia/Shanghai");
    let from = match param_time(&q, "from")? {
        Some(f) => f,
        None => store::now(&state.pool).await?,
    };
    let outcome = CronSchedule::parse(expr, zone).map_err(|e| (e.field, e.message.clone()));
    let fires = match &outcome {
        Ok(c) => match c.first_fire_after(from) {
            Ok(_) => Ok(annotate(
                c,
                &Schedule::Cron(Box::new(c.clone())).upcoming(from, FIRES),
            )),
            Err(e) => Err((e.field, e.message.clone())),
        },
        Err(e) => Err(e.clone()),
    };
    let tz: Tz = zone.parse().unwrap_or(Tz::UTC);
    let bad_field = fires.as_ref().err().map(|(f, _)| *f);
    let body = html! {
        h1 { "Cron playground" }
        p.muted { "Five fields (min hour day-of-month month day-of-week) or six with seconds first; macros like @daily. Times are evaluated in the zone, with DST as cronie does it." }
        form.filters #playground method="get" action="/ui/playground" {
            label { "Expression " input #expr type="text" name="expr" value=(expr) class=[(bad_field == Some("trigger.expr")).then_some("invalid")]; }
            label { "Time zone " input #tz type="text" name="tz" value=(zone) list="zones" class=[(bad_field == Some("trigger.timezone")).then_some("invalid")]; }
            label { "From " input #from type="text" name="from" value=(from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)); }
            button #show type="submit" { "Show fire times" }
        }
        datalist #zones { @for z in ["UTC", "Asia/Shanghai", "America/New_York", "Europe/London", "Europe/Berlin", "Asia/Tokyo", "Australia/Sydney", "Australia/Lord_Howe", "America/Los_Angeles", "America/Sao_Paulo"] { option value=(z) {} } }
        @match &fires {
            Ok(list) => { (fire_table(tz, list, None)) },
            Err((field, message)) => {
                div.panel.error-panel #playground-error {
                    p { strong { (field_label(field)) } ": " (message) }
                }
            },
        }
    };
    let mut resp = page(&session, "/ui/playground", "Cron playground", body);
    if fires.is_err() {
        // The form and the reason, as a refusal: 422 as the API's preview answers.
        *resp.status_mut() = axum::http::StatusCode::UNPROCESSABLE_ENTITY;
    }
    Ok(resp)
}

fn field_label(field: &str) -> &str {
    match field {
        "trigger.expr" => "expression",
        "trigger.timezone" => "time zone",
        other => other,
    }
}
