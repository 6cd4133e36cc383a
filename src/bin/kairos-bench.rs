//! `kairos-bench`: measures a real `kairos serve` process against a PostgreSQL and prints a
//! Markdown table (see BENCHMARKS.md for how to run it and the numbers of the last run).
//!
//! Each scenario gets a fresh database on the server `DATABASE_URL` points at, and a fresh
//! `kairos serve` child (the binary next to this one), so numbers include HTTP, the pool and
//! the real loops. `pgbench -N` on the same server is printed as the hardware ceiling.
#![forbid(unsafe_code)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};
use tokio::task::JoinSet;

#[derive(Parser, Debug)]
#[command(about = "Benchmark kairos against a PostgreSQL (DATABASE_URL)")]
struct Args {
    /// Scenarios to run: pgbench, trigger, claim, workers, lag, push, replicas, idle, memory,
    /// console (comma-separated) or all.
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
    /// Task counts the claim→complete scenario spreads its pending instances over (each task
    /// has concurrency_limit 1000). Every (tasks, agents, mode) combination runs, modes being
    /// one POST /v1/completions per claimed batch and one concurrent complete per instance.
    #[arg(long, value_delimiter = ',', default_value = "100,1")]
    claim_tasks: Vec<i64>,
    /// Instances per claim (and per batch completion in batched mode).
    #[arg(long, default_value_t = 100)]
    claim_batch: i64,
    /// Shared limits in the claim scenario: `none`, and/or `shared` (every instance draws on one
    /// limit of concurrency 1000 and on a per_key limit of concurrency 50 over 100 keys); one
    /// row each.
    #[arg(long, value_delimiter = ',', default_value = "none")]
    claim_limits: Vec<String>,
    /// The concurrency of the `shared` limit of `--claim-limits shared`.
    #[arg(long, default_value_t = 1000)]
    claim_limit_concurrency: i64,
    /// In the fire-lag scenario, every task draws on one shared limit of this concurrency
    /// (0: no limit).
    #[arg(long, default_value_t = 0)]
    lag_limit: i64,
    /// In the fire-lag scenario, every task's trigger has this `jitter_seconds` (0: none); the
    /// row then also reports the starts per second over the jitter.
    #[arg(long, default_value_t = 0)]
    lag_jitter: i64,
    /// How the claim→complete agents report: single (one concurrent complete request per
    /// instance) and/or batch (one POST /v1/completions per claim); one row each.
    #[arg(long, value_delimiter = ',', default_value = "single,batch")]
    claim_modes: Vec<String>,
    /// Pending instances drained in the workers scenario (one agent's many workers against as
    /// many agents of one worker each).
    #[arg(long, default_value_t = 20_000)]
    workers_instances: i64,
    /// Long-polling workers in the workers scenario: all of one agent on one task, then one
    /// per agent, each agent with its own task.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Which shapes the workers scenario runs: one-agent (every worker of one agent) and/or
    /// agents (one worker per agent); one row each.
    #[arg(long, value_delimiter = ',', default_value = "one-agent,agents")]
    workers_shapes: Vec<String>,
    /// `concurrency_limit` of the workers scenario's tasks (1-1000).
    #[arg(long, default_value_t = 1000)]
    workers_limit: i64,
    /// Tasks on the `0 * * * * *` cron (second 0 of every minute) in the fire-lag scenario.
    #[arg(long, default_value_t = 10_000)]
    lag_tasks: i64,
    /// Minute boundaries the fire-lag scenario measures.
    #[arg(long, default_value_t = 2)]
    lag_minutes: u32,
    /// How the fire-lag agents report: batch (one POST /v1/completions per claim) and/or
    /// single (one concurrent complete request per instance); one row each.
    #[arg(long, value_delimiter = ',', default_value = "batch,single")]
    lag_modes: Vec<String>,
    /// Due instances of the push scenario's one webhook task, pushed to a local receiver.
    #[arg(long, default_value_t = 5_000)]
    push_instances: i64,
    /// webhook_max_in_flight of the kairos server in the push scenario (default: the server's
    /// default).
    #[arg(long)]
    push_in_flight: Option<usize>,
    /// webhook_max_per_task of the kairos server in the push scenario (default: the server's
    /// default).
    #[arg(long)]
    push_per_task: Option<i64>,
    /// Replica counts (kairos serve processes on one database) for the replicas scenario.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    replicas: Vec<usize>,
    /// Tasks due at one instant in the replicas scenario's trigger part.
    #[arg(long, default_value_t = 20_000)]
    replica_tasks: i64,
    /// Pending instances (over 100 tasks, 16 agents, batched) in the replicas scenario's
    /// claim→complete part.
    #[arg(long, default_value_t = 20_000)]
    replica_instances: i64,
    /// Registered (never due) tasks in the idle-cost scenario.
    #[arg(long, default_value_t = 1_000_000)]
    idle_tasks: i64,
    /// Seconds the idle cost is measured over.
    #[arg(long, default_value_t = 20)]
    idle_seconds: u64,
    /// Registered tasks in the memory scenario.
    #[arg(long, default_value_t = 100_000)]
    memory_tasks: i64,
    /// Registered tasks in the console scenario.
    #[arg(long, default_value_t = 100_000)]
    console_tasks: i64,
    /// Instances (history) in the console scenario.
    #[arg(long, default_value_t = 10_000_000)]
    console_instances: i64,
    /// Requests per console page.
    #[arg(long, default_value_t = 20)]
    console_requests: usize,
    /// Keep the console scenario's seeded database under this name and reuse it on the next
    /// run (seeding 10M instances takes minutes); without it the database is dropped.
    #[arg(long)]
    console_keep_db: Option<String>,
    /// Run every `kairos serve` behind PgBouncer in transaction pooling mode: this URL names
    /// the PgBouncer in front of DATABASE_URL's server (its database part is replaced by each
    /// scenario's database), with `database_pooler = "pgbouncer"`; LISTEN, migrations and the
    /// bench's own connections stay on DATABASE_URL.
    #[arg(long)]
    via_pgbouncer: Option<String>,
}

