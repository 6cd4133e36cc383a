//! Backfills: the schedule's windows in a range materialised idempotently under the overlap
//! policy (`source = backfill`), and operator retries of existing windows that did not
//! succeed. Which windows the range holds is `crate::domain::policy::backfill_windows`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::{
    InstanceRow, NewInstance, cancel_unfinished_between, cancel_windows, insert_windows,
    status_names, unfinished_windows,
};
use crate::domain::instance::{Event, Instance, InstanceStatus, Source, legal_sources};
use crate::store::statements::sql;
use crate::store::{Error, Result, notify_work_for};

/// What a backfill did (or, in a dry run, would do) to each window.
#[derive(Debug, Clone, Default)]
pub struct BackfillReport {
    /// `(window_key, outcome)`: `exists`, `created`, `skipped: <reason>` (or `would_…`).
    pub windows: Vec<(String, String)>,
    pub created: usize,
    pub existing: usize,
    /// Of the created windows, those recorded SKIPPED by the overlap policy.
    pub skipped: usize,
    pub cancelled: usize,
    /// Of the existing windows, those given an operator retry ([`Reprocess::Failed`]).
    pub reprocessed: usize,
    /// The windows materialised PENDING (for their trace's window spans).
    pub materialised: Vec<super::Created>,
}

/// Operator retries of a task's windows `keys` that are in one of `from` (status names), in
/// the caller's transaction, rows locked in id order. Returns the instances written.
async fn retry_windows(
    conn: &mut PgConnection,
    task_id: &str,
    keys: &[String],
    from: &[&str],
    actor: &str,
    reason: &str,
    priority: Option<i16>,
) -> Result<Vec<Instance>> {
    let rows: Vec<InstanceRow> = sqlx::query_as(sql!("instances/backfill/retry_windows"))
        .bind(task_id)
        .bind(from)
        .bind(actor)
        .bind(reason)
        .bind(priority)
        .bind(keys)
        .fetch_all(&mut *conn)
        .await?;
    rows.into_iter().map(Instance::try_from).collect()
}

/// What existing windows of a backfill's range get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reprocess {
    /// Existing windows are left alone, whatever their status.
    #[default]
    None,
    /// DEAD, FAILED and CANCELLED windows get an operator retry (one more attempt); SUCCESS
    /// never runs again, PENDING and RUNNING are left alone, SKIPPED stays a record.
    Failed,
}

/// The statuses [`Reprocess::Failed`] retries: the operator-retry sources that mean "it did
/// not succeed", without SKIPPED (a window that never ran by policy is not a failure).
fn reprocess_failed_sources() -> Vec<InstanceStatus> {
    legal_sources(Event::OperatorRetry)
        .into_iter()
        .filter(|s| *s != InstanceStatus::Skipped)
        .collect()
}

/// A backfill of `[from, to)`.
#[derive(Debug, Clone)]
pub struct Backfill {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub dry_run: bool,
    /// Refused (`422` on `to`) past this many windows.
    pub max_windows: usize,
    /// The overlap policy of this backfill only; the task's when `None`.
    pub overlap: Option<crate::domain::task::Overlap>,
    pub reprocess: Reprocess,
    /// The priority of the windows it makes or retries; the task's when `None`.
    pub priority: Option<i16>,
}

