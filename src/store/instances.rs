//! The `task_instance` table: idempotent window inserts, compare-and-swap transitions, and the
//! operators' queries. Every transition records itself in the same statement or transaction:
//! happy-path ones on the row (`created_*`, `claimed_by`, `finished_by`), the others as
//! `instance_events` rows (see `events.rs` and migration 2).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{Error, RUNNING_BY_ID, Result, map_db_error, outbox};
use crate::domain::instance::{
    Event, Instance, InstanceStatus, Source, idempotency_key, legal_sources, transition,
};
use crate::domain::retry::backoff;
use crate::domain::task::RetryBackoff;

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
}

/// One inserted row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Created {
    pub id: Uuid,
    pub task_id: String,
    pub window_key: String,
    pub status: String,
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
    let created: Vec<Created> = sqlx::query_as(
        "with ins as ( \
             insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
                 agent_id, attempt, max_attempts, available_at, skip_reason, finished_at, \
                 context_override, created_by, created_status, created_reason) \
             select id, task_id, window_key, scheduled_at, status, source, agent_id, 1, \
                 max_attempts, available_at, skip_reason, \
                 case when status = 'SKIPPED' then now() end, context_override, $12, status, \
                 coalesce(skip_reason, source) \
             from unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], \
                         $6::text[], $7::text[], $8::int[], $9::timestamptz[], $10::text[], \
                         $11::jsonb[]) \
                 as r(id, task_id, window_key, scheduled_at, status, source, agent_id, \
                      max_attempts, available_at, skip_reason, context_override) \
             on conflict (task_id, window_key) do nothing \
             returning id, task_id, window_key, status \
         ) \
         select id, task_id, window_key, status from ins",
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
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;

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

/// The window keys of each task's unfinished (PENDING/RUNNING/FAILED) instances, oldest first.
pub async fn unfinished_windows(
    conn: &mut PgConnection,
    task_ids: &[&str],
) -> Result<HashMap<String, Vec<String>>> {
    // One probe per status, each through that status's task-keyed partial index (migration 6).
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select task_id, window_key from ( \
             select task_id, window_key, scheduled_at from task_instance \
             where task_id = any($1) and status = 'PENDING' \
             union all \
             select task_id, window_key, scheduled_at from task_instance \
             where task_id = any($1) and status = 'RUNNING' \
             union all \
             select task_id, window_key, scheduled_at from task_instance \
             where task_id = any($1) and status = 'FAILED' \
         ) u order by task_id, scheduled_at, window_key",
    )
    .bind(task_ids)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for (task, key) in rows {
        out.entry(task).or_default().push(key);
    }
    Ok(out)
}

/// For each `(task_id, first due window key)`, the keys of rows that already exist from that
/// key up to now (window keys of scheduled windows sort chronologically).
pub async fn existing_windows(
    conn: &mut PgConnection,
    from: &[(&str, String)],
) -> Result<HashMap<String, std::collections::HashSet<String>>> {
    let ids: Vec<&str> = from.iter().map(|f| f.0).collect();
    let keys: Vec<&str> = from.iter().map(|f| f.1.as_str()).collect();
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select i.task_id, i.window_key \
         from unnest($1::text[], $2::text[]) as d(task_id, from_key) \
         join task_instance i on i.task_id = d.task_id and i.window_key >= d.from_key \
             and i.window_key <= to_char(now() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
    )
    .bind(&ids)
    .bind(&keys)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;
    let mut out: HashMap<String, std::collections::HashSet<String>> = HashMap::new();
    for (task, key) in rows {
        out.entry(task).or_default().insert(key);
    }
    Ok(out)
}

fn status_names(statuses: &[InstanceStatus]) -> Vec<&'static str> {
    statuses.iter().map(|s| s.as_str()).collect()
}

/// The first half of an `ev` CTE that closes attempts in `upd`: when the closing attempt's claim
/// lives only on the row (`old_claimed_by`, see migration 2), it becomes an explicit event
/// first, so the history keeps it once the row moves on. The caller appends one `select` of
/// the closing event (with `o = 1`) and `) x order by instance_id, o`, which numbers the claim
/// before the event that ends it.
const CLOSE_ATTEMPT_EVENTS: &str = "insert into instance_events \
         (instance_id, attempt, from_status, to_status, actor, reason, at) \
     select instance_id, attempt, from_status, to_status, actor, reason, at from ( \
         select id as instance_id, attempt, 'PENDING' as from_status, 'RUNNING' as to_status, \
             old_claimed_by as actor, 'claimed by worker ' || coalesce(worker_id, 'unknown') \
                 as reason, started_at as at, 0 as o \
         from upd where old_claimed_by is not null \
         union all";

/// Which instances a cancellation is for.
enum CancelScope<'a> {
    One(Uuid),
    Windows(&'a str, &'a [String]),
    /// A task's instances that have not started (PENDING) or wait for a retry (FAILED).
    Unstarted(&'a str),
}

/// Move the instances in `scope` to CANCELLED where the state machine allows it (a
/// compare-and-swap on their current status), clear any lease so a running worker is fenced
/// out, and write one event each. The one statement every cancellation path uses.
async fn cancel_where(
    conn: &mut PgConnection,
    scope: CancelScope<'_>,
    actor: &str,
    reason: &str,
) -> Result<Vec<InstanceRow>> {
    let (filter, from) = match scope {
        CancelScope::One(_) => ("id = $4", legal_sources(Event::Cancel)),
        CancelScope::Windows(..) => (
            "task_id = $4 and window_key = any($5)",
            legal_sources(Event::Cancel),
        ),
        CancelScope::Unstarted(_) => (
            "task_id = $4",
            vec![InstanceStatus::Pending, InstanceStatus::Failed],
        ),
    };
    let sql = format!(
        "with old as ( \
             select id, status, claimed_by from task_instance \
             where {filter} and status = any($1) for update \
         ), upd as ( \
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
         select {INSTANCE_COLUMNS} from upd"
    );
    let q = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(status_names(&from))
        .bind(actor)
        .bind(reason);
    let q = match scope {
        CancelScope::One(id) => q.bind(id),
        CancelScope::Windows(task_id, keys) => q.bind(task_id).bind(keys),
        CancelScope::Unstarted(task_id) => q.bind(task_id),
    };
    q.fetch_all(&mut *conn).await.map_err(map_db_error)
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
    let rows = cancel_where(conn, CancelScope::Unstarted(task_id), actor, reason).await?;
    Ok(rows.len() as u64)
}

