//! Windows: inserting them idempotently (scheduled, manual, dependent on an upstream success),
//! the trigger loop's reads of existing and unfinished windows, and cancelling windows (the
//! one cancellation statement every path uses, operator cancels included).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{
    CLOSE_ATTEMPT_EVENTS, INSTANCE_COLUMNS, InstanceRow, get_instance_by_window, status_names,
};
use crate::domain::instance::{
    Event, Instance, InstanceStatus, Source, legal_sources, result_digest,
};
use crate::domain::schedule::canonical_window_key;
use crate::domain::task::FieldError;
use crate::domain::trace::TraceContext;
use crate::store::{Error, Result, notify_work, notify_work_of};

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
    pub status: String,
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
    let created: Vec<Created> = sqlx::query_as(
        "with ins as ( \
             insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
                 agent_id, attempt, max_attempts, available_at, skip_reason, finished_at, \
                 context_override, created_by, created_status, created_reason, created_at, \
                 updated_at, limit_draws, priority, trace_parent, trace_state) \
             select id, task_id, window_key, scheduled_at, status, source, agent_id, 1, \
                 max_attempts, available_at, skip_reason, \
                 case when status = 'SKIPPED' then created end, context_override, \
                 $12, status, coalesce(skip_reason, source), created, created, \
                 case when status = 'PENDING' then ( \
                     select kairos_render_limit_draws(t.spec->'execution'->'limits', r.task_id, \
                         r.agent_id, coalesce(t.spec->'context', '{}'::jsonb) \
                             || coalesce(r.context_override, '{}'::jsonb)) \
                     from tasks t where t.id = r.task_id \
                       and jsonb_array_length(coalesce(t.spec->'execution'->'limits', '[]'::jsonb)) > 0) \
                 end, \
                 coalesce(r.priority, (select (t.spec->'execution'->>'priority')::smallint \
                           from tasks t where t.id = r.task_id), 5), \
                 r.trace_parent, r.trace_state \
             from unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], \
                         $6::text[], $7::text[], $8::int[], $9::timestamptz[], $10::text[], \
                         $11::jsonb[], $14::smallint[], $15::text[], $16::text[]) \
                 as r(id, task_id, window_key, scheduled_at, status, source, agent_id, \
                      max_attempts, available_at, skip_reason, context_override, priority, \
                      trace_parent, trace_state) \
             cross join (select case when $13::timestamptz is null then now() \
                                     else greatest($13, clock_timestamp()) end as created) c \
             on conflict (task_id, window_key) do nothing \
             returning id, task_id, window_key, status, trace_parent, trace_state \
         ) \
         select id, task_id, window_key, status, trace_parent, trace_state from ins",
    )
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
    /// ([`cancel_unfinished_between`]).
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
    // (migration 6); a task's PENDING rows are sorted by their window (top-N, in memory of
    // the size of the limit), never returned.
    let probe = |dir: &str, limit: &str| {
        format!(
            "select * from ( \
                 (select window_key, scheduled_at from task_instance \
                  where task_id = d.task_id and status = 'PENDING' \
                  order by scheduled_at {dir}, window_key {dir} limit {limit}) \
                 union all \
                 (select window_key, scheduled_at from task_instance \
                  where task_id = d.task_id and status = 'RUNNING' \
                  order by scheduled_at {dir}, window_key {dir} limit {limit}) \
                 union all \
                 (select window_key, scheduled_at from task_instance \
                  where task_id = d.task_id and status = 'FAILED' \
                  order by scheduled_at {dir}, window_key {dir} limit {limit}) \
             ) u order by scheduled_at {dir}, window_key {dir} limit {limit}"
        )
    };
    let rows: Vec<(String, String, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select d.task_id, w.window_key, w.oldest \
         from unnest($1::text[], $2::bigint[]) as d(task_id, newest) \
         cross join lateral ( \
             select window_key, scheduled_at, true as oldest from ({oldest}) o \
             union all \
             select window_key, scheduled_at, false from ({newest}) n \
         ) w \
         order by d.task_id, w.oldest desc, w.scheduled_at, w.window_key",
        oldest = probe("asc", "1"),
        newest = probe("desc", "d.newest"),
    )))
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
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select i.task_id, i.window_key \
         from unnest($1::text[], $2::text[]) as d(task_id, from_key) \
         join task_instance i on i.task_id = d.task_id and i.window_key >= d.from_key \
             and i.window_key <= $3",
    )
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

