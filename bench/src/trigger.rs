//! Trigger throughput: tasks due at one instant, and how long until every window exists,
//! written from the instant (staging off) or staged ahead of it.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::json;

use crate::db::{BenchDb, cursor_layout, earliest_due, insert_tasks};
use crate::output::{Row, row};
use crate::server::start_servers;

/// How one burst of due tasks was materialised.
pub struct TriggerRun {
    pub secs: f64,
    /// Seconds from the instant to the last window row's `created_at` (database clock).
    pub last: f64,
    /// Whether the servers were up only after the instant (the numbers then flatter them).
    pub late: bool,
    /// Window rows after the burst settled, tasks with at least one, windows per creator.
    pub windows: i64,
    pub tasks_with_window: i64,
    pub by_creator: Vec<(String, i64)>,
}

/// `n` tasks due at one instant, served by `k` replicas: time until every window exists.
pub async fn trigger_run(
    base: &str,
    tag: &str,
    n: i64,
    k: usize,
    staged: bool,
) -> Result<TriggerRun> {
    let db = BenchDb::create(base, tag).await?;
    // Due at one instant, with time to start every replica first.
    let lead = 1 + 2 * k;
    insert_tasks(
        &db.pool,
        n,
        "t",
        json!({"type": "interval", "every_seconds": 3600}),
        json!({"overlap": "queue"}),
        &format!("date_trunc('second', now()) + interval '{lead} seconds'"),
    )
    .await?;
    let due: chrono::DateTime<chrono::Utc> = earliest_due(&db.pool).await?;
    // Staging off, this measures how fast windows are written, from the instant on. Staged
    // (the default lead), part of them are written before the instant and published at it.
    let env: &[(&str, &str)] = if staged {
        &[]
    } else {
        &[("KAIROS_TRIGGER_LEAD_MS", "0")]
    };
    let servers = start_servers(&db, k, env).await?;
    // Wait for the due instant on the database clock, then time until every window exists.
    let mut late = true;
    loop {
        let now = kairos::store::now(&db.pool).await?;
        if now >= due {
            break;
        }
        late = false;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    // Done when no cursor is left at the instant: a cursor moves in the transaction that
    // writes its window. This look reads the due index only; counting the instance table
    // instead (a scan of up to n rows every 20 ms) took CPU from the loops being measured.
    let left_sql = format!(
        "select count(*) from (select 1 from {} \
         where not paused and next_fire_at is not null and next_fire_at <= $1 limit 1) x",
        cursor_layout(&db.pool).await?.table
    );
    loop {
        let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(left_sql.as_str()))
            .bind(due)
            .fetch_one(&db.pool)
            .await?;
        if left == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("trigger scenario timed out with tasks still due");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    // Let any late duplicate show up before counting.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let last: f64 = sqlx::query_scalar(
        "select extract(epoch from max(created_at) - min(scheduled_at))::float8 from task_instance",
    )
    .fetch_one(&db.pool)
    .await?;
    let (windows, tasks_with_window): (i64, i64) =
        sqlx::query_as("select count(*), count(distinct task_id) from task_instance")
            .fetch_one(&db.pool)
            .await?;
    let by_creator: Vec<(String, i64)> = sqlx::query_as(
        "select coalesce(created_by, '?'), count(*) from task_instance group by 1 order by 1",
    )
    .fetch_all(&db.pool)
    .await?;
    drop(servers);
    db.drop_db().await?;
    Ok(TriggerRun {
        secs,
        last,
        late,
        windows,
        tasks_with_window,
        by_creator,
    })
}

/// The instant with staging off (`trigger_lead_ms` 0): windows written per second from it.
pub async fn trigger_throughput(base: &str, n: i64) -> Result<Row> {
    let r = trigger_run(base, "trigger", n, 1, false).await?;
    Ok(row(
        &format!("trigger throughput, {n} tasks due at one instant, staging off"),
        format!("{:.0} windows/s", n as f64 / r.secs),
        format!(
            "all windows in {:.2} s (last row {:.2} s after the instant)",
            r.secs, r.last
        ),
        if r.late {
            "one replica, batches of 500 tasks per transaction; the replica was up only after the instant, so the timing started late"
        } else {
            "one replica, batches of 500 tasks per transaction"
        },
    ))
}

/// The same instant with staging on (`trigger_lead_ms` at its default): how long after the
/// instant the last window is visible. Not a write rate: part of the windows were written
/// before the instant.
pub async fn trigger_staged(base: &str, n: i64) -> Result<Row> {
    let r = trigger_run(base, "trigger", n, 1, true).await?;
    Ok(row(
        &format!("trigger, {n} tasks due at one instant, staged (default lead)"),
        format!("every window visible {:.2} s after the instant", r.secs),
        format!(
            "{:.0} windows/s counted from the instant",
            n as f64 / r.secs
        ),
        "one replica; the windows staged before the instant are published at it",
    ))
}
