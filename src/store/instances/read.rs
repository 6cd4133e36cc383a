//! The instance row as stored and the reads over it: one instance (by id or by window), the
//! operators' filtered, paged lists, and the agents of a set of instances.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use sqlx::types::Json;
use uuid::Uuid;

use crate::domain::instance::{Instance, InstanceStatus, idempotency_key};
use crate::domain::trace::TraceContext;
use crate::store::statements::sql;
use crate::store::{Error, Result};

#[derive(sqlx::FromRow)]
pub(in crate::store) struct InstanceRow {
    pub(in crate::store) id: Uuid,
    pub(in crate::store) task_id: String,
    pub(in crate::store) agent_id: String,
    pub(in crate::store) window_key: String,
    pub(in crate::store) scheduled_at: DateTime<Utc>,
    pub(in crate::store) status: String,
    pub(in crate::store) source: String,
    pub(in crate::store) attempt: i32,
    pub(in crate::store) max_attempts: i32,
    pub(in crate::store) available_at: DateTime<Utc>,
    pub(in crate::store) lease_expires_at: Option<DateTime<Utc>>,
    pub(in crate::store) worker_id: Option<String>,
    pub(in crate::store) started_at: Option<DateTime<Utc>>,
    pub(in crate::store) finished_at: Option<DateTime<Utc>>,
    pub(in crate::store) result: Option<Json<Value>>,
    pub(in crate::store) error: Option<String>,
    pub(in crate::store) error_kind: Option<String>,
    pub(in crate::store) skip_reason: Option<String>,
    pub(in crate::store) upstream_instance_id: Option<Uuid>,
    pub(in crate::store) upstream_result_digest: Option<String>,
    pub(in crate::store) created_at: DateTime<Utc>,
    pub(in crate::store) updated_at: DateTime<Utc>,
    pub(in crate::store) priority: i16,
    pub(in crate::store) trace_parent: Option<String>,
    pub(in crate::store) trace_state: Option<String>,
}

pub(in crate::store) const INSTANCE_COLUMNS: &str = "id, task_id, agent_id, window_key, scheduled_at, status, source, attempt, \
     max_attempts, available_at, lease_expires_at, worker_id, started_at, finished_at, result, \
     error, error_kind, skip_reason, upstream_instance_id, upstream_result_digest, created_at, \
     updated_at, priority, trace_parent, trace_state";

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
            priority: r.priority,
            created_at: r.created_at,
            updated_at: r.updated_at,
            trace: r
                .trace_parent
                .as_deref()
                .and_then(|p| TraceContext::parse(p, r.trace_state.as_deref())),
        })
    }
}

pub async fn get_instance(pool: &PgPool, id: Uuid) -> Result<Instance> {
    let row: InstanceRow = sqlx::query_as(sql!("instances/read/get"))
        .bind(id)
        .fetch_optional(pool)
        .await?
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
    /// Only instances of this priority (0-9).
    pub priority: Option<i16>,
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
    // Dynamic: the caller's filters pick the index a page walks (the task's, a status's, or
    // time's) and the statuses its pages; one statement with `($n is null or …)` conditions
    // would, once PostgreSQL plans it generically, walk one index with every filter a
    // post-filter, reading the whole history for a rare status.
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
    let rows: Vec<InstanceRow> = q.build_query_as().fetch_all(pool).await?;
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
    crate::store::push_agent_filters(q, &f.agent_id, &f.agents_in);
    if let Some(s) = status {
        q.push(" and status = ").push_bind(s.as_str());
    }
    if let Some(k) = &f.window_key {
        q.push(" and window_key = ").push_bind(k.clone());
    }
    if let Some(p) = f.priority {
        q.push(" and priority = ").push_bind(p);
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

pub async fn get_instance_by_window<'e>(
    conn: impl sqlx::PgExecutor<'e>,
    task_id: &str,
    key: &str,
) -> Result<Instance> {
    let row: InstanceRow = sqlx::query_as(sql!("instances/read/get_by_window"))
        .bind(task_id)
        .bind(key)
        .fetch_optional(conn)
        .await?
        .ok_or(Error::NotFound)?;
    row.try_into()
}

/// The agent of each existing instance among `ids`.
pub async fn agents_of(pool: &PgPool, ids: &[Uuid]) -> Result<Vec<(Uuid, String)>> {
    sqlx::query_as(sql!("instances/read/agents_of"))
        .bind(ids)
        .fetch_all(pool)
        .await
        .map_err(crate::store::Error::from)
}
