//! The `task_instance` table: idempotent window inserts, compare-and-swap transitions, and the
//! operators' queries. Every transition writes its `instance_events` row in the same statement
//! or transaction.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{Error, Result, map_db_error};
use crate::domain::instance::{
    Event, Instance, InstanceStatus, Source, idempotency_key, legal_sources,
};

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
                 context_override) \
             select id, task_id, window_key, scheduled_at, status, source, agent_id, 1, \
                 max_attempts, available_at, skip_reason, \
                 case when status = 'SKIPPED' then now() end, context_override \
             from unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], \
                         $6::text[], $7::text[], $8::int[], $9::timestamptz[], $10::text[], \
                         $11::jsonb[]) \
                 as r(id, task_id, window_key, scheduled_at, status, source, agent_id, \
                      max_attempts, available_at, skip_reason, context_override) \
             on conflict (task_id, window_key) do nothing \
             returning id, task_id, window_key, status, source, skip_reason \
         ), ev as ( \
             insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason) \
             select id, 1, null, status, $12, coalesce(skip_reason, source) from ins \
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
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select task_id, window_key from task_instance \
         where task_id = any($1) and status in ('PENDING', 'RUNNING', 'FAILED') \
         order by task_id, scheduled_at, window_key",
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

fn status_names(statuses: &[InstanceStatus]) -> Vec<&'static str> {
    statuses.iter().map(|s| s.as_str()).collect()
}

/// Cancel the named windows of a task if they are still cancellable (CAS on the legal source
/// states); a running lease is fenced out because its token is cleared. Returns the window keys
/// actually cancelled.
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
    let from = status_names(&legal_sources(Event::Cancel));
    let rows: Vec<(String,)> = sqlx::query_as(
        "with old as ( \
             select id, status from task_instance \
             where task_id = $1 and window_key = any($2) and status = any($3) for update \
         ), upd as ( \
             update task_instance t set status = 'CANCELLED', lease_token = null, \
                 lease_expires_at = null, finished_at = now(), error_kind = 'cancelled', \
                 error = $5, updated_at = now() \
             from old where t.id = old.id \
             returning t.id, t.window_key, t.attempt, old.status as from_status \
         ), ev as ( \
             insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason) \
             select id, attempt, from_status, 'CANCELLED', $4, $5 from upd \
         ) \
         select window_key from upd",
    )
    .bind(task_id)
    .bind(window_keys)
    .bind(&from)
    .bind(actor)
    .bind(reason)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_db_error)?;
    Ok(rows.into_iter().map(|r| r.0).collect())
}

/// Cancel a task's instances that have not started (PENDING) or wait for a retry (FAILED).
pub async fn cancel_unstarted_of_task(
    conn: &mut PgConnection,
    task_id: &str,
    actor: &str,
    reason: &str,
) -> Result<u64> {
    let result = sqlx::query(
        "with old as ( \
             select id, status from task_instance \
             where task_id = $1 and status in ('PENDING', 'FAILED') for update \
         ), upd as ( \
             update task_instance t set status = 'CANCELLED', finished_at = now(), \
                 error_kind = 'cancelled', error = $3, updated_at = now() \
             from old where t.id = old.id \
             returning t.id, t.attempt, old.status as from_status \
         ) \
         insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason) \
         select id, attempt, from_status, 'CANCELLED', $2, $3 from upd",
    )
    .bind(task_id)
    .bind(actor)
    .bind(reason)
    .execute(&mut *conn)
    .await
    .map_err(map_db_error)?;
    Ok(result.rows_affected())
}

#[derive(sqlx::FromRow)]
struct InstanceRow {
    id: Uuid,
    task_id: String,
    window_key: String,
    scheduled_at: DateTime<Utc>,
    status: String,
    source: String,
    attempt: i32,
    max_attempts: i32,
    available_at: DateTime<Utc>,
    lease_expires_at: Option<DateTime<Utc>>,
    worker_id: Option<String>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    result: Option<Json<Value>>,
    error: Option<String>,
    error_kind: Option<String>,
    skip_reason: Option<String>,
    upstream_instance_id: Option<Uuid>,
    upstream_result_digest: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

const INSTANCE_COLUMNS: &str = "id, task_id, window_key, scheduled_at, status, source, attempt, \
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

/// Instances newest first (by `scheduled_at`, then id), one page.
pub async fn list_instances(pool: &PgPool, f: &InstanceFilter) -> Result<Vec<Instance>> {
    let mut q = sqlx::QueryBuilder::<sqlx::Postgres>::new(format!(
        "select {INSTANCE_COLUMNS} from task_instance where true"
    ));
    if let Some(t) = &f.task_id {
        q.push(" and task_id = ").push_bind(t.clone());
    }
    if !f.statuses.is_empty() {
        let names: Vec<String> = f.statuses.iter().map(|s| s.as_str().to_owned()).collect();
        q.push(" and status = any(").push_bind(names).push(")");
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
    let rows: Vec<InstanceRow> = q
        .build_query_as()
        .fetch_all(pool)
        .await
        .map_err(map_db_error)?;
    rows.into_iter().map(Instance::try_from).collect()
}