/// `--via-pgbouncer`, for every server started.
static VIA_PGBOUNCER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// `url` with its database part replaced by `name` (its query kept).
fn with_database(url: &str, name: &str) -> Result<String> {
    let (prefix, rest) = url.rsplit_once('/').with_context(|| {
        format!(
            "{} has no database path",
            kairos::config::redact_database_url(url)
        )
    })?;
    let query = rest
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    Ok(format!("{prefix}/{name}{query}"))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new().context("tokio runtime")?;
    rt.block_on(run(args))
}

const SCENARIOS: [&str; 10] = [
    "pgbench", "trigger", "claim", "workers", "lag", "push", "replicas", "idle", "memory",
    "console",
];

fn wants(args: &Args, name: &str) -> bool {
    args.only == "all" || args.only.split(',').any(|s| s.trim() == name)
}

async fn run(args: Args) -> Result<()> {
    kairos::outbound::install_crypto_provider();
    let base = std::env::var("DATABASE_URL")
        .context("DATABASE_URL must name the PostgreSQL to measure")?;
    let _ = VIA_PGBOUNCER.set(args.via_pgbouncer.clone());
    for name in args.only.split(',').map(str::trim) {
        if name != "all" && !SCENARIOS.contains(&name) {
            bail!(
                "unknown scenario {name:?} in --only (one of {}, or all)",
                SCENARIOS.join(", ")
            );
        }
    }
    for mode in &args.lag_modes {
        if mode != "batch" && mode != "single" {
            bail!("unknown --lag-modes entry {mode:?} (batch or single)");
        }
    }
    for mode in &args.claim_modes {
        if mode != "batch" && mode != "single" {
            bail!("unknown --claim-modes entry {mode:?} (batch or single)");
        }
    }
    for shape in &args.workers_shapes {
        if shape != "one-agent" && shape != "agents" {
            bail!("unknown --workers-shapes entry {shape:?} (one-agent or agents)");
        }
    }
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    if !(1..=1000).contains(&args.workers_limit) {
        bail!("--workers-limit must be from 1 to 1000");
    }
    if args.lag_minutes == 0 {
        bail!("--lag-minutes must be at least 1");
    }
    if args.replicas.contains(&0) {
        bail!("--replicas entries must be at least 1");
    }
    let mut rows: Vec<[String; 4]> = Vec::new();
    println!(
        "kairos-bench on {} cores; PostgreSQL at {}{}",
        num_cpus(),
        kairos::config::redact_database_url(&base),
        match &args.via_pgbouncer {
            Some(b) => format!(
                "; kairos through PgBouncer at {}",
                kairos::config::redact_database_url(b)
            ),
            None => String::new(),
        }
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
            rows.push(trigger_throughput(&base, n).await?);
            rows.push(trigger_staged(&base, n).await?);
        }
    }
    if wants(&args, "claim") {
        for &tasks in &args.claim_tasks {
            for mode in &args.claim_modes {
                let batched = mode == "batch";
                for &k in &args.agents {
                    for limits in &args.claim_limits {
                        rows.push(
                            claim_complete(
                                &base,
                                args.claim_instances,
                                tasks,
                                k,
                                args.claim_batch,
                                batched,
                                (limits == "shared").then_some(args.claim_limit_concurrency),
                            )
                            .await?,
                        );
                    }
                }
            }
        }
    }
    if wants(&args, "workers") {
        for shape in &args.workers_shapes {
            rows.push(
                workers_drain(
                    &base,
                    args.workers_instances,
                    args.workers,
                    args.workers_limit,
                    shape == "one-agent",
                )
                .await?,
            );
        }
    }
    if wants(&args, "lag") {
        for mode in &args.lag_modes {
            rows.push(
                fire_lag(
                    &base,
                    args.lag_tasks,
                    args.lag_minutes,
                    mode == "single",
                    args.lag_limit,
                    args.lag_jitter,
                )
                .await?,
            );
        }
    }
    if wants(&args, "push") {
        rows.push(
            push(
                &base,
                args.push_instances,
                args.push_in_flight,
                args.push_per_task,
            )
            .await?,
        );
    }
    if wants(&args, "replicas") {
        for &k in &args.replicas {
            rows.push(replicas_trigger(&base, args.replica_tasks, k).await?);
            rows.push(replicas_claim(&base, args.replica_instances, k).await?);
        }
    }
    if wants(&args, "idle") {
        rows.push(idle_cost(&base, args.idle_tasks, args.idle_seconds).await?);
    }
    if wants(&args, "memory") {
        rows.push(memory(&base, args.memory_tasks).await?);
    }
    if wants(&args, "console") {
        rows.extend(console_pages(&base, &args).await?);
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

/// A fresh database for one scenario, dropped when done.
struct BenchDb {
    admin: PgPool,
    name: String,
    url: String,
    pool: PgPool,
}

impl BenchDb {
    async fn create(base: &str, tag: &str) -> Result<BenchDb> {
        let name = format!("kairos_bench_{tag}_{}", std::process::id());
        Self::open(base, &name, true).await
    }

    /// A database kept between runs under `name`: created and migrated when missing.
    async fn open_or_create(base: &str, name: &str) -> Result<BenchDb> {
        Self::open(base, name, false).await
    }

    /// Database `name` on the server of `base`, migrated; `fresh` drops an existing one first.
    async fn open(base: &str, name: &str, fresh: bool) -> Result<BenchDb> {
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(base)
            .await
            .context("connect")?;
        if fresh {
            admin
                .execute(sqlx::AssertSqlSafe(format!(
                    "drop database if exists {name}"
                )))
                .await?;
        }
        let exists: bool =
            sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
                .bind(name)
                .fetch_one(&admin)
                .await?;
        if !exists {
            admin
                .execute(sqlx::AssertSqlSafe(format!("create database {name}")))
                .await?;
        }
        let url = with_database(base, name)?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect(&url)
            .await?;
        kairos::store::migrate(&pool).await?;
        Ok(BenchDb {
            admin,
            name: name.to_owned(),
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
    start_node(db, "bench", extra).await
}

/// `k` replicas on the same database, node ids `bench1`..`bench<k>`, each on its own port.
async fn start_servers(db: &BenchDb, k: usize, extra: &[(&str, &str)]) -> Result<Vec<Server>> {
    let mut servers = Vec::with_capacity(k);
    for i in 1..=k {
        servers.push(start_node(db, &format!("bench{i}"), extra).await?);
    }
    Ok(servers)
}

async fn start_node(db: &BenchDb, node_id: &str, extra: &[(&str, &str)]) -> Result<Server> {
    let exe = std::env::current_exe()?.with_file_name("kairos");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut cmd = Command::new(&exe);
    cmd.arg("serve")
        .env("DATABASE_URL", &db.url)
        .env("KAIROS_LISTEN", format!("127.0.0.1:{port}"))
        .env("KAIROS_NODE_ID", node_id)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if std::path::Path::new("config/kairos.toml").exists() {
        cmd.env("KAIROS_CONFIG", "config/kairos.toml");
    }
    if let Some(Some(bouncer)) = VIA_PGBOUNCER.get() {
        cmd.env("DATABASE_URL", with_database(bouncer, &db.name)?)
            .env("KAIROS_DATABASE_POOLER", "pgbouncer")
            .env("KAIROS_LISTEN_DATABASE_URL", &db.url)
            .env("KAIROS_MIGRATE_DATABASE_URL", &db.url);
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

/// Where the trigger cursor lives: its own table since migration 5, the task row before. The
/// older layout is kept so one bench source can measure a version from before it.
struct CursorLayout {
    table: &'static str,
    key: &'static str,
}

async fn cursor_layout(pool: &PgPool) -> Result<CursorLayout> {
    let own: bool = sqlx::query_scalar("select to_regclass('task_cursor') is not null")
        .fetch_one(pool)
        .await?;
    Ok(if own {
        CursorLayout {
            table: "task_cursor",
            key: "task_id",
        }
    } else {
        CursorLayout {
            table: "tasks",
            key: "id",
        }
    })
}

/// The earliest `next_fire_at` of all tasks.
async fn earliest_due(pool: &PgPool) -> Result<chrono::DateTime<chrono::Utc>> {
    let c = cursor_layout(pool).await?;
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "select min(next_fire_at) from {}",
        c.table
    )))
    .fetch_one(pool)
    .await?)
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
        sqlx::query(
            "insert into tasks (id, agent_id, spec, trigger_type) \
             select $1 || g, 'bench_agent', jsonb_set($2::jsonb, '{id}', to_jsonb($1 || g)), $3 \
             from generate_series($4::bigint, $5::bigint - 1) g",
        )
        .bind(prefix)
        .bind(&spec)
        .bind(ttype)
        .bind(start)
        .bind(end)
        .execute(pool)
        .await?;
        start = end;
    }
    // The due instant is set once every task exists, so that seeding never eats into the lead
    // the replicas get to start before it.
    let c = cursor_layout(pool).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "update {} set next_fire_at = {next_fire_sql} where starts_with({}, $1)",
        c.table, c.key
    )))
    .bind(prefix)
    .execute(pool)
    .await?;
    Ok(())
}

