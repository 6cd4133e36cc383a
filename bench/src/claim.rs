//! The claim→complete drain: PENDING instances claimed without waiting by agents that report
//! each batch at once or each instance alone, until nothing is PENDING.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::agents::{agent_client, complete_batch, complete_each};
use crate::db::{BenchDb, count, seed_pending};
use crate::measure::percentile;
use crate::output::{Row, row};
use crate::server::start_server;

/// What one drain of the pending instances by claiming agents measured.
#[derive(Default)]
pub struct Drain {
    pub secs: f64,
    /// Completions the server accepted, and refused.
    pub done: u64,
    refused: u64,
    /// Claim requests, those that came back with no instance while instances were still
    /// PENDING, and those answered non-2xx.
    claims: u64,
    empty: u64,
    claim_errors: u64,
    /// The most instances still unclaimed (PENDING at the start less those claimed since) right
    /// after an empty claim.
    empty_max_left: i64,
    /// Claim latencies in ms, sorted.
    latencies: Vec<f64>,
}

/// `agents` agents (spread round-robin over `urls`) claim `batch` at a time without waiting,
/// and complete what they claimed, until nothing is PENDING.
///
/// How many instances are left is the agents' own tally: the PENDING count at the start less
/// what they have claimed since. Only near the end, where claims in flight may hold the rest,
/// does an empty claim ask the table whether any is still PENDING: a `count(*)` after every
/// empty claim cost the server a scan of the table each time, and only in the drains that
/// have empty claims (shared limits).
pub async fn drain(
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
    let unclaimed = Arc::new(AtomicI64::new(pending(pool).await?));
    // Claimed but not yet tallied: at most every agent's claim in flight.
    let tail = i64::try_from(agents)
        .unwrap_or(i64::MAX)
        .saturating_mul(batch);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let mut workers = Vec::new();
    for a in 0..agents {
        let (client, url, pool) = (client.clone(), urls[a % urls.len()].clone(), pool.clone());
        let unclaimed = unclaimed.clone();
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
                let claimed = i64::try_from(items.len()).unwrap_or(i64::MAX);
                let left = unclaimed.fetch_sub(claimed, Ordering::SeqCst) - claimed;
                if items.is_empty() {
                    // Empty can mean another agent holds the tasks right now: stop only when
                    // nothing is left to claim, as the table says. Far from the end the tally
                    // says so by itself: more are left than other agents' claims can hold.
                    if left <= tail && !any_pending(&pool).await? {
                        return Ok::<Drain, anyhow::Error>(d);
                    }
                    if ok {
                        d.empty += 1;
                        d.empty_max_left = d.empty_max_left.max(left.max(0));
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
    pub fn detail(&self, batch: i64) -> String {
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

/// Whether any instance is PENDING now.
async fn any_pending(pool: &PgPool) -> Result<bool> {
    Ok(
        sqlx::query_scalar("select exists (select 1 from task_instance where status = 'PENDING')")
            .fetch_one(pool)
            .await?,
    )
}

/// The instances PENDING now.
async fn pending(pool: &PgPool) -> Result<i64> {
    count(
        pool,
        "select count(*) from task_instance where status = 'PENDING'",
    )
    .await
}

/// One drain: `n` instances over `tasks` tasks, `agents` agents, reporting batched or single,
/// with or without the shared limits of `--claim-limits shared`; every instance must succeed.
pub async fn claim_complete(
    base: &str,
    n: i64,
    tasks: i64,
    agents: usize,
    batch: i64,
    batched: bool,
    limits: Option<i64>,
) -> Result<Row> {
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
