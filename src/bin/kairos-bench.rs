//! `kairos-bench`: measures a real `kairos serve` process against a PostgreSQL and prints a
//! Markdown table (see BENCHMARKS.md for how to run it and the numbers of the last run).
//!
//! Each scenario gets a fresh database on the server `DATABASE_URL` points at, and a fresh
//! `kairos serve` child (the binary next to this one), so numbers include HTTP, the pool and
//! the real loops. `pgbench -N` on the same server is printed as the hardware ceiling.
#![forbid(unsafe_code)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

#[derive(Parser, Debug)]
#[command(about = "Benchmark kairos against a PostgreSQL (DATABASE_URL)")]
struct Args {
    /// Scenarios to run: trigger, claim, lag, idle, memory, pgbench (comma-separated) or all.
    #[arg(long, default_value = "all")]
    only: String,
    /// Task counts for the trigger throughput scenario.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    trigger_tasks: Vec<i64>,
    /// Pending instances drained in the claim→complete scenario.
    #[arg(long, default_value_t = 50_000)]
    claim_instances: i64,
    /// Agent counts for the claim→complete scenario.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    agents: Vec<usize>,
    /// Instances per claim (and per batch completion when --batch-complete).
    #[arg(long, default_value_t = 100)]
    claim_batch: i64,
    /// Tasks on per-minute crons in the fire-lag scenario.
    #[arg(long, default_value_t = 10_000)]
    lag_tasks: i64,
    /// Registered (never due) tasks in the idle-cost scenario.
    #[arg(long, default_value_t = 1_000_000)]
    idle_tasks: i64,
    /// Seconds the idle cost is measured over.
    #[arg(long, default_value_t = 20)]
    idle_seconds: u64,
    /// Registered tasks in the memory scenario.
    #[arg(long, default_value_t = 100_000)]
    memory_tasks: i64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new().context("tokio runtime")?;
    rt.block_on(run(args))
}

fn wants(args: &Args, name: &str) -> bool {
    args.only == "all" || args.only.split(',').any(|s| s.trim() == name)
}

async fn run(args: Args) -> Result<()> {
    kairos::outbound::install_crypto_provider();
    let base = std::env::var("DATABASE_URL")
        .context("DATABASE_URL must name the PostgreSQL to measure")?;
    let mut rows: Vec<[String; 4]> = Vec::new();
    println!(
        "kairos-bench on {} cores; PostgreSQL at {}",
        num_cpus(),
        redact(&base)
    );

    if wants(&args, "pgbench") {
        match pgbench(&base).await {
            Ok(tps) => rows.push(row(
                "pgbench -N ceiling (8 clients, 10 s)",
                format!("{tps:.0} TPS"),
                "",
                "one fsync'd commit per transaction",
            )),
            Err(e) => rows.push(row(
                "pgbench -N ceiling",
                "not measured",
                "",
                &format!("{e:#}"),
            )),
        }
    }
    if wants(&args, "trigger") {
        for &n in &args.trigger_tasks {
            let r = trigger_throughput(&base, n).await?;
            rows.push(r);
        }
    }
    if wants(&args, "claim") {
        for batched in [false, true] {
            for &k in &args.agents {
                rows.push(
                    claim_complete(&base, args.claim_instances, k, args.claim_batch, batched)
                        .await?,
                );
            }
        }
    }
    if wants(&args, "lag") {
        rows.push(fire_lag(&base, args.lag_tasks).await?);
    }
    if wants(&args, "idle") {
        rows.push(idle_cost(&base, args.idle_tasks, args.idle_seconds).await?);
    }
    if wants(&args, "memory") {
        rows.push(memory(&base, args.memory_tasks).await?);
    }

    println!();
    println!("| scenario | result | detail | notes |");
    println!("|---|---|---|---|");
    for r in rows {
        println!("| {} | {} | {} | {} |", r[0], r[1], r[2], r[3]);
    }
    Ok(())
}

fn row(a: &str, b: impl Into<String>, c: impl Into<String>, d: &str) -> [String; 4] {
    [a.to_owned(), b.into(), c.into(), d.to_owned()]
}

fn num_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_owned(),
    }
}

/// A fresh database for one scenario, dropped when done.
struct BenchDb {
    admin: PgPool,
    name: String,
    url: String,
    pool: PgPool,
}