async fn count(pool: &PgPool, sql: &'static str) -> Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(pool).await?)
}

/// How one burst of due tasks was materialised.
struct TriggerRun {
    secs: f64,
    /// Seconds from the instant to the last window row's `created_at` (database clock).
    last: f64,
    /// Whether the servers were up only after the instant (the numbers then flatter them).
    late: bool,
    /// Window rows after the burst settled, tasks with at least one, windows per creator.
    windows: i64,
    tasks_with_window: i64,
    by_creator: Vec<(String, i64)>,
}

/// `n` tasks due at one instant, served by `k` replicas: time until every window exists.
async fn trigger_run(base: &str, tag: &str, n: i64, k: usize, staged: bool) -> Result<TriggerRun> {
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

async fn trigger_throughput(base: &str, n: i64) -> Result<[String; 4]> {
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
async fn trigger_staged(base: &str, n: i64) -> Result<[String; 4]> {
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

/// Insert `n` PENDING instances over `tasks` tasks of one agent.
/// The shared limits of `--claim-limits shared`: one budget of 1000 at once that every
/// instance draws on, and 50 at once per tenant over 100 tenants.
async fn seed_limits(pool: &PgPool, shared: i64) -> Result<Value> {
    sqlx::query(
        "insert into limits (name, spec) values ('shared', $1), \
             ('tenant', '{\"concurrency\": 50, \"per_key\": true}')",
    )
    .bind(json!({"concurrency": shared, "per_key": false}))
    .execute(pool)
    .await?;
    Ok(json!([{"name": "shared"}, {"name": "tenant", "key": "{{params.tenant}}"}]))
}

async fn seed_pending(pool: &PgPool, n: i64, tasks: i64, limits: Option<i64>) -> Result<()> {
    let draws = match limits {
        Some(shared) => seed_limits(pool, shared).await?,
        None => json!([]),
    };
    insert_tasks(
        pool,
        tasks,
        "c",
        json!({"type": "manual"}),
        json!({"concurrency_limit": 1000, "max_retries": 0, "limits": draws}),
        "null",
    )
    .await?;
    // Each instance a tenant's (g % 100), its draws rendered as the API renders them.
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
             max_attempts, available_at, context_override, limit_draws) \
         select gen_random_uuid(), 'c' || (g % $2), 'w' || g, now(), 'PENDING', 'manual', 'bench_agent', 1, now(), \
             c.ctx, kairos_render_limit_draws($3::jsonb, 'c' || (g % $2), 'bench_agent', c.ctx) \
         from generate_series(1, $1) g \
         cross join lateral (select jsonb_build_object('params', jsonb_build_object('tenant', 't' || (g % 100))) as ctx) c",
    )
    .bind(n)
    .bind(tasks)
    .bind(&draws)
    .execute(pool)
    .await?;
    // Statistics as autovacuum would have them in any database that has run for a minute:
    // without them the planner takes the table just filled for a near-empty one.
    sqlx::query("analyze task_instance").execute(pool).await?;
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// An HTTP client for the bench's agents, keeping up to `idle` connections per server.
fn agent_client(idle: usize) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(idle.max(64))
        .build()?)
}