#[derive(sqlx::FromRow)]
pub(super) struct InstanceRow {
    pub(super) id: Uuid,
    pub(super) task_id: String,
    pub(super) agent_id: String,
    pub(super) window_key: String,
    pub(super) scheduled_at: DateTime<Utc>,
    pub(super) status: String,
    pub(super) source: String,
    pub(super) attempt: i32,
    pub(super) max_attempts: i32,
    pub(super) available_at: DateTime<Utc>,
    pub(super) lease_expires_at: Option<DateTime<Utc>>,
    pub(super) worker_id: Option<String>,
    pub(super) started_at: Option<DateTime<Utc>>,
    pub(super) finished_at: Option<DateTime<Utc>>,
    pub(super) result: Option<Json<Value>>,
    pub(super) error: Option<String>,
    pub(super) error_kind: Option<String>,
    pub(super) skip_reason: Option<String>,
    pub(super) upstream_instance_id: Option<Uuid>,
    pub(super) upstream_result_digest: Option<String>,
    pub(super) created_at: DateTime<Utc>,
    pub(super) updated_at: DateTime<Utc>,
}

pub(super) const INSTANCE_COLUMNS: &str = "id, task_id, agent_id, window_key, scheduled_at, status, source, attempt, \
     max_attempts, available_at, lease_expires_at, worker_id, started_at, finished_at, result, \
     error, error_kind, skip_reason, upstream_instance_id, upstream_result_digest, created_at, \
     updated_at";

impl TryFrom<InstanceRow> for Instance {
    type Error = Error;
    fn try_from(r: InstanceRow) -> Result<Instance> {
        Ok(Instance {
            idempotency_key: idempotency_key(&r.task_id, &r.window_key),
            status: r.status.parse().map_err(Error::Corrupt)?,
            source: r.source.parse().map_err(Error::Corrupt)?,
            id: r.id,
            task_id: r.task_id,
            agent_id: r.agent_id,
            window_key: r.window_key,
            scheduled_at: r.scheduled_at,
            attempt: r.attempt,
            max_attempts: r.max_attempts,
            available_at: r.available_at,
            lease_expires_at: r.lease_expires_at,
            worker_id: r.worker_id,
            started_at: r.started_at,
            finished_at: r.finished_at,
            result: r.result.map(|j| j.0),
            error: r.error,
            error_kind: r.error_kind,
            skip_reason: r.skip_reason,
            upstream_instance_id: r.upstream_instance_id,
            upstream_result_digest: r.upstream_result_digest,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

pub async fn get_instance(pool: &PgPool, id: Uuid) -> Result<Instance> {
    let row: InstanceRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {INSTANCE_COLUMNS} from task_instance where id = $1"
    )))
    .bind(id)
    .fetch_optional(pool)
    .await
    .map_err(map_db_error)?
    .ok_or(Error::NotFound)?;
    row.try_into()
}

#[derive(Debug, Clone, Default)]
pub struct InstanceFilter {
    pub task_id: Option<String>,
    pub agent_id: Option<String>,
    /// Only these agents' instances (an agent token's scope).
    pub agents_in: Option<Vec<String>>,
    pub statuses: Vec<InstanceStatus>,
    pub window_key: Option<String>,
    /// `scheduled_at >= from`.
    pub from: Option<DateTime<Utc>>,
    /// `scheduled_at < to`.
    pub to: Option<DateTime<Utc>>,
    /// Keyset cursor: rows strictly before `(scheduled_at, id)` in newest-first order.
    pub before: Option<(DateTime<Utc>, Uuid)>,
    pub limit: i64,
}

/// Instances newest first (by `scheduled_at`, then id), one page. Several statuses are read as
/// one ordered page per status, merged: PostgreSQL 15 cannot walk a `(status, scheduled_at)`
/// index in time order for `status = any(…)`, and would otherwise read and sort every row of
/// those statuses (the console's DEAD queue over DEAD and FAILED).
pub async fn list_instances(pool: &PgPool, f: &InstanceFilter) -> Result<Vec<Instance>> {
    let mut statuses: Vec<&InstanceStatus> = Vec::new();
    for s in &f.statuses {
        if !statuses.contains(&s) {
            statuses.push(s);
        }
    }
    let mut q = sqlx::QueryBuilder::<sqlx::Postgres>::new("");
    if statuses.len() <= 1 {
        push_instance_page(&mut q, f, statuses.first().copied());
    } else {
        q.push("select * from (");
        for (i, s) in statuses.iter().enumerate() {
            if i > 0 {
                q.push(" union all ");
            }
            q.push("(");
            push_instance_page(&mut q, f, Some(s));
            q.push(")");
        }
        q.push(") pages order by scheduled_at desc, id desc limit ")
            .push_bind(f.limit);
    }
    let rows: Vec<InstanceRow> = q
        .build_query_as()
        .fetch_all(pool)
        .await
        .map_err(map_db_error)?;
    rows.into_iter().map(Instance::try_from).collect()
}

/// One page of `f` restricted to `status` (any status when `None`).
fn push_instance_page(
    q: &mut sqlx::QueryBuilder<sqlx::Postgres>,
    f: &InstanceFilter,
    status: Option<&InstanceStatus>,
) {
    q.push(format!(
        "select {INSTANCE_COLUMNS} from task_instance where true"
    ));
    if let Some(t) = &f.task_id {
        q.push(" and task_id = ").push_bind(t.clone());
    }
    super::push_agent_filters(q, &f.agent_id, &f.agents_in);
    if let Some(s) = status {
        q.push(" and status = ").push_bind(s.as_str());
    }
    if let Some(k) = &f.window_key {
        q.push(" and window_key = ").push_bind(k.clone());
    }
    if let Some(from) = f.from {
        q.push(" and scheduled_at >= ").push_bind(from);
    }
    if let Some(to) = f.to {
        q.push(" and scheduled_at < ").push_bind(to);
    }
    if let Some((at, id)) = f.before {
        q.push(" and (scheduled_at, id) < (")
            .push_bind(at)
            .push(", ")
            .push_bind(id)
            .push(")");
    }
    q.push(" order by scheduled_at desc, id desc limit ")
        .push_bind(f.limit);
}

// ---------------------------------------------------------------------------------------------
// Claims and lease-fenced transitions.

/// Explain a compare-and-swap on (id, RUNNING, token) that matched nothing: 404 when the
/// instance does not exist, otherwise a fence rejection describing where it stands.
async fn fence_error(pool: &PgPool, id: Uuid) -> Error {
    match get_instance(pool, id).await {
        Ok(i) => Error::Fenced {
            instance_id: i.id,
            task_id: i.task_id,
            window_key: i.window_key,
            attempt: i.attempt,
            status: i.status.as_str().to_owned(),
        },
        Err(e) => e,
    }
}

/// One lease extension asked for by a lease holder.
#[derive(Debug, Clone)]
pub struct LeaseExtension {
    pub id: Uuid,
    pub lease_token: Uuid,
    pub lease_seconds: i64,
}

/// Extend many leases in the caller's transaction, each a compare-and-swap on (id, RUNNING,
/// lease token). Returns the instances written.
pub(super) async fn heartbeat_in(
    conn: &mut PgConnection,
    items: &[LeaseExtension],
) -> Result<Vec<Instance>> {
    let ids: Vec<Uuid> = items.iter().map(|h| h.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|h| h.lease_token).collect();
    let secs: Vec<f64> = items.iter().map(|h| h.lease_seconds as f64).collect();
    let rows: Vec<InstanceRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with f as ( \
             select * from unnest($1::uuid[], $2::uuid[], $3::float8[]) as f(id, token, secs) \
         ), upd as ( \
             update task_instance i \
             set lease_expires_at = now() + make_interval(secs => f.secs), updated_at = now() \
             from f where i.id = f.id and {RUNNING_BY_ID} and i.lease_token = f.token \
             returning i.* \
         ) \
         select {INSTANCE_COLUMNS} from upd"
    )))
    .bind(&ids)
    .bind(&tokens)
    .bind(&secs)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;
    rows.into_iter().map(Instance::try_from).collect()
}

