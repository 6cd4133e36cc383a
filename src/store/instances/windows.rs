//! Windows: inserting them idempotently (scheduled, manual, dependent on an upstream success),
//! and the trigger loop's reads of existing and unfinished windows. Cancelling windows is
//! `cancel`'s; the manual trigger that inserts one is `manual`'s.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use crate::domain::instance::{Instance, InstanceStatus, Source, result_digest};
use crate::domain::trace::TraceContext;
use crate::store::statements::sql;
use crate::store::{Result, notify_work_of};

/// A window to insert.
#[derive(Debug, Clone)]
pub struct NewInstance {
    pub task_id: String,
    pub window_key: String,
    pub scheduled_at: DateTime<Utc>,
    /// PENDING or SKIPPED.
    pub status: InstanceStatus,
    pub source: Source,
    pub agent_id: String,
    pub max_attempts: i32,
    pub available_at: DateTime<Utc>,
    pub skip_reason: Option<String>,
    pub context_override: Option<Value>,
    /// The instance's own priority; the task's `execution.priority` when `None`.
    pub priority: Option<i16>,
    /// The trace context it is created under (a manual trigger's `traceparent`); `None` for a
    /// window of its own trace (every scheduled one: the task's context is only linked to).
    pub trace: Option<TraceContext>,
}

/// One inserted row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Created {
    pub id: Uuid,
    pub task_id: String,
    pub window_key: String,
    #[sqlx(try_from = "String")]
    pub status: InstanceStatus,
    /// The trace context it was created under (docs/tracing.md), if any.
    #[sqlx(default)]
    pub trace_parent: Option<String>,
    #[sqlx(default)]
    pub trace_state: Option<String>,
}

impl Created {
    /// The trace context the window was created under, if any.
    pub fn trace(&self) -> Option<TraceContext> {
        TraceContext::parse(self.trace_parent.as_deref()?, self.trace_state.as_deref())
    }
}

#[derive(Debug, Default)]
pub struct InsertReport {
    pub created: Vec<Created>,
    /// `(task_id, window_key)` of rows that already existed: inserts lost to another replica or
    /// an earlier pass.
    pub conflicts: Vec<(String, String)>,
}

impl InsertReport {
    /// The rows of `rows` (the batch given to [`insert_windows`]) that were written: all but
    /// the conflicts, which are rare, so this is usually the whole batch.
    pub fn written<'a>(&self, rows: &'a [NewInstance]) -> Vec<&'a NewInstance> {
        if self.conflicts.is_empty() {
            return rows.iter().collect();
        }
        let lost: std::collections::HashSet<(&str, &str)> = self
            .conflicts
            .iter()
            .map(|(t, k)| (t.as_str(), k.as_str()))
            .collect();
        rows.iter()
            .filter(|r| !lost.contains(&(r.task_id.as_str(), r.window_key.as_str())))
            .collect()
    }
}

/// Insert windows with `ON CONFLICT (task_id, window_key) DO NOTHING`, and one creating event
/// per inserted row, in one statement. Never select-then-insert.
pub async fn insert_windows(
    conn: &mut PgConnection,
    rows: &[NewInstance],
    actor: &str,
) -> Result<InsertReport> {
    insert_windows_at(conn, rows, actor, None).await
}

