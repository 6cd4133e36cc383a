//! Shared limits over real HTTP and a real PostgreSQL: budgets of concurrency and rate that
//! tasks of several agents draw on, holds, and what the API refuses.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use common::{TestApp, backlog, claim, eventually, json, manual_task, trigger};
use kairos::app::Options;
use kairos::services::Heartbeats;
use kairos::services::retry_scanner::RetryScannerConfig;
use kairos::services::timeout_reaper::{TimeoutReaper, TimeoutReaperConfig};
use kairos::services::webhook_dispatcher::WebhookDispatcherConfig;
use serde_json::{Value, json};
use sqlx::PgPool;

#[sqlx::test]
async fn a_concurrency_limit_is_shared_by_tasks_of_two_agents(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let (status, body) = json(
        app.put("/v1/limits/openai", json!({"concurrency": 3}))
            .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    manual_task(&app, "a-report", "agent-a", json!([{"name": "openai"}])).await;
    manual_task(&app, "b-report", "agent-b", json!([{"name": "openai"}])).await;
    trigger(&app, "a-report", 5, json!({})).await;
    trigger(&app, "b-report", 5, json!({})).await;
    let a = claim(&app, "agent-a", "w1", 10, json!({})).await;
    let b = claim(&app, "agent-b", "w2", 10, json!({})).await;
    assert_eq!(a.len() + b.len(), 3, "{a:?} {b:?}");
    let (_, view) = json(app.get("/v1/limits/openai").await).await;
    assert_eq!(view["running"], 3, "{view}");
    let first: &Value = &a[0];
    let (status, _) = json(
        app.post(
            &format!(
                "/v1/instances/{}/complete",
                first["id"].as_str().unwrap_or("")
            ),
            json!({"lease_token": first["lease_token"], "result": {}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    let more = claim(&app, "agent-b", "w2", 10, json!({})).await;
    assert_eq!(more.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Helpers.

const TASKS_1: [&str; 3] = ["t-a", "t-b", "t-c"];

async fn put_limit(app: &TestApp, name: &str, body: Value) -> (u16, Value) {
    json(app.put(&format!("/v1/limits/{name}"), body).await).await
}

async fn limit_ok(app: &TestApp, name: &str, body: Value) -> Value {
    let (status, view) = put_limit(app, name, body).await;
    assert!(
        status == 201 || status == 200,
        "PUT limit {name}: {status} {view}"
    );
    view
}

async fn put_task(app: &TestApp, id: &str, body: Value) -> (u16, Value) {
    json(app.put(&format!("/v1/tasks/{id}"), body).await).await
}

async fn task_ok(app: &TestApp, id: &str, body: Value) {
    let (status, view) = put_task(app, id, body).await;
    assert!(
        status == 201 || status == 200,
        "PUT task {id}: {status} {view}"
    );
}

/// A manual poll-mode task of `agent` with these `execution` settings.
fn manual_body(agent: &str, execution: Value) -> Value {
    json!({"agent_id": agent, "trigger": {"type": "manual"}, "execution": execution})
}

/// A manual poll-mode task of `agent` (`concurrency_limit` 100) whose instances draw on the
/// `per_key` limit `limit`, keyed by their `params.tenant`.
async fn tenant_task(app: &TestApp, id: &str, agent: &str, limit: &str) {
    let draw = json!([{"name": limit, "key": "{{params.tenant}}"}]);
    let execution = json!({"concurrency_limit": 100, "limits": draw});
    task_ok(app, id, manual_body(agent, execution)).await;
}

/// The `field` of every validation error in a problem body.
fn fields(problem: &Value) -> Vec<String> {
    problem["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["field"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Expect a 422 whose errors name `field`.
fn assert_invalid(what: &str, status: u16, problem: &Value, field: &str) {
    assert_eq!(status, 422, "{what}: {problem}");
    assert!(
        fields(problem).iter().any(|f| f == field),
        "{what}: expected an error naming {field:?}, got {problem}"
    );
}

fn id_of(i: &Value) -> String {
    i["id"].as_str().expect("instance id").to_owned()
}

fn uuid_of(i: &Value) -> uuid::Uuid {
    id_of(i).parse().expect("instance uuid")
}

async fn complete(app: &TestApp, i: &Value) -> (u16, Value) {
    json(
        app.post(
            &format!("/v1/instances/{}/complete", id_of(i)),
            json!({"lease_token": i["lease_token"], "result": {}}),
        )
        .await,
    )
    .await
}

async fn fail(app: &TestApp, i: &Value, extra: Value) -> (u16, Value) {
    let mut body = json!({"lease_token": i["lease_token"], "error": "refused"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    json(
        app.post(&format!("/v1/instances/{}/fail", id_of(i)), body)
            .await,
    )
    .await
}

/// Release the hold of limit `name` on `key` through the API, expecting 200.
async fn release_key(app: &TestApp, name: &str, key: &str) {
    let (status, view) = json(
        app.post(&format!("/v1/limits/{name}/release"), json!({"key": key}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{view}");
}

async fn limit_view(app: &TestApp, name: &str) -> Value {
    let (status, view) = json(app.get(&format!("/v1/limits/{name}")).await).await;
    assert_eq!(status, 200, "{view}");
    view
}

/// Units held in `limit_units` (all limits).
async fn units_total(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select coalesce(sum(cost), 0)::bigint from limit_units")
        .fetch_one(pool)
        .await
        .expect("units")
}

/// The `limit_units` rows of one instance.
async fn units_of(pool: &PgPool, id: uuid::Uuid) -> i64 {
    sqlx::query_scalar("select count(*) from limit_units where instance_id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("units of instance")
}

async fn status_of(pool: &PgPool, id: uuid::Uuid) -> String {
    sqlx::query_scalar("select status from task_instance where id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("status")
}

/// `common::backlog`, with each row's `limit_draws` rendered from its task's limits as an
/// instance created through the API would have them.
async fn backlog_drawing(pool: &PgPool, task: &str, agent: &str, n: i32, age_s: i32) {
    backlog(pool, task, agent, n, age_s, 4).await;
    sqlx::query(
        "update task_instance i set limit_draws = kairos_render_limit_draws( \
             t.spec->'execution'->'limits', i.task_id, i.agent_id, \
             coalesce(t.spec->'context', '{}'::jsonb) || coalesce(i.context_override, '{}'::jsonb)) \
         from tasks t where t.id = i.task_id and i.task_id = $1",
    )
    .bind(task)
    .execute(pool)
    .await
    .expect("render draws");
}

/// Claim for `agent` until `pred` holds for the claimed list (instances claimed and not
/// accepted are completed so they do not linger), or panic after `deadline`.
async fn claim_until<F>(
    app: &TestApp,
    agent: &str,
    deadline: Duration,
    what: &str,
    pred: F,
) -> Vec<Value>
where
    F: Fn(&[Value]) -> bool,
{
    let start = Instant::now();
    loop {
        let got = claim(app, agent, "poller", 10, json!({})).await;
        if pred(&got) {
            return got;
        }
        for i in &got {
            complete(app, i).await;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn of_task<'a>(got: &'a [Value], task: &str) -> Vec<&'a Value> {
    got.iter().filter(|i| i["task_id"] == task).collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Concurrency under contention: 3 replicas, 16 claimers.

#[derive(Default)]
struct Tally {
    completed: Mutex<HashSet<String>>,
    duplicate_completes: AtomicI64,
    fails: AtomicI64,
    abandoned: AtomicI64,
    claimed: AtomicI64,
}

#[sqlx::test]
async fn three_replicas_and_sixteen_claimers_never_run_past_a_shared_concurrency_of_three(
    pool: PgPool,
) {
    // Replica 0 runs the reaper and the retry scanner; all three serve claims.
    let mut opts = Options::api_only("r0");
    let mut reaper = TimeoutReaperConfig::new("r0");
    reaper.interval = Duration::from_millis(100);
    opts.reaper = Some(reaper);
    let mut scanner = RetryScannerConfig::new("r0");
    scanner.interval = Duration::from_millis(100);
    opts.retry_scanner = Some(scanner);
    let apps = Arc::new(vec![
        TestApp::spawn_opts(pool.clone(), opts).await,
        TestApp::spawn(pool.clone()).await,
        TestApp::spawn(pool.clone()).await,
    ]);
    let app = &apps[0];
    limit_ok(app, "shared", json!({"concurrency": 3})).await;
    let execution = |cost: i64| {
        json!({"concurrency_limit": 100, "max_retries": 4,
               "retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0},
               "limits": [{"name": "shared", "cost": cost}]})
    };
    let body = |agent: &str, cost: i64| {
        json!({"agent_id": agent, "trigger": {"type": "manual"}, "execution": execution(cost),
               "circuit_breaker": {"failure_threshold": 1000}})
    };
    task_ok(app, "t-a", body("agent-a", 1)).await;
    task_ok(app, "t-b", body("agent-b", 1)).await;
    task_ok(app, "t-c", body("agent-a", 2)).await;
    trigger(app, "t-a", 20, json!({})).await;
    trigger(&apps[1], "t-b", 20, json!({})).await;
    trigger(&apps[2], "t-c", 10, json!({})).await;
    const TOTAL: i64 = 50;

    let stop = Arc::new(AtomicBool::new(false));
    // The monitor: units held, RUNNING rows and RUNNING cost of the three tasks, in one
    // snapshot, every few milliseconds.
    let monitor = {
        let (pool, stop) = (pool.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut units, mut running, mut weighted, mut mismatches, mut samples) =
                (0i64, 0i64, 0i64, Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                let row: Option<(i64, i64, i64)> = sqlx::query_as(
                    "select (select coalesce(sum(cost), 0) from limit_units)::bigint, \
                         (select count(*) from task_instance \
                          where task_id = any($1) and status = 'RUNNING'), \
                         (select coalesce(sum(case when task_id = 't-c' then 2 else 1 end), 0) \
                          from task_instance where task_id = any($1) and status = 'RUNNING')::bigint",
                )
                .bind(&TASKS_1[..])
                .fetch_one(&pool)
                .await
                .ok();
                if let Some((u, r, w)) = row {
                    samples += 1;
                    units = units.max(u);
                    running = running.max(r);
                    weighted = weighted.max(w);
                    if u != w && mismatches.len() < 10 {
                        mismatches.push((u, w));
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            (units, running, weighted, mismatches, samples)
        })
    };
    // Watches for the end: every instance finished.
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (pool, done) = (pool.clone(), done.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let open: i64 = sqlx::query_scalar(
                    "select count(*) from task_instance \
                     where task_id = any($1) and status not in ('SUCCESS', 'DEAD', 'CANCELLED')",
                )
                .bind(&TASKS_1[..])
                .fetch_one(&pool)
                .await
                .unwrap_or(1);
                if open == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let tally = Arc::new(Tally::default());
    let mut claimers = Vec::new();
    for c in 0..16usize {
        let (apps, done, tally) = (apps.clone(), done.clone(), tally.clone());
        claimers.push(tokio::spawn(async move {
            let app = &apps[c % 3];
            let agent = if c % 2 == 0 { "agent-a" } else { "agent-b" };
            // Claimers 0 and 1 take short leases and walk away from every first attempt.
            let expirer = c < 2;
            let extra = if expirer {
                json!({"lease_seconds": 1})
            } else {
                json!({"lease_seconds": 30})
            };
            let max = if expirer { 1 } else { 1 + (c % 3) as i64 };
            while !done.load(Ordering::Relaxed) {
                let got = claim(app, agent, &format!("w{c}"), max, extra.clone()).await;
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                tally.claimed.fetch_add(got.len() as i64, Ordering::Relaxed);
                for i in &got {
                    let byte = uuid_of(i).as_bytes()[15];
                    let first = i["attempt"] == 1;
                    if first && expirer {
                        tally.abandoned.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    tokio::time::sleep(Duration::from_millis(u64::from(byte % 8))).await;
                    if first && byte % 4 == 1 {
                        let (status, body) = fail(app, i, json!({"retryable": true})).await;
                        assert!(status == 200 || status == 409, "fail: {status} {body}");
                        if status == 200 {
                            tally.fails.fetch_add(1, Ordering::Relaxed);
                        }
                        continue;
                    }
                    let (status, body) = complete(app, i).await;
                    assert!(status == 200 || status == 409, "complete: {status} {body}");
                    if status == 200 {
                        let fresh = tally.completed.lock().expect("completed").insert(id_of(i));
                        if !fresh {
                            tally.duplicate_completes.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }));
    }
    for c in claimers {
        c.await.expect("claimer");
    }
    watcher.await.expect("watcher");
    stop.store(true, Ordering::Relaxed);
    let (max_units, max_running, max_weighted, mismatches, samples) =
        monitor.await.expect("monitor");

    assert!(samples > 50, "the monitor barely sampled: {samples}");
    assert!(max_units <= 3, "{max_units} units held with concurrency 3");
    assert!(
        max_weighted <= 3,
        "RUNNING cost reached {max_weighted} with concurrency 3"
    );
    assert!(max_running <= 3, "{max_running} RUNNING with concurrency 3");
    assert!(
        max_weighted >= 2,
        "claimers never overlapped: worst cost {max_weighted}"
    );
    assert!(
        mismatches.is_empty(),
        "units held differ from the RUNNING cost in one snapshot (units, cost): {mismatches:?}"
    );
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "select status, count(*) from task_instance where task_id = any($1) \
         group by status order by status",
    )
    .bind(&TASKS_1[..])
    .fetch_all(&pool)
    .await
    .expect("statuses");
    assert_eq!(
        rows,
        vec![("SUCCESS".to_owned(), TOTAL)],
        "every instance finished"
    );
    let completed = tally.completed.lock().expect("completed").len() as i64;
    assert_eq!(completed, TOTAL, "one accepted complete per instance");
    assert_eq!(tally.duplicate_completes.load(Ordering::Relaxed), 0);
    assert!(tally.fails.load(Ordering::Relaxed) > 0, "no fail raced");
    let abandoned = tally.abandoned.load(Ordering::Relaxed);
    assert!(abandoned > 0, "no lease was left to expire");
    let reaped: i64 = sqlx::query_scalar(
        "select count(*) from instance_events where actor like 'reaper:%' and from_status = 'RUNNING'",
    )
    .fetch_one(&pool)
    .await
    .expect("reaped");
    assert!(
        reaped >= abandoned,
        "{abandoned} leases abandoned, {reaped} reaped"
    );
    assert_eq!(
        units_total(&pool).await,
        0,
        "units left with nothing running"
    );
    assert_eq!(limit_view(app, "shared").await["running"], 0);
}

// ---------------------------------------------------------------------------------------------
// 2. Rate.

#[sqlx::test]
async fn a_rate_of_five_per_two_seconds_with_burst_one_never_starts_more_than_six_in_any_two_seconds(
    pool: PgPool,
) {
    let apps = Arc::new(vec![
        TestApp::spawn(pool.clone()).await,
        TestApp::spawn(pool.clone()).await,
    ]);
    let app = &apps[0];
    limit_ok(
        app,
        "rl",
        json!({"rate": {"count": 5, "per_seconds": 2, "burst": 1}}),
    )
    .await;
    task_ok(
        app,
        "rated",
        manual_body(
            "ra",
            json!({"concurrency_limit": 100, "limits": [{"name": "rl"}]}),
        ),
    )
    .await;
    backlog_drawing(&pool, "rated", "ra", 300, 60).await;
    let view = limit_view(app, "rl").await;
    assert_eq!(view["available_rate"], 2, "{view}");

    // From idle: burst + 1 start at once.
    let first = claim(app, "ra", "first", 10, json!({})).await;
    assert_eq!(first.len(), 2, "{first:?}");
    for i in &first {
        assert_eq!(complete(app, i).await.0, 200);
    }
    let next = claim(app, "ra", "first", 10, json!({})).await;
    assert!(next.len() <= 1, "{next:?}");
    for i in &next {
        assert_eq!(complete(app, i).await.0, 200);
    }

    // Many claimers on two replicas for a few seconds.
    let until = Instant::now() + Duration::from_secs(8);
    let mut claimers = Vec::new();
    for c in 0..8usize {
        let apps = apps.clone();
        claimers.push(tokio::spawn(async move {
            let app = &apps[c % 2];
            while Instant::now() < until {
                let got = claim(app, "ra", &format!("w{c}"), 3, json!({})).await;
                for i in &got {
                    let (status, body) = complete(app, i).await;
                    assert_eq!(status, 200, "{body}");
                }
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    for c in claimers {
        c.await.expect("claimer");
    }

    let starts: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
        "select started_at from task_instance where task_id = 'rated' and started_at is not null \
         order by started_at",
    )
    .fetch_all(&pool)
    .await
    .expect("starts");
    assert!(
        starts.len() >= 6,
        "too few starts to mean anything: {}",
        starts.len()
    );
    let micros: Vec<i64> = starts.iter().map(|s| s.timestamp_micros()).collect();
    // No half-open [s, s + 2 s) from any start holds more than count + burst = 6.
    for (i, s) in micros.iter().enumerate() {
        let n = micros[i..]
            .iter()
            .take_while(|x| **x < s + 2_000_000)
            .count();
        assert!(n <= 6, "{n} starts in [{}, +2 s): {starts:?}", starts[i]);
    }
    // GCRA exactly: in any closed [a, b] at most burst + 1 + (b − a) / T starts, T = 0.4 s.
    for i in 0..micros.len() {
        for j in i..micros.len() {
            let allowed = 2 + (micros[j] - micros[i]) / 400_000;
            assert!(
                (j - i + 1) as i64 <= allowed,
                "{} starts between {} and {}: at most {allowed}",
                j - i + 1,
                starts[i],
                starts[j]
            );
        }
    }
    // The first two started at the same instant (one claim), the third an interval later.
    assert_eq!(micros[0], micros[1], "{starts:?}");
    assert!(micros[2] - micros[0] >= 400_000, "{starts:?}");
    // A rate holds no units.
    assert_eq!(units_total(&pool).await, 0);
    let running: i64 = sqlx::query_scalar(
        "select count(*) from task_instance where task_id = 'rated' and status = 'RUNNING'",
    )
    .fetch_one(&pool)
    .await
    .expect("running");
    assert_eq!(running, 0);
}

// ---------------------------------------------------------------------------------------------
// 3. per_key.

/// A long poll kept back by a rate alone looks again when the rate admits the next start, not
/// on its relook timer (which grows to a second): one worker long-polling a backlog on a rate of
/// one start per 2.33 s starts each instance within moments of the instant the rate allows it.
/// On the relook timer alone the starts drift behind by up to a second each, and with 2.33 s
/// between them some start at least two thirds of a second late.
#[sqlx::test]
async fn a_long_poll_kept_back_by_a_rate_starts_when_the_rate_admits_it(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(
        &app,
        "paced",
        json!({"rate": {"count": 3, "per_seconds": 7}}),
    )
    .await;
    task_ok(
        &app,
        "report",
        manual_body(
            "pa",
            json!({"concurrency_limit": 100, "limits": [{"name": "paced"}]}),
        ),
    )
    .await;
    backlog_drawing(&pool, "report", "pa", 4, 60).await;
    for _ in 0..4 {
        let got = claim(&app, "pa", "w", 1, json!({"wait_seconds": 10})).await;
        assert_eq!(got.len(), 1, "a start within the long poll");
        assert_eq!(complete(&app, &got[0]).await.0, 200);
    }
    let starts = assert_paced(&pool, "report").await;
    assert_eq!(starts.len(), 4);
}

/// The starts of `task` (microseconds, in order) came one interval of a rate of 3 per 7 s apart:
/// never sooner, and within 350 ms of the instant the rate allowed each.
async fn assert_paced(pool: &PgPool, task: &str) -> Vec<i64> {
    let starts: Vec<i64> = sqlx::query_scalar(
        "select (extract(epoch from started_at) * 1e6)::bigint from task_instance \
         where task_id = $1 and started_at is not null order by started_at",
    )
    .bind(task)
    .fetch_all(pool)
    .await
    .expect("starts");
    let interval = 7_000_000 / 3;
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= interval - 1,
            "the rate allows one start per 2.33 s: {starts:?}"
        );
        assert!(
            gap < interval + 350_000,
            "a start came {} ms after the rate allowed it: {starts:?}",
            (gap - interval) / 1000
        );
    }
    starts
}

#[sqlx::test]
async fn per_key_budgets_are_separate_so_one_tenant_waits_while_the_others_run(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "tenant", json!({"concurrency": 1, "per_key": true})).await;
    tenant_task(&app, "per-tenant", "pk", "tenant").await;
    // The second of tenant a is older than b's and c's.
    for t in ["a", "a", "b", "c"] {
        trigger(&app, "per-tenant", 1, json!({"params": {"tenant": t}})).await;
    }
    let tenant = |i: &Value| {
        i["context"]["params"]["tenant"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let got = claim(&app, "pk", "w1", 10, json!({})).await;
    let mut tenants: Vec<String> = got.iter().map(tenant).collect();
    tenants.sort();
    assert_eq!(tenants, vec!["a", "b", "c"], "{got:?}");
    assert!(claim(&app, "pk", "w2", 10, json!({})).await.is_empty());

    let view = limit_view(&app, "tenant").await;
    assert_eq!(view["per_key"], true, "{view}");
    assert_eq!(view["running"], 3, "{view}");
    let mut keys: Vec<(String, i64)> = view["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| {
            (
                k["key"].as_str().unwrap_or("").to_owned(),
                k["running"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            ("a".to_owned(), 1),
            ("b".to_owned(), 1),
            ("c".to_owned(), 1)
        ],
        "{view}"
    );

    // b finishing frees nothing for a; a finishing lets the second a run.
    let b = got.iter().find(|i| tenant(i) == "b").expect("b");
    assert_eq!(complete(&app, b).await.0, 200);
    assert!(claim(&app, "pk", "w2", 10, json!({})).await.is_empty());
    let a = got.iter().find(|i| tenant(i) == "a").expect("a");
    assert_eq!(complete(&app, a).await.0, 200);
    let second = claim(&app, "pk", "w2", 10, json!({})).await;
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(tenant(&second[0]), "a");
    assert_ne!(id_of(&second[0]), id_of(a));
}

#[sqlx::test]
async fn long_rendered_keys_are_kept_apart_by_a_digest_and_never_fail_a_claim(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "tenant", json!({"concurrency": 1, "per_key": true})).await;
    tenant_task(&app, "long-keys", "lk", "tenant").await;
    // Keys of 12,000 characters that share their first 200 (hex: they do not compress below
    // btree's 2,704-byte row limit), and a short one.
    let long = |n: usize| -> String {
        let mut s: String = (0..375)
            .map(|_| uuid::Uuid::new_v4().simple().to_string())
            .collect();
        s.replace_range(..1, &n.to_string());
        format!("{}{s}", "p".repeat(200))
    };
    let (a, b) = (long(1), long(2));
    for t in [a.as_str(), b.as_str(), a.as_str(), "short"] {
        trigger(&app, "long-keys", 1, json!({"params": {"tenant": t}})).await;
    }
    let keys: Vec<String> = sqlx::query_scalar(
        "select d->>'key' from task_instance, jsonb_array_elements(limit_draws) d \
         where task_id = 'long-keys' order by created_at",
    )
    .fetch_all(&pool)
    .await
    .expect("keys");
    assert!(keys.iter().all(|k| k.chars().count() <= 256), "{keys:?}");
    assert_ne!(
        keys[0], keys[1],
        "keys that differ after 200 characters stay apart"
    );
    assert_eq!(keys[0], keys[2], "the same parameter renders the same key");
    // One start per key: a, b and short; a's second waits for a's budget.
    let got = claim(&app, "lk", "w1", 10, json!({})).await;
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(claim(&app, "lk", "w2", 10, json!({})).await.is_empty());
    let first_a = got
        .iter()
        .find(|i| i["context"]["params"]["tenant"] == a.as_str())
        .expect("a started");
    assert_eq!(complete(&app, first_a).await.0, 200);
    let second = claim(&app, "lk", "w2", 10, json!({})).await;
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0]["context"]["params"]["tenant"], a.as_str());
}

#[sqlx::test]
async fn control_characters_never_reach_a_key_so_every_key_can_be_held_by_name(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "tenant", json!({"concurrency": 1, "per_key": true})).await;
    // In a template: 422 naming the key.
    let (status, problem) = put_task(
        &app,
        "bad-key",
        manual_body(
            "ck",
            json!({"limits": [{"name": "tenant", "key": "a\n{{params.tenant}}"}]}),
        ),
    )
    .await;
    assert_invalid(
        "a control character",
        status,
        &problem,
        "execution.limits[0].key",
    );
    // From a parameter: each becomes U+FFFD, a key that a hold can name.
    tenant_task(&app, "ctl-keys", "ck", "tenant").await;
    trigger(
        &app,
        "ctl-keys",
        1,
        json!({"params": {"tenant": "a\nb\u{85}c"}}),
    )
    .await;
    let key: String = sqlx::query_scalar(
        "select limit_draws->0->>'key' from task_instance where task_id = 'ctl-keys'",
    )
    .fetch_one(&pool)
    .await
    .expect("key");
    assert_eq!(key, "a\u{FFFD}b\u{FFFD}c");
    let (status, held) = json(
        app.post("/v1/limits/tenant/hold", json!({"seconds": 60, "key": key}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{held}");
    assert!(
        claim(&app, "ck", "w", 5, json!({})).await.is_empty(),
        "held by name"
    );
    release_key(&app, "tenant", &key).await;
    assert_eq!(claim(&app, "ck", "w", 5, json!({})).await.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// 4. Holds.

/// Whether the instance started at or after the hold recorded for (limit, key) ended.
async fn started_after_hold(pool: &PgPool, id: uuid::Uuid, limit: &str, key: &str) -> bool {
    sqlx::query_scalar(
        "select i.started_at >= s.held_until from task_instance i, limit_state s \
         where i.id = $1 and s.limit_name = $2 and s.key = $3",
    )
    .bind(id)
    .bind(limit)
    .bind(key)
    .fetch_one(pool)
    .await
    .expect("started after hold")
}

#[sqlx::test]
async fn a_hold_stops_only_that_limits_instances_until_it_lifts_or_is_released(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "hl", json!({"concurrency": 10})).await;
    task_ok(
        &app,
        "held",
        manual_body(
            "h",
            json!({"concurrency_limit": 100, "limits": [{"name": "hl"}]}),
        ),
    )
    .await;
    task_ok(
        &app,
        "free",
        manual_body("h", json!({"concurrency_limit": 100})),
    )
    .await;
    trigger(&app, "held", 2, json!({})).await;
    trigger(&app, "free", 2, json!({})).await;

    let (status, view) = json(app.post("/v1/limits/hl/hold", json!({"seconds": 2})).await).await;
    assert_eq!(status, 200, "{view}");
    assert!(view["held_until"].is_string(), "{view}");
    assert_eq!(view["held_reason"], "held by operator", "{view}");
    let got = claim(&app, "h", "w1", 10, json!({})).await;
    assert_eq!(of_task(&got, "free").len(), 2, "{got:?}");
    assert!(of_task(&got, "held").is_empty(), "{got:?}");
    for i in &got {
        assert_eq!(complete(&app, i).await.0, 200);
    }
    // They start once the hold has passed, not before.
    let got = claim_until(
        &app,
        "h",
        Duration::from_secs(15),
        "the hold to lift",
        |g| !of_task(g, "held").is_empty(),
    )
    .await;
    assert_eq!(of_task(&got, "held").len(), 2, "{got:?}");
    for i in &got {
        assert!(started_after_hold(&pool, uuid_of(i), "hl", "").await);
        assert_eq!(complete(&app, i).await.0, 200);
    }
    assert!(limit_view(&app, "hl").await["held_until"].is_null());

    // A long hold, released early.
    let (status, _) = json(
        app.post(
            "/v1/limits/hl/hold",
            json!({"seconds": 600, "reason": "maintenance"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    trigger(&app, "held", 1, json!({})).await;
    trigger(&app, "free", 1, json!({})).await;
    let got = claim(&app, "h", "w1", 10, json!({})).await;
    assert_eq!(of_task(&got, "free").len(), 1, "{got:?}");
    assert!(of_task(&got, "held").is_empty(), "{got:?}");
    assert_eq!(limit_view(&app, "hl").await["held_reason"], "maintenance");
    let (status, view) = json(app.post("/v1/limits/hl/release", json!({})).await).await;
    assert_eq!(status, 200, "{view}");
    assert!(view["held_until"].is_null(), "{view}");
    let got = claim(&app, "h", "w1", 10, json!({})).await;
    assert_eq!(of_task(&got, "held").len(), 1, "{got:?}");

    // per_key: a hold on key a leaves key b claimable.
    limit_ok(&app, "pkh", json!({"concurrency": 5, "per_key": true})).await;
    tenant_task(&app, "tenant-work", "k", "pkh").await;
    let (status, problem) = json(
        app.post("/v1/limits/pkh/hold", json!({"seconds": 60}))
            .await,
    )
    .await;
    assert_invalid("per_key hold without key", status, &problem, "key");
    let (status, view) = json(
        app.post("/v1/limits/pkh/hold", json!({"seconds": 600, "key": "a"}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{view}");
    trigger(&app, "tenant-work", 1, json!({"params": {"tenant": "a"}})).await;
    trigger(&app, "tenant-work", 1, json!({"params": {"tenant": "b"}})).await;
    let got = claim(&app, "k", "w1", 10, json!({})).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["context"]["params"]["tenant"], "b");
    let view = limit_view(&app, "pkh").await;
    let a = view["keys"]
        .as_array()
        .and_then(|k| k.iter().find(|k| k["key"] == "a"))
        .cloned()
        .unwrap_or(Value::Null);
    assert!(a["held_until"].is_string(), "{view}");
    let (status, _) = json(
        app.post("/v1/limits/pkh/release", json!({"key": "a"}))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    let got = claim(&app, "k", "w1", 10, json!({})).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["context"]["params"]["tenant"], "a");
}

/// Keys and reasons are measured in characters, as the API's JSON Schema `maxLength` counts them
/// (a 256-character key of three-byte characters holds and releases), and control characters
/// are refused on `key` and `reason` with a 422 naming the field.
#[sqlx::test]
async fn per_key_cannot_change_while_a_budget_is_held(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let hold = |body: Value| {
        let app = &app;
        async move { json(app.post("/v1/limits/flip/hold", body).await).await.0 }
    };
    let release = || {
        let app = &app;
        async move {
            json(app.post("/v1/limits/flip/release", json!({})).await)
                .await
                .0
        }
    };
    for (from, to, held) in [
        (true, false, json!({"seconds": 60, "key": "acme"})),
        (false, true, json!({"seconds": 60})),
    ] {
        limit_ok(&app, "flip", json!({"concurrency": 2, "per_key": from})).await;
        assert_eq!(hold(held).await, 200);
        let (status, problem) =
            put_limit(&app, "flip", json!({"concurrency": 2, "per_key": to})).await;
        assert_eq!(status, 409, "{problem}");
        assert!(
            problem["detail"].as_str().unwrap_or("").contains("held"),
            "{problem}"
        );
        assert_eq!(limit_view(&app, "flip").await["per_key"], from);
        // Other changes go through; per_key once the hold is released.
        limit_ok(&app, "flip", json!({"concurrency": 3, "per_key": from})).await;
        assert_eq!(release().await, 200);
        let view = limit_ok(&app, "flip", json!({"concurrency": 3, "per_key": to})).await;
        assert_eq!(view["per_key"], to, "{view}");
    }
}

#[sqlx::test]
async fn hold_keys_count_characters_and_refuse_control_characters(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "pkc", json!({"concurrency": 5, "per_key": true})).await;
    tenant_task(&app, "tenant-chars", "kc", "pkc").await;
    let wide = "租".repeat(256);
    let (status, view) = json(
        app.post(
            "/v1/limits/pkc/hold",
            json!({"seconds": 600, "key": wide, "reason": "限流".repeat(512)}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{view}");
    trigger(&app, "tenant-chars", 1, json!({"params": {"tenant": wide}})).await;
    assert!(claim(&app, "kc", "w1", 10, json!({})).await.is_empty());
    release_key(&app, "pkc", &wide).await;
    assert_eq!(claim(&app, "kc", "w1", 10, json!({})).await.len(), 1);

    for (path, body, field) in [
        (
            "hold",
            json!({"seconds": 60, "key": "租".repeat(257)}),
            "key",
        ),
        ("hold", json!({"seconds": 60, "key": "a\u{1}b"}), "key"),
        (
            "hold",
            json!({"seconds": 60, "key": "a", "reason": "x\u{85}"}),
            "reason",
        ),
        (
            "hold",
            json!({"seconds": 60, "key": "a", "reason": "x".repeat(1025)}),
            "reason",
        ),
        ("release", json!({"key": "a\u{7f}"}), "key"),
        ("release", json!({"key": "租".repeat(257)}), "key"),
    ] {
        let (status, problem) = json(
            app.post(&format!("/v1/limits/pkc/{path}"), body.clone())
                .await,
        )
        .await;
        assert_invalid(&format!("{path} {body}"), status, &problem, field);
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Throttled fails.

#[sqlx::test]
async fn a_throttled_fail_keeps_the_attempt_spares_the_circuit_and_holds_the_limit_for_other_tasks(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "api", json!({"concurrency": 5})).await;
    limit_ok(&app, "unrelated", json!({"concurrency": 5})).await;
    task_ok(
        &app,
        "t1",
        json!({"agent_id": "x", "trigger": {"type": "manual"},
               "execution": {"concurrency_limit": 10, "max_retries": 0, "limits": [{"name": "api"}]},
               "circuit_breaker": {"failure_threshold": 2}}),
    )
    .await;
    task_ok(
        &app,
        "t2",
        manual_body(
            "y",
            json!({"concurrency_limit": 10, "limits": [{"name": "api"}]}),
        ),
    )
    .await;
    trigger(&app, "t1", 1, json!({})).await;

    // Five throttles, more than the breaker's threshold of 2.
    let mut id = String::new();
    for n in 0..5 {
        let got = claim_until(
            &app,
            "x",
            Duration::from_secs(10),
            "the throttled instance",
            |g| !g.is_empty(),
        )
        .await;
        assert_eq!(got.len(), 1, "{got:?}");
        if n == 0 {
            id = id_of(&got[0]);
        }
        assert_eq!(id_of(&got[0]), id);
        assert_eq!(got[0]["attempt"], 1, "{got:?}");
        let (status, inst) = fail(
            &app,
            &got[0],
            json!({"error": "429 Too Many Requests", "retry_after_seconds": 1}),
        )
        .await;
        assert_eq!(status, 200, "{inst}");
        assert_eq!(inst["status"], "PENDING", "{inst}");
        assert_eq!(inst["attempt"], 1, "{inst}");
        assert_eq!(inst["error_kind"], "throttled", "{inst}");
    }
    let (_, task) = json(app.get("/v1/tasks/t1").await).await;
    assert_eq!(task["consecutive_failures"], 0, "{task}");
    assert_eq!(task["paused"], false, "{task}");

    // A throttle that holds the limit: another task's instance waits for the hold too.
    trigger(&app, "t2", 1, json!({})).await;
    let got = claim_until(&app, "x", Duration::from_secs(10), "the t1 instance", |g| {
        !g.is_empty()
    })
    .await;
    let t1 = got[0].clone();
    let (status, inst) = fail(
        &app,
        &t1,
        json!({"error": "429", "retry_after_seconds": 3, "hold_limit": "api"}),
    )
    .await;
    assert_eq!(status, 200, "{inst}");
    assert_eq!(inst["status"], "PENDING", "{inst}");
    assert_eq!(inst["error_kind"], "throttled", "{inst}");
    let view = limit_view(&app, "api").await;
    assert!(view["held_until"].is_string(), "{view}");
    assert_eq!(
        inst["available_at"], view["held_until"],
        "the retry comes back the instant the hold ends"
    );
    assert!(
        view["held_reason"].as_str().unwrap_or("").contains(&id),
        "{view}"
    );
    assert!(claim(&app, "y", "w", 10, json!({})).await.is_empty());
    let t2 = claim_until(
        &app,
        "y",
        Duration::from_secs(15),
        "t2 after the hold",
        |g| !g.is_empty(),
    )
    .await;
    assert!(started_after_hold(&pool, uuid_of(&t2[0]), "api", "").await);
    assert_eq!(complete(&app, &t2[0]).await.0, 200);

    // Only the attempt that holds the lease holds the limit: the same fail sent again (its
    // answer lost) is answered as before without a second hold, and a fail under a lease that
    // is not the instance's (a stale worker's late 429) is 409 and holds nothing. (The first
    // hold has ended: t2 started after it.)
    assert!(limit_view(&app, "api").await["held_until"].is_null());
    let (status, again) = fail(
        &app,
        &t1,
        json!({"error": "429", "retry_after_seconds": 3, "hold_limit": "api"}),
    )
    .await;
    assert_eq!(
        (status, &again["status"]),
        (200, &json!("PENDING")),
        "{again}"
    );
    let mut stale = t1.clone();
    stale["lease_token"] = json!(uuid::Uuid::new_v4());
    let (status, refused) = fail(
        &app,
        &stale,
        json!({"error": "429", "retry_after_seconds": 60, "hold_limit": "api"}),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    let view = limit_view(&app, "api").await;
    assert!(view["held_until"].is_null(), "{view}");

    // Refused holds: 422 naming hold_limit, and the instance keeps running under its lease.
    let got = claim_until(
        &app,
        "x",
        Duration::from_secs(10),
        "t1 after the hold",
        |g| !g.is_empty(),
    )
    .await;
    let t1 = got[0].clone();
    assert!(started_after_hold(&pool, uuid_of(&t1), "api", "").await);
    for (what, body) in [
        ("without retry_after_seconds", json!({"hold_limit": "api"})),
        (
            "a limit the instance does not draw on",
            json!({"hold_limit": "unrelated", "retry_after_seconds": 5}),
        ),
        (
            "a limit that does not exist",
            json!({"hold_limit": "ghost", "retry_after_seconds": 5}),
        ),
    ] {
        let (status, problem) = fail(&app, &t1, body).await;
        assert_invalid(what, status, &problem, "hold_limit");
        assert_eq!(status_of(&pool, uuid_of(&t1)).await, "RUNNING", "{what}");
    }
    assert!(limit_view(&app, "unrelated").await["held_until"].is_null());
    let (status, inst) = complete(&app, &t1).await;
    assert_eq!(status, 200, "{inst}");
    assert_eq!(inst["status"], "SUCCESS");
    assert_eq!(inst["attempt"], 1, "throttles spent no attempt: {inst}");
}

// ---------------------------------------------------------------------------------------------
// 6. A limit-bound backlog hides nothing.

#[sqlx::test]
async fn a_limit_bound_backlog_never_hides_another_tasks_newer_work(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "one", json!({"concurrency": 1})).await;
    task_ok(
        &app,
        "a-limited",
        manual_body(
            "mixed",
            json!({"concurrency_limit": 100, "limits": [{"name": "one"}]}),
        ),
    )
    .await;
    task_ok(
        &app,
        "b-free",
        manual_body("mixed", json!({"concurrency_limit": 100})),
    )
    .await;
    backlog_drawing(&pool, "a-limited", "mixed", 50, 120).await;
    backlog(&pool, "b-free", "mixed", 5, 10, 4).await;
    let got = claim(&app, "mixed", "w", 10, json!({})).await;
    assert_eq!(of_task(&got, "a-limited").len(), 1, "{got:?}");
    assert_eq!(of_task(&got, "b-free").len(), 5, "{got:?}");
    assert_eq!(got.len(), 6);
}

// ---------------------------------------------------------------------------------------------
// 7. Bad input.

#[sqlx::test]
async fn limits_are_listed_by_name_a_page_at_a_time(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    for name in ["gamma", "alpha", "delta", "beta", "epsilon"] {
        limit_ok(&app, name, json!({"concurrency": 2})).await;
    }
    let page = |q: String| {
        let app = &app;
        async move { json(app.get(&format!("/v1/limits{q}")).await).await }
    };
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    // Page after page of two: every limit once, in name order, each with its usage.
    let mut seen = Vec::new();
    let mut query = "?limit=2".to_owned();
    for _ in 0..5 {
        let (status, body) = page(query.clone()).await;
        assert_eq!(status, 200, "{body}");
        assert!(names(&body).len() <= 2, "{body}");
        assert!(
            body["items"]
                .as_array()
                .is_some_and(|a| a.iter().all(|l| l["running"] == 0)),
            "{body}"
        );
        seen.extend(names(&body));
        match body["next_cursor"].as_str() {
            Some(c) => query = format!("?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen, ["alpha", "beta", "delta", "epsilon", "gamma"]);
    // Without `limit`, the first page of 100: all five, and no next page.
    let (status, body) = page(String::new()).await;
    assert_eq!((status, names(&body).len()), (200, 5), "{body}");
    assert!(body["next_cursor"].is_null(), "{body}");
    // Out of bounds, unknown or forged: 422 naming the parameter.
    for (q, field) in [
        ("?limit=0", "limit"),
        ("?limit=501", "limit"),
        ("?limit=ten", "limit"),
        ("?cursor=zz", "cursor"),
        ("?page=2", "page"),
    ] {
        let (status, body) = page(q.to_owned()).await;
        assert_eq!(status, 422, "{q}: {body}");
        assert_eq!(body["errors"][0]["field"], field, "{q}: {body}");
    }
}

#[sqlx::test]
async fn a_limit_deleted_and_made_again_starts_from_nothing(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "gone", json!({"concurrency": 1})).await;
    let draws =
        |limits: Value| manual_body("dl", json!({"concurrency_limit": 10, "limits": limits}));
    task_ok(&app, "old-user", draws(json!([{"name": "gone"}]))).await;
    trigger(&app, "old-user", 1, json!({})).await;
    let running = claim(&app, "dl", "w1", 5, json!({})).await;
    assert_eq!(running.len(), 1, "{running:?}");
    // The task stops drawing on the limit while its instance runs; then the limit goes.
    task_ok(&app, "old-user", draws(json!([]))).await;
    let (status, body) = json(
        app.request(reqwest::Method::DELETE, "/v1/limits/gone", None)
            .await,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    // Made again: nothing of the old budget counts, and a new user starts at once.
    limit_ok(&app, "gone", json!({"concurrency": 1})).await;
    assert_eq!(limit_view(&app, "gone").await["running"], 0);
    task_ok(&app, "new-user", draws(json!([{"name": "gone"}]))).await;
    trigger(&app, "new-user", 1, json!({})).await;
    let got = claim(&app, "dl", "w2", 5, json!({})).await;
    assert_eq!(of_task(&got, "new-user").len(), 1, "{got:?}");
    // The old instance finishes as usual.
    assert_eq!(complete(&app, &running[0]).await.0, 200);
    assert_eq!(limit_view(&app, "gone").await["running"], 1);
}

#[sqlx::test]
async fn bad_limits_and_draws_are_refused_naming_the_field_and_in_use_limits_are_protected(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    for (what, body, field) in [
        ("concurrency 0", json!({"concurrency": 0}), "concurrency"),
        ("concurrency -1", json!({"concurrency": -1}), "concurrency"),
        (
            "rate.count 0",
            json!({"rate": {"count": 0, "per_seconds": 1}}),
            "rate.count",
        ),
        (
            "burst above count",
            json!({"rate": {"count": 2, "per_seconds": 1, "burst": 3}}),
            "rate.burst",
        ),
        ("neither", json!({}), "concurrency"),
        ("only per_key", json!({"per_key": true}), "concurrency"),
    ] {
        let (status, problem) = put_limit(&app, "bad", body).await;
        assert_invalid(what, status, &problem, field);
    }
    assert_eq!(json(app.get("/v1/limits/bad").await).await.0, 404);

    limit_ok(&app, "conc", json!({"concurrency": 2})).await;
    limit_ok(
        &app,
        "rated",
        json!({"rate": {"count": 5, "per_seconds": 1, "burst": 1}}),
    )
    .await;
    limit_ok(&app, "pk", json!({"concurrency": 3, "per_key": true})).await;
    let many: Vec<Value> = (0..9).map(|i| json!({"name": format!("l{i}")})).collect();
    for (what, limits, field) in [
        (
            "unknown template variable",
            json!([{"name": "conc", "key": "{{tenant}}"}]),
            "execution.limits[0].key",
        ),
        ("nine limits", Value::Array(many), "execution.limits"),
        (
            "unknown limit",
            json!([{"name": "nope"}]),
            "execution.limits[0].name",
        ),
        (
            "per_key without key",
            json!([{"name": "pk"}]),
            "execution.limits[0].key",
        ),
        (
            "cost above concurrency",
            json!([{"name": "conc", "cost": 3}]),
            "execution.limits[0].cost",
        ),
        (
            "cost above burst + 1",
            json!([{"name": "rated", "cost": 3}]),
            "execution.limits[0].cost",
        ),
    ] {
        let (status, problem) =
            put_task(&app, "drawer", manual_body("d", json!({"limits": limits}))).await;
        assert_invalid(what, status, &problem, field);
    }
    assert_eq!(json(app.get("/v1/tasks/drawer").await).await.0, 404);

    // A limit in use: no change may strand its task, and it cannot be deleted.
    task_ok(
        &app,
        "user",
        manual_body("d", json!({"limits": [{"name": "conc", "cost": 2}]})),
    )
    .await;
    let (status, problem) = put_limit(&app, "conc", json!({"concurrency": 1})).await;
    assert_eq!(status, 409, "{problem}");
    let (status, problem) =
        put_limit(&app, "conc", json!({"concurrency": 2, "per_key": true})).await;
    assert_eq!(status, 409, "{problem}");
    assert_eq!(limit_view(&app, "conc").await["concurrency"], 2);
    let resp = app
        .client
        .delete(app.url("/v1/limits/conc"))
        .send()
        .await
        .expect("delete");
    assert_eq!(resp.status().as_u16(), 409);
    let resp = app
        .client
        .delete(app.url("/v1/tasks/user"))
        .send()
        .await
        .expect("delete task");
    assert!(resp.status().is_success(), "{}", resp.status());
    let resp = app
        .client
        .delete(app.url("/v1/limits/conc"))
        .send()
        .await
        .expect("delete");
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(json(app.get("/v1/limits/conc").await).await.0, 404);

    // Declarative: the same PUT changes nothing; If-Match guards changes.
    let (status, first) = put_limit(&app, "same", json!({"concurrency": 4})).await;
    assert_eq!(status, 201, "{first}");
    let (status, second) = put_limit(&app, "same", json!({"concurrency": 4})).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["version"], first["version"], "{second}");
    let put_if = |version: &str, body: Value| {
        app.client
            .put(app.url("/v1/limits/same"))
            .header("If-Match", version.to_owned())
            .json(&body)
            .send()
    };
    let resp = put_if("\"7\"", json!({"concurrency": 5}))
        .await
        .expect("put");
    assert_eq!(resp.status().as_u16(), 412);
    assert_eq!(limit_view(&app, "same").await["concurrency"], 4);
    let current = format!("\"{}\"", first["version"]);
    let resp = put_if(&current, json!({"concurrency": 5}))
        .await
        .expect("put");
    assert_eq!(resp.status().as_u16(), 200);
    let (_, view) = json(resp).await;
    assert_eq!(view["concurrency"], 5, "{view}");
    assert_ne!(view["version"], first["version"], "{view}");
}

// ---------------------------------------------------------------------------------------------
// 8. Webhook dispatch.

#[derive(Default)]
struct SlowHook {
    in_flight: AtomicI64,
    most: AtomicI64,
    hits: AtomicI64,
}

async fn slow_hook(State(h): State<Arc<SlowHook>>) -> axum::Json<Value> {
    let now = h.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    h.most.fetch_max(now, Ordering::SeqCst);
    h.hits.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    h.in_flight.fetch_sub(1, Ordering::SeqCst);
    axum::Json(json!({"status": "success", "result": {"ok": true}}))
}

/// A local webhook receiver answering success after 200 ms, counting what it saw; its address.
async fn slow_receiver() -> (Arc<SlowHook>, std::net::SocketAddr) {
    let hook = Arc::new(SlowHook::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind receiver");
    let addr = listener.local_addr().expect("receiver addr");
    let router = axum::Router::new()
        .fallback(slow_hook)
        .with_state(hook.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (hook, addr)
}

/// Wait until `n` instances of task `pushed` succeeded.
async fn all_pushed(pool: &PgPool, n: i64) {
    eventually(Duration::from_secs(30), "every push to succeed", || {
        let pool = pool.clone();
        async move {
            let done: i64 = sqlx::query_scalar(
                "select count(*) from task_instance where task_id = 'pushed' and status = 'SUCCESS'",
            )
            .fetch_one(&pool)
            .await
            .ok()?;
            (done == n).then_some(())
        }
    })
    .await;
}

#[sqlx::test]
async fn webhook_pushes_obey_a_shared_concurrency_of_two(pool: PgPool) {
    let (hook, addr) = slow_receiver().await;

    let mut opts = Options::api_only("hooks");
    let mut wh = WebhookDispatcherConfig::new("hooks", "");
    wh.interval = Duration::from_millis(100);
    opts.webhook = Some(wh);
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    limit_ok(&app, "pushes", json!({"concurrency": 2})).await;
    task_ok(
        &app,
        "pushed",
        json!({"agent_id": "hooks", "trigger": {"type": "manual"},
               "execution": {"concurrency_limit": 100, "limits": [{"name": "pushes"}]},
               "dispatch": {"mode": "webhook", "url": format!("http://{addr}/hook"),
                            "secret": "push-secret-123"}}),
    )
    .await;
    trigger(&app, "pushed", 8, json!({})).await;
    all_pushed(&pool, 8).await;
    let most = hook.most.load(Ordering::SeqCst);
    assert!(most <= 2, "the receiver saw {most} requests at once");
    assert_eq!(most, 2, "pushes never overlapped");
    assert_eq!(hook.hits.load(Ordering::SeqCst), 8);
    assert_eq!(units_total(&pool).await, 0);
    app.shutdown().await;
}

/// The webhook dispatcher, like a long poll, passes again when a rate that alone keeps its work
/// back admits the next start, not at its interval (1 s): pushes on a rate of one start per
/// 2.33 s start within moments of the rate's instants. At the interval alone they came 0.67 s
/// and more late (a pass right after each push's answer, then one a second).
#[sqlx::test]
async fn webhook_pushes_kept_back_by_a_rate_start_when_the_rate_admits_them(pool: PgPool) {
    let (_, addr) = slow_receiver().await;

    let mut opts = Options::api_only("hooks");
    opts.webhook = Some(WebhookDispatcherConfig::new("hooks", ""));
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    limit_ok(
        &app,
        "paced",
        json!({"rate": {"count": 3, "per_seconds": 7}}),
    )
    .await;
    task_ok(
        &app,
        "pushed",
        json!({"agent_id": "hooks", "trigger": {"type": "manual"},
               "execution": {"concurrency_limit": 100, "limits": [{"name": "paced"}]},
               "dispatch": {"mode": "webhook", "url": format!("http://{addr}/hook"),
                            "secret": "push-secret-123"}}),
    )
    .await;
    trigger(&app, "pushed", 4, json!({})).await;
    all_pushed(&pool, 4).await;
    assert_paced(&pool, "pushed").await;
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 9. Every exit from RUNNING gives the units back.

#[sqlx::test]
async fn concurrency_units_come_back_on_every_exit_from_running(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "ex", json!({"concurrency": 10})).await;
    task_ok(
        &app,
        "exits",
        manual_body(
            "e",
            json!({"concurrency_limit": 100, "max_retries": 3,
                   "retry_backoff": {"base_seconds": 3600, "max_seconds": 3600, "jitter": 0},
                   "limits": [{"name": "ex", "cost": 2}]}),
        ),
    )
    .await;
    let reaper = TimeoutReaper::new(
        pool.clone(),
        TimeoutReaperConfig::new("reaper"),
        Heartbeats::default(),
    );
    for exit in ["complete", "fail", "cancel", "lease expiry", "give-back"] {
        trigger(&app, "exits", 1, json!({})).await;
        let lease = if exit == "lease expiry" { 1 } else { 60 };
        let got = claim(&app, "e", "w", 1, json!({"lease_seconds": lease})).await;
        assert_eq!(got.len(), 1, "{exit}: {got:?}");
        let i = &got[0];
        let id = uuid_of(i);
        assert_eq!(units_of(&pool, id).await, 1, "{exit}: units while RUNNING");
        assert_eq!(limit_view(&app, "ex").await["running"], 2, "{exit}");
        match exit {
            "complete" => assert_eq!(complete(&app, i).await.0, 200),
            "fail" => {
                let (status, body) = fail(&app, i, json!({"retryable": true})).await;
                assert_eq!(status, 200, "{body}");
                assert_eq!(body["status"], "FAILED", "{body}");
            }
            "cancel" => {
                let (status, body) = json(
                    app.post(&format!("/v1/instances/{id}/cancel"), json!({}))
                        .await,
                )
                .await;
                assert_eq!(status, 200, "{body}");
                assert_eq!(body["status"], "CANCELLED", "{body}");
            }
            "lease expiry" => {
                eventually(
                    Duration::from_secs(15),
                    "the reaper to take the lease",
                    || {
                        let (pool, reaper) = (pool.clone(), &reaper);
                        async move {
                            reaper.run_once().await.ok()?;
                            (status_of(&pool, id).await != "RUNNING").then_some(())
                        }
                    },
                )
                .await;
            }
            _ => {
                let token: uuid::Uuid = i["lease_token"]
                    .as_str()
                    .expect("token")
                    .parse()
                    .expect("uuid");
                let given = kairos::store::instances::give_back(
                    &pool,
                    &[(id, token)],
                    "test",
                    "giving it back",
                )
                .await
                .expect("give back");
                assert_eq!(given.len(), 1);
                assert_eq!(status_of(&pool, id).await, "PENDING");
            }
        }
        assert_ne!(status_of(&pool, id).await, "RUNNING", "{exit}");
        assert_eq!(units_of(&pool, id).await, 0, "{exit}: units after the exit");
        assert_eq!(limit_view(&app, "ex").await["running"], 0, "{exit}");
    }
    assert_eq!(units_total(&pool).await, 0);
}

/// The reasons of `waiting_on` in an instance's detail.
async fn waiting_reasons(app: &TestApp, id: &str) -> Vec<Value> {
    let (status, body) = json(app.get(&format!("/v1/instances/{id}")).await).await;
    assert_eq!(status, 200, "{body}");
    body["waiting_on"].as_array().cloned().unwrap_or_default()
}

#[sqlx::test]
async fn a_waiting_instance_says_which_limit_holds_it_and_who_runs_on_it(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    limit_ok(&app, "openai", json!({"concurrency": 1})).await;
    limit_ok(&app, "tenant", json!({"concurrency": 5, "per_key": true})).await;
    manual_task(
        &app,
        "report",
        "agent-a",
        json!([{"name": "openai"}, {"name": "tenant", "key": "t-{{params.tenant}}"}]),
    )
    .await;
    trigger(&app, "report", 2, json!({"params": {"tenant": "acme"}})).await;
    let running = claim(&app, "agent-a", "w1", 5, json!({})).await;
    assert_eq!(running.len(), 1);
    let (_, page) = json(app.get("/v1/instances?task_id=report&status=PENDING").await).await;
    let waiting = page["items"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let reasons = waiting_reasons(&app, &waiting).await;
    let on_limit: Vec<&Value> = reasons
        .iter()
        .filter(|r| r["reason"] == "limit_concurrency")
        .collect();
    assert_eq!(on_limit.len(), 1, "{reasons:?}");
    assert_eq!(on_limit[0]["limit"], "openai");
    let detail = on_limit[0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("1 of 1"), "{detail}");
    assert!(detail.contains(&id_of(&running[0])), "{detail}");
    // The agent claimed a moment ago: it is not absent.
    assert!(
        reasons.iter().all(|r| r["reason"] != "no_agent"),
        "{reasons:?}"
    );

    // Held on the tenant's key: the hold is named with its key and its end.
    let (status, body) = json(
        app.post(
            "/v1/limits/tenant/hold",
            json!({"seconds": 600, "key": "t-acme", "reason": "429 from the API"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let reasons = waiting_reasons(&app, &waiting).await;
    let held = reasons
        .iter()
        .find(|r| r["reason"] == "limit_held")
        .cloned()
        .unwrap_or_default();
    assert_eq!(held["limit"], "tenant", "{reasons:?}");
    assert_eq!(held["key"], "t-acme", "{reasons:?}");
    assert!(held["until"].is_string(), "{held}");

    // An agent never seen claiming: its instances say so.
    manual_task(&app, "lonely", "agent-never", json!([])).await;
    trigger(&app, "lonely", 1, json!({})).await;
    let (_, page) = json(app.get("/v1/instances?task_id=lonely").await).await;
    let lonely = page["items"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let reasons = waiting_reasons(&app, &lonely).await;
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert_eq!(reasons[0]["reason"], "no_agent");
    // A running instance has no waiting_on at all.
    let (_, body) = json(
        app.get(&format!("/v1/instances/{}", id_of(&running[0])))
            .await,
    )
    .await;
    assert!(body.get("waiting_on").is_none(), "{body}");
}
