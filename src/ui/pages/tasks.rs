//! The task list (with each task's recent windows), a task's page (state, next fire times,
//! timeline, definition) and its actions: pause, resume, trigger, backfill with a preview.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use maud::{Markup, html};

use super::{
    PAGE, Params, Query, encode, flash_text, param, priority_label, query_string, reason_field,
};
use crate::domain::instance::InstanceStatus;
use crate::domain::schedule::{CronSchedule, Schedule};
use crate::domain::task::{MAX_REASON_LEN, Overlap, Task, TriggerSpec, parse_timestamp};
use crate::state::AppState;
use crate::store::instances::{self as store_instances, Backfill, ManualTrigger, Reprocess};
use crate::store::{self, console, tasks as store_tasks};
use crate::ui::render::{self, csrf, time};
use crate::ui::{AdminForm, Session, UiError, UiResult, page};
use crate::usecases::tasks::{
    MAX_BACKFILL_WINDOWS, not_found_task, run_backfill, task_trace, visible_task,
};

/// Windows in a task list's strip.
const STRIP: i64 = 30;
/// Windows in a task's timeline.
const TIMELINE: i64 = 240;
/// Fire times shown on a task page and in the playground.
pub(super) const FIRES: usize = 10;

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

pub(super) fn annotate(
    c: &CronSchedule,
    fires: &[DateTime<Utc>],
) -> Vec<(DateTime<Utc>, Option<String>)> {
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
pub(super) fn fire_table(
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