impl BenchDb {
    async fn create(base: &str, tag: &str) -> Result<BenchDb> {
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(base)
            .await
            .context("connect")?;
        let name = format!("kairos_bench_{tag}_{}", std::process::id());
        admin
            .execute(sqlx::AssertSqlSafe(format!(
                "drop database if exists {name}"
            )))
            .await?;
        admin
            .execute(sqlx::AssertSqlSafe(format!("create database {name}")))
            .await?;
        let (prefix, rest) = base
            .rsplit_once('/')
            .context("DATABASE_URL has no database path")?;
        let query = rest
            .split_once('?')
            .map(|(_, q)| format!("?{q}"))
            .unwrap_or_default();
        let url = format!("{prefix}/{name}{query}");
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect(&url)
            .await?;
        kairos::store::migrate(&pool).await?;
        Ok(BenchDb {
            admin,
            name,
            url,
            pool,
        })
    }

    async fn drop_db(self) -> Result<()> {
        self.pool.close().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.admin
            .execute(sqlx::AssertSqlSafe(format!(
                "drop database if exists {} with (force)",
                self.name
            )))
            .await?;
        Ok(())
    }
}

/// A `kairos serve` child process, killed on drop.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_server(db: &BenchDb, extra: &[(&str, &str)]) -> Result<Server> {
    let exe = std::env::current_exe()?.with_file_name("kairos");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut cmd = Command::new(&exe);
    cmd.arg("serve")
        .env("DATABASE_URL", &db.url)
        .env("KAIROS_LISTEN", format!("127.0.0.1:{port}"))
        .env("KAIROS_NODE_ID", "bench")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if std::path::Path::new("config/kairos.toml").exists() {
        cmd.env("KAIROS_CONFIG", "config/kairos.toml");
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client.get(format!("{}/healthz", server.base)).send().await
            && r.status().is_success()
        {
            return Ok(server);
        }
        if Instant::now() > deadline {
            bail!("kairos did not start");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Insert `n` tasks of `trigger` for `agent`, ids `<prefix><k>`, with `next_fire_at`.
async fn insert_tasks(
    pool: &PgPool,
    n: i64,
    prefix: &str,
    trigger: Value,
    execution: Value,
    next_fire_sql: &str,
) -> Result<()> {
    let spec = json!({
        "id": "x", "agent_id": "bench_agent", "trigger": trigger,
        "execution": execution, "dispatch": {"mode": "poll"}, "context": {},
        "notify": {"on_success": [], "on_failure": []},
        "circuit_breaker": {"failure_threshold": 5, "cooldown_seconds": null}
    });
    let sub = kairos::domain::task::parse_submission("x", &spec)
        .map_err(|e| anyhow::anyhow!("bench task spec invalid: {e:?}"))?;
    let spec = serde_json::to_value(&sub.spec)?;
    let ttype = sub.spec.trigger.type_name();
    let chunk = 50_000;
    let mut start = 0;
    while start < n {
        let end = (start + chunk).min(n);
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "insert into tasks (id, agent_id, spec, trigger_type, next_fire_at) \
             select $1 || g, 'bench_agent', jsonb_set($2::jsonb, '{{id}}', to_jsonb($1 || g)), $3, {next_fire_sql} \
             from generate_series($4::bigint, $5::bigint - 1) g"
        )))
        .bind(prefix)
        .bind(&spec)
        .bind(ttype)
        .bind(start)
        .bind(end)
        .execute(pool)
        .await?;
        start = end;
    }
    Ok(())
}

async fn count(pool: &PgPool, sql: &'static str) -> Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(pool).await?)
}