/// Which instances a cancellation is for.
pub(super) enum CancelScope<'a> {
    One(Uuid),
    Windows(&'a str, &'a [String]),
    /// A task's instances that have not started (PENDING) or wait for a retry (FAILED).
    Unstarted(&'a str),
    /// A task's unfinished instances whose windows fall strictly between two of its windows
    /// (by `(scheduled_at, window_key)`, the order of [`unfinished_windows`]).
    Between(&'a str, &'a str, &'a str),
}

impl CancelScope<'_> {
    /// The rows of the scope, its values numbered from `$4`, and the states they are
    /// cancelled from; and the number of the first parameter after its values.
    fn filter(&self) -> (&'static str, Vec<InstanceStatus>, usize) {
        match self {
            CancelScope::One(_) => ("id = $4", legal_sources(Event::Cancel), 5),
            CancelScope::Windows(..) => (
                "task_id = $4 and window_key = any($5)",
                legal_sources(Event::Cancel),
                6,
            ),
            CancelScope::Unstarted(_) => ("task_id = $4", unstarted_sources(), 5),
            CancelScope::Between(..) => (
                "task_id = $4 \
                 and (scheduled_at, window_key) > (select b.scheduled_at, b.window_key \
                     from task_instance b where b.task_id = $4 and b.window_key = $5) \
                 and (scheduled_at, window_key) < (select b.scheduled_at, b.window_key \
                     from task_instance b where b.task_id = $4 and b.window_key = $6)",
                legal_sources(Event::Cancel),
                7,
            ),
        }
    }

    /// Bind the scope's values (`$4`…).
    fn bind<'q, O>(
        &self,
        q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        match *self {
            CancelScope::One(id) => q.bind(id),
            CancelScope::Windows(task_id, keys) => q.bind(task_id.to_owned()).bind(keys.to_vec()),
            CancelScope::Unstarted(task_id) => q.bind(task_id.to_owned()),
            CancelScope::Between(task_id, after, before) => q
                .bind(task_id.to_owned())
                .bind(after.to_owned())
                .bind(before.to_owned()),
        }
    }
}

/// The cancellation statement over `old` (the rows to cancel, locked, with their `status`
/// and `claimed_by`), ending in `select {returning} from upd`.
fn cancel_sql(old: &str, returning: &str) -> String {
    format!(
        "with old as ({old}), upd as ( \
             update task_instance i set status = 'CANCELLED', finished_at = now(), \
                 lease_token = null, lease_expires_at = null, deadline_at = null, \
                 claimed_by = null, error_kind = 'cancelled', error = $3, updated_at = now() \
             from old where i.id = old.id \
             returning i.*, old.status as from_status, old.claimed_by as old_claimed_by \
         ), ev as ( \
             {CLOSE_ATTEMPT_EVENTS} \
             select id, attempt, from_status, 'CANCELLED', $2, $3, now(), 1 from upd \
             ) x order by instance_id, o \
         ) \
         select {returning} from upd"
    )
}

/// Move the instances in `scope` to CANCELLED where the state machine allows it (a
/// compare-and-swap on their current status), clear any lease so a running worker is fenced
/// out, and write one event each. The one statement every cancellation path uses; scopes that
/// can hold a whole backlog go through [`cancel_in_batches`].
pub(super) async fn cancel_where(
    conn: &mut PgConnection,
    scope: CancelScope<'_>,
    actor: &str,
    reason: &str,
) -> Result<Vec<InstanceRow>> {
    let (filter, from, _) = scope.filter();
    let sql = cancel_sql(
        &format!(
            "select id, status, claimed_by from task_instance \
             where {filter} and status = any($1) for update"
        ),
        INSTANCE_COLUMNS,
    );
    let q = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(status_names(&from))
        .bind(actor)
        .bind(reason);
    scope
        .bind(q)
        .fetch_all(&mut *conn)
        .await
        .map_err(crate::store::Error::from)
}

/// Most instances one statement of [`cancel_in_batches`] cancels.
pub const CANCEL_BATCH: i64 = 1000;