/// Announce that `agent_id` may have claimable work, inside the caller's transaction.
pub async fn notify_work(conn: &mut PgConnection, agent_id: &str) -> Result<()> {
    sqlx::query("select pg_notify($1, $2)")
        .bind(super::WORK_CHANNEL)
        .bind(agent_id)
        .execute(&mut *conn)
        .await
        .map_err(map_db_error)?;
    Ok(())
}

/// One completion reported by a lease holder.
#[derive(Debug, Clone)]
pub struct Completion {
    pub id: Uuid,
    pub lease_token: Uuid,
    pub result: Option<Value>,
    /// Who reports it (the event actor); `agent:<worker_id>` of the instance when `None`.
    pub actor: Option<String>,
}

/// One answer per id, in order: the written instance, or why the compare-and-swap missed.
pub(super) async fn answer_each(
    pool: &PgPool,
    ids: impl Iterator<Item = Uuid>,
    written: Vec<Instance>,
) -> Result<Vec<Result<Instance>>> {
    let mut by_id: HashMap<Uuid, Instance> = written.into_iter().map(|i| (i.id, i)).collect();
    let mut out = Vec::new();
    for id in ids {
        match by_id.remove(&id) {
            Some(inst) => out.push(Ok(inst)),
            None => out.push(Err(fence_error(pool, id).await)),
        }
    }
    Ok(out)
}

#[derive(sqlx::FromRow)]
struct CompletedRow {
    #[sqlx(flatten)]
    instance: InstanceRow,
    /// Some task of the batch has dependents (`after` tasks) to trigger.
    has_dependents: bool,
    /// Some task of the batch has `notify.on_success` receivers.
    notifies: bool,
}

/// Lock order for task rows. Completions, failures and reaps of one batch touch several tasks'
/// counters; two batches (or a batch and the reaper) over overlapping tasks that lock them in
/// different orders can deadlock (SQLSTATE 40P01). Each statement that updates task rows
/// therefore locks them first with this sub-select, in id order. `NO KEY UPDATE` is the lock the
/// update itself takes, so this adds no new conflict, only an order.
const TASKS_OF_UPD_IN_ID_ORDER: &str =
    "select id from tasks where id in (select task_id from upd) order by id for no key update";

/// [`TASKS_OF_UPD_IN_ID_ORDER`] restricted to tasks whose failure count a success must reset.
const TASKS_TO_RESET: &str = "select id from tasks where id in (select task_id from upd) \
     and consecutive_failures <> 0 order by id for no key update";