async fn trigger_throughput(base: &str, n: i64) -> Result<[String; 4]> {
    let db = BenchDb::create(base, "trigger").await?;
    // Due one second from now, all at the same instant.
    insert_tasks(
        &db.pool,
        n,
        "t",
        json!({"type": "interval", "every_seconds": 3600}),
        json!({"overlap": "queue"}),
        "date_trunc('second', now()) + interval '3 seconds'",
    )
    .await?;
    let due: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select min(next_fire_at) from tasks")
            .fetch_one(&db.pool)
            .await?;
    let server = start_server(&db, &[]).await?;
    // Wait for the due instant on the database clock, then time until every window exists.
    loop {
        let now = kairos::store::now(&db.pool).await?;
        if now >= due {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    loop {
        let c = count(&db.pool, "select count(*) from task_instance").await?;
        if c >= n {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("trigger scenario timed out at {c} of {n}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let last: f64 = sqlx::query_scalar(
        "select extract(epoch from max(created_at) - min(scheduled_at))::float8 from task_instance",
    )
    .fetch_one(&db.pool)
    .await?;
    drop(server);
    db.drop_db().await?;
    Ok(row(
        &format!("trigger throughput, {n} tasks due at one instant"),
        format!("{:.0} windows/s", n as f64 / secs),
        format!("all windows in {secs:.2} s (last row {last:.2} s after the instant)"),
        "one replica, batches of 500 tasks per transaction",
    ))
}

/// Insert `n` PENDING instances over `tasks` tasks of one agent.
async fn seed_pending(pool: &PgPool, n: i64, tasks: i64) -> Result<()> {
    insert_tasks(
        pool,
        tasks,
        "c",
        json!({"type": "manual"}),
        json!({"concurrency_limit": 1000, "max_retries": 0}),
        "null",
    )
    .await?;
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
             max_attempts, available_at) \
         select gen_random_uuid(), 'c' || (g % $2), 'w' || g, now(), 'PENDING', 'manual', 'bench_agent', 1, now() \
         from generate_series(1, $1) g",
    )
    .bind(n)
    .bind(tasks)
    .execute(pool)
    .await?;
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn claim_complete(
    base: &str,
    n: i64,
    agents: usize,
    batch: i64,
    batched: bool,
) -> Result<[String; 4]> {
    let db = BenchDb::create(base, "claim").await?;
    seed_pending(&db.pool, n, 100).await?;
    let server = start_server(&db, &[("KAIROS_DATABASE_MAX_CONNECTIONS", "20")]).await?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let latencies = Arc::new(std::sync::Mutex::new(Vec::<f64>::new()));
    let started = Instant::now();
    let mut workers = Vec::new();
    for a in 0..agents {
        let (client, url, latencies, pool) = (
            client.clone(),
            server.base.clone(),
            latencies.clone(),
            db.pool.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut done = 0u64;
            loop {
                let t = Instant::now();
                let resp: Value = client
                    .post(format!("{url}/v1/claims"))
                    .json(&json!({"agent_id": "bench_agent", "worker_id": format!("w{a}"), "max_instances": batch}))
                    .send()
                    .await?
                    .json()
                    .await?;
                if let Ok(mut l) = latencies.lock() {
                    l.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                let items = resp["instances"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    // Empty can mean another agent holds the tasks right now: stop only when
                    // nothing is left to claim.
                    let left: i64 = sqlx::query_scalar("select count(*) from task_instance where status = 'PENDING'")
                        .fetch_one(&pool)
                        .await?;
                    if left == 0 {
                        return Ok::<u64, anyhow::Error>(done);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                if batched {
                    let completions: Vec<Value> = items
                        .iter()
                        .map(|i| json!({"id": i["id"], "lease_token": i["lease_token"]}))
                        .collect();
                    let r: Value = client
                        .post(format!("{url}/v1/completions"))
                        .json(&json!({"completions": completions}))
                        .send()
                        .await?
                        .json()
                        .await?;
                    done += r["results"]
                        .as_array()
                        .map(|a| a.iter().filter(|x| x["status"] == 200).count() as u64)
                        .unwrap_or(0);
                    continue;
                }
                for i in items {
                    let id = i["id"].as_str().unwrap_or("");
                    let r = client
                        .post(format!("{url}/v1/instances/{id}/complete"))
                        .json(&json!({"lease_token": i["lease_token"]}))
                        .send()
                        .await?;
                    if r.status().is_success() {
                        done += 1;
                    }
                }
            }
        }));
    }
    let mut done = 0;
    for w in workers {
        done += w.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let mut l = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    l.sort_by(f64::total_cmp);
    let success = count(
        &db.pool,
        "select count(*) from task_instance where status = 'SUCCESS'",
    )
    .await?;
    drop(server);
    db.drop_db().await?;
    if success != n {
        bail!("claim scenario: {success} of {n} succeeded");
    }
    Ok(row(
        &format!("claim→complete over HTTP, {n} instances, {agents} agent(s)"),
        format!("{:.0} instances/s", done as f64 / secs),
        format!(
            "claim latency p50 {:.1} ms, p99 {:.1} ms (max_instances {batch})",
            percentile(&l, 0.5),
            percentile(&l, 0.99)
        ),
        if batched {
            "one POST /v1/completions per claimed batch (one commit)"
        } else {
            "one complete request per instance"
        },
    ))
}

async fn fire_lag(base: &str, n: i64) -> Result<[String; 4]> {
    let db = BenchDb::create(base, "lag").await?;
    insert_tasks(
        &db.pool,
        n,
        "l",
        json!({"type": "cron", "expr": "* * * * *", "timezone": "UTC"}),
        json!({}),
        "date_trunc('minute', now()) + interval '1 minute'",
    )
    .await?;
    let due: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select min(next_fire_at) from tasks")
            .fetch_one(&db.pool)
            .await?;
    let server = start_server(&db, &[("KAIROS_DATABASE_MAX_CONNECTIONS", "20")]).await?;
    let client = reqwest::Client::new();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut agents = Vec::new();
    for a in 0..8 {
        let (client, url, stop) = (client.clone(), server.base.clone(), stop.clone());
        agents.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let resp: Value = match client
                    .post(format!("{url}/v1/claims"))
                    .json(&json!({"agent_id": "bench_agent", "worker_id": format!("lag{a}"), "max_instances": 100, "wait_seconds": 5}))
                    .send()
                    .await
                {
                    Ok(r) => r.json().await.unwrap_or(Value::Null),
                    Err(_) => continue,
                };
                let completions: Vec<Value> = resp["instances"]
                    .as_array()
                    .map(|a| a.iter().map(|i| json!({"id": i["id"], "lease_token": i["lease_token"]})).collect())
                    .unwrap_or_default();
                if !completions.is_empty() {
                    let _ = client
                        .post(format!("{url}/v1/completions"))
                        .json(&json!({"completions": completions}))
                        .send()
                        .await;
                }
            }
        }));
    }
    let wait = (due - chrono::Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(1);
    println!(
        "fire lag: waiting {:.0} s for the minute boundary",
        wait.as_secs_f64()
    );
    tokio::time::sleep(wait).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let started = count(
            &db.pool,
            "select count(*) from task_instance where started_at is not null",
        )
        .await?;
        if started >= n || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let lags: Vec<f64> = sqlx::query_scalar(
        "select extract(epoch from started_at - scheduled_at)::float8 * 1000 from task_instance \
         where started_at is not null order by 1",
    )
    .fetch_all(&db.pool)
    .await?;
    for a in agents {
        let _ = tokio::time::timeout(Duration::from_secs(10), a).await;
    }
    drop(server);
    db.drop_db().await?;
    Ok(row(
        &format!(
            "fire lag, {n} tasks on a per-minute cron, 8 agents long-polling, batch completions"
        ),
        format!(
            "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            percentile(&lags, 0.5),
            percentile(&lags, 0.99),
            lags.last().copied().unwrap_or(0.0)
        ),
        format!("{} of {n} windows started", lags.len()),
        "started_at − scheduled_at, database clock",
    ))
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let stime: f64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    Ok((utime + stime) / 100.0)
}

fn rss_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Ok(kb / 1024.0)
}

async fn idle_cost(base: &str, n: i64, seconds: u64) -> Result<[String; 4]> {
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

async fn memory(base: &str, n: i64) -> Result<[String; 4]> {
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

async fn pgbench(base: &str) -> Result<f64> {
    let db = BenchDb::create(base, "pgbench").await?;
    let bin = which_pgbench()
        .context("pgbench not found (Debian: postgresql-contrib or postgresql-15)")?;
    let init = Command::new(&bin)
        .args(["-i", "-q", "-s", "8", &db.url])
        .output()?;
    if !init.status.success() {
        bail!(
            "pgbench -i failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
    }
    let out = Command::new(&bin)
        .args(["-N", "-c", "8", "-j", "2", "-T", "10", &db.url])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    db.drop_db().await?;
    text.lines()
        .find(|l| l.starts_with("tps"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .context("no tps line in pgbench output")
}

fn which_pgbench() -> Option<String> {
    if Command::new("pgbench").arg("--version").output().is_ok() {
        return Some("pgbench".to_owned());
    }
    let dirs = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    let mut found: Vec<String> = dirs
        .filter_map(|d| d.ok())
        .map(|d| format!("{}/bin/pgbench", d.path().display()))
        .filter(|p| std::path::Path::new(p).exists())
        .collect();
    found.sort();
    found.pop()
}
