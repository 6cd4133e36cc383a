//! What the operators' console reads beyond the API's lists: sampled gauges and per-minute
//! rollups (written by the stats sampler), and the recent windows of tasks as status cells.
//! Every query here reads an index range of bounded size; none counts over history.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::Result;
use super::statements::sql;
use crate::domain::instance::InstanceStatus;

/// A table with more rows than this (planner estimate) is not counted exactly for terminal
/// statuses: those are estimated from `pg_stats`.
pub const EXACT_COUNT_MAX_ROWS: f64 = 200_000.0;

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
    let rows: Vec<WindowCell> = sqlx::query_as(sql!("console/recent_windows"))
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
    sqlx::query_as(sql!("console/gauges"))
        .fetch_all(pool)
        .await
        .map_err(crate::store::Error::from)
}

/// Minute rollups from `since` on, oldest first.
pub async fn minutes_since(pool: &PgPool, since: DateTime<Utc>) -> Result<Vec<Minute>> {
    sqlx::query_as(sql!("console/minutes_since"))
        .bind(since)
        .fetch_all(pool)
        .await
        .map_err(crate::store::Error::from)
}

/// Per-status instance counts: exact for a small table, and for the live statuses (each read
/// through its partial index) of a large one; terminal statuses of a large table are estimated
/// from the planner's statistics (`exact = false`).
async fn count_statuses(conn: &mut PgConnection) -> Result<Vec<(String, i64, bool)>> {
    let estimate: f64 = sqlx::query_scalar(sql!("console/row_estimate"))
        .fetch_one(&mut *conn)
        .await?;
    if estimate < EXACT_COUNT_MAX_ROWS {
        let rows: Vec<(String, i64)> = sqlx::query_as(sql!("console/count_by_status"))
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
        let n: i64 = sqlx::query_scalar(sql!("console/count_of_status"))
            .bind(live.as_str())
            .fetch_one(&mut *conn)
            .await?;
        out.push((live.as_str().to_owned(), n, true));
    }
    // Most-common-value frequencies of `status` times the row estimate.
    let freqs: Vec<(String, f64)> = sqlx::query_as(sql!("console/status_frequencies"))
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
/// gauges, re-sample the minutes of windows scheduled in the last 10 minutes (their windows are
/// still settling), and drop minute rollups older than 24 hours. Returns the status counts it stored, or `None` when another replica is sampling.
pub async fn sample(pool: &PgPool) -> Result<Option<Vec<(String, i64, bool)>>> {
    let mut tx = crate::store::begin(pool).await?;
    let locked: bool = sqlx::query_scalar(sql!("console/try_sampler_lock"))
        .bind(SAMPLER_LOCK)
        .fetch_one(&mut *tx)
        .await?;
    if !locked {
        return Ok(None);
    }
    let statuses = count_statuses(&mut tx).await?;
    let (tasks, paused, circuits): (i64, i64, i64) = sqlx::query_as(sql!("console/count_tasks"))
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
    sqlx::query(sql!("console/store_gauges"))
        .bind(&names)
        .bind(&values)
        .bind(&exact)
        .execute(&mut *tx)
        .await?;
    sqlx::query(sql!("console/store_minutes"))
        .execute(&mut *tx)
        .await?;
    sqlx::query(sql!("console/prune_minutes"))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Some(statuses))
}
