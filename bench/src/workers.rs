//! The workers drain: one agent's long-polling workers against as many agents of one worker,
//! every empty answer checked against the work the agent could have claimed.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::task::JoinSet;

use crate::agents::{agent_client, complete_batch};
use crate::db::{BenchDb, seed_pending};
use crate::measure::{percentile, prom_sample};
use crate::output::{Row, row, yes_no};
use crate::server::start_server;

/// What the workers of the workers scenario measured.
#[derive(Default)]
pub struct WorkerRun {
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
pub async fn claimable(
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

/// `n` PENDING instances drained by `workers` long-polling workers (`wait_seconds` 1,
/// `max_instances` 100, each batch reported in one `POST /v1/completions`): all of one agent on
/// one task (`one_agent`), or one worker per agent, each agent with its own task. Every empty
/// answer is checked against the agent's claimable work at the moment it arrived.
pub async fn workers_drain(
    base: &str,
    n: i64,
    workers: usize,
    limit: i64,
    one_agent: bool,
) -> Result<Row> {
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
