//! The daemon at rest: CPU and database transactions with many registered tasks none of which
//! is due, and RSS after listing a large registry over the API.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::db::{BenchDb, insert_tasks};
use crate::measure::{cpu_seconds, rss_mib};
use crate::output::{Row, row};
use crate::server::start_server;

/// CPU share and database transactions per second over `seconds`, with `n` tasks none due.
pub async fn idle_cost(base: &str, n: i64, seconds: u64) -> Result<Row> {
    let db = BenchDb::create(base, "idle").await?;
    insert_tasks(
        &db.pool,
        n,
        "i",
        json!({"type": "interval", "every_seconds": 86400}),
        json!({}),
        "now() + interval '1 day'",
    )
    .await?;
    sqlx::query("analyze tasks").execute(&db.pool).await?;
    let server = start_server(&db, &[]).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let xacts = |pool: PgPool, name: String| async move {
        let v: i64 = sqlx::query_scalar(
            "select (xact_commit + xact_rollback)::bigint from pg_stat_database where datname = $1",
        )
        .bind(name)
        .fetch_one(&pool)
        .await?;
        Ok::<i64, anyhow::Error>(v)
    };
    let pid = server.child.id();
    let cpu0 = cpu_seconds(pid)?;
    let x0 = xacts(db.admin.clone(), db.name.clone()).await?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let cpu1 = cpu_seconds(pid)?;
    let x1 = xacts(db.admin.clone(), db.name.clone()).await?;
    let wall = t0.elapsed().as_secs_f64();
    drop(server);
    db.drop_db().await?;
    Ok(row(
        &format!("idle cost, {n} registered tasks, none due"),
        format!("{:.2} % CPU", (cpu1 - cpu0) / wall * 100.0),
        format!(
            "{:.1} transactions/s on the database over {wall:.0} s",
            (x1 - x0) as f64 / wall
        ),
        "all loops running (trigger, retry, reaper, webhook, notifier, pruner, stats)",
    ))
}

/// RSS after every one of `n` registered tasks was listed through the API.
pub async fn memory(base: &str, n: i64) -> Result<Row> {
    let db = BenchDb::create(base, "mem").await?;
    insert_tasks(
        &db.pool,
        n,
        "m",
        json!({"type": "cron", "expr": "0 * * * *", "timezone": "Europe/London"}),
        json!({}),
        "now() + interval '1 day'",
    )
    .await?;
    let server = start_server(&db, &[]).await?;
    // List every task through the API once, so the process has served the whole registry.
    let client = reqwest::Client::new();
    let mut cursor: Option<String> = None;
    let mut seen = 0usize;
    loop {
        let url = match &cursor {
            Some(c) => format!("{}/v1/tasks?limit=500&cursor={c}", server.base),
            None => format!("{}/v1/tasks?limit=500", server.base),
        };
        let page: Value = client.get(url).send().await?.json().await?;
        seen += page["items"].as_array().map(Vec::len).unwrap_or(0);
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let rss = rss_mib(server.child.id())?;
    drop(server);
    db.drop_db().await?;
    Ok(row(
        &format!("memory, {n} registered tasks"),
        format!("{rss:.1} MiB RSS"),
        format!("after listing all {seen} tasks over the API"),
        "the registry lives in PostgreSQL, not in the process",
    ))
}
