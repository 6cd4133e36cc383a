//! What the operators' console reads beyond the API's lists: sampled gauges and per-minute
//! rollups (written by the stats sampler), and the recent windows of tasks as status cells.
//! Every query here reads an index range of bounded size; none counts over history.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::Result;
use crate::domain::instance::InstanceStatus;

/// A table with more rows than this (planner estimate) is not counted exactly for terminal
/// statuses: those are estimated from `pg_stats`.
pub const EXACT_COUNT_MAX_ROWS: f64 = 200_000.0;

/// Minutes younger than this are re-sampled on every pass (their windows are still settling).
pub const SETTLING_MINUTES: i64 = 10;

/// How long minute rollups are kept.
pub const KEEP_MINUTES_HOURS: i64 = 24;

/// The advisory lock key of the console sampler: one replica samples per pass.
pub const SAMPLER_LOCK: i64 = 0x6b61_6972_6f73_0001;

/// One window of a task, as a status cell of a strip or timeline.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WindowCell {
    pub id: Uuid,
    pub task_id: String,
    pub window_key: String,
    pub scheduled_at: DateTime<Utc>,
    pub status: String,
    pub attempt: i32,
    pub max_attempts: i32,
    /// `started_at - available_at` in milliseconds, when the window started: how long it
    /// waited once claimable (a jittered window's offset, a retry's backoff do not count).
    pub start_lag_ms: Option<f64>,
    pub skip_reason: Option<String>,
    pub error_kind: Option<String>,
}

/// The newest `per_task` windows of each of `task_ids`, newest first, read through the
/// `(task_id, scheduled_at desc, id desc)` index one task at a time.
pub async fn recent_windows(
    pool: &PgPool,
    task_ids: &[String],
    per_task: i64,
) -> Result<HashMap<String, Vec<WindowCell>>> {
    let rows: Vec<WindowCell> = sqlx::query_as(
        "select w.id, t.id as task_id, w.window_key, w.scheduled_at, w.status, w.attempt, \
                w.max_attempts, w.start_lag_ms, w.skip_reason, w.error_kind \
         from unnest($1::text[]) as t(id) \
         cross join lateral ( \
             select i.id, i.window_key, i.scheduled_at, i.status, i.attempt, i.max_attempts, \
                    extract(epoch from (i.started_at - i.available_at))::float8 * 1000 \
                        as start_lag_ms, \
                    i.skip_reason, i.error_kind \
             from task_instance i where i.task_id = t.id \
             order by i.scheduled_at desc, i.id desc limit $2) w",
    )
    .bind(task_ids)
    .bind(per_task)
    .fetch_all(pool)
    .await?;
    let mut out: HashMap<String, Vec<WindowCell>> = HashMap::new();
    for r in rows {
        out.entry(r.task_id.clone()).or_default().push(r);
    }
    Ok(out)
}

/// One sampled gauge.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Gauge {
    pub name: String,
    pub value: i64,
    pub exact: bool,
    pub sampled_at: DateTime<Utc>,
}

/// One minute of windows.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Minute {
    pub minute: DateTime<Utc>,
    pub windows: i32,
    pub succeeded: i32,
    pub skipped: i32,
    pub failed: i32,
    pub dead: i32,
    pub open: i32,
    pub fire_lag_p50_ms: Option<f64>,
    pub fire_lag_p99_ms: Option<f64>,
    pub start_lag_p50_ms: Option<f64>,
    pub start_lag_p99_ms: Option<f64>,
}

pub async fn gauges(pool: &PgPool) -> Result<Vec<Gauge>> {
    sqlx::query_as("select name, value, exact, sampled_at from console_gauges order by name")
        .fetch_all(pool)
        .await
        .map_err(crate::store::Error::from)
}

/// Minute rollups from `since` on, oldest first.
pub async fn minutes_since(pool: &PgPool, since: DateTime<Utc>) -> Result<Vec<Minute>> {
    sqlx::query_as(
        "select minute, windows, succeeded, skipped, failed, dead, open, fire_lag_p50_ms, \
                fire_lag_p99_ms, start_lag_p50_ms, start_lag_p99_ms \
         from console_minutes where minute >= $1 order by minute",
    )
    .bind(since)
    .fetch_all(pool)
    .await
    .map_err(crate::store::Error::from)
}