/// [`cancel_where`] for a scope that may hold a task's whole backlog (tens of thousands of
/// rows), in the caller's transaction (a deletion still cancels all or nothing): statements of
/// at most `batch` instances each, in id order from where the last one stopped (a keyset, so
/// no row is read twice), each handing back only its count and last id. Returns how many
/// were cancelled.
pub(super) async fn cancel_in_batches(
    conn: &mut PgConnection,
    scope: CancelScope<'_>,
    actor: &str,
    reason: &str,
    batch: i64,
) -> Result<u64> {
    let batch = batch.max(1);
    let (filter, from, next) = scope.filter();
    let (after, limit) = (next, next + 1);
    let sql = cancel_sql(
        &format!(
            "select id, status, claimed_by from task_instance \
             where {filter} and status = any($1) and (${after}::uuid is null or id > ${after}) \
             order by id limit ${limit} for update"
        ),
        "count(*), (select u.id from upd u order by u.id desc limit 1)",
    );
    let statuses = status_names(&from);
    let mut last: Option<Uuid> = None;
    let mut cancelled = 0u64;
    loop {
        let q = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(&statuses)
            .bind(actor)
            .bind(reason);
        let (n, last_id): (i64, Option<Uuid>) = scope
            .bind(q)
            .bind(last)
            .bind(batch)
            .fetch_one(&mut *conn)
            .await?;
        cancelled += u64::try_from(n).unwrap_or(0);
        match last_id {
            Some(id) if n >= batch => last = Some(id),
            _ => return Ok(cancelled),
        }
    }
}

/// The states [`CancelScope::Unstarted`] cancels: the sources of a cancel but RUNNING, which
/// is a started attempt (PENDING and FAILED).
fn unstarted_sources() -> Vec<InstanceStatus> {
    legal_sources(Event::Cancel)
        .into_iter()
        .filter(|s| *s != InstanceStatus::Running)
        .collect()
}

/// Cancel the named windows of a task if they are still cancellable (overlap `replace`).
/// Returns the window keys actually cancelled.
pub async fn cancel_windows(
    conn: &mut PgConnection,
    task_id: &str,
    window_keys: &[String],
    actor: &str,
    reason: &str,
) -> Result<Vec<String>> {
    if window_keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = cancel_where(
        conn,
        CancelScope::Windows(task_id, window_keys),
        actor,
        reason,
    )
    .await?;
    Ok(rows.into_iter().map(|r| r.window_key).collect())
}

/// Cancel a task's instances that have not started (PENDING) or wait for a retry (FAILED).
pub async fn cancel_unstarted_of_task(
    conn: &mut PgConnection,
    task_id: &str,
    actor: &str,
    reason: &str,
) -> Result<u64> {
    cancel_in_batches(
        conn,
        CancelScope::Unstarted(task_id),
        actor,
        reason,
        CANCEL_BATCH,
    )
    .await
}

/// Cancel a task's unfinished instances whose windows fall strictly between the windows
/// `after` and `before` (overlap `replace` superseding the windows [`unfinished_windows`] left
/// unread). Returns how many were cancelled.
pub async fn cancel_unfinished_between(
    conn: &mut PgConnection,
    task_id: &str,
    after: &str,
    before: &str,
    actor: &str,
    reason: &str,
) -> Result<u64> {
    cancel_in_batches(
        conn,
        CancelScope::Between(task_id, after, before),
        actor,
        reason,
        CANCEL_BATCH,
    )
    .await
}