/// [`insert_windows`], recording the rows as created at `created_at` (or at the insert, if that
/// is later) instead of the transaction's start: the trigger loop stages a coming instant's
/// windows in a transaction that it commits at that instant, and they are created when they
/// become visible. A batch a stager writes after the instant is recorded when written, a
/// lower bound of its commit.
pub async fn insert_windows_at(
    conn: &mut PgConnection,
    rows: &[NewInstance],
    actor: &str,
    created_at: Option<DateTime<Utc>>,
) -> Result<InsertReport> {
    if rows.is_empty() {
        return Ok(InsertReport::default());
    }
    let ids: Vec<Uuid> = rows.iter().map(|_| Uuid::now_v7()).collect();
    let task_ids: Vec<&str> = rows.iter().map(|r| r.task_id.as_str()).collect();
    let keys: Vec<&str> = rows.iter().map(|r| r.window_key.as_str()).collect();
    let scheduled: Vec<DateTime<Utc>> = rows.iter().map(|r| r.scheduled_at).collect();
    let statuses: Vec<&str> = rows.iter().map(|r| r.status.as_str()).collect();
    let sources: Vec<&str> = rows.iter().map(|r| r.source.as_str()).collect();
    let agents: Vec<&str> = rows.iter().map(|r| r.agent_id.as_str()).collect();
    let max_attempts: Vec<i32> = rows.iter().map(|r| r.max_attempts).collect();
    let available: Vec<DateTime<Utc>> = rows.iter().map(|r| r.available_at).collect();
    let reasons: Vec<Option<&str>> = rows.iter().map(|r| r.skip_reason.as_deref()).collect();
    let contexts: Vec<Option<Json<&Value>>> = rows
        .iter()
        .map(|r| r.context_override.as_ref().map(Json))
        .collect();
    let priorities: Vec<Option<i16>> = rows.iter().map(|r| r.priority).collect();
    let trace_parents: Vec<Option<String>> = rows
        .iter()
        .map(|r| r.trace.as_ref().map(TraceContext::traceparent))
        .collect();
    let trace_states: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.trace.as_ref().and_then(|t| t.state.as_deref()))
        .collect();
    let created: Vec<Created> = sqlx::query_as(sql!("instances/windows/insert"))
        .bind(&ids)
        .bind(&task_ids)
        .bind(&keys)
        .bind(&scheduled)
        .bind(&statuses)
        .bind(&sources)
        .bind(&agents)
        .bind(&max_attempts)
        .bind(&available)
        .bind(&reasons)
        .bind(&contexts)
        .bind(actor)
        .bind(created_at)
        .bind(&priorities)
        .bind(&trace_parents)
        .bind(&trace_states)
        .fetch_all(&mut *conn)
        .await?;

    let mut report = InsertReport::default();
    if created.len() < rows.len() {
        let made: std::collections::HashSet<(&str, &str)> = created
            .iter()
            .map(|c| (c.task_id.as_str(), c.window_key.as_str()))
            .collect();
        report.conflicts = rows
            .iter()
            .filter(|r| !made.contains(&(r.task_id.as_str(), r.window_key.as_str())))
            .map(|r| (r.task_id.clone(), r.window_key.clone()))
            .collect();
    }
    report.created = created;
    Ok(report)
}

/// What the overlap policy sees of a task's unfinished (PENDING, RUNNING, FAILED) instances:
/// their window keys, oldest first, but only as many as a decision can use however large the
/// backlog ([`unfinished_windows`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unfinished {
    /// The oldest unfinished window, then the newest ones (all of them when they are few).
    pub keys: Vec<String>,
    /// Unfinished windows between `keys[0]` and `keys[1]` may have been left unread. A policy
    /// that cancels a window after them (overlap `replace`, oldest first) cancels these too
    /// ([`cancel_unfinished_between`](super::cancel_unfinished_between)).
    pub gap: bool,
}

/// The unfinished windows of each `(task_id, newest)` that an overlap decision needs: the
/// oldest (the window a `skip` names as blocking) and the `newest` most recent (a
/// `replace` keeps the newest, a `skip` only asks whether the task has reached its
/// concurrency limit, so `newest` is that limit). At most `newest + 1` rows per task,
/// however many instances wait: the trigger loop reads this for every due task on every
/// pass.
pub async fn unfinished_windows(
    conn: &mut PgConnection,
    tasks: &[(&str, i64)],
) -> Result<HashMap<String, Unfinished>> {
    let ids: Vec<&str> = tasks.iter().map(|t| t.0).collect();
    let newest: Vec<i64> = tasks.iter().map(|t| t.1.max(1)).collect();
    // Per status, a first-rows probe through that status's task-keyed partial index
    // (`migrations/20261201000006_no_unfinished_index.sql`); a task's PENDING rows are sorted by their window (top-N, in memory of
    // the size of the limit), never returned.
    let rows: Vec<(String, String, bool)> = sqlx::query_as(sql!("instances/windows/unfinished"))
        .bind(&ids)
        .bind(&newest)
        .fetch_all(&mut *conn)
        .await?;
    let limits: HashMap<&str, i64> = ids.iter().copied().zip(newest).collect();
    let mut out: HashMap<String, Unfinished> = HashMap::new();
    for (task, key, oldest) in rows {
        let u = out.entry(task).or_default();
        // The oldest is read first; it is also among the newest when they are few.
        if oldest || u.keys.first() != Some(&key) {
            u.keys.push(key);
        }
    }
    for (task, u) in out.iter_mut() {
        let full = limits.get(task.as_str()).copied().unwrap_or(1);
        // Oldest plus a full set of newest that does not include it: there may be more.
        u.gap = u.keys.len() as i64 > full;
    }
    Ok(out)
}