/// Per-status instance counts: exact for a small table, and for the live statuses (each read
/// through its partial index) of a large one; terminal statuses of a large table are estimated
/// from the planner's statistics (`exact = false`).
async fn count_statuses(conn: &mut PgConnection) -> Result<Vec<(String, i64, bool)>> {
    let estimate: f64 = sqlx::query_scalar(
        "select reltuples::float8 from pg_class where oid = 'task_instance'::regclass",
    )
    .fetch_one(&mut *conn)
    .await?;
    if estimate < EXACT_COUNT_MAX_ROWS {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("select status, count(*) from task_instance group by status")
                .fetch_all(&mut *conn)
                .await?;
        return Ok(InstanceStatus::ALL
            .iter()
            .map(|s| {
                let n = rows
                    .iter()
                    .find(|(name, _)| name == s.as_str())
                    .map_or(0, |(_, n)| *n);
                (s.as_str().to_owned(), n, true)
            })
            .collect());
    }
    let mut out = Vec::new();
    for live in [
        InstanceStatus::Pending,
        InstanceStatus::Running,
        InstanceStatus::Failed,
        InstanceStatus::Dead,
    ] {
        let n: i64 = sqlx::query_scalar("select count(*) from task_instance where status = $1")
            .bind(live.as_str())
            .fetch_one(&mut *conn)
            .await?;
        out.push((live.as_str().to_owned(), n, true));
    }
    // Most-common-value frequencies of `status` times the row estimate.
    let freqs: Vec<(String, f64)> = sqlx::query_as(
        "select v, f::float8 from pg_stats s, \
             unnest(s.most_common_vals::text::text[], s.most_common_freqs) as m(v, f) \
         where s.schemaname = current_schema() and s.tablename = 'task_instance' \
           and s.attname = 'status'",
    )
    .fetch_all(&mut *conn)
    .await?;
    for terminal in [
        InstanceStatus::Success,
        InstanceStatus::Skipped,
        InstanceStatus::Cancelled,
    ] {
        let f = freqs
            .iter()
            .find(|(v, _)| v == terminal.as_str())
            .map_or(0.0, |(_, f)| *f);
        out.push((
            terminal.as_str().to_owned(),
            (f * estimate).round() as i64,
            false,
        ));
    }
    Ok(out)
}

/// One sampler pass, when no other replica holds the sampler's lock: store status and task
/// gauges, and re-sample the minutes of windows scheduled in the last [`SETTLING_MINUTES`].
/// Returns the status counts it stored, or `None` when another replica is sampling.
pub async fn sample(pool: &PgPool) -> Result<Option<Vec<(String, i64, bool)>>> {
    let mut tx = crate::store::begin(pool).await?;
    let locked: bool = sqlx::query_scalar("select pg_try_advisory_xact_lock($1)")
        .bind(SAMPLER_LOCK)
        .fetch_one(&mut *tx)
        .await?;
    if !locked {
        return Ok(None);
    }
    let statuses = count_statuses(&mut tx).await?;
    let (tasks, paused, circuits): (i64, i64, i64) = sqlx::query_as(
        "select count(*), count(*) filter (where paused), \
                count(*) filter (where paused and paused_reason like 'circuit open%') from tasks",
    )
    .fetch_one(&mut *tx)
    .await?;
    let mut names: Vec<String> = Vec::new();
    let mut values: Vec<i64> = Vec::new();
    let mut exact: Vec<bool> = Vec::new();
    for (name, value, is_exact) in statuses
        .iter()
        .map(|(s, n, e)| (format!("instances.{s}"), *n, *e))
        .chain([
            ("tasks".to_owned(), tasks, true),
            ("tasks.paused".to_owned(), paused, true),
            ("tasks.circuit_open".to_owned(), circuits, true),
        ])
    {
        names.push(name);
        values.push(value);
        exact.push(is_exact);
    }
    sqlx::query(
        "insert into console_gauges (name, value, exact, sampled_at) \
         select n, v, e, now() from unnest($1::text[], $2::int8[], $3::bool[]) as g(n, v, e) \
         on conflict (name) do update set value = excluded.value, exact = excluded.exact, \
             sampled_at = excluded.sampled_at",
    )
    .bind(&names)
    .bind(&values)
    .bind(&exact)
    .execute(&mut *tx)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "insert into console_minutes (minute, windows, succeeded, skipped, failed, dead, open, \
             fire_lag_p50_ms, fire_lag_p99_ms, start_lag_p50_ms, start_lag_p99_ms, sampled_at) \
         select date_trunc('minute', scheduled_at), count(*), \
             count(*) filter (where status = 'SUCCESS'), \
             count(*) filter (where status = 'SKIPPED'), \
             count(*) filter (where status = 'FAILED'), \
             count(*) filter (where status = 'DEAD'), \
             count(*) filter (where status in ('PENDING', 'RUNNING')), \
             percentile_cont(0.5) within group (order by fire_lag) \
                 filter (where source = 'schedule'), \
             percentile_cont(0.99) within group (order by fire_lag) \
                 filter (where source = 'schedule'), \
             percentile_cont(0.5) within group (order by start_lag), \
             percentile_cont(0.99) within group (order by start_lag), \
             now() \
         from (select scheduled_at, status, source, \
                   greatest(extract(epoch from (created_at - scheduled_at)), 0) * 1000 \
                       as fire_lag, \
                   extract(epoch from (started_at - available_at)) * 1000 as start_lag \
               from task_instance \
               where scheduled_at >= date_trunc('minute', now()) - interval '{SETTLING_MINUTES} minutes' \
                 and scheduled_at < now()) w \
         group by 1 \
         on conflict (minute) do update set windows = excluded.windows, \
             succeeded = excluded.succeeded, skipped = excluded.skipped, \
             failed = excluded.failed, dead = excluded.dead, open = excluded.open, \
             fire_lag_p50_ms = excluded.fire_lag_p50_ms, \
             fire_lag_p99_ms = excluded.fire_lag_p99_ms, \
             start_lag_p50_ms = excluded.start_lag_p50_ms, \
             start_lag_p99_ms = excluded.start_lag_p99_ms, sampled_at = excluded.sampled_at"
    )))
    .execute(&mut *tx)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "delete from console_minutes where minute < now() - interval '{KEEP_MINUTES_HOURS} hours'"
    )))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(statuses))
}