/// Report a claimed batch in one `POST /v1/completions`: (accepted, refused) items.
async fn complete_batch(
    client: &reqwest::Client,
    url: &str,
    items: &[Value],
) -> Result<(u64, u64)> {
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
    let ok = r["results"]
        .as_array()
        .map(|a| a.iter().filter(|x| x["status"] == 200).count() as u64)
        .unwrap_or(0);
    Ok((ok, items.len() as u64 - ok.min(items.len() as u64)))
}

/// Complete every claimed instance with its own request, all in flight at once:
/// (accepted, refused) requests.
async fn complete_each(
    client: &reqwest::Client,
    url: &str,
    items: Vec<Value>,
) -> Result<(u64, u64)> {
    let mut set = JoinSet::new();
    for i in items {
        let (client, url) = (client.clone(), url.to_owned());
        set.spawn(async move {
            let id = i["id"].as_str().unwrap_or("").to_owned();
            let r = client
                .post(format!("{url}/v1/instances/{id}/complete"))
                .json(&json!({"lease_token": i["lease_token"]}))
                .send()
                .await?;
            Ok::<bool, anyhow::Error>(r.status().is_success())
        });
    }
    let (mut ok, mut refused) = (0, 0);
    while let Some(r) = set.join_next().await {
        if r?? {
            ok += 1;
        } else {
            refused += 1;
        }
    }
    Ok((ok, refused))
}

/// What one drain of the pending instances by claiming agents measured.
#[derive(Default)]
struct Drain {
    secs: f64,
    /// Completions the server accepted, and refused.
    done: u64,
    refused: u64,
    /// Claim requests, those that came back with no instance while instances were still
    /// PENDING, and those answered non-2xx.
    claims: u64,
    empty: u64,
    claim_errors: u64,
    /// The most instances still PENDING right after an empty claim.
    empty_max_left: i64,
    /// Claim latencies in ms, sorted.
    latencies: Vec<f64>,
}