/// The completions in the caller's transaction: each a compare-and-swap on (id, RUNNING,
/// lease token). In the same statement: the success (on the row, `finished_by`), the tasks'
/// failure counts reset, and the wake-ups of [`queued_work_sql`] (its snapshot is from
/// before the update). Only when the batch needs them: the dependents' windows and the
/// `instance.succeeded` notifications. Returns the instances written.
pub(super) async fn complete_in(
    conn: &mut PgConnection,
    items: &[Completion],
) -> Result<Vec<Instance>> {
    let ids: Vec<Uuid> = items.iter().map(|c| c.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|c| c.lease_token).collect();
    let results: Vec<Option<Json<&Value>>> =
        items.iter().map(|c| c.result.as_ref().map(Json)).collect();
    let actors: Vec<Option<&str>> = items.iter().map(|c| c.actor.as_deref()).collect();
    let rows: Vec<CompletedRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with f as ( \
             select * from unnest($1::uuid[], $2::uuid[], $3::jsonb[], $4::text[]) \
                 as f(id, token, result, actor) \
         ), upd as ( \
             update task_instance i set status = 'SUCCESS', result = f.result, finished_at = now(), \
                 lease_token = null, lease_expires_at = null, deadline_at = null, \
                 error = null, error_kind = null, updated_at = now(), \
                 finished_by = coalesce(f.actor, 'agent:' || coalesce(i.worker_id, 'unknown')) \
             from f where i.id = f.id and {RUNNING_BY_ID} and i.lease_token = f.token \
             returning i.* \
         ), tk as ( \
             update tasks set consecutive_failures = 0 \
             where id in ({TASKS_TO_RESET}) \
         ), info as ( \
             select bool_or(exists ( \
                        select 1 from tasks d where d.upstream_task_id = t.id)) as has_dependents, \
                    bool_or(jsonb_array_length(coalesce(t.spec->'notify'->'on_success', '[]')) > 0) \
                        as notifies, \
                    count(pg_notify($5, t.agent_id)) filter (where {queued}) \
                        as woken \
             from tasks t where t.id in (select distinct task_id from upd) \
         ) \
         select {INSTANCE_COLUMNS}, coalesce(info.has_dependents, false) as has_dependents, \
             coalesce(info.notifies, false) as notifies \
         from upd cross join info",
        queued = queued_work_sql()
    )))
    .bind(&ids)
    .bind(&tokens)
    .bind(&results)
    .bind(&actors)
    .bind(super::WORK_CHANNEL)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;
    let has_dependents = rows.iter().any(|r| r.has_dependents);
    let notifies = rows.iter().any(|r| r.notifies);
    let done: Vec<Instance> = rows
        .into_iter()
        .map(|r| Instance::try_from(r.instance))
        .collect::<Result<_>>()?;
    if has_dependents {
        for inst in &done {
            let result = items
                .iter()
                .find(|c| c.id == inst.id)
                .and_then(|c| c.result.as_ref());
            trigger_dependents(conn, inst, result).await?;
        }
    }
    if notifies {
        let events: Vec<outbox::Event> = done
            .iter()
            .map(|inst| outbox::Event {
                kind: "instance.succeeded",
                task_id: inst.task_id.clone(),
                instance_id: Some(inst.id),
                list: outbox::NotifyList::OnSuccess,
                data: serde_json::json!({ "instance": inst }),
            })
            .collect();
        outbox::enqueue(conn, &events).await?;
    }
    Ok(done)
}

/// The one wake-up rule, for a task `t` some of whose RUNNING instances are finishing in this
/// transaction, read *before* they change: a finished slot may unblock the task's queued work,
/// so the agent is woken where the task has PENDING work. Where the task was below its limit
/// that work was claimable already and the NOTIFY wakes nobody (it is one per agent and
/// transaction: PostgreSQL folds repeats). Testing for the limit first cost more than the
/// NOTIFY it saved: it counted the task's RUNNING rows, and during a drain the run-slot index
/// of a task holds mostly entries of just-finished rows, each read in the heap (single
/// completes, 16 agents: about half of a completion's statement time).
pub fn queued_work_sql() -> String {
    super::has_pending_sql("t.id", "true")
}

/// Wake the agents of the tasks among `task_ids` that [`queued_work_sql`] holds for.
/// Call it before the finishing rows leave RUNNING (the NOTIFY is sent at commit).
async fn notify_queued(conn: &mut PgConnection, task_ids: &[&str]) -> Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "select pg_notify($1, t.agent_id) from tasks t \
         where t.id = any($2) and {}",
        queued_work_sql()
    )))
    .bind(super::WORK_CHANNEL)
    .bind(task_ids)
    .execute(&mut *conn)
    .await
    .map_err(map_db_error)?;
    Ok(())
}

/// `sha256:<hex>` of a result's JSON text (`null` when there is none): what a downstream
/// instance records of its upstream's output, so a chained task can check what it built on.
pub fn result_digest(result: Option<&Value>) -> String {
    use sha2::{Digest, Sha256};
    let text = result
        .map(Value::to_string)
        .unwrap_or_else(|| "null".to_owned());
    let hash = Sha256::digest(text.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// In the transaction of an upstream SUCCESS: insert the same window for every unpaused task
/// that runs `after` it (`source = dependency`), recording the upstream instance and its result
/// digest. The unique window key makes a re-run of the upstream window trigger nothing more.
async fn trigger_dependents(
    conn: &mut PgConnection,
    upstream: &Instance,
    result: Option<&Value>,
) -> Result<()> {
    let digest = result_digest(result);
    let reason = format!("dependency: upstream instance {} succeeded", upstream.id);
    let created: Vec<(Uuid, String, String)> = sqlx::query_as(
        "with d as ( \
             select id, agent_id, spec from tasks where upstream_task_id = $1 and not paused \
         ), ins as ( \
             insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
                 agent_id, max_attempts, available_at, upstream_instance_id, upstream_result_digest, \
                 created_by, created_status, created_reason) \
             select gen_random_uuid(), d.id, $2, $3, 'PENDING', 'dependency', d.agent_id, \
                 coalesce((d.spec->'execution'->>'max_retries')::int, 3) + 1, now(), $4, $5, \
                 'dependency', 'PENDING', $6 \
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
    .await
    .map_err(map_db_error)?;
    let mut agents: Vec<&str> = created.iter().map(|c| c.2.as_str()).collect();
    agents.sort_unstable();
    agents.dedup();
    for agent in agents {
        notify_work(conn, agent).await?;
    }
    for (id, task_id, _) in &created {
        tracing::info!(task_id = %task_id, window_key = %upstream.window_key, instance_id = %id, upstream_task_id = %upstream.task_id, upstream_instance_id = %upstream.id, "dependent window materialised");
    }
    let paused: Vec<String> =
        sqlx::query_scalar("select id from tasks where upstream_task_id = $1 and paused")
            .bind(&upstream.task_id)
            .fetch_all(&mut *conn)
            .await
            .map_err(map_db_error)?;
    for task_id in paused {
        tracing::info!(task_id = %task_id, window_key = %upstream.window_key, upstream_task_id = %upstream.task_id, reason = "task paused", "dependent window not materialised");
    }
    Ok(())
}

/// One failed attempt to record: decided in Rust (state machine, backoff), written in SQL.
#[derive(Debug, Clone)]
pub struct Failure {
    pub id: Uuid,
    pub lease_token: Uuid,
    /// FAILED (attempts remain) or DEAD.
    pub to: InstanceStatus,
    /// Backoff before the retry scanner may make it PENDING again (FAILED only).
    pub delay: std::time::Duration,
    pub error: String,
    pub error_kind: &'static str,
}

/// A RUNNING instance about to fail, with what deciding FAILED vs DEAD needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunningAttempt {
    pub id: Uuid,
    pub task_id: String,
    pub window_key: String,
    pub agent_id: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub lease_token: Uuid,
    /// The worker holding the lease.
    pub worker_id: Option<String>,
    /// The task's `execution.retry_backoff` as stored; null when the task was deleted.
    pub retry_backoff: Option<Json<Value>>,
    /// False when the task was deleted: nobody is left to retry for.
    pub task_exists: bool,
    /// `lease_expired` or `timeout` for reaped rows; null otherwise.
    pub expiry: Option<String>,
}

/// The [`RunningAttempt`] columns but `expiry`, for `task_instance i left join tasks t`.
const RUNNING_ATTEMPT_COLUMNS: &str = "i.id, i.task_id, i.window_key, i.agent_id, i.attempt, \
     i.max_attempts, i.lease_token, i.worker_id, \
     t.spec->'execution'->'retry_backoff' as retry_backoff, t.id is not null as task_exists";

/// Lock up to `limit` RUNNING instances whose lease expired or whose run passed its deadline,
/// skipping rows another replica's reaper holds. (`lease_expires_at is not null` holds for
/// every RUNNING row; it is spelled out because the expiry index requires it: migration 4.)
pub async fn lock_expired(conn: &mut PgConnection, limit: i64) -> Result<Vec<RunningAttempt>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {RUNNING_ATTEMPT_COLUMNS}, \
             case when i.deadline_at < now() then 'timeout' else 'lease_expired' end as expiry \
         from task_instance i left join tasks t on t.id = i.task_id \
         where i.status = 'RUNNING' and i.lease_expires_at is not null \
             and least(i.lease_expires_at, i.deadline_at) < now() \
         order by least(i.lease_expires_at, i.deadline_at) \
         limit $1 \
         for update of i skip locked"
    )))
    .bind(limit)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)
}

