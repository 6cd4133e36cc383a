//! Replicas: the trigger burst and the claim drain with several `kairos serve` processes on one
//! database, each checked for exactly once.

use anyhow::Result;

use crate::claim::drain;
use crate::db::{BenchDb, seed_pending};
use crate::output::{Row, row, yes_no};
use crate::server::start_servers;
use crate::trigger::trigger_run;

/// The trigger burst over `k` replicas, staging off: rate, and one window per task.
pub async fn replicas_trigger(base: &str, n: i64, k: usize) -> Result<Row> {
    let r = trigger_run(base, &format!("rtrig{k}"), n, k, false).await?;
    let creators = r
        .by_creator
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let once = r.windows == n && r.tasks_with_window == n;
    let mut notes = format!(
        "exactly once: {} ({} windows for {n} tasks, {} tasks with a window)",
        yes_no(once),
        r.windows,
        r.tasks_with_window
    );
    if r.late {
        notes.push_str("; the replicas were up only after the instant");
    }
    Ok(row(
        &format!("replicas: trigger throughput, {n} tasks due at one instant, {k} replica(s)"),
        format!("{:.0} windows/s", n as f64 / r.secs),
        format!(
            "all windows in {:.2} s (last row {:.2} s after the instant); by creator: {creators}",
            r.secs, r.last
        ),
        &notes,
    ))
}

/// The batched drain by 16 agents spread over `k` replicas: rate, and each instance once.
pub async fn replicas_claim(base: &str, n: i64, k: usize) -> Result<Row> {
    let db = BenchDb::create(base, &format!("rclaim{k}")).await?;
    seed_pending(&db.pool, n, 100, None).await?;
    let servers = start_servers(&db, k, &[("KAIROS_DATABASE_MAX_CONNECTIONS", "24")]).await?;
    let urls: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let d = drain(&db.pool, &urls, 16, 100, true).await?;
    let (total, success, retried): (i64, i64, i64) = sqlx::query_as(
        "select count(*), count(*) filter (where status = 'SUCCESS'), \
             count(*) filter (where attempt <> 1) from task_instance",
    )
    .fetch_one(&db.pool)
    .await?;
    drop(servers);
    db.drop_db().await?;
    let once = total == n && success == n && retried == 0 && d.done == n as u64;
    Ok(row(
        &format!(
            "replicas: claim→complete, {n} instances over 100 tasks, 16 agents round-robin over {k} replica(s), batched"
        ),
        format!("{:.0} instances/s", d.done as f64 / d.secs),
        d.detail(100),
        &format!(
            "exactly once: {} ({success} of {n} SUCCESS, {retried} with attempt ≠ 1, {} completions accepted)",
            yes_no(once),
            d.done
        ),
    ))
}