/// `agents` agents (spread round-robin over `urls`) claim `batch` at a time without waiting,
/// and complete what they claimed, until nothing is PENDING.
async fn drain(
    pool: &PgPool,
    urls: &[String],
    agents: usize,
    batch: i64,
    batched: bool,
) -> Result<Drain> {
    if urls.is_empty() {
        bail!("no server to claim from");
    }
    let client = agent_client(agents * usize::try_from(batch).unwrap_or(100))?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let mut workers = Vec::new();
    for a in 0..agents {
        let (client, url, pool) = (client.clone(), urls[a % urls.len()].clone(), pool.clone());
        workers.push(tokio::spawn(async move {
            let mut d = Drain::default();
            loop {
                if Instant::now() > deadline {
                    bail!("agent w{a} still draining after 600 s");
                }
                let t = Instant::now();
                let resp = client
                    .post(format!("{url}/v1/claims"))
                    .json(&json!({"agent_id": "bench_agent", "worker_id": format!("w{a}"), "max_instances": batch}))
                    .send()
                    .await?;
                let ok = resp.status().is_success();
                let body: Value = resp.json().await.unwrap_or(Value::Null);
                d.latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                d.claims += 1;
                if !ok {
                    d.claim_errors += 1;
                }
                let items = body["instances"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    // Empty can mean another agent holds the tasks right now: stop only when
                    // nothing is left to claim.
                    let left: i64 = sqlx::query_scalar(
                        "select count(*) from task_instance where status = 'PENDING'",
                    )
                    .fetch_one(&pool)
                    .await?;
                    if left == 0 {
                        return Ok::<Drain, anyhow::Error>(d);
                    }
                    if ok {
                        d.empty += 1;
                        d.empty_max_left = d.empty_max_left.max(left);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                let (ok, refused) = if batched {
                    complete_batch(&client, &url, &items).await?
                } else {
                    complete_each(&client, &url, items).await?
                };
                d.done += ok;
                d.refused += refused;
            }
        }));
    }
    let mut total = Drain::default();
    for w in workers {
        let d = w.await??;
        total.done += d.done;
        total.refused += d.refused;
        total.claims += d.claims;
        total.empty += d.empty;
        total.claim_errors += d.claim_errors;
        total.empty_max_left = total.empty_max_left.max(d.empty_max_left);
        total.latencies.extend(d.latencies);
    }
    total.secs = started.elapsed().as_secs_f64();
    total.latencies.sort_by(f64::total_cmp);
    Ok(total)
}

impl Drain {
    /// Claim latencies, empty claims and anything refused, for the detail column.
    fn detail(&self, batch: i64) -> String {
        let mut s = format!(
            "claim p50 {:.1} ms, p99 {:.1} ms (max_instances {batch}); {} of {} claims empty \
             while instances were pending",
            percentile(&self.latencies, 0.5),
            percentile(&self.latencies, 0.99),
            self.empty,
            self.claims
        );
        if self.empty > 0 {
            s.push_str(&format!(" (up to {} PENDING)", self.empty_max_left));
        }
        if self.claim_errors > 0 {
            s.push_str(&format!(", {} claims answered non-2xx", self.claim_errors));
        }
        if self.refused > 0 {
            s.push_str(&format!(", {} completions refused", self.refused));
        }
        s
    }
}

async fn claim_complete(
    base: &str,
    n: i64,
    tasks: i64,
    agents: usize,
    batch: i64,
    batched: bool,
    limits: Option<i64>,
) -> Result<[String; 4]> {
    let db = BenchDb::create(base, "claim").await?;
    seed_pending(&db.pool, n, tasks, limits).await?;
    let server = start_server(&db, &[("KAIROS_DATABASE_MAX_CONNECTIONS", "24")]).await?;
    let d = drain(
        &db.pool,
        std::slice::from_ref(&server.base),
        agents,
        batch,
        batched,
    )
    .await?;
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
    let mode = if batched { "batched" } else { "single" };
    Ok(row(
        &format!(
            "claim→complete over HTTP, {n} instances over {tasks} task(s), {agents} agent(s), {mode}{}",
            match limits {
                Some(shared) => format!(
                    ", every instance on shared limits ({shared} at once; 50 per tenant, 100 tenants)"
                ),
                None => String::new(),
            }
        ),
        format!("{:.0} instances/s", d.done as f64 / d.secs),
        d.detail(batch),
        if batched {
            "one POST /v1/completions per claimed batch (one commit)"
        } else {
            "one complete request per instance, a claimed batch's all in flight at once"
        },
    ))
}

/// What the workers of the workers scenario measured.
#[derive(Default)]
struct WorkerRun {
    /// Completions the server accepted, and refused.
    done: u64,
    refused: u64,
    /// Claim requests answered (the last, empty one of each worker after its agent's work was
    /// gone excepted), and those answered non-2xx.
    claims: u64,
    claim_errors: u64,
    /// Instances the claims carried.
    claimed: u64,
    /// Empty answers while the agent had claimable instances: PENDING, available, of an
    /// unpaused task with room under its `concurrency_limit`, at the instant the answer
    /// arrived ([`claimable`]).
    empty_claimable: u64,
    /// The most claimable instances counted at such an answer.
    empty_max_claimable: i64,
    /// Empty answers while the agent had PENDING instances but none claimable (their tasks at
    /// their limits at that instant).
    empty_held: u64,
    /// Claim latencies in ms (the final empty long polls excepted).
    latencies: Vec<f64>,
    /// When the last completion was answered.
    last_done: Option<Instant>,
}

/// The agent's available PENDING instances now, and how many of its instances were claimable
/// at `at` (the instant an empty answer arrived): each task's PENDING rows then, capped by its
/// room under its `concurrency_limit` then, paused tasks none. "Then" is rebuilt from the rows'
/// `started_at` and `finished_at` (during a drain rows only go PENDING -> RUNNING -> SUCCESS),
/// so completions between the answer and this count do not pass for room the claim had; the
/// bench and PostgreSQL share the host's clock. A claim transaction that began before `at` and
/// committed after counts as RUNNING at `at` (its rows were locked by then).
async fn claimable(
    pool: &PgPool,
    agent: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(i64, i64)> {
    Ok(sqlx::query_as(
        "with per as ( \
             select task_id, \
                 count(*) filter (where status = 'PENDING' and available_at <= now()) as pending_now, \
                 count(*) filter (where (status = 'PENDING' and available_at <= $2) \
                                     or started_at > $2) as pending_then, \
                 count(*) filter (where started_at <= $2 \
                                    and (status = 'RUNNING' or finished_at > $2)) as running_then \
             from task_instance where agent_id = $1 group by task_id \
         ) \
         select coalesce(sum(per.pending_now), 0)::bigint, \
             coalesce(sum(least(per.pending_then, greatest(coalesce( \
                 (t.spec->'execution'->>'concurrency_limit')::bigint, 1) - per.running_then, 0))) \
                 filter (where not t.paused), 0)::bigint \
         from per join tasks t on t.id = per.task_id",
    )
    .bind(agent)
    .bind(at)
    .fetch_one(pool)
    .await?)
}

/// The value of one series (name and labels exactly) in Prometheus text; 0 when absent.
fn prom_sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// `n` PENDING instances drained by `workers` long-polling workers (`wait_seconds` 1,
/// `max_instances` 100, each batch reported in one `POST /v1/completions`): all of one agent on
/// one task (`one_agent`), or one worker per agent, each agent with its own task. Every empty
/// answer is checked against the agent's claimable work at the moment it arrived.
async fn workers_drain(
    base: &str,
    n: i64,
    workers: usize,
    limit: i64,
    one_agent: bool,
) -> Result<[String; 4]> {
    const BATCH: i64 = 100;
    let db = BenchDb::create(base, "workers").await?;
    let tasks = if one_agent { 1 } else { workers as i64 };
    seed_pending(&db.pool, n, tasks, None).await?;
    sqlx::query(
        "update tasks set spec = jsonb_set(spec, '{execution,concurrency_limit}', to_jsonb($1))",
    )
    .bind(limit)
    .execute(&db.pool)
    .await?;
    if !one_agent {
        // Task c<k> and its instances belong to agent bench_agent<k>.
        sqlx::query(
            "update tasks set agent_id = 'bench_agent' || substr(id, 2), \
                 spec = jsonb_set(spec, '{agent_id}', to_jsonb('bench_agent' || substr(id, 2)))",
        )
        .execute(&db.pool)
        .await?;
        sqlx::query("update task_instance set agent_id = 'bench_agent' || substr(task_id, 2)")
            .execute(&db.pool)
            .await?;
        sqlx::query("analyze task_instance")
            .execute(&db.pool)
            .await?;
    }
    let server = start_server(&db, &[("KAIROS_DATABASE_MAX_CONNECTIONS", "24")]).await?;
    let client = agent_client(workers * 2)?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let mut set = JoinSet::new();
    for w in 0..workers {
        let agent = if one_agent {
            "bench_agent".to_owned()
        } else {
            format!("bench_agent{w}")
        };
        let (client, url, pool) = (client.clone(), server.base.clone(), db.pool.clone());
        set.spawn(async move {
            let mut r = WorkerRun::default();
            loop {
                if Instant::now() > deadline {
                    bail!("worker w{w} of {agent} still draining after 600 s");
                }
                let t = Instant::now();
                let resp = client
                    .post(format!("{url}/v1/claims"))
                    .json(&json!({"agent_id": agent, "worker_id": format!("w{w}"),
                                  "max_instances": BATCH, "wait_seconds": 1}))
                    .send()
                    .await?;
                let ok = resp.status().is_success();
                let body: Value = resp.json().await.unwrap_or(Value::Null);
                let answered = chrono::Utc::now();
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                let items = body["instances"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    let (pending, claimable) = claimable(&pool, &agent, answered).await?;
                    if ok && pending == 0 {
                        // The agent's work is gone (rows only leave PENDING during a drain).
                        return Ok::<WorkerRun, anyhow::Error>(r);
                    }
                    r.claims += 1;
                    r.latencies.push(ms);
                    if !ok {
                        r.claim_errors += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    } else if claimable > 0 {
                        r.empty_claimable += 1;
                        r.empty_max_claimable = r.empty_max_claimable.max(claimable);
                    } else {
                        r.empty_held += 1;
                    }
                    continue;
                }
                r.claims += 1;
                r.latencies.push(ms);
                r.claimed += items.len() as u64;
                let (done, refused) = complete_batch(&client, &url, &items).await?;
                r.done += done;
                r.refused += refused;
                r.last_done = Some(Instant::now());
            }
        });
    }
    let mut total = WorkerRun::default();
    let mut joined = Vec::new();
    while let Some(r) = set.join_next().await {
        joined.push(r);
    }
    // What the server did for those claims: its claim rounds (transactions), and the looks
    // (one request's share of a round) that came back empty, ended long polls or not.
    let text = client
        .get(format!("{}/metrics", server.base))
        .send()
        .await?
        .text()
        .await?;
    let rounds: f64 = ["settled", "unsettled", "skipped"]
        .iter()
        .map(|o| {
            prom_sample(
                &text,
                &format!("kairos_claim_head_total{{outcome=\"{o}\"}}"),
            )
        })
        .sum();
    let empty_looks = prom_sample(&text, "kairos_claims_total{outcome=\"empty\"}");
    for r in joined {
        let r = r??;
        total.done += r.done;
        total.refused += r.refused;
        total.claims += r.claims;
        total.claim_errors += r.claim_errors;
        total.claimed += r.claimed;
        total.empty_claimable += r.empty_claimable;
        total.empty_max_claimable = total.empty_max_claimable.max(r.empty_max_claimable);
        total.empty_held += r.empty_held;
        total.latencies.extend(r.latencies);
        total.last_done = total.last_done.max(r.last_done);
    }
    let secs = total
        .last_done
        .map_or(0.0, |t| t.duration_since(started).as_secs_f64());
    total.latencies.sort_by(f64::total_cmp);
    let (success, retried): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where status = 'SUCCESS'), \
             count(*) filter (where attempt <> 1) from task_instance",
    )
    .fetch_one(&db.pool)
    .await?;
    drop(server);
    db.drop_db().await?;
    let once = success == n && retried == 0 && total.done == n as u64;
    let shape = if one_agent {
        format!("{workers} workers of one agent on one task")
    } else {
        format!("{workers} agents of one worker each, one task each")
    };
    let mut detail = format!(
        "claim p50 {:.0} ms, p99 {:.0} ms; {} of {} claims empty while the agent had claimable \
         instances",
        percentile(&total.latencies, 0.5),
        percentile(&total.latencies, 0.99),
        total.empty_claimable,
        total.claims
    );
    if total.empty_claimable > 0 {
        detail.push_str(&format!(" (up to {} claimable)", total.empty_max_claimable));
    }
    detail.push_str(&format!(
        ", {} empty with its work held (tasks at their limit); {:.1} instances a claim",
        total.empty_held,
        total.claimed as f64 / total.claims.max(1) as f64
    ));
    detail.push_str(&format!(
        "; server: {rounds:.0} claim rounds, {empty_looks:.0} looks came back empty"
    ));
    if total.claim_errors > 0 {
        detail.push_str(&format!(", {} claims answered non-2xx", total.claim_errors));
    }
    if total.refused > 0 {
        detail.push_str(&format!(", {} completions refused", total.refused));
    }
    Ok(row(
        &format!("workers: {n} instances, {shape}, long-polling (wait_seconds 1), batched"),
        format!("{:.0} instances/s", total.done as f64 / secs.max(1e-9)),
        detail,
        &format!(
            "max_instances {BATCH}, one POST /v1/completions per batch, concurrency_limit {limit}; \
             timed to the last completion; exactly once: {} ({success} of {n} SUCCESS, \
             {retried} with attempt ≠ 1)",
            yes_no(once)
        ),
    ))
}

async fn fire_lag(
    base: &str,
    n: i64,
    minutes: u32,
    single: bool,
    limit: i64,
    jitter: i64,
) -> Result<[String; 4]> {
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
async fn push(
    base: &str,
    n: i64,
    in_flight: Option<usize>,
    per_task: Option<i64>,
) -> Result<[String; 4]> {
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

/// User plus system CPU seconds of process `pid` (`/proc/<pid>/stat`, at 100 ticks a second).
fn proc_cpu_secs(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start with the state.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// A counter's value in a server's `/metrics` (summed over its labels), if it can be read.
async fn metric(client: &reqwest::Client, base: &str, name: &str) -> Option<f64> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let values: Vec<f64> = text
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

async fn replicas_trigger(base: &str, n: i64, k: usize) -> Result<[String; 4]> {
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

async fn replicas_claim(base: &str, n: i64, k: usize) -> Result<[String; 4]> {
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

/// The console at scale: `--console-tasks` cron tasks over several agents and
/// `--console-instances` windows of history (mostly SUCCESS, with SKIPPED, DEAD, FAILED and
/// PENDING ones), then `--console-requests` sequential GETs of every page kind, timed from
/// request to the last byte. Also times one stats-sampler pass, which feeds the overview.
async fn console_pages(base: &str, args: &Args) -> Result<Vec<[String; 4]>> {
    let tasks = args.console_tasks.max(1);
    let n = args.console_instances.max(1);
    let db = match &args.console_keep_db {
        Some(name) => BenchDb::open_or_create(base, name).await?,
        None => BenchDb::create(base, "console").await?,
    };
    let have: i64 = count(&db.pool, "select count(*) from task_instance").await?;
    let seeded_in = if have < n {
        let started = Instant::now();
        sqlx::query(
            "truncate tasks, task_instance, instance_events, console_gauges, console_minutes",
        )
        .execute(&db.pool)
        .await?;
        insert_tasks(
            &db.pool,
            tasks,
            "c",
            json!({"type": "cron", "expr": "30 8 * * *", "timezone": "Asia/Shanghai"}),
            json!({"max_retries": 2}),
            "now() + interval '1 hour'",
        )
        .await?;
        // Agents a0..a99 (the task list and claims filter by agent).
        sqlx::query("update tasks set agent_id = 'a' || (substr(id, 2)::int % 100), \
                     spec = jsonb_set(spec, '{agent_id}', to_jsonb('a' || (substr(id, 2)::int % 100)))")
            .execute(&db.pool)
            .await?;
        let per_task = (n + tasks - 1) / tasks;
        let base_at: chrono::DateTime<chrono::Utc> =
            sqlx::query_scalar("select date_trunc('minute', now())")
                .fetch_one(&db.pool)
                .await?;
        let chunk = 1_000_000;
        let mut start = 0;
        while start < n {
            let end = (start + chunk).min(n);
            // Window k of task t is k minutes before now (k = g / tasks); 1 in 50 is SKIPPED,
            // 1 in 500 DEAD, 1 in 1000 FAILED, the newest of each task PENDING, the rest SUCCESS.
            sqlx::query(
                "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
                     agent_id, attempt, max_attempts, available_at, started_at, finished_at, \
                     error, error_kind, skip_reason, result, created_at, updated_at, \
                     created_by, created_status, claimed_by, finished_by) \
                 select gen_random_uuid(), 'c' || (g % $3), \
                     to_char(at, 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), at, st, 'schedule', \
                     'a' || ((g % $3) % 100), 1, 3, at, \
                     case when st in ('SUCCESS', 'DEAD', 'FAILED') then at + interval '2 seconds' end, \
                     case when st in ('SUCCESS', 'DEAD', 'SKIPPED') then at + interval '5 seconds' end, \
                     case when st in ('DEAD', 'FAILED') then 'model API returned 503' end, \
                     case when st in ('DEAD', 'FAILED') then 'agent' end, \
                     case when st = 'SKIPPED' then 'overlap: previous window still running' end, \
                     case when st = 'SUCCESS' then '{\"ok\": true}'::jsonb end, \
                     at + interval '20 milliseconds', at + interval '5 seconds', \
                     'trigger', case when st = 'SKIPPED' then 'SKIPPED' else 'PENDING' end, \
                     case when st in ('SUCCESS', 'DEAD', 'FAILED') then 'worker-1' end, \
                     case when st = 'SUCCESS' then 'worker-1' end \
                 from (select g, $4::timestamptz - make_interval(mins => (g / $3)::int + 1) as at, \
                              case when g / $3 = 0 then 'PENDING' \
                                   when g % 500 = 7 then 'DEAD' \
                                   when g % 1000 = 3 then 'FAILED' \
                                   when g % 50 = 1 then 'SKIPPED' \
                                   else 'SUCCESS' end as st \
                       from generate_series($1::bigint, $2::bigint - 1) g) s",
            )
            .bind(start)
            .bind(end)
            .bind(tasks)
            .bind(base_at)
            .execute(&db.pool)
            .await?;
            start = end;
            eprintln!("console: seeded {end} of {n} instances ({per_task} per task)");
        }
        sqlx::query("analyze tasks").execute(&db.pool).await?;
        sqlx::query("analyze task_instance")
            .execute(&db.pool)
            .await?;
        Some(started.elapsed().as_secs_f64())
    } else {
        None
    };
    let sample_started = Instant::now();
    kairos::store::console::sample(&db.pool).await?;
    let sample_secs = sample_started.elapsed().as_secs_f64();

    let server = start_server(&db, &[]).await?;
    let client = reqwest::Client::new();
    let dead_id: String = sqlx::query_scalar(
        "select id::text from task_instance where status = 'DEAD' order by scheduled_at desc limit 1",
    )
    .fetch_one(&db.pool)
    .await?;
    // The second page of the instance list: follow the first page's cursor.
    let first = client
        .get(format!("{}/v1/instances?limit=50", server.base))
        .send()
        .await?
        .json::<Value>()
        .await?;
    let cursor = first["next_cursor"].as_str().unwrap_or("").to_owned();
    let some_task = format!("c{}", tasks / 2);
    let pages: Vec<(String, String)> = vec![
        ("overview".into(), "/ui/".into()),
        ("tasks".into(), "/ui/tasks".into()),
        (
            "tasks, a later page".into(),
            format!("/ui/tasks?after={some_task}"),
        ),
        (
            "tasks, agent a7, cron".into(),
            "/ui/tasks?agent=a7&type=cron".into(),
        ),
        ("task detail".into(), format!("/ui/tasks/{some_task}")),
        ("instances".into(), "/ui/instances".into()),
        (
            "instances, next page".into(),
            format!("/ui/instances?cursor={cursor}"),
        ),
        (
            "instances of a task".into(),
            format!("/ui/instances?task_id={some_task}"),
        ),
        (
            "instances, status DEAD".into(),
            "/ui/instances?status=DEAD".into(),
        ),
        (
            "instances, status RUNNING (none)".into(),
            "/ui/instances?status=RUNNING".into(),
        ),
        (
            "instances, status CANCELLED (none)".into(),
            "/ui/instances?status=CANCELLED".into(),
        ),
        (
            "instances, status SKIPPED".into(),
            "/ui/instances?status=SKIPPED".into(),
        ),
        (
            "instances, scheduled in one minute".into(),
            "/ui/instances?from=2026-12-01T12:00:00Z&to=2026-12-01T12:01:00Z".into(),
        ),
        ("instance detail".into(), format!("/ui/instances/{dead_id}")),
        ("DEAD queue".into(), "/ui/dead".into()),
        (
            "cron playground".into(),
            "/ui/playground?expr=30+2+*+*+*&tz=America/New_York".into(),
        ),
    ];
    let mut rows = Vec::new();
    let seed_note = match seeded_in {
        Some(s) => format!("seeded in {s:.0} s"),
        None => "reused seeded database".to_owned(),
    };
    rows.push(row(
        &format!("console data: {tasks} tasks, {n} instances"),
        format!("sampler pass {:.0} ms", sample_secs * 1000.0),
        seed_note,
        "one stats-sampler pass (counts + minute rollups) at this size",
    ));
    for (name, path) in pages {
        let url = format!("{}{}", server.base, path);
        let mut times = Vec::with_capacity(args.console_requests);
        for _ in 0..args.console_requests.max(1) {
            let t = Instant::now();
            let resp = client.get(&url).send().await?;
            let status = resp.status();
            let body = resp.bytes().await?;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            if !status.is_success() {
                bail!("{path}: {status}: {}", String::from_utf8_lossy(&body));
            }
        }
        times.sort_by(f64::total_cmp);
        rows.push(row(
            &format!("console page: {name}"),
            format!("p50 {:.0} ms", percentile(&times, 0.5)),
            format!(
                "p99 {:.0} ms, max {:.0} ms",
                percentile(&times, 0.99),
                times[times.len() - 1]
            ),
            &format!(
                "`GET {}`",
                path.split('?')
                    .next()
                    .unwrap_or("")
                    .replace(&dead_id, "{id}")
            ),
        ));
    }
    drop(server);
    if args.console_keep_db.is_none() {
        db.drop_db().await?;
    }
    Ok(rows)
}
