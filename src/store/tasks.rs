//! The `tasks` table (the registry and pause state) and `task_cursor`, the trigger loop's
//! `next_fire_at` cursor (one narrow row per task,
//! `migrations/20261201000005_task_cursor.sql`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::statements::sql;
use super::{Error, Result, TASKS_CHANNEL};
use crate::domain::task::{
    Execution, FieldError, Task, TaskId, TaskSpec, TaskSubmission, TriggerSpec,
};
use crate::domain::trace::TraceContext;

/// Longest dependency chain followed when checking for cycles.
const MAX_DEPENDENCY_DEPTH: i32 = 1000;

#[derive(sqlx::FromRow)]
struct TaskRow {
    spec: Json<Value>,
    paused: bool,
    paused_reason: Option<String>,
    next_fire_at: Option<DateTime<Utc>>,
    consecutive_failures: i32,
    version: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<TaskRow> for Task {
    type Error = Error;
    fn try_from(row: TaskRow) -> Result<Task> {
        let spec: TaskSpec = serde_json::from_value(row.spec.0)
            .map_err(|e| Error::Corrupt(format!("tasks.spec: {e}")))?;
        Ok(Task {
            spec,
            paused: row.paused,
            paused_reason: row.paused_reason,
            next_fire_at: row.next_fire_at,
            consecutive_failures: row.consecutive_failures,
            version: row.version,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

/// What a PUT did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upserted {
    Created,
    Replaced,
    Unchanged,
}

pub async fn get_task(pool: &PgPool, id: &str) -> Result<Task> {
    let row: TaskRow = sqlx::query_as(sql!("tasks/get"))
        .bind(id)
        .fetch_optional(pool)
        .await?
        .ok_or(Error::NotFound)?;
    row.try_into()
}

/// The trace contexts the tasks `ids` were defined under (docs/tracing.md), by task id: only
/// tasks that have one. Read when window spans are recorded, to link them to it.
pub async fn list_task_traces(
    pool: &PgPool,
    ids: &[&str],
) -> Result<std::collections::HashMap<String, TraceContext>> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(sql!("tasks/traces"))
        .bind(ids)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, parent, state)| {
            TraceContext::parse(&parent, state.as_deref()).map(|c| (id, c))
        })
        .collect())
}

#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub agent_id: Option<String>,
    /// Only these agents' tasks (an agent token's scope).
    pub agents_in: Option<Vec<String>>,
    pub paused: Option<bool>,
    /// Only tasks whose trigger is of this type (`cron`, `interval`, …).
    pub trigger_type: Option<String>,
    /// Keyset cursor: ids strictly greater than this.
    pub after_id: Option<String>,
    pub limit: i64,
}

/// Tasks in id order, one page.
pub async fn list_tasks(pool: &PgPool, f: &TaskFilter) -> Result<Vec<Task>> {
    let rows: Vec<TaskRow> = sqlx::query_as(sql!("tasks/list"))
        .bind(&f.agent_id)
        .bind(&f.agents_in)
        .bind(f.paused)
        .bind(&f.trigger_type)
        .bind(&f.after_id)
        .bind(f.limit)
        .fetch_all(pool)
        .await?;
    rows.into_iter().map(Task::try_from).collect()
}

