//! The instance list and filters, an instance's page (state, events, error, result, why it
//! waits) and its actions: retry and cancel.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use maud::{Markup, html};
use uuid::Uuid;

use super::{
    PAGE, Params, Query, encode, flash_text, param, param_time, priority_label, query_string,
    reason_field,
};
use crate::domain::instance::{Instance, InstanceStatus};
use crate::domain::task::MAX_REASON_LEN;
use crate::state::AppState;
use crate::store::instances as store_instances;
use crate::store::{self, events};
use crate::ui::limits::waiting_panel;
use crate::ui::render::{self, csrf, status, time, time_opt};
use crate::ui::{AdminForm, Session, UiError, UiResult, page};
use crate::usecases::cursor::{instance_cursor, parse_instance_cursor};
use crate::usecases::instances::{OperatorMove, operator_move};

pub(super) fn instance_filter(
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

/// One page of instances and the link query of the next page, keeping the filters.
pub(super) async fn instance_page(
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
pub(super) fn instance_table(items: &[Instance], select: bool) -> Markup {
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
    let waiting = waiting_panel(&state, &inst).await?;
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
    let Some(what) = OperatorMove::parse(&action) else {
        return Err(UiError::not_found(format!("no instance action {action:?}")));
    };
    let uuid = Uuid::parse_str(&id)
        .map_err(|_| UiError::not_found(format!("no instance with id {id:?}")))?;
    let reason = reason_field(&form, what.default_reason())?;
    operator_move(&state.pool, uuid, what, &reason, None).await?;
    let code = match what {
        OperatorMove::Retry => "retried",
        OperatorMove::Cancel => "cancelled",
    };
    Ok(Redirect::to(&format!("/ui/instances/{uuid}?done={code}")).into_response())
}