/// For each `(task_id, first due window key)`, the keys of rows that already exist from that
/// key up to `until`, the instant the windows are planned for (window keys of scheduled
/// windows sort chronologically).
pub async fn existing_windows(
    conn: &mut PgConnection,
    from: &[(&str, String)],
    until: DateTime<Utc>,
) -> Result<HashMap<String, std::collections::HashSet<String>>> {
    let ids: Vec<&str> = from.iter().map(|f| f.0).collect();
    let keys: Vec<&str> = from.iter().map(|f| f.1.as_str()).collect();
    let rows: Vec<(String, String)> = sqlx::query_as(sql!("instances/windows/existing"))
        .bind(&ids)
        .bind(&keys)
        .bind(crate::domain::schedule::window_key(until))
        .fetch_all(&mut *conn)
        .await?;
    let mut out: HashMap<String, std::collections::HashSet<String>> = HashMap::new();
    for (task, key) in rows {
        out.entry(task).or_default().insert(key);
    }
    Ok(out)
}

/// In the transaction of an upstream SUCCESS: insert the same window for every unpaused task
/// that runs `after` it (`source = dependency`), recording the upstream instance and its result
/// digest. The unique window key makes a re-run of the upstream window trigger nothing more.
///
/// The downstream task rows are read `for key share`, which waits for a delete of the task or
/// a change of its definition (both hold the row `for update`) and then reads the row as they
/// left it. Read without a lock, a delete's cancellation or a move's change of agent that
/// runs beside this insert would not see its uncommitted row, which would stay PENDING for a
/// task that no longer exists, or under an agent that no longer runs the task. The lock does
/// not wait for the counter updates of completions and failures (`for no key update`).
pub(super) async fn trigger_dependents(
    conn: &mut PgConnection,
    upstream: &Instance,
    result: Option<&Value>,
) -> Result<()> {
    let digest = result_digest(result);
    let reason = format!("dependency: upstream instance {} succeeded", upstream.id);
    let created: Vec<(Uuid, String, String)> =
        sqlx::query_as(sql!("instances/windows/insert_dependents"))
            .bind(&upstream.task_id)
            .bind(&upstream.window_key)
            .bind(upstream.scheduled_at)
            .bind(upstream.id)
            .bind(&digest)
            .bind(&reason)
            .fetch_all(&mut *conn)
            .await?;
    notify_work_of(conn, created.iter().map(|c| c.2.as_str()).collect()).await?;
    for (id, task_id, _) in &created {
        tracing::info!(task_id = %task_id, window_key = %upstream.window_key, instance_id = %id, upstream_task_id = %upstream.task_id, upstream_instance_id = %upstream.id, "dependent window materialised");
    }
    let paused: Vec<String> = sqlx::query_scalar(sql!("instances/windows/paused_dependents"))
        .bind(&upstream.task_id)
        .fetch_all(&mut *conn)
        .await?;
    for task_id in paused {
        tracing::info!(task_id = %task_id, window_key = %upstream.window_key, upstream_task_id = %upstream.task_id, reason = "task paused", "dependent window not materialised");
    }
    Ok(())
}