/// The first window of a trigger being registered (new or changed): strictly after `now`, but
/// a `once` task keeps its instant even when it has passed (the trigger loop then applies the
/// misfire grace), and a cron expression that never fires within the search horizon is refused
/// (`422` on `trigger.expr`) rather than stored to never run.
fn registered_fire_at(trigger: &TriggerSpec, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>> {
    trigger.first_window(now).map_err(Error::Invalid)
}

/// The next window of a task being resumed: computed from now, so paused time is not "missed";
/// a one-shot whose instant passed while paused does not fire.
fn resumed_fire_at(trigger: &TriggerSpec, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>> {
    let schedule = trigger
        .schedule()
        .map_err(|e| Error::Corrupt(e.to_string()))?;
    Ok(schedule.next_after(now))
}

async fn lock_task(conn: &mut PgConnection, id: &str) -> Result<Option<Task>> {
    let row: Option<TaskRow> = sqlx::query_as(sql!("tasks/lock"))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    row.map(Task::try_from).transpose()
}

/// How far ahead a task's next window must be for its change to wake the trigger loops. The
/// loops never sleep longer than this, so a later window is found by their next look anyway;
/// registering thousands of far-off schedules therefore sends no notification at all (a NOTIFY
/// also serialises commits).
pub const WAKE_HORIZON: std::time::Duration = std::time::Duration::from_secs(10);

/// Wake the trigger loops when the task's next window (`next_fire_at`) is due within
/// [`WAKE_HORIZON`].
async fn notify_task_changed(
    conn: &mut PgConnection,
    id: &str,
    next_fire_at: Option<DateTime<Utc>>,
) -> Result<()> {
    let Some(at) = next_fire_at else {
        return Ok(());
    };
    sqlx::query(sql!("tasks/notify_changed"))
        .bind(TASKS_CHANNEL)
        .bind(id)
        .bind(at)
        .bind(WAKE_HORIZON.as_secs_f64())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Refuse an `after` edge to an unknown upstream or one that would close a cycle. Callers hold
/// the dependency lock, so two concurrent PUTs cannot each add half of a cycle.
async fn check_dependency(conn: &mut PgConnection, id: &TaskId, upstream: &TaskId) -> Result<()> {
    let exists: bool = sqlx::query_scalar(sql!("tasks/exists"))
        .bind(upstream.as_str())
        .fetch_one(&mut *conn)
        .await?;
    if !exists {
        return Err(Error::Invalid(FieldError::new(
            "trigger.task",
            format!("upstream task {upstream} does not exist"),
        )));
    }
    let cycle: bool = sqlx::query_scalar(sql!("tasks/would_cycle"))
        .bind(upstream.as_str())
        .bind(id.as_str())
        .bind(MAX_DEPENDENCY_DEPTH)
        .fetch_one(&mut *conn)
        .await?;
    if cycle {
        return Err(Error::Invalid(FieldError::new(
            "trigger.task",
            format!("depending on {upstream} would create a dependency cycle"),
        )));
    }
    Ok(())
}

/// Create or replace a task declaratively. An identical submission changes nothing (not even
/// the version, nor the stored trace context); one that creates or changes the task stores its
/// trace context (or none). A changed trigger recomputes `next_fire_at` from now; other changes keep it.
pub async fn upsert_task(
    pool: &PgPool,
    sub: &TaskSubmission,
    if_match: Option<i64>,
) -> Result<(Upserted, Task)> {
    let spec = &sub.spec;
    let spec_json =
        serde_json::to_value(spec).map_err(|e| Error::Corrupt(format!("task spec: {e}")))?;
    let trace_parent = sub.trace.as_ref().map(TraceContext::traceparent);
    let trace_state = sub.trace.as_ref().and_then(|t| t.state.as_deref());
    let mut tx = crate::store::begin(pool).await?;
    if let Some(upstream) = spec.trigger.upstream() {
        sqlx::query(sql!("tasks/lock_dependencies"))
            .execute(&mut *tx)
            .await?;
        check_dependency(&mut tx, &spec.id, upstream).await?;
    }
    let now: DateTime<Utc> = sqlx::query_scalar(sql!("tasks/now"))
        .fetch_one(&mut *tx)
        .await?;

    if let TriggerSpec::Cron { expr, timezone } = &spec.trigger {
        // The shortest gap between fire times is measured from now (DST included).
        crate::domain::jitter::check_cron_jitter(expr, timezone, spec.jitter_seconds, now)
            .map_err(Error::Invalid)?;
    }
    super::limits::check_draws(&mut tx, &spec.execution.limits).await?;
    let existing = lock_task(&mut tx, spec.id.as_str()).await?;
    if let Some(v) = if_match {
        match &existing {
            Some(t) if t.version == v => {}
            Some(t) => return Err(Error::VersionMismatch { current: t.version }),
            None => return Err(Error::VersionMismatch { current: 0 }),
        }
    }

    let outcome = match existing {
        None => {
            let paused = sub.paused.unwrap_or(false);
            let inserted = sqlx::query(sql!("tasks/insert"))
                .bind(spec.id.as_str())
                .bind(&spec.agent_id)
                .bind(Json(&spec_json))
                .bind(spec.trigger.type_name())
                .bind(spec.trigger.upstream().map(TaskId::as_str))
                .bind(paused)
                .bind(paused.then_some("paused at registration"))
                .bind(spec.dispatch.mode())
                .bind(&trace_parent)
                .bind(trace_state)
                .execute(&mut *tx)
                .await?;
            if inserted.rows_affected() == 0 {
                // Another request created it between our lock attempt and the insert.
                return Err(Error::Conflict(format!(
                    "task {} was created concurrently; retry the request",
                    spec.id
                )));
            }
            // The insert created the cursor row (the trigger of `20261201000005_task_cursor.sql`).
            set_next_fire_at(
                &mut tx,
                spec.id.as_str(),
                registered_fire_at(&spec.trigger, now)?,
            )
            .await?;
            Upserted::Created
        }
        Some(current) => {
            let pause_change = sub.paused.filter(|p| *p != current.paused);
            if current.spec == *spec && pause_change.is_none() {
                tx.commit().await?;
                return Ok((Upserted::Unchanged, current));
            }
            // A changed trigger, or a resume by definition, starts the schedule afresh from now;
            // otherwise the cursor is the trigger loop's and is left alone. A resume by
            // definition is `POST …/resume`: the breaker's count starts afresh, and an unchanged
            // trigger's next window is the one after now (paused time is not "missed").
            let trigger_changed = current.spec.trigger != spec.trigger;
            let resumed = pause_change == Some(false);
            let restart = trigger_changed || resumed;
            let paused = pause_change.unwrap_or(current.paused);
            sqlx::query(sql!("tasks/replace"))
                .bind(spec.id.as_str())
                .bind(&spec.agent_id)
                .bind(Json(&spec_json))
                .bind(spec.trigger.type_name())
                .bind(spec.trigger.upstream().map(TaskId::as_str))
                .bind(paused)
                .bind(spec.dispatch.mode())
                .bind(resumed)
                .bind(&trace_parent)
                .bind(trace_state)
                .execute(&mut *tx)
                .await?;
            if restart {
                let next_fire_at = if trigger_changed {
                    registered_fire_at(&spec.trigger, now)?
                } else {
                    resumed_fire_at(&spec.trigger, now)?
                };
                set_next_fire_at(&mut tx, spec.id.as_str(), next_fire_at).await?;
            }
            // Waiting instances draw on what the task draws on now (keys rendered from the
            // context they will run with).
            let draws_changed = current.spec.execution.limits != spec.execution.limits
                || (!spec.execution.limits.is_empty() && current.spec.context != spec.context);
            if draws_changed {
                let n = super::limits::render_waiting_draws(&mut tx, spec.id.as_str()).await?;
                if n > 0 {
                    tracing::info!(task_id = %spec.id.as_str(), instances = n, reason = "the task's limits or context changed", "waiting instances draw on the task's limits anew");
                }
            }
            if current.spec.agent_id != spec.agent_id {
                let moved = super::instances::move_unstarted_to_agent(
                    &mut tx,
                    spec.id.as_str(),
                    &spec.agent_id,
                )
                .await?;
                if moved > 0 {
                    tracing::info!(task_id = %spec.id.as_str(), agent_id = %spec.agent_id, instances = moved, reason = "the task moved to another agent", "waiting instances moved to the task's agent");
                }
            }
            Upserted::Replaced
        }
    };
    let task = lock_task(&mut tx, spec.id.as_str())
        .await?
        .ok_or(Error::NotFound)?;
    if !task.paused {
        notify_task_changed(&mut tx, spec.id.as_str(), task.next_fire_at).await?;
    }
    tx.commit().await?;
    Ok((outcome, task))
}

/// Remove a task. Its PENDING and FAILED instances are CANCELLED (with events); RUNNING ones
/// finish under their leases; history is kept. Returns the number of instances cancelled.
pub async fn delete_task(pool: &PgPool, id: &str, actor: &str) -> Result<u64> {
    let mut tx = crate::store::begin(pool).await?;
    let deleted = sqlx::query(sql!("tasks/delete"))
        .bind(id)
        .execute(&mut *tx)
        .await?;
    if deleted.rows_affected() == 0 {
        return Err(Error::NotFound);
    }
    let cancelled =
        super::instances::cancel_unstarted_of_task(&mut tx, id, actor, "task deleted").await?;
    orphan_dependents(&mut tx, id).await?;
    tx.commit().await?;
    Ok(cancelled)
}

/// Pause a task: no windows are materialised and none of its instances can be claimed.
/// Pausing a paused task only updates the reason.
pub async fn pause_task(pool: &PgPool, id: &str, reason: &str) -> Result<Task> {
    let mut tx = super::begin(pool).await?;
    let row: TaskRow = sqlx::query_as(sql!("tasks/pause"))
        .bind(id)
        .bind(reason)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    row.try_into()
}

/// Resume a task: `next_fire_at` is recomputed from now, so paused time is not "missed".
/// Resuming a running task changes nothing.
pub async fn resume_task(pool: &PgPool, id: &str) -> Result<Task> {
    let mut tx = crate::store::begin(pool).await?;
    let current = lock_task(&mut tx, id).await?.ok_or(Error::NotFound)?;
    if !current.paused {
        tx.commit().await?;
        return Ok(current);
    }
    let now: DateTime<Utc> = sqlx::query_scalar(sql!("tasks/now"))
        .fetch_one(&mut *tx)
        .await?;
    let next_fire_at = resumed_fire_at(&current.spec.trigger, now)?;
    sqlx::query(sql!("tasks/resume"))
        .bind(id)
        .execute(&mut *tx)
        .await?;
    set_next_fire_at(&mut tx, id, next_fire_at).await?;
    notify_task_changed(&mut tx, id, next_fire_at).await?;
    let task = lock_task(&mut tx, id).await?.ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(task)
}

/// Set a task's next window (its cursor row exists from the task's insert on).
async fn set_next_fire_at(
    conn: &mut PgConnection,
    id: &str,
    next_fire_at: Option<DateTime<Utc>>,
) -> Result<()> {
    sqlx::query(sql!("tasks/set_next_fire_at"))
        .bind(id)
        .bind(next_fire_at)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A due task as the trigger loop sees it, its cursor locked until the surrounding transaction
/// ends: only the parts of the spec that the loop uses.
#[derive(Debug, Clone)]
pub struct DueTask {
    pub id: String,
    pub agent_id: String,
    pub trigger: TriggerSpec,
    /// `trigger.jitter_seconds` (0 when absent).
    pub jitter_seconds: i64,
    pub execution: Execution,
    pub next_fire_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct DueRow {
    id: String,
    agent_id: String,
    trigger: Option<String>,
    execution: Option<String>,
    next_fire_at: DateTime<Utc>,
}

/// Lock the cursors of up to `limit` due, unpaused tasks, skipping those another replica holds
/// (task rows are read, never locked or written, by the loop; a cursor skipped because another
/// replica holds it costs no task read). Each task is one primary-key lookup: with the
/// statistics of a just-registered fleet the planner otherwise hashed the whole registry for
/// every batch.
///
/// Only the spec's `trigger` and `execution` are read, as JSON text parsed straight into their
/// types: the rest of a spec (context, notify lists, dispatch) can be many kilobytes the loop
/// never uses, and building a whole `serde_json::Value` first cost more than the parse itself
/// (measured with 100,000 tasks due at one instant: about a third of the daemon's CPU in the
/// pass). Rows whose parts no longer parse are returned as errors beside the good ones so one
/// bad row cannot stall the loop.
///
/// `staged_until`: instead of the tasks due now, the tasks whose next window falls after now
/// and at or before that coming instant, and that have no unfinished (PENDING, RUNNING,
/// FAILED) instance (the loop stages them). Overdue tasks are left to a pass that publishes at
/// once; tasks with unfinished instances are left unlocked to the pass at the instant, which
/// decides their overlap policy then, and a failure of one of their instances (which may open
/// the task's circuit, writing its cursor) never waits for a staging transaction.
/// `passed_over`: tasks this transaction locked and left as they were, not to be read again.
pub async fn lock_due_tasks(
    conn: &mut PgConnection,
    limit: i64,
    staged_until: Option<DateTime<Utc>>,
    passed_over: &[String],
) -> Result<(Vec<DueTask>, Vec<(String, String)>)> {
    let rows: Vec<DueRow> = sqlx::query_as(sql!("tasks/lock_due"))
        .bind(limit)
        .bind(staged_until)
        .bind(passed_over)
        .fetch_all(&mut *conn)
        .await?;
    let mut due = Vec::with_capacity(rows.len());
    let mut bad = Vec::new();
    for row in rows {
        match parse_due_parts(row.trigger.as_deref(), row.execution.as_deref()) {
            Ok((trigger, execution)) => due.push(DueTask {
                id: row.id,
                agent_id: row.agent_id,
                jitter_seconds: parse_jitter(row.trigger.as_deref()),
                trigger,
                execution,
                next_fire_at: row.next_fire_at,
            }),
            Err(why) => bad.push((row.id, why)),
        }
    }
    Ok((due, bad))
}

/// The trigger and execution of a stored spec, or why they do not parse.
fn parse_due_parts(
    trigger: Option<&str>,
    execution: Option<&str>,
) -> std::result::Result<(TriggerSpec, Execution), String> {
    let trigger = serde_json::from_str(trigger.ok_or("missing field `trigger`")?)
        .map_err(|e| format!("trigger: {e}"))?;
    let execution = serde_json::from_str(execution.ok_or("missing field `execution`")?)
        .map_err(|e| format!("execution: {e}"))?;
    Ok((trigger, execution))
}

/// `jitter_seconds` of a stored trigger's text: 0 when absent (triggers stored before jitter
/// existed) or unreadable (a trigger that parsed has a valid one: it was validated when written).
fn parse_jitter(trigger: Option<&str>) -> i64 {
    #[derive(serde::Deserialize)]
    struct Jitter {
        #[serde(default)]
        jitter_seconds: Option<i64>,
    }
    trigger
        .and_then(|t| serde_json::from_str::<Jitter>(t).ok())
        .and_then(|j| j.jitter_seconds)
        .unwrap_or(0)
}

/// How the trigger loop moves one task's cursor.
#[derive(Debug, Clone)]
pub struct CursorMove {
    pub task_id: String,
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The newest window written in this pass, if any.
    pub last_window_at: Option<DateTime<Utc>>,
}

/// Move the trigger cursor of several tasks at once.
pub async fn advance_tasks(conn: &mut PgConnection, moves: &[CursorMove]) -> Result<()> {
    if moves.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = moves.iter().map(|m| m.task_id.as_str()).collect();
    let next: Vec<Option<DateTime<Utc>>> = moves.iter().map(|m| m.next_fire_at).collect();
    let last: Vec<Option<DateTime<Utc>>> = moves.iter().map(|m| m.last_window_at).collect();
    sqlx::query(sql!("tasks/advance"))
        .bind(&ids)
        .bind(&next)
        .bind(&last)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Pause a task whose stored definition no longer parses, so it stops blocking the loop and an
/// operator sees why.
pub async fn quarantine_task(conn: &mut PgConnection, id: &str, reason: &str) -> Result<()> {
    sqlx::query(sql!("tasks/quarantine"))
        .bind(id)
        .bind(reason)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The earliest `next_fire_at` of any unpaused task and the database's `now()`, for the trigger
/// loop's sleep.
pub async fn earliest_fire_at(pool: &PgPool) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>)> {
    sqlx::query_as(sql!("tasks/earliest_fire_at"))
        .fetch_one(pool)
        .await
        .map_err(crate::store::Error::from)
}

/// Resume up to `limit` tasks whose circuit cooldown has ended. The circuit is then half-open:
/// `consecutive_failures` is kept, so the next failed attempt opens it again and a success
/// closes it. Returns `(task id, agent id)` of each resumed task.
pub async fn resume_cooled_down(
    conn: &mut PgConnection,
    limit: i64,
) -> Result<Vec<(String, String)>> {
    let rows: Vec<DueRow> = sqlx::query_as(sql!("tasks/lock_cooled_down"))
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?;
    let mut resumed = Vec::with_capacity(rows.len());
    for row in rows {
        let trigger = match parse_due_parts(row.trigger.as_deref(), row.execution.as_deref()) {
            Ok((trigger, _)) => trigger,
            Err(e) => {
                tracing::error!(task_id = %row.id, reason = %e, "stored task definition unreadable; leaving it paused");
                continue;
            }
        };
        let next = resumed_fire_at(&trigger, row.next_fire_at)?;
        sqlx::query(sql!("tasks/resume_cooled_down"))
            .bind(&row.id)
            .execute(&mut *conn)
            .await?;
        set_next_fire_at(conn, &row.id, next).await?;
        notify_task_changed(conn, &row.id, next).await?;
        super::notify_work(conn, &row.agent_id).await?;
        tracing::info!(task_id = %row.id, next_fire_at = ?next, reason = "circuit cooldown ended", "task resumed (half-open)");
        resumed.push((row.id, row.agent_id));
    }
    Ok(resumed)
}

/// Pause the tasks that depend on `upstream` (deleted): they could never fire again, and an
/// operator must see why rather than find them silently orphaned.
pub async fn orphan_dependents(conn: &mut PgConnection, upstream: &str) -> Result<Vec<String>> {
    let ids: Vec<String> = sqlx::query_scalar(sql!("tasks/orphan_dependents"))
        .bind(upstream)
        .fetch_all(&mut *conn)
        .await?;
    for id in &ids {
        tracing::warn!(task_id = %id, upstream_task_id = %upstream, reason = "upstream deleted", "dependent task paused");
    }
    Ok(ids)
}