/// Write failed attempts: RUNNING → FAILED (with `available_at = now() + delay`) or DEAD, each
/// a compare-and-swap on (id, RUNNING, lease token) with its event, and add the failures to the
/// tasks' `consecutive_failures`. Returns the instances as written.
pub async fn record_failures(
    conn: &mut PgConnection,
    failures: &[Failure],
    actor: &str,
) -> Result<Vec<Instance>> {
    if failures.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = failures.iter().map(|f| f.id).collect();
    let tokens: Vec<Uuid> = failures.iter().map(|f| f.lease_token).collect();
    let tos: Vec<&str> = failures.iter().map(|f| f.to.as_str()).collect();
    let delays: Vec<i64> = failures
        .iter()
        .map(|f| i64::try_from(f.delay.as_millis()).unwrap_or(i64::MAX / 2))
        .collect();
    let errors: Vec<&str> = failures.iter().map(|f| f.error.as_str()).collect();
    let kinds: Vec<&str> = failures.iter().map(|f| f.error_kind).collect();
    let rows: Vec<InstanceRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with f as ( \
             select * from unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[], $5::text[], \
                                  $6::text[]) as f(id, token, to_status, delay_ms, error, kind) \
         ), old as ( \
             select id, claimed_by from task_instance where id = any($1) \
         ), upd as ( \
             update task_instance i set status = f.to_status, error = f.error, \
                 error_kind = f.kind, \
                 available_at = case when f.to_status = 'FAILED' \
                     then now() + f.delay_ms * interval '1 millisecond' else i.available_at end, \
                 finished_at = case when f.to_status = 'DEAD' then now() end, \
                 lease_token = null, lease_expires_at = null, deadline_at = null, \
                 claimed_by = null, updated_at = now() \
             from f, old where i.id = f.id and old.id = i.id and {RUNNING_BY_ID} \
                 and i.lease_token = f.token \
             returning i.*, old.claimed_by as old_claimed_by \
         ), ev as ( \
             {CLOSE_ATTEMPT_EVENTS} \
             select id, attempt, 'RUNNING', status, $7, error_kind || ': ' || left(error, 512), \
                 now(), 1 \
             from upd \
             ) x order by instance_id, o \
         ), tk as ( \
             update tasks t set consecutive_failures = t.consecutive_failures + c.n \
             from (select task_id, count(*)::int as n from upd group by task_id) c \
             where t.id = c.task_id and t.id in ({TASKS_OF_UPD_IN_ID_ORDER}) \
         ) \
         select {INSTANCE_COLUMNS} from upd"
    )))
    .bind(&ids)
    .bind(&tokens)
    .bind(&tos)
    .bind(&delays)
    .bind(&errors)
    .bind(&kinds)
    .bind(actor)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;
    let written: Vec<Instance> = rows
        .into_iter()
        .map(Instance::try_from)
        .collect::<Result<_>>()?;
    let events: Vec<outbox::Event> = written
        .iter()
        .map(|i| outbox::Event {
            kind: if i.status == InstanceStatus::Dead {
                "instance.dead"
            } else {
                "instance.failed"
            },
            task_id: i.task_id.clone(),
            instance_id: Some(i.id),
            list: outbox::NotifyList::OnFailure,
            data: serde_json::json!({ "instance": i }),
        })
        .collect();
    outbox::enqueue(conn, &events).await?;
    let mut tasks: Vec<&str> = written.iter().map(|i| i.task_id.as_str()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    super::tasks::open_circuits(conn, &tasks).await?;
    Ok(written)
}

