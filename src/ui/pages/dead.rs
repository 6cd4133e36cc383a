//! The DEAD queue: DEAD and FAILED instances, retried or cancelled one by one or in bulk.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect};
use maud::html;
use uuid::Uuid;

use super::instances::{instance_filter, instance_page, instance_table};
use super::{Params, Query, param, reason_field};
use crate::domain::instance::InstanceStatus;
use crate::domain::task::MAX_REASON_LEN;
use crate::state::AppState;
use crate::ui::render::csrf;
use crate::ui::{AdminForm, Session, UiError, UiResult, page};
use crate::usecases::instances::{OperatorMove, operator_move};

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
    let Some(what) = OperatorMove::parse(action) else {
        return Err(UiError::bad_request(format!(
            "action: {action:?} is not retry or cancel"
        )));
    };
    if ids.is_empty() {
        return Err(UiError::bad_request("ids: select at least one instance"));
    }
    if ids.len() > MAX_BULK {
        return Err(UiError::bad_request(format!(
            "ids: at most {MAX_BULK} at once"
        )));
    }
    let reason = reason_field(&form, what.default_reason())?;
    let (mut ok, mut failed) = (0u32, 0u32);
    for raw in ids {
        let Ok(id) = Uuid::parse_str(raw) else {
            failed += 1;
            continue;
        };
        match operator_move(&state.pool, id, what, &reason, None).await {
            Ok(_) => ok += 1,
            Err(e) if e.status().is_client_error() => {
                tracing::info!(instance_id = %id, reason = %e.detail(), "console bulk action skipped an instance");
                failed += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let action = what.name();
    Ok(Redirect::to(&format!("/ui/dead?action={action}&ok={ok}&failed={failed}")).into_response())
}
