//! Webhook push: one webhook task's backlog pushed to a local receiver, with its rate, latency,
//! exactly-once check and CPU per pushed instance.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::db::{BenchDb, count};
use crate::measure::{metric, percentile, proc_cpu_secs};
use crate::output::{Row, row, yes_no};
use crate::server::start_server;

/// The push scenario's receiver: answers success at once, and notes each push's
/// `Idempotency-Key` (one per instance) so a push that arrives twice is seen.
#[derive(Default)]
struct Hooks {
    hits: AtomicU64,
    keys: std::sync::Mutex<std::collections::HashSet<String>>,
}

async fn hook(
    axum::extract::State(hooks): axum::extract::State<Arc<Hooks>>,
    headers: axum::http::HeaderMap,
) -> axum::Json<Value> {
    hooks.hits.fetch_add(1, Ordering::Relaxed);
    if let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok())
        && let Ok(mut keys) = hooks.keys.lock()
    {
        keys.insert(key.to_owned());
    }
    axum::Json(json!({"status": "success"}))
}

/// One webhook task's backlog: `n` instances of one task (concurrency_limit 1000), due at
/// once, pushed to a local receiver that answers 200 with success at once. Reports
/// instances/s from the first recorded result to the last, and the push latency (claim to
/// recorded result) at p50 and p99, all on the database clock.
pub async fn push(
    base: &str,
    n: i64,
    in_flight: Option<usize>,
    per_task: Option<i64>,
) -> Result<Row> {
    let db = BenchDb::create(base, "push").await?;
    let hooks = Arc::new(Hooks::default());
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(hooks.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let receiver = tokio::spawn(async move { axum::serve(listener, app).await });
    let in_flight_env = in_flight.map(|v| v.to_string());
    let per_task_env = per_task.map(|v| v.to_string());
    let mut env = Vec::new();
    if let Some(v) = &in_flight_env {
        env.push(("KAIROS_WEBHOOK_MAX_IN_FLIGHT", v.as_str()));
    }
    if let Some(v) = &per_task_env {
        env.push(("KAIROS_WEBHOOK_MAX_PER_TASK", v.as_str()));
    }
    let server = start_server(&db, &env).await?;
    let client = reqwest::Client::new();
    let r = client
        .put(format!("{}/v1/tasks/p0", server.base))
        .json(&json!({
            "agent_id": "bench_agent",
            "trigger": {"type": "manual"},
            "dispatch": {"mode": "webhook", "url": format!("http://127.0.0.1:{port}/hook"),
                         "secret": "bench-secret-0123456789"},
            "execution": {"concurrency_limit": 1000}
        }))
        .send()
        .await?;
    if !r.status().is_success() {
        let status = r.status();
        bail!(
            "PUT /v1/tasks/p0: {status} {}",
            r.text().await.unwrap_or_default()
        );
    }
    // The pending instances and the work notification in one transaction, on a connection of
    // its own whose backend's CPU is left out of the server's.
    let mut inserter = db.pool.acquire().await?;
    let inserter_pid: i32 = sqlx::query_scalar("select pg_backend_pid()")
        .fetch_one(&mut *inserter)
        .await?;
    let cpu_before = push_cpu(&db.pool, server.child.id(), inserter_pid).await;
    let mut tx = sqlx::Connection::begin(&mut *inserter).await?;
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
             max_attempts, available_at) \
         select gen_random_uuid(), 'p0', 'w' || g, now(), 'PENDING', 'manual', 'bench_agent', 1, now() \
         from generate_series(1, $1) g",
    )
    .bind(n)
    .execute(&mut *tx)
    .await?;
    sqlx::query("select pg_notify($1, 'bench_agent')")
        .bind(kairos::store::WORK_CHANNEL)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    // Every figure is on the database clock (`started_at`, `finished_at`), so how often this
    // loop looks does not change them; it looks every 250 ms, since each look counts the table
    // and takes CPU from the server being measured.
    let committed = kairos::store::now(&db.pool).await?;
    let started = Instant::now();
    let mut success = 0;
    while started.elapsed() < Duration::from_secs(120) {
        success = count(
            &db.pool,
            "select count(*) from task_instance where status = 'SUCCESS'",
        )
        .await?;
        if success >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cpu_after = push_cpu(&db.pool, server.child.id(), inserter_pid).await;
    drop(inserter);
    // Let a stray second push (there must be none) reach the receiver before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (first, last, span): (f64, f64, f64) = sqlx::query_as(
        "select coalesce(extract(epoch from min(finished_at) - $1), 0)::float8, \
             coalesce(extract(epoch from max(finished_at) - $1), 0)::float8, \
             coalesce(extract(epoch from max(finished_at) - min(finished_at)), 0)::float8 \
         from task_instance where status = 'SUCCESS'",
    )
    .bind(committed)
    .fetch_one(&db.pool)
    .await?;
    let mut latencies: Vec<f64> = sqlx::query_scalar(
        "select (extract(epoch from finished_at - started_at) * 1000)::float8 \
         from task_instance where status = 'SUCCESS'",
    )
    .fetch_all(&db.pool)
    .await?;
    latencies.sort_by(f64::total_cmp);
    let attempts_over_one = count(
        &db.pool,
        "select count(*) from task_instance where attempt > 1",
    )
    .await?;
    let by_status: Vec<(String, i64)> =
        sqlx::query_as("select status, count(*) from task_instance group by 1 order by 1")
            .fetch_all(&db.pool)
            .await?;
    let claims = metric(&client, &server.base, "kairos_webhook_claims_total").await;
    drop(server);
    receiver.abort();
    db.drop_db().await?;
    let hits = hooks.hits.load(Ordering::Relaxed);
    let distinct = hooks.keys.lock().map(|k| k.len()).unwrap_or(0);
    let statuses = by_status
        .iter()
        .map(|(s, c)| format!("{c} {s}"))
        .collect::<Vec<_>>()
        .join(", ");
    let once = yes_no(
        success == n
            && hits == n.unsigned_abs()
            && distinct == hits as usize
            && attempts_over_one == 0,
    );
    let detail = if success >= n {
        format!(
            "all {n} SUCCESS, first result {first:.2} s and last {last:.2} s after the due \
             commit; push latency (claim to recorded result) p50 {:.0} ms, p99 {:.0} ms; \
             receiver got {hits} pushes of {distinct} instances; exactly once: {once}; \
             {} dispatcher claims; {}",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            claims.map_or_else(|| "?".to_owned(), |c| format!("{c:.0}")),
            cpu_after.per_push(&cpu_before, n)
        )
    } else {
        format!(
            "timed out after {:.0} s: {statuses}; receiver got {hits} pushes of {distinct} \
             instances",
            started.elapsed().as_secs_f64()
        )
    };
    let setting = |name: &str, v: Option<String>| {
        v.map_or_else(|| format!("{name} default"), |v| format!("{name}={v}"))
    };
    Ok(row(
        &format!(
            "webhook push of one task's backlog, {n} instances due, local receiver answering 200"
        ),
        if success >= n && span > 0.0 {
            format!("{:.0} instances/s", n as f64 / span)
        } else {
            "not finished".to_owned()
        },
        detail,
        &format!(
            "one task, concurrency_limit 1000; {}, {}; instances/s from the first recorded \
             result to the last",
            setting("KAIROS_WEBHOOK_MAX_IN_FLIGHT", in_flight_env.clone()),
            setting("KAIROS_WEBHOOK_MAX_PER_TASK", per_task_env.clone()),
        ),
    ))
}