/// FAILED instances whose backoff has passed → PENDING with `attempt + 1`, at most `limit` per
/// call (the rate limit against retry storms). Wakes the agents' waiting claims.
pub async fn retry_due(conn: &mut PgConnection, limit: i64, actor: &str) -> Result<Vec<Created>> {
    let rows: Vec<(Uuid, String, String, String, i32)> = sqlx::query_as(
        "with due as ( \
             select id from task_instance where status = 'FAILED' and available_at <= now() \
             order by available_at limit $1 for update skip locked \
         ), upd as ( \
             update task_instance i set status = 'PENDING', attempt = i.attempt + 1, \
                 updated_at = now() \
             from due where i.id = due.id and i.status = 'FAILED' \
             returning i.id, i.task_id, i.window_key, i.agent_id, i.attempt \
         ), ev as ( \
             insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason) \
             select id, attempt, 'FAILED', 'PENDING', $2, 'retry: attempt ' || attempt from upd \
         ) \
         select id, task_id, window_key, agent_id, attempt from upd",
    )
    .bind(limit)
    .bind(actor)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;
    let mut agents: Vec<&str> = rows.iter().map(|r| r.3.as_str()).collect();
    agents.sort_unstable();
    agents.dedup();
    for agent in agents {
        notify_work(conn, agent).await?;
    }
    Ok(rows
        .into_iter()
        .map(|(id, task_id, window_key, _, attempt)| Created {
            id,
            task_id,
            window_key,
            status: format!("PENDING attempt {attempt}"),
        })
        .collect())
}

/// The operator-retry write after a CTE `old (id, status)` of locked rows: PENDING with one
/// more attempt allowed, claimable now, its event by actor `$3` with reason `$4`. Follow it
/// with `select … from upd`.
const OPERATOR_RETRY_SQL: &str = "upd as ( \
         update task_instance i set status = 'PENDING', attempt = i.attempt + 1, \
             max_attempts = i.max_attempts + 1, available_at = now(), finished_at = null, \
             started_at = null, worker_id = null, lease_token = null, \
             lease_expires_at = null, deadline_at = null, result = null, error = null, \
             error_kind = null, skip_reason = null, updated_at = now() \
         from old where i.id = old.id \
         returning i.*, old.status as from_status \
     ), ev as ( \
         insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason) \
         select id, attempt, from_status, 'PENDING', $3, $4 from upd \
     ) ";

/// Operator retry: DEAD, FAILED, CANCELLED or SKIPPED → PENDING, one more attempt allowed,
/// claimable now.
pub async fn operator_retry(
    pool: &PgPool,
    id: Uuid,
    actor: &str,
    reason: &str,
) -> Result<Instance> {
    let from = status_names(&legal_sources(Event::OperatorRetry));
    let mut tx = pool.begin().await.map_err(map_db_error)?;
    let row: Option<InstanceRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with old as ( \
             select id, status from task_instance where id = $1 and status = any($2) for update \
         ), {OPERATOR_RETRY_SQL} \
         select {INSTANCE_COLUMNS} from upd"
    )))
    .bind(id)
    .bind(&from)
    .bind(actor)
    .bind(reason)
    .fetch_optional(&mut *tx)
    .await
    .map_err(map_db_error)?;
    let Some(row) = row else {
        drop(tx);
        return Err(illegal_error(pool, id).await);
    };
    let inst: Instance = row.try_into()?;
    notify_work(&mut tx, &inst.agent_id).await?;
    tx.commit().await.map_err(map_db_error)?;
    Ok(inst)
}

/// Operator cancel: PENDING, RUNNING or FAILED → CANCELLED; a running lease is fenced out.
pub async fn operator_cancel(
    pool: &PgPool,
    id: Uuid,
    actor: &str,
    reason: &str,
) -> Result<Instance> {
    let mut conn = pool.acquire().await.map_err(map_db_error)?;
    let row = cancel_where(&mut conn, CancelScope::One(id), actor, reason)
        .await?
        .pop();
    drop(conn);
    match row {
        Some(r) => r.try_into(),
        None => Err(illegal_error(pool, id).await),
    }
}

async fn illegal_error(pool: &PgPool, id: Uuid) -> Error {
    match get_instance(pool, id).await {
        Ok(i) => Error::Illegal {
            instance_id: i.id,
            status: i.status.as_str().to_owned(),
        },
        Err(e) => e,
    }
}

/// Longest `error` text kept for an attempt (longer text is cut, marked with an ellipsis).
pub const MAX_ERROR_LEN: usize = 4096;

/// Cut an error message to [`MAX_ERROR_LEN`] bytes on a character boundary.
pub fn bound_error(error: &str) -> String {
    if error.len() <= MAX_ERROR_LEN {
        return error.to_owned();
    }
    let mut end = MAX_ERROR_LEN - 3;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &error[..end])
}

/// Decide what a failed attempt becomes (FAILED with backoff, or DEAD) by the state machine and
/// the task's backoff policy. `unit` is the jitter draw in [0, 1).
pub fn plan_failure(
    a: &RunningAttempt,
    retryable: bool,
    error: &str,
    error_kind: &'static str,
    unit: f64,
) -> Failure {
    // A task that no longer exists has nobody to retry for.
    let give_up = !retryable || a.attempt >= a.max_attempts || !a.task_exists;
    let to = transition(Some(InstanceStatus::Running), Event::Fail { give_up })
        .unwrap_or(InstanceStatus::Dead);
    let delay = match to {
        InstanceStatus::Failed => backoff(&retry_policy(a), a.attempt, unit),
        _ => std::time::Duration::ZERO,
    };
    Failure {
        id: a.id,
        lease_token: a.lease_token,
        to,
        delay,
        error: bound_error(error),
        error_kind,
    }
}

