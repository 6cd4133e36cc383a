//! Fire lag: a burst of cron windows at each minute boundary, and how long after its instant
//! each window is started by long-polling agents.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use crate::agents::{agent_client, complete_batch, complete_each};
use crate::db::{BenchDb, earliest_due, insert_tasks};
use crate::measure::percentile;
use crate::output::{Row, row};
use crate::server::start_server;

/// `n` tasks on `0 * * * * *` over `minutes` boundaries, eight long-polling agents reporting
/// `single` or batched, optionally on one shared limit and with jitter.
pub async fn fire_lag(
    base: &str,
    n: i64,
    minutes: u32,
    single: bool,
    limit: i64,
    jitter: i64,
) -> Result<Row> {
    let db = BenchDb::create(base, "lag").await?;
    let execution = if limit > 0 {
        sqlx::query("insert into limits (name, spec) values ('shared', $1)")
            .bind(json!({"concurrency": limit, "per_key": false}))
            .execute(&db.pool)
            .await?;
        json!({"limits": [{"name": "shared"}]})
    } else {
        json!({})
    };
    // Second 0 of every minute, first at a minute boundary at least 15 s away (so the server
    // is up before it).
    insert_tasks(
        &db.pool,
        n,
        "l",
        if jitter > 0 {
            json!({"type": "cron", "expr": "0 * * * * *", "timezone": "UTC", "jitter_seconds": jitter})
        } else {
            json!({"type": "cron", "expr": "0 * * * * *", "timezone": "UTC"})
        },
        execution,
        "date_trunc('minute', now() + interval '15 seconds') + interval '1 minute'",
    )
    .await?;
    let due: chrono::DateTime<chrono::Utc> = earliest_due(&db.pool).await?;
    let last = due + chrono::Duration::minutes(i64::from(minutes) - 1);
    let expected = n * i64::from(minutes);
    let server = start_server(&db, &[("KAIROS_DATABASE_MAX_CONNECTIONS", "24")]).await?;
    let client = agent_client(8 * 100)?;
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let mut agents = Vec::new();
    for a in 0..8 {
        let (client, url, stop, failures) = (
            client.clone(),
            server.base.clone(),
            stop.clone(),
            failures.clone(),
        );
        agents.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let resp: Value = match client
                    .post(format!("{url}/v1/claims"))
                    .json(&json!({"agent_id": "bench_agent", "worker_id": format!("lag{a}"), "max_instances": 100, "wait_seconds": 5}))
                    .send()
                    .await
                {
                    Ok(r) => r.json().await.unwrap_or(Value::Null),
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let items = resp["instances"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    continue;
                }
                let reported = if single {
                    complete_each(&client, &url, items).await
                } else {
                    complete_batch(&client, &url, &items).await
                };
                match reported {
                    Ok((_, 0)) => {}
                    Ok((_, refused)) => {
                        failures.fetch_add(refused, Ordering::Relaxed);
                    }
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let mode = if single {
        "single completes (concurrent)"
    } else {
        "batch completions"
    };
    let boundaries = if minutes == 1 {
        "1 minute boundary".to_owned()
    } else {
        format!("{minutes} minute boundaries")
    };
    let wait = (due - chrono::Utc::now()).to_std().unwrap_or_default();
    println!(
        "fire lag, {mode}: waiting {:.0} s for the first boundary ({boundaries})",
        wait.as_secs_f64()
    );
    tokio::time::sleep(wait).await;
    // Until every window of every boundary started, or a minute after the last boundary.
    let end = last + chrono::Duration::seconds(60);
    loop {
        let started: i64 = sqlx::query_scalar(
            "select count(*) from task_instance where started_at is not null and scheduled_at <= $1",
        )
        .bind(last)
        .fetch_one(&db.pool)
        .await?;
        if started >= expected || kairos::store::now(&db.pool).await? >= end {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    // The lag, and where it goes: the trigger writing the window, then the claim taking it.
    let (lags, made): (Vec<f64>, Vec<f64>) = sqlx::query_as(
        "select array_agg(extract(epoch from started_at - available_at)::float8 * 1000 \
                          order by started_at - available_at), \
                array_agg(extract(epoch from created_at - scheduled_at)::float8 * 1000 \
                          order by created_at - scheduled_at) \
         from task_instance where started_at is not null and scheduled_at <= $1",
    )
    .bind(last)
    .fetch_one(&db.pool)
    .await
    .map(|(l, m): (Option<Vec<f64>>, Option<Vec<f64>>)| {
        (l.unwrap_or_default(), m.unwrap_or_default())
    })?;
    let (created, started, in_minute, skipped): (i64, i64, i64, i64) = sqlx::query_as(
        "select count(*), count(started_at), \
             count(*) filter (where started_at < scheduled_at + interval '60 seconds'), \
             count(*) filter (where status = 'SKIPPED') \
         from task_instance where scheduled_at <= $1",
    )
    .bind(last)
    .fetch_one(&db.pool)
    .await?;
    // Starts per second of the first boundary, over its jitter: how evenly jitter spreads them.
    let per_second: Vec<i64> = if jitter > 0 {
        sqlx::query_scalar(
            "select count(i.started_at) from generate_series(0, $2 - 1) s \
             left join task_instance i on i.scheduled_at = $1 and i.started_at is not null \
                 and floor(extract(epoch from i.started_at - $1))::int = s \
             group by s order by s",
        )
        .bind(due)
        .bind(i32::try_from(jitter).unwrap_or(i32::MAX))
        .fetch_all(&db.pool)
        .await?
    } else {
        Vec::new()
    };
    for a in agents {
        let _ = tokio::time::timeout(Duration::from_secs(10), a).await;
    }
    drop(server);
    db.drop_db().await?;
    let failures = failures.load(Ordering::Relaxed);
    let mut notes =
        "started_at − available_at, database clock; max_instances 100, wait_seconds 5; \
         window written = created_at − scheduled_at (a staged window's created_at is its \
         instant, at which its transaction commits)"
            .to_owned();
    if failures > 0 {
        notes.push_str(&format!(
            "; {failures} failed claim/complete requests or refused completions"
        ));
    }
    if !per_second.is_empty() {
        let total: i64 = per_second.iter().sum();
        let busiest = per_second.iter().copied().max().unwrap_or(0);
        let average = total as f64 / per_second.len() as f64;
        notes.push_str(&format!(
            "; starts per second over the first boundary's {jitter} s: {per_second:?} \
             (busiest {busiest}, average {average:.0}, ratio {:.2})",
            busiest as f64 / average.max(1.0)
        ));
    }
    Ok(row(
        &format!(
            "fire lag, {n} tasks on `0 * * * * *`, {boundaries}, 8 agents long-polling, {mode}{}{}",
            if limit > 0 {
                format!(", every task on one shared limit of {limit} at once")
            } else {
                String::new()
            },
            if jitter > 0 {
                format!(", jitter_seconds {jitter}")
            } else {
                String::new()
            }
        ),
        format!(
            "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            percentile(&lags, 0.5),
            percentile(&lags, 0.99),
            lags.last().copied().unwrap_or(0.0)
        ),
        format!(
            "{created} of {expected} windows created, {started} started ({in_minute} within their minute), \
             {} unclaimed ({skipped} of them SKIPPED); window written p50 {:.0} ms, p99 {:.0} ms",
            created - started,
            percentile(&made, 0.5),
            percentile(&made, 0.99)
        ),
        &notes,
    ))
}