/// A task moved to `agent_id` takes its unstarted instances along (PENDING, and FAILED ones
/// waiting for their retry): claims find an agent's work by the instance's `agent_id`, so rows
/// left under the old agent would be claimable by no one who runs the task now. RUNNING
/// instances stay with the worker holding them. The new agent's waiting claims are woken.
/// Returns how many instances moved.
pub async fn move_unstarted_to_agent(
    conn: &mut PgConnection,
    task_id: &str,
    agent_id: &str,
) -> Result<u64> {
    let moved = sqlx::query(
        "update task_instance set agent_id = $2, updated_at = now() \
         where task_id = $1 and status = any($3) and agent_id <> $2",
    )
    .bind(task_id)
    .bind(agent_id)
    .bind(status_names(&unstarted_sources()))
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if moved > 0 {
        notify_work(conn, agent_id).await?;
    }
    Ok(moved)
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
    let created: Vec<(Uuid, String, String)> = sqlx::query_as(
        "with d as ( \
             select id, agent_id, spec from tasks where upstream_task_id = $1 and not paused \
             order by id for key share \
         ), ins as ( \
             insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
                 agent_id, max_attempts, available_at, upstream_instance_id, upstream_result_digest, \
                 created_by, created_status, created_reason, limit_draws, priority) \
             select gen_random_uuid(), d.id, $2, $3, 'PENDING', 'dependency', d.agent_id, \
                 coalesce((d.spec->'execution'->>'max_retries')::int, 3) + 1, now(), $4, $5, \
                 'dependency', 'PENDING', $6, \
                 kairos_render_limit_draws(d.spec->'execution'->'limits', d.id, d.agent_id, \
                     coalesce(d.spec->'context', '{}'::jsonb)), \
                 coalesce((d.spec->'execution'->>'priority')::smallint, 5) \
             from d \
             on conflict (task_id, window_key) do nothing \
             returning id, task_id, agent_id \
         ) \
         select id, task_id, agent_id from ins",
    )
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
    let paused: Vec<String> =
        sqlx::query_scalar("select id from tasks where upstream_task_id = $1 and paused")
            .bind(&upstream.task_id)
            .fetch_all(&mut *conn)
            .await?;
    for task_id in paused {
        tracing::info!(task_id = %task_id, window_key = %upstream.window_key, upstream_task_id = %upstream.task_id, reason = "task paused", "dependent window not materialised");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Manual triggers.

/// A run asked for over the API.
#[derive(Debug, Clone, Default)]
pub struct ManualTrigger {
    /// Caller-chosen key; `manual:<uuid>` when absent.
    pub window_key: Option<String>,
    /// When it may be claimed; now when absent.
    pub run_at: Option<DateTime<Utc>>,
    pub delay_seconds: Option<i64>,
    /// Merged over the task's context (top-level keys) at claim time.
    pub context: Option<Value>,
    /// The run's priority; the task's `execution.priority` when absent.
    pub priority: Option<i16>,
    /// The trigger's trace context (`traceparent`), if it came with a valid one.
    pub trace: Option<TraceContext>,
}

/// What a manual trigger did ([`trigger_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Triggered {
    /// A new instance.
    Created,
    /// The task already had an instance with the trigger's window key (returned unchanged).
    Existing,
    /// The task's waiting debounced instance took the trigger (`execution.debounce`): moved
    /// later, with the trigger's context.
    Debounced,
}

/// Create a manual (or delayed) instance of `task_id`, or find the one with the same key.
/// Returns whether it was created ([`trigger_run`] without a debounce key: a trigger that a
/// debounced task's waiting instance takes is not a creation).
pub async fn trigger_instance(
    pool: &PgPool,
    task_id: &str,
    t: &ManualTrigger,
    actor: &str,
) -> Result<(bool, Instance)> {
    let (what, inst) = trigger_run(pool, task_id, t, None, actor).await?;
    Ok((what == Triggered::Created, inst))
}