/// Materialise the schedule's windows in `[from, to)` (`source = backfill`), idempotently and
/// under the task's (or the request's) overlap policy; with [`Reprocess::Failed`], existing
/// windows that did not succeed get an operator retry. Concurrent backfills of the task take
/// turns (an advisory lock) and come after a trigger pass holding its cursor, so every window
/// is inserted once.
pub async fn backfill(
    pool: &PgPool,
    task_id: &str,
    req: &Backfill,
    actor: &str,
) -> Result<BackfillReport> {
    use crate::domain::policy::{SkipReason, apply_overlap, backfill_windows};
    use crate::domain::schedule::{Schedule, window_key};
    use crate::domain::task::{FieldError, TaskSpec};
    let (from, to, dry_run, max_windows) = (req.from, req.to, req.dry_run, req.max_windows);

    let mut tx = crate::store::begin(pool).await?;
    // Backfills of one task take turns on an advisory lock, not on the task row: a backfill
    // may cancel RUNNING instances (overlap `replace`), and holding the task row for update
    // before them would invert the lock order of the reaper and the group commit, which lock
    // instance rows before their tasks' rows. `for key share` still waits for a delete or a
    // change of the task.
    sqlx::query(sql!("instances/backfill/take_turn"))
        .bind(task_id)
        .execute(&mut *tx)
        .await?;
    let spec: Option<Json<Value>> = sqlx::query_scalar(sql!("instances/backfill/task_spec"))
        .bind(task_id)
        .fetch_optional(&mut *tx)
        .await?;
    let spec: TaskSpec = serde_json::from_value(spec.ok_or(Error::NotFound)?.0)
        .map_err(|e| Error::Corrupt(format!("tasks.spec: {e}")))?;
    crate::store::hold_task_cursor(&mut tx, task_id).await?;
    let schedule = spec
        .trigger
        .schedule()
        .map_err(|e| Error::Corrupt(e.to_string()))?;
    if matches!(schedule, Schedule::None) {
        return Err(Error::Invalid(FieldError::new(
            "trigger.type",
            format!(
                "{} {} task has no schedule to backfill; use POST /v1/tasks/{task_id}/trigger",
                crate::domain::text::article(spec.trigger.type_name()),
                spec.trigger.type_name()
            ),
        )));
    }
    let windows = backfill_windows(&schedule, from, to, max_windows).map_err(Error::Invalid)?;
    let keys: Vec<String> = windows.iter().map(|w| window_key(*w)).collect();
    let existing: Vec<(String, String)> = sqlx::query_as(sql!("instances/backfill/existing"))
        .bind(task_id)
        .bind(&keys)
        .fetch_all(&mut *tx)
        .await?;
    let reprocess_from = match req.reprocess {
        Reprocess::None => Vec::new(),
        Reprocess::Failed => status_names(&reprocess_failed_sources()),
    };
    let to_reprocess: Vec<String> = existing
        .iter()
        .filter(|(_, status)| reprocess_from.contains(&status.as_str()))
        .map(|(k, _)| k.clone())
        .collect();
    let existing: std::collections::HashSet<String> =
        existing.into_iter().map(|(k, _)| k).collect();
    let read = unfinished_windows(
        &mut tx,
        &[(task_id, i64::from(spec.execution.concurrency_limit))],
    )
    .await?
    .remove(task_id)
    .unwrap_or_default();
    let gap = match (read.gap, read.keys.first(), read.keys.get(1)) {
        (true, Some(a), Some(b)) => Some((a.clone(), b.clone())),
        _ => None,
    };
    let unfinished = read.keys;
    let candidates: Vec<(DateTime<Utc>, Source, bool)> = windows
        .iter()
        .filter(|w| !existing.contains(&window_key(**w)))
        .map(|w| (*w, Source::Backfill, true))
        .collect();
    let mut execution = spec.execution.clone();
    if let Some(overlap) = req.overlap {
        execution.overlap = overlap;
    }
    let (planned, cancel) = apply_overlap(&execution, candidates, &unfinished);

    let mut report = BackfillReport {
        existing: existing.len(),
        ..BackfillReport::default()
    };
    let prefix = if dry_run { "would_" } else { "" };
    let mut outcome: HashMap<String, String> = existing
        .iter()
        .map(|k| (k.clone(), "exists".to_owned()))
        .collect();
    for p in &planned {
        let text = match &p.skip {
            None => format!("{prefix}create"),
            Some(r) => format!("{prefix}skip: {}", r.as_text()),
        };
        outcome.insert(window_key(p.scheduled_at), text);
    }
    for k in &to_reprocess {
        outcome.insert(k.clone(), format!("{prefix}reprocess"));
    }
    if !dry_run {
        if !cancel.is_empty() {
            let newest = planned
                .iter()
                .rev()
                .find(|p| p.skip.is_none())
                .map(|p| window_key(p.scheduled_at))
                .unwrap_or_default();
            let reason = format!("overlap replace: superseded by window {newest}");
            report.cancelled = cancel_windows(&mut tx, task_id, &cancel, actor, &reason)
                .await?
                .len();
            // Cancelling past the oldest window supersedes every window before the one
            // cancelled, read or not.
            if let Some((oldest, next)) = gap.as_ref().filter(|_| cancel.len() > 1) {
                let more =
                    cancel_unfinished_between(&mut tx, task_id, oldest, next, actor, &reason)
                        .await?;
                report.cancelled += usize::try_from(more).unwrap_or(usize::MAX);
            }
        }
        let rows: Vec<NewInstance> = planned
            .iter()
            .map(|p| NewInstance {
                task_id: task_id.to_owned(),
                window_key: window_key(p.scheduled_at),
                scheduled_at: p.scheduled_at,
                status: if p.skip.is_some() {
                    InstanceStatus::Skipped
                } else {
                    InstanceStatus::Pending
                },
                source: Source::Backfill,
                agent_id: spec.agent_id.clone(),
                max_attempts: spec.execution.max_attempts(),
                available_at: crate::domain::jitter::available_at(
                    task_id,
                    &window_key(p.scheduled_at),
                    p.scheduled_at,
                    spec.jitter_seconds,
                ),
                skip_reason: p.skip.as_ref().map(SkipReason::as_text),
                context_override: None,
                priority: req.priority,
                trace: None,
            })
            .collect();
        for chunk in rows.chunks(1000) {
            let r = insert_windows(&mut tx, chunk, actor).await?;
            for c in &r.created {
                report.created += 1;
                if c.status == InstanceStatus::Skipped {
                    report.skipped += 1;
                } else {
                    report.materialised.push(c.clone());
                }
            }
            for (_, key) in r.conflicts {
                // Created meanwhile by a manual trigger with the same key.
                report.existing += 1;
                outcome.insert(key, "exists".to_owned());
            }
        }
        if !to_reprocess.is_empty() {
            let retried = retry_windows(
                &mut tx,
                task_id,
                &to_reprocess,
                &reprocess_from,
                actor,
                "backfill reprocess: operator retry",
                req.priority,
            )
            .await?;
            for inst in &retried {
                tracing::info!(task_id = %task_id, window_key = %inst.window_key, instance_id = %inst.id, attempt = inst.attempt, reason = "backfill reprocess", "instance retried");
            }
            report.reprocessed = retried.len();
        }
        let pending = report.created.saturating_sub(report.skipped);
        let claimable = pending + report.reprocessed;
        if claimable > 0 {
            notify_work_for(&mut tx, &spec.agent_id, claimable).await?;
        }
        tx.commit().await?;
        // Windows materialised as PENDING, as the trigger loop counts them.
        metrics::counter!("kairos_windows_created_total").increment(pending as u64);
    } else {
        report.created = planned.len();
        report.skipped = planned.iter().filter(|p| p.skip.is_some()).count();
        report.reprocessed = to_reprocess.len();
        tx.rollback().await?;
    }
    report.windows = keys
        .into_iter()
        .map(|k| {
            let o = outcome.remove(&k).unwrap_or_default();
            (k, o)
        })
        .collect();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reprocessing_retries_dead_failed_and_cancelled_windows() {
        assert_eq!(
            reprocess_failed_sources(),
            vec![
                InstanceStatus::Failed,
                InstanceStatus::Dead,
                InstanceStatus::Cancelled
            ]
        );
    }
}
