//! Tasks as the API and the console show them (secrets removed, another agent's hidden), the
//! retention rules a window instant must meet, and a backfill run end to end.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::domain::access::{Principal, redact_url};
use crate::domain::schedule::format_instant;
use crate::domain::task::Task;
use crate::domain::trace::TraceContext;
use crate::otel::Spans;
use crate::problem::ApiError;
use crate::store::instances::{self as store_instances, Backfill, BackfillReport};
use crate::store::{self, tasks as store_tasks};

/// Most windows one backfill call may cover.
pub const MAX_BACKFILL_WINDOWS: usize = 10_000;

/// The task as the API shows it: the spec (secrets removed) plus the read-only fields.
pub fn task_json(t: &Task) -> Value {
    let mut v = t.spec.to_public_json();
    if let Some(o) = v.as_object_mut() {
        o.insert("paused".into(), json!(t.paused));
        o.insert("paused_reason".into(), json!(t.paused_reason));
        o.insert(
            "next_fire_at".into(),
            json!(t.next_fire_at.map(format_instant)),
        );
        o.insert("consecutive_failures".into(), json!(t.consecutive_failures));
        o.insert("version".into(), json!(t.version));
        o.insert("created_at".into(), json!(format_instant(t.created_at)));
        o.insert("updated_at".into(), json!(format_instant(t.updated_at)));
    }
    v
}

/// The task as `principal` may see it: another agent's task is 404 for an agent token limited
/// to some agents, and only admins see the path and query of webhook and notification URLs.
pub fn visible_task(t: &Task, principal: &Principal) -> Result<Value, ApiError> {
    if !principal.may_read(&t.spec.agent_id) {
        tracing::debug!(principal = %principal.label, task_id = %t.spec.id.as_str(), reason = "another agent's task", "read hidden");
        return Err(ApiError::NotFound(format!(
            "no task with id {:?}",
            t.spec.id.as_str()
        )));
    }
    let mut v = task_json(t);
    if !principal.sees_url_paths() {
        if let Some(Value::String(url)) = v.pointer_mut("/dispatch/url") {
            *url = redact_url(url);
        }
        for list in ["on_success", "on_failure"] {
            if let Some(Value::Array(urls)) = v.pointer_mut(&format!("/notify/{list}")) {
                for u in urls.iter_mut() {
                    if let Value::String(url) = u {
                        *url = redact_url(url);
                    }
                }
            }
        }
    }
    Ok(v)
}

/// A store error about task `id`, with "not found" naming the task.
pub fn not_found_task(e: store::Error, id: &str) -> ApiError {
    match e {
        store::Error::NotFound => ApiError::NotFound(format!("no task with id {id:?}")),
        other => other.into(),
    }
}

/// The context task `id` was defined under, for its window spans' links (docs/tracing.md):
/// read only when spans are exported; a failed read loses the link, never the request.
pub async fn task_trace(pool: &PgPool, spans: &Spans, id: &str) -> Option<TraceContext> {
    if !spans.is_on() {
        return None;
    }
    match store_tasks::list_task_traces(pool, &[id]).await {
        Ok(mut traces) => traces.remove(id),
        Err(e) => {
            tracing::warn!(task_id = %id, error = %e, "reading the task's trace context for a window span link failed");
            None
        }
    }
}

/// The oldest window instant still protected by its row: `retention_days` before the database
/// clock. Older terminal rows may have been pruned.
pub async fn retention_cutoff(
    pool: &PgPool,
    retention_days: i64,
) -> Result<DateTime<Utc>, ApiError> {
    let now = store::now(pool).await?;
    Ok(now - chrono::Duration::days(retention_days))
}

/// Refuse a window instant older than `cutoff`: the pruner may have deleted the row that made
/// that window unique, so it could be created, and run, a second time.
pub fn check_retention(
    retention_days: i64,
    task_id: &str,
    field: &str,
    at: DateTime<Utc>,
    cutoff: DateTime<Utc>,
) -> Result<(), ApiError> {
    if at >= cutoff {
        return Ok(());
    }
    let at = format_instant(at);
    tracing::info!(task_id = %task_id, window_key = %at, field, reason = "older than retention_days", "window refused");
    Err(ApiError::invalid(
        field,
        format!(
            "{at} is older than retention_days ({retention_days} days, before {}): instances \
             that old may have been pruned, so the window's uniqueness can no longer be \
             guaranteed",
            format_instant(cutoff)
        ),
    ))
}

/// Refuse a window key naming an instant more than `retention_days` after the run's own time.
/// The run's row is scheduled at that time and may be pruned `retention_days` after it: were
/// that before the window's instant, the schedule would find no row for the window and run it
/// a second time. (Refused rather than kept by the pruner, the same bound both ways: a window
/// key is accepted only within `retention_days` of when its run is.)
pub fn check_ahead_of_retention(
    retention_days: i64,
    task_id: &str,
    at: DateTime<Utc>,
    runs_at: DateTime<Utc>,
) -> Result<(), ApiError> {
    let horizon = runs_at + chrono::Duration::days(retention_days);
    if at <= horizon {
        return Ok(());
    }
    let at = format_instant(at);
    tracing::info!(task_id = %task_id, window_key = %at, reason = "later than retention_days after the run", "window refused");
    Err(ApiError::invalid(
        "window_key",
        format!(
            "{at} is more than retention_days ({retention_days} days, after {}) after the run's \
             time: its instance may be pruned before the window comes, and the window would then \
             run a second time; trigger it within {retention_days} days of its instant",
            format_instant(horizon),
        ),
    ))
}

/// A backfill of task `id`: `to` after `from`, `from` within retention, then the store's
/// backfill, its new windows' spans, and one log line.
pub async fn run_backfill(
    pool: &PgPool,
    spans: &Spans,
    retention_days: i64,
    id: &str,
    req: &Backfill,
) -> Result<BackfillReport, ApiError> {
    if req.to <= req.from {
        return Err(ApiError::invalid("to", "must be after from"));
    }
    let cutoff = retention_cutoff(pool, retention_days).await?;
    check_retention(retention_days, id, "from", req.from, cutoff)?;
    let report = store_instances::backfill(pool, id, req, "backfill")
        .await
        .map_err(|e| not_found_task(e, id))?;
    if spans.is_on() && !report.materialised.is_empty() {
        let now = Utc::now();
        let link = task_trace(pool, spans, id).await;
        for c in &report.materialised {
            spans.window(
                c.id,
                &c.task_id,
                &c.window_key,
                c.trace().as_ref(),
                link.as_ref(),
                now,
            );
        }
    }
    tracing::info!(task_id = %id, from = %format_instant(req.from), to = %format_instant(req.to), dry_run = req.dry_run, overlap = ?req.overlap, reprocess = ?req.reprocess, created = report.created, existing = report.existing, skipped = report.skipped, cancelled = report.cancelled, reprocessed = report.reprocessed, "backfill");
    Ok(report)
}