/// CPU seconds spent so far by the push scenario's parties: the kairos server, the
/// PostgreSQL backends of its database (the one running `skip_pid` left out), and this process
/// (the receiver, plus the scenario's own few looks). Read from `/proc`, so only where the
/// database runs on this host; `None` where it cannot be read.
#[derive(Debug, Default)]
struct PushCpu {
    kairos: Option<f64>,
    postgres: std::collections::HashMap<i32, f64>,
    bench: Option<f64>,
}

impl PushCpu {
    /// Microseconds per pushed instance since `before`, per party.
    fn per_push(&self, before: &PushCpu, n: i64) -> String {
        let us = |secs: f64| secs * 1e6 / n.max(1) as f64;
        let diff = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| us(a - b));
        let pg: f64 = self
            .postgres
            .iter()
            .map(|(pid, t)| t - before.postgres.get(pid).copied().unwrap_or(0.0))
            .sum();
        match (
            diff(self.kairos, before.kairos),
            diff(self.bench, before.bench),
        ) {
            (Some(k), Some(b)) if !self.postgres.is_empty() => format!(
                "CPU per instance: kairos {k:.0} µs, PostgreSQL {:.0} µs, receiver {b:.0} µs",
                us(pg)
            ),
            _ => "CPU per instance not read (no /proc, or PostgreSQL on another host)".to_owned(),
        }
    }
}

async fn push_cpu(pool: &PgPool, kairos_pid: u32, skip_pid: i32) -> PushCpu {
    let pids: Vec<i32> = sqlx::query_scalar(
        "select pid from pg_stat_activity where datname = current_database() and pid <> $1",
    )
    .bind(skip_pid)
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    PushCpu {
        kairos: proc_cpu_secs(&kairos_pid.to_string()),
        postgres: pids
            .into_iter()
            .filter_map(|p| Some((p, proc_cpu_secs(&p.to_string())?)))
            .collect(),
        bench: proc_cpu_secs("self"),
    }
}