/// Create a manual (or delayed) instance of `task_id`, or find the one with the same key, or,
/// for a task with `execution.debounce` and a trigger without a window key, make or move the
/// task's waiting instance of `debounce_key` (default: the task's id). Manual runs are not
/// subject to overlap skips (someone asked for this run); the concurrency limit still holds at
/// claim time. A manual run of a task whose next window is being staged waits for it
/// ([`hold_task_cursor`](crate::store::hold_task_cursor)).
///
/// Refused (`Invalid`): a `debounce_key` for a task without `execution.debounce`, and `run_at`
/// or `delay_seconds` on a debounced trigger (its debounce decides when it runs).
pub async fn trigger_run(
    pool: &PgPool,
    task_id: &str,
    t: &ManualTrigger,
    debounce_key: Option<&str>,
    actor: &str,
) -> Result<(Triggered, Instance)> {
    let mut tx = crate::store::begin(pool).await?;
    crate::store::hold_task_cursor(&mut tx, task_id).await?;
    // The run's time is read after that wait: a run that waited for a staged window comes
    // after it.
    let row: Option<(Json<Value>, DateTime<Utc>)> =
        sqlx::query_as("select spec, clock_timestamp() from tasks where id = $1")
            .bind(task_id)
            .fetch_optional(&mut *tx)
            .await?;
    let (spec, now) = row.ok_or(Error::NotFound)?;
    let spec: crate::domain::task::TaskSpec =
        serde_json::from_value(spec.0).map_err(|e| Error::Corrupt(format!("tasks.spec: {e}")))?;
    match (&spec.execution.debounce, &t.window_key) {
        (Some(debounce), None) => {
            let key = debounce_key.unwrap_or(task_id);
            for (field, given) in [
                ("run_at", t.run_at.is_some()),
                ("delay_seconds", t.delay_seconds.is_some()),
            ] {
                if given {
                    return Err(Error::Invalid(FieldError::new(
                        field,
                        "is not taken by a debounced trigger: the task's execution.debounce \
                         decides when the run starts (give a window_key for a run of its own)",
                    )));
                }
            }
            let window_key = format!("manual:{}", Uuid::new_v4());
            let (id, outcome) = super::debounce::debounce_trigger(
                &mut tx,
                &spec,
                debounce,
                key,
                &window_key,
                t,
                actor,
            )
            .await?;
            let what = match outcome {
                super::debounce::Outcome::Created => {
                    // Its waiting claims learn when it comes (they wake, find it not yet
                    // available, and wait for its available_at).
                    notify_work(&mut tx, &spec.agent_id).await?;
                    Triggered::Created
                }
                super::debounce::Outcome::Debounced => Triggered::Debounced,
            };
            tx.commit().await?;
            match what {
                Triggered::Created => {
                    metrics::counter!("kairos_windows_created_total").increment(1)
                }
                _ => metrics::counter!("kairos_debounced_triggers_total").increment(1),
            }
            let inst = super::get_instance(pool, id).await?;
            return Ok((what, inst));
        }
        (None, _) if debounce_key.is_some() => {
            return Err(Error::Invalid(FieldError::new(
                "debounce_key",
                "the task has no execution.debounce: its manual runs are not debounced",
            )));
        }
        _ => {}
    }
    let at = match (t.run_at, t.delay_seconds) {
        (Some(at), _) => at,
        (None, Some(d)) => now + chrono::Duration::seconds(d),
        (None, None) => now,
    };
    // A key that is an instant names that window however it is spelled. A window triggered
    // under another spelling before keys were made canonical still answers to that spelling.
    let key = match &t.window_key {
        None => format!("manual:{}", Uuid::new_v4()),
        Some(k) => match canonical_window_key(k) {
            Some(c) if c != *k => match get_instance_by_window(&mut *tx, task_id, k).await {
                Ok(old) => return Ok((Triggered::Existing, old)),
                Err(Error::NotFound) => c,
                Err(e) => return Err(e),
            },
            _ => k.clone(),
        },
    };
    let report = insert_windows_at(
        &mut tx,
        &[NewInstance {
            task_id: task_id.to_owned(),
            window_key: key.clone(),
            scheduled_at: at,
            status: InstanceStatus::Pending,
            source: Source::Manual,
            agent_id: spec.agent_id.clone(),
            max_attempts: spec.execution.max_attempts(),
            available_at: at,
            skip_reason: None,
            context_override: t.context.clone(),
            priority: t.priority,
            trace: t.trace.clone(),
        }],
        actor,
        Some(now),
    )
    .await?;
    let created = !report.created.is_empty();
    if created && at <= now {
        notify_work(&mut tx, &spec.agent_id).await?;
    }
    tx.commit().await?;
    if created {
        metrics::counter!("kairos_windows_created_total").increment(1);
    }
    let inst = get_instance_by_window(pool, task_id, &key).await?;
    let what = if created {
        Triggered::Created
    } else {
        Triggered::Existing
    };
    Ok((what, inst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unstarted_instances_are_the_pending_and_failed_ones() {
        assert_eq!(
            unstarted_sources(),
            vec![InstanceStatus::Pending, InstanceStatus::Failed]
        );
    }
}