/// The backoff policy of a failing attempt's task. A stored `retry_backoff` that cannot be read
/// (written by another version, or edited by hand) must not cost the instance its remaining
/// attempts: it is logged and the default policy applies, so the instance stays FAILED with a
/// sensible retry time.
fn retry_policy(a: &RunningAttempt) -> RetryBackoff {
    let read = match &a.retry_backoff {
        Some(j) => serde_json::from_value::<RetryBackoff>(j.0.clone()).map_err(|e| e.to_string()),
        None => Err("execution.retry_backoff is missing".to_owned()),
    };
    read.unwrap_or_else(|reason| {
        let fallback = RetryBackoff::default();
        tracing::warn!(
            task_id = %a.task_id,
            window_key = %a.window_key,
            instance_id = %a.id,
            attempt = a.attempt,
            reason = %reason,
            base_seconds = fallback.base_seconds,
            max_seconds = fallback.max_seconds,
            "stored retry_backoff unreadable; retrying with the default backoff"
        );
        fallback
    })
}

/// One failed attempt reported by its lease holder.
#[derive(Debug, Clone)]
pub struct FailureReport {
    pub id: Uuid,
    pub lease_token: Uuid,
    pub error: String,
    pub retryable: bool,
    /// A retry may start at once instead of after the task's backoff (the attempt was cut
    /// short by kairos itself, not failed by the agent).
    pub retry_at_once: bool,
    pub error_kind: &'static str,
    /// Who reports it (the event actor); `agent:<worker_id>` of the lease holder when `None`.
    pub actor: Option<String>,
}

/// Record many reported failures in the caller's transaction: each locks its RUNNING row
/// under its lease token (missing ones are left out), is planned by the state machine and the
/// task's backoff, and is written as a compare-and-swap. Returns the instances written.
pub(super) async fn fail_in(
    conn: &mut PgConnection,
    items: &[FailureReport],
) -> Result<Vec<Instance>> {
    let ids: Vec<Uuid> = items.iter().map(|f| f.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|f| f.lease_token).collect();
    let running: Vec<RunningAttempt> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {RUNNING_ATTEMPT_COLUMNS}, null::text as expiry \
         from unnest($1::uuid[], $2::uuid[]) as f(id, token) \
         join task_instance i on i.id = f.id and {RUNNING_BY_ID} and i.lease_token = f.token \
         left join tasks t on t.id = i.task_id \
         order by i.id \
         for update of i"
    )))
    .bind(&ids)
    .bind(&tokens)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;
    let mut tasks: Vec<&str> = running.iter().map(|a| a.task_id.as_str()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    if !tasks.is_empty() {
        notify_queued(conn, &tasks).await?;
    }
    // Each locked attempt fails once, as its first report says; actors group the writes.
    let mut by_actor: Vec<(String, Vec<Failure>)> = Vec::new();
    let mut planned: std::collections::HashSet<Uuid> = std::collections::HashSet::new();
    for item in items {
        let Some(a) = running.iter().find(|a| a.id == item.id) else {
            continue;
        };
        if !planned.insert(item.id) {
            continue;
        }
        let mut failure = plan_failure(
            a,
            item.retryable,
            &item.error,
            item.error_kind,
            rand::random::<f64>(),
        );
        if item.retry_at_once {
            failure.delay = std::time::Duration::ZERO;
        }
        let actor = item
            .actor
            .clone()
            .unwrap_or_else(|| format!("agent:{}", a.worker_id.as_deref().unwrap_or("unknown")));
        match by_actor.iter_mut().find(|(known, _)| *known == actor) {
            Some((_, list)) => list.push(failure),
            None => by_actor.push((actor, vec![failure])),
        }
    }
    let mut written = Vec::new();
    for (actor, failures) in by_actor {
        written.extend(record_failures(conn, &failures, &actor).await?);
    }
    Ok(written)
}

// ---------------------------------------------------------------------------------------------
// Manual triggers and backfills.

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
}

pub async fn get_instance_by_window(pool: &PgPool, task_id: &str, key: &str) -> Result<Instance> {
    let row: InstanceRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {INSTANCE_COLUMNS} from task_instance where task_id = $1 and window_key = $2"
    )))
    .bind(task_id)
    .bind(key)
    .fetch_optional(pool)
    .await
    .map_err(map_db_error)?
    .ok_or(Error::NotFound)?;
    row.try_into()
}

/// Create a manual (or delayed) instance of `task_id`, or find the one with the same key.
/// Returns whether it was created. Manual runs are not subject to overlap skips (someone asked
/// for this run); the concurrency limit still holds at claim time.
pub async fn trigger_instance(
    pool: &PgPool,
    task_id: &str,
    t: &ManualTrigger,
    actor: &str,
) -> Result<(bool, Instance)> {
    let mut tx = pool.begin().await.map_err(map_db_error)?;
    let row: Option<(Json<Value>, DateTime<Utc>)> =
        sqlx::query_as("select spec, now() from tasks where id = $1")
            .bind(task_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_db_error)?;
    let (spec, now) = row.ok_or(Error::NotFound)?;
    let spec: crate::domain::task::TaskSpec =
        serde_json::from_value(spec.0).map_err(|e| Error::Corrupt(format!("tasks.spec: {e}")))?;
    let at = match (t.run_at, t.delay_seconds) {
        (Some(at), _) => at,
        (None, Some(d)) => now + chrono::Duration::seconds(d),
        (None, None) => now,
    };
    let key = t
        .window_key
        .clone()
        .unwrap_or_else(|| format!("manual:{}", Uuid::new_v4()));
    let report = insert_windows(
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
        }],
        actor,
    )
    .await?;
    let created = !report.created.is_empty();
    if created && at <= now {
        notify_work(&mut tx, &spec.agent_id).await?;
    }
    tx.commit().await.map_err(map_db_error)?;
    let inst = get_instance_by_window(pool, task_id, &key).await?;
    Ok((created, inst))
}

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
) -> Result<Vec<Instance>> {
    let rows: Vec<InstanceRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with old as ( \
             select id, status from task_instance \
             where task_id = $1 and window_key = any($5) and status = any($2) \
             order by id for update \
         ), {OPERATOR_RETRY_SQL} \
         select {INSTANCE_COLUMNS} from upd"
    )))
    .bind(task_id)
    .bind(from)
    .bind(actor)
    .bind(reason)
    .bind(keys)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;
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
const REPROCESS_FAILED: [InstanceStatus; 3] = [
    InstanceStatus::Dead,
    InstanceStatus::Failed,
    InstanceStatus::Cancelled,
];

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
}

/// Materialise the schedule's windows in `[from, to)` (`source = backfill`), idempotently and
/// under the task's (or the request's) overlap policy; with [`Reprocess::Failed`], existing
/// windows that did not succeed get an operator retry. The task row is locked for the
/// duration, so concurrent backfills and the trigger loop take turns and every window is
/// inserted once.
pub async fn backfill(
    pool: &PgPool,
    task_id: &str,
    req: &Backfill,
    actor: &str,
) -> Result<BackfillReport> {
    use crate::domain::policy::{SkipReason, apply_overlap};
    use crate::domain::schedule::{Schedule, window_key};
    use crate::domain::task::{FieldError, TaskSpec};
    let (from, to, dry_run, max_windows) = (req.from, req.to, req.dry_run, req.max_windows);

    let mut tx = pool.begin().await.map_err(map_db_error)?;
    let spec: Option<Json<Value>> =
        sqlx::query_scalar("select spec from tasks where id = $1 for update")
            .bind(task_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_db_error)?;
    let spec: TaskSpec = serde_json::from_value(spec.ok_or(Error::NotFound)?.0)
        .map_err(|e| Error::Corrupt(format!("tasks.spec: {e}")))?;
    let schedule = spec
        .trigger
        .schedule()
        .map_err(|e| Error::Corrupt(e.to_string()))?;
    if matches!(schedule, Schedule::None) {
        return Err(Error::Invalid(FieldError::new(
            "",
            format!(
                "a {} task has no schedule to backfill; use POST /v1/tasks/{task_id}/trigger",
                spec.trigger.type_name()
            ),
        )));
    }
    let mut windows = Vec::new();
    let mut cursor = schedule.next_at_or_after(from);
    while let Some(w) = cursor {
        if w >= to {
            break;
        }
        if windows.len() >= max_windows {
            return Err(Error::Invalid(FieldError::new(
                "to",
                format!("the range holds more than {max_windows} windows; backfill it in parts"),
            )));
        }
        windows.push(w);
        cursor = schedule.next_after(w);
    }
    let keys: Vec<String> = windows.iter().map(|w| window_key(*w)).collect();
    let existing: Vec<(String, String)> = sqlx::query_as(
        "select window_key, status from task_instance where task_id = $1 and window_key = any($2)",
    )
    .bind(task_id)
    .bind(&keys)
    .fetch_all(&mut *tx)
    .await
    .map_err(map_db_error)?;
    let reprocess_from = match req.reprocess {
        Reprocess::None => Vec::new(),
        Reprocess::Failed => status_names(&REPROCESS_FAILED),
    };
    let to_reprocess: Vec<String> = existing
        .iter()
        .filter(|(_, status)| reprocess_from.contains(&status.as_str()))
        .map(|(k, _)| k.clone())
        .collect();
    let existing: std::collections::HashSet<String> =
        existing.into_iter().map(|(k, _)| k).collect();
    let unfinished = unfinished_windows(&mut tx, &[task_id])
        .await?
        .remove(task_id)
        .unwrap_or_default();
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
                available_at: p.scheduled_at,
                skip_reason: p.skip.as_ref().map(SkipReason::as_text),
                context_override: None,
            })
            .collect();
        for chunk in rows.chunks(1000) {
            let r = insert_windows(&mut tx, chunk, actor).await?;
            for c in &r.created {
                report.created += 1;
                if c.status == InstanceStatus::Skipped.as_str() {
                    report.skipped += 1;
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
            )
            .await?;
            for inst in &retried {
                tracing::info!(task_id = %task_id, window_key = %inst.window_key, instance_id = %inst.id, attempt = inst.attempt, reason = "backfill reprocess", "instance retried");
            }
            report.reprocessed = retried.len();
        }
        if report.created > report.skipped || report.reprocessed > 0 {
            notify_work(&mut tx, &spec.agent_id).await?;
        }
        tx.commit().await.map_err(map_db_error)?;
    } else {
        report.created = planned.len();
        report.skipped = planned.iter().filter(|p| p.skip.is_some()).count();
        report.reprocessed = to_reprocess.len();
        tx.rollback().await.map_err(map_db_error)?;
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

/// Delete up to `batch` terminal instances (with their event rows) scheduled and finished more
/// than `retention_days` ago, and up to `batch` settled outbox rows of that age.
pub async fn prune_finished(pool: &PgPool, retention_days: i64, batch: i64) -> Result<(u64, u64)> {
    let instances: i64 = sqlx::query_scalar(
        "with gone as ( \
             delete from task_instance where id in ( \
                 select id from task_instance \
                 where scheduled_at < now() - make_interval(days => $1) \
                   and finished_at < now() - make_interval(days => $1) \
                   and status in ('SUCCESS', 'DEAD', 'SKIPPED', 'CANCELLED') \
                 order by scheduled_at limit $2 for update skip locked) \
             returning id \
         ), ev as ( \
             delete from instance_events where instance_id in (select id from gone) \
         ) \
         select count(*) from gone",
    )
    .bind(i32::try_from(retention_days).unwrap_or(i32::MAX))
    .bind(batch)
    .fetch_one(pool)
    .await
    .map_err(map_db_error)?;
    let outbox = sqlx::query(
        "delete from outbox where id in ( \
             select id from outbox \
             where coalesce(delivered_at, undeliverable_at) < now() - make_interval(days => $1) \
             limit $2 for update skip locked)",
    )
    .bind(i32::try_from(retention_days).unwrap_or(i32::MAX))
    .bind(batch)
    .execute(pool)
    .await
    .map_err(map_db_error)?
    .rows_affected();
    Ok((u64::try_from(instances).unwrap_or(0), outbox))
}

/// The agent of each existing instance among `ids`.
pub async fn agents_of(pool: &PgPool, ids: &[Uuid]) -> Result<Vec<(Uuid, String)>> {
    sqlx::query_as("select id, agent_id from task_instance where id = any($1)")
        .bind(ids)
        .fetch_all(pool)
        .await
        .map_err(map_db_error)
}
