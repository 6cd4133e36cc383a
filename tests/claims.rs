//! Claims under fenced leases, the retry scanner and the timeout reaper, against a real
//! PostgreSQL and a real HTTP server, with real concurrency.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::{TestApp, claim, eventually, json};
use kairos::app::Options;
use kairos::services::Heartbeats;
use kairos::services::retry_scanner::{RetryScanner, RetryScannerConfig};
use kairos::services::timeout_reaper::{TimeoutReaper, TimeoutReaperConfig};
use serde_json::{Value, json};
use sqlx::PgPool;

/// A manual task (no windows of its own) with the given execution settings.
async fn manual_task(app: &TestApp, id: &str, agent: &str, execution: Value) {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{id}"),
            json!({"agent_id": agent, "trigger": {"type": "manual"}, "execution": execution}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

/// Insert `n` PENDING instances of `task` directly, oldest window first.
async fn pending(pool: &PgPool, task: &str, agent: &str, n: i32, max_attempts: i32) {
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
             agent_id, max_attempts, available_at) \
         select gen_random_uuid(), $1, 'w' || lpad(g::text, 6, '0'), \
             now() - interval '1 hour' + g * interval '1 millisecond', 'PENDING', 'manual', $2, $3, \
             now() - interval '1 hour' + g * interval '1 millisecond' \
         from generate_series(1, $4) g",
    )
    .bind(task)
    .bind(agent)
    .bind(max_attempts)
    .bind(n)
    .execute(pool)
    .await
    .expect("insert pending");
}

fn id_of(i: &Value) -> String {
    i["id"].as_str().expect("id").to_owned()
}

fn token_of(i: &Value) -> String {
    i["lease_token"].as_str().expect("lease_token").to_owned()
}

fn scanner(pool: &PgPool, node: &str) -> RetryScanner {
    RetryScanner::new(
        pool.clone(),
        RetryScannerConfig::new(node),
        Heartbeats::default(),
    )
}

fn reaper(pool: &PgPool, node: &str) -> TimeoutReaper {
    TimeoutReaper::new(
        pool.clone(),
        TimeoutReaperConfig::new(node),
        Heartbeats::default(),
    )
}

#[sqlx::test]
async fn eight_concurrent_claimers_take_each_of_1000_instances_exactly_once(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(
        &app,
        "bulk",
        "bulk_agent",
        json!({"concurrency_limit": 1000}),
    )
    .await;
    pending(&pool, "bulk", "bulk_agent", 1000, 1).await;

    let mut workers = Vec::new();
    let app = std::sync::Arc::new(app);
    for w in 0..8 {
        let app = app.clone();
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = claim(&app, "bulk_agent", &format!("w{w}"), 7, json!({})).await;
                if got.is_empty() {
                    break;
                }
                for i in got {
                    let (status, done) = json(
                        app.post(
                            &format!("/v1/instances/{}/complete", id_of(&i)),
                            json!({"lease_token": token_of(&i), "result": {"by": w}}),
                        )
                        .await,
                    )
                    .await;
                    assert_eq!(status, 200, "{done}");
                    mine.push(id_of(&i));
                }
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.expect("worker"));
    }
    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 1000, "every instance claimed once in total");
    assert_eq!(unique.len(), 1000, "no instance claimed twice");
    let (success, claims): (i64, i64) = sqlx::query_as(
        "select (select count(*) from task_instance where task_id = 'bulk' and status = 'SUCCESS'), \
                (select count(*) from instance_history where to_status = 'RUNNING')",
    )
    .fetch_one(&pool)
    .await
    .expect("counts");
    assert_eq!(success, 1000);
    assert_eq!(claims, 1000, "one claim transition per instance");
}

#[sqlx::test]
async fn claims_never_exceed_the_concurrency_limit_under_concurrent_claimers(pool: PgPool) {
    let app = std::sync::Arc::new(TestApp::spawn(pool.clone()).await);
    manual_task(
        &app,
        "q",
        "qa",
        json!({"concurrency_limit": 2, "overlap": "queue"}),
    )
    .await;
    pending(&pool, "q", "qa", 12, 1).await;
    let mut order = Vec::new();
    // Rounds of 6 racing claimers until all 12 went through. A round may claim fewer than the
    // limit allows when the racers split the oldest rows between them: a queue task is never
    // claimed out of window order, so a claimer holding a newer row leaves it.
    let mut rounds = 0;
    while order.len() < 12 {
        rounds += 1;
        assert!(
            rounds <= 60,
            "only {} of 12 claimed in 60 rounds",
            order.len()
        );
        let mut claimers = Vec::new();
        for c in 0..6 {
            let app = app.clone();
            claimers.push(tokio::spawn(async move {
                claim(&app, "qa", &format!("c{c}"), 3, json!({})).await
            }));
        }
        let mut got = Vec::new();
        for c in claimers {
            got.extend(c.await.expect("claimer"));
        }
        let running: i64 = sqlx::query_scalar(
            "select count(*) from task_instance where task_id = 'q' and status = 'RUNNING'",
        )
        .fetch_one(&pool)
        .await
        .expect("count");
        assert!(running <= 2, "{running} running with limit 2");
        assert_eq!(got.len() as i64, running);
        got.sort_by_key(|i| i["window_key"].as_str().unwrap_or("").to_owned());
        for i in &got {
            order.push(i["window_key"].as_str().unwrap_or("").to_owned());
            app.post(
                &format!("/v1/instances/{}/complete", id_of(i)),
                json!({"lease_token": token_of(i)}),
            )
            .await;
        }
    }
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "windows claimed in order");
    assert_eq!(order.len(), 12);
}

#[sqlx::test]
async fn a_claim_carries_context_lease_and_idempotency_key_and_skips_paused_tasks(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let (status, _) = json(
        app.put(
            "/v1/tasks/ctx",
            json!({"agent_id": "ca", "trigger": {"type": "manual"}, "context": {"params": {"region": "cn-north"}}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
    pending(&pool, "ctx", "ca", 1, 4).await;
    app.post("/v1/tasks/ctx/pause", json!({})).await;
    assert!(
        claim(&app, "ca", "w", 5, json!({})).await.is_empty(),
        "paused task's work is held"
    );
    app.post("/v1/tasks/ctx/resume", json!({})).await;
    assert!(
        claim(&app, "other_agent", "w", 5, json!({}))
            .await
            .is_empty(),
        "only the task's agent"
    );
    let got = claim(&app, "ca", "w", 5, json!({"lease_seconds": 30})).await;
    assert_eq!(got.len(), 1);
    let i = &got[0];
    assert_eq!(i["status"], "RUNNING");
    assert_eq!(i["worker_id"], "w");
    assert_eq!(i["context"], json!({"params": {"region": "cn-north"}}));
    assert_eq!(
        i["idempotency_key"],
        format!("ctx:{}", i["window_key"].as_str().unwrap_or(""))
    );
    assert!(i["lease_token"].is_string());
    let started: chrono::DateTime<chrono::Utc> = i["started_at"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("started_at");
    let expires: chrono::DateTime<chrono::Utc> = i["lease_expires_at"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("lease");
    let lease = (expires - started).num_seconds();
    assert!((29..=31).contains(&lease), "{lease}");
}

#[sqlx::test]
async fn stale_tokens_and_oversized_results_are_refused(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "t", "a", json!({})).await;
    pending(&pool, "t", "a", 1, 4).await;
    let i = claim(&app, "a", "w", 1, json!({})).await.remove(0);
    let id = id_of(&i);
    let wrong = uuid::Uuid::new_v4().to_string();

    let (status, problem) = json(
        app.post(
            &format!("/v1/instances/{id}/heartbeat"),
            json!({"lease_token": wrong}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 409, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or("")
            .contains("stale lease"),
        "{problem}"
    );
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": wrong}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 409);
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/fail"),
            json!({"lease_token": wrong, "error": "x"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 409);
    let (status, problem) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": "nope"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(problem["errors"][0]["field"], "lease_token");
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{}/complete", uuid::Uuid::new_v4()),
            json!({"lease_token": token_of(&i)}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);

    let big = "x".repeat(70 * 1024);
    let (status, problem) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": token_of(&i), "result": {"blob": big}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 413, "{problem}");

    // The heartbeat with the right token extends the lease; the instance is still RUNNING.
    let (status, hb) = json(
        app.post(
            &format!("/v1/instances/{id}/heartbeat"),
            json!({"lease_token": token_of(&i), "lease_seconds": 120}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{hb}");
    assert_eq!(hb["status"], "RUNNING");
    let (status, done) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": token_of(&i), "result": {"ok": true}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(done["status"], "SUCCESS");
    assert_eq!(done["result"], json!({"ok": true}));
    // Completing twice under the same lease is answered as the first time, and changes
    // nothing (the first result stays); a heartbeat under the ended lease is fenced.
    let (status, again) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": token_of(&i), "result": {"ok": false}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(again["result"], json!({"ok": true}));
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/heartbeat"),
            json!({"lease_token": token_of(&i)}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 409);
}

#[sqlx::test]
async fn late_complete_after_reap_is_rejected_with_409_and_the_newer_result_stays(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(
        &app,
        "t",
        "a",
        json!({"retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0}}),
    )
    .await;
    pending(&pool, "t", "a", 1, 4).await;
    let old = claim(&app, "a", "slow_worker", 1, json!({"lease_seconds": 1}))
        .await
        .remove(0);
    let id = id_of(&old);

    // The slow worker stops heartbeating: after the lease the reaper fails the attempt.
    let reaper = reaper(&pool, "r1");
    let reaped = eventually(Duration::from_secs(10), "the lease to be reaped", || {
        let reaper = &reaper;
        async move {
            let r = reaper.run_once().await.expect("reap");
            (r.num_reaped == 1).then_some(r)
        }
    })
    .await;
    assert_eq!(reaped.num_dead, 0);
    let (_, failed) = json(app.get(&format!("/v1/instances/{id}")).await).await;
    assert_eq!(failed["status"], "FAILED");
    assert_eq!(failed["error_kind"], "lease_expired");

    // After the backoff the scanner makes it PENDING again; another worker takes attempt 2.
    let scanner = scanner(&pool, "s1");
    eventually(Duration::from_secs(10), "the retry", || {
        let scanner = &scanner;
        async move { (scanner.run_once().await.expect("scan").num_retried == 1).then_some(()) }
    })
    .await;
    let new = claim(&app, "a", "fast_worker", 1, json!({}))
        .await
        .remove(0);
    assert_eq!(id_of(&new), id);
    assert_eq!(new["attempt"], 2);
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": token_of(&new), "result": {"by": "fast"}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);

    // The slow worker comes back and reports: fenced out.
    let (status, problem) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": token_of(&old), "result": {"by": "slow"}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 409, "{problem}");
    let (_, detail) = json(app.get(&format!("/v1/instances/{id}")).await).await;
    assert_eq!(detail["status"], "SUCCESS");
    assert_eq!(detail["result"], json!({"by": "fast"}));
    let transitions: Vec<(String, String)> = detail["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap_or("-").to_owned(),
                e["to"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let expect = [
        ("PENDING", "RUNNING"),
        ("RUNNING", "FAILED"),
        ("FAILED", "PENDING"),
        ("PENDING", "RUNNING"),
        ("RUNNING", "SUCCESS"),
    ];
    assert_eq!(
        transitions,
        expect
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect::<Vec<_>>()
    );
}

#[sqlx::test]
async fn failures_retry_with_backoff_until_dead_and_an_operator_retry_revives(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(
        &app,
        "t",
        "a",
        json!({"max_retries": 2, "retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0}}),
    )
    .await;
    pending(&pool, "t", "a", 1, 3).await;
    let scanner = scanner(&pool, "s");
    for attempt in 1..=3 {
        let i = claim(&app, "a", "w", 1, json!({})).await.remove(0);
        assert_eq!(i["attempt"], attempt);
        let (status, failed) = json(
            app.post(
                &format!("/v1/instances/{}/fail", id_of(&i)),
                json!({"lease_token": token_of(&i), "error": format!("boom {attempt}")}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "{failed}");
        if attempt < 3 {
            assert_eq!(failed["status"], "FAILED");
            let avail: chrono::DateTime<chrono::Utc> = failed["available_at"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .expect("available_at");
            let now = kairos::store::now(&pool).await.expect("now");
            assert!(avail > now, "backoff puts the retry in the future");
            // Not claimable during the backoff, not even by a long poll that ends before it.
            assert!(claim(&app, "a", "w", 1, json!({})).await.is_empty());
            eventually(Duration::from_secs(10), "retry", || {
                let scanner = &scanner;
                async move { (scanner.run_once().await.expect("scan").num_retried == 1).then_some(()) }
            })
            .await;
        } else {
            assert_eq!(failed["status"], "DEAD");
            assert_eq!(failed["error"], "boom 3");
            assert!(failed["finished_at"].is_string());
        }
    }
    let (_, task) = json(app.get("/v1/tasks/t").await).await;
    assert_eq!(task["consecutive_failures"], 3);

    // An operator brings it back for one more attempt, which succeeds.
    let (_, list) = json(app.get("/v1/instances?task_id=t").await).await;
    let id = list["items"][0]["id"].as_str().expect("id").to_owned();
    let (status, revived) = json(
        app.post(
            &format!("/v1/instances/{id}/retry"),
            json!({"reason": "downstream fixed"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{revived}");
    assert_eq!(revived["status"], "PENDING");
    assert_eq!(revived["attempt"], 4);
    assert_eq!(revived["max_attempts"], 4);
    let i = claim(&app, "a", "w", 1, json!({})).await.remove(0);
    app.post(
        &format!("/v1/instances/{id}/complete"),
        json!({"lease_token": token_of(&i)}),
    )
    .await;
    let (_, task) = json(app.get("/v1/tasks/t").await).await;
    assert_eq!(
        task["consecutive_failures"], 0,
        "a success resets the count"
    );
    // SUCCESS is terminal: no operator retry.
    let (status, _) = json(
        app.post(&format!("/v1/instances/{id}/retry"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 409);
}

#[sqlx::test]
async fn a_non_retryable_failure_is_dead_at_once_and_cancel_fences_the_lease(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "t", "a", json!({"concurrency_limit": 5})).await;
    pending(&pool, "t", "a", 2, 4).await;
    let got = claim(&app, "a", "w", 2, json!({})).await;
    let (status, dead) = json(
        app.post(
            &format!("/v1/instances/{}/fail", id_of(&got[0])),
            json!({"lease_token": token_of(&got[0]), "error": "bad input", "retryable": false}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(dead["status"], "DEAD");
    assert_eq!(dead["error_kind"], "agent");

    let id = id_of(&got[1]);
    let (status, cancelled) = json(
        app.post(
            &format!("/v1/instances/{id}/cancel"),
            json!({"reason": "not needed"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(cancelled["status"], "CANCELLED");
    assert_eq!(cancelled["error_kind"], "cancelled");
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": token_of(&got[1])}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 409, "the cancelled lease is fenced out");
    let (status, _) = json(
        app.post(&format!("/v1/instances/{id}/cancel"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 409, "cancelling twice is an illegal transition");
}

#[sqlx::test]
async fn two_replicas_scanning_at_once_never_apply_a_transition_twice(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(
        &app,
        "t",
        "a",
        json!({"concurrency_limit": 1000, "max_retries": 5, "timeout_seconds": 1}),
    )
    .await;
    pending(&pool, "t", "a", 300, 6).await;
    // 150 instances RUNNING with expired leases, 150 FAILED with their backoff passed.
    sqlx::query(
        "update task_instance set status = 'RUNNING', lease_token = gen_random_uuid(), \
             lease_expires_at = now() - interval '1 second', started_at = now() - interval '5 seconds', \
             deadline_at = now() + interval '1 hour', worker_id = 'gone', \
             run_slot = substr(window_key, 2)::int \
         where task_id = 't' and window_key <= 'w000150'",
    )
    .execute(&pool)
    .await
    .expect("running");
    sqlx::query(
        "update task_instance set status = 'FAILED', available_at = now() - interval '1 second' \
         where task_id = 't' and window_key > 'w000150'",
    )
    .execute(&pool)
    .await
    .expect("failed");

    let mut passes = Vec::new();
    for node in ["a", "b"] {
        for _ in 0..3 {
            let s = RetryScanner::new(
                pool.clone(),
                RetryScannerConfig {
                    node_id: node.to_owned(),
                    interval: Duration::from_millis(10),
                    batch_size: 20,
                },
                Heartbeats::default(),
            );
            let r = TimeoutReaper::new(
                pool.clone(),
                TimeoutReaperConfig {
                    node_id: node.to_owned(),
                    interval: Duration::from_millis(10),
                    batch_size: 20,
                },
                Heartbeats::default(),
            );
            passes.push(tokio::spawn(async move {
                let mut n = 0;
                for _ in 0..20 {
                    n += s.run_once().await.expect("scan").num_retried;
                    n += r.run_once().await.expect("reap").num_reaped;
                }
                n
            }));
        }
    }
    let mut total = 0;
    for p in passes {
        total += p.await.expect("pass");
    }
    // Every reaped instance became FAILED with a backoff, so 150 retries + 150 reaps happened.
    assert!(total >= 300, "{total}");
    let dupes: i64 = sqlx::query_scalar(
        "select count(*) from (select instance_id, attempt, from_status, to_status from instance_history \
         group by 1, 2, 3, 4 having count(*) > 1) d",
    )
    .fetch_one(&pool)
    .await
    .expect("dupes");
    assert_eq!(dupes, 0, "no transition applied twice for one attempt");
    let reaped: i64 = sqlx::query_scalar("select count(*) from instance_history where from_status = 'RUNNING' and to_status = 'FAILED'")
        .fetch_one(&pool)
        .await
        .expect("reaped");
    assert_eq!(reaped, 150);
}

#[sqlx::test]
async fn a_long_poll_returns_soon_after_a_window_becomes_due(pool: PgPool) {
    let mut opts = Options::api_only("lp");
    let mut trig = kairos::services::trigger_loop::TriggerLoopConfig::new("lp");
    trig.max_sleep = Duration::from_secs(30);
    opts.trigger = Some(trig);
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    let (status, _) = json(
        app.put("/v1/tasks/soon", json!({"agent_id": "lpa", "trigger": {"type": "interval", "every_seconds": 3}, "execution": {"overlap": "queue"}}))
            .await,
    )
    .await;
    assert_eq!(status, 201);
    let (_, task) = json(app.get("/v1/tasks/soon").await).await;
    let due: chrono::DateTime<chrono::Utc> = task["next_fire_at"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("next");
    let started = Instant::now();
    let got = claim(&app, "lpa", "w", 1, json!({"wait_seconds": 10})).await;
    let waited = started.elapsed();
    assert_eq!(got.len(), 1, "the long poll got the window");
    let received = kairos::store::now(&pool).await.expect("now");
    let lag = (received - due).num_milliseconds();
    assert!(got[0]["window_key"] == kairos::domain::schedule::window_key(due));
    assert!(
        lag < 1000,
        "returned {lag} ms after the window was due (waited {waited:?})"
    );
    app.shutdown().await;
}

#[sqlx::test]
async fn a_long_poll_with_nothing_to_do_returns_empty_after_wait_seconds(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let started = Instant::now();
    let got = claim(&app, "idle", "w", 1, json!({"wait_seconds": 1})).await;
    assert!(got.is_empty());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
}

#[sqlx::test]
async fn bad_claims_name_the_field(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let cases = [
        (json!({"worker_id": "w"}), "agent_id"),
        (json!({"agent_id": "a"}), "worker_id"),
        (
            json!({"agent_id": "a", "worker_id": "w", "max_instances": 0}),
            "max_instances",
        ),
        (
            json!({"agent_id": "a", "worker_id": "w", "max_instances": 101}),
            "max_instances",
        ),
        (
            json!({"agent_id": "a", "worker_id": "w", "lease_seconds": 0}),
            "lease_seconds",
        ),
        (
            json!({"agent_id": "a", "worker_id": "w", "wait_seconds": 31}),
            "wait_seconds",
        ),
        (
            json!({"agent_id": "a", "worker_id": "w", "colour": 1}),
            "colour",
        ),
        (json!({"agent_id": "a b", "worker_id": "w"}), "agent_id"),
    ];
    let mut seen = HashMap::new();
    for (body, field) in cases {
        let (status, problem) = json(app.post("/v1/claims", body.clone()).await).await;
        assert_eq!(status, 422, "{body} -> {problem}");
        assert_eq!(problem["errors"][0]["field"], field, "{body}");
        seen.insert(field, true);
    }
    assert!(seen.len() >= 6);
}

#[sqlx::test]
async fn a_batch_completion_commits_valid_leases_and_fences_stale_ones(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "b", "ba", json!({"concurrency_limit": 10})).await;
    pending(&pool, "b", "ba", 4, 1).await;
    let got = claim(&app, "ba", "w", 4, json!({})).await;
    assert_eq!(got.len(), 4);
    let mut items: Vec<Value> = got
        .iter()
        .take(3)
        .map(|i| json!({"id": i["id"], "lease_token": i["lease_token"], "result": {"n": i["window_key"]}}))
        .collect();
    items.push(json!({"id": got[3]["id"], "lease_token": uuid::Uuid::new_v4()}));
    items.push(json!({"id": uuid::Uuid::new_v4(), "lease_token": uuid::Uuid::new_v4()}));
    let (status, body) = json(
        app.post("/v1/completions", json!({"completions": items}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let statuses: Vec<u64> = body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["status"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(statuses, vec![200, 200, 200, 409, 404]);
    assert_eq!(body["results"][0]["instance"]["status"], "SUCCESS");
    let states: Vec<(String,)> =
        sqlx::query_as("select status from task_instance order by window_key")
            .fetch_all(&pool)
            .await
            .expect("states");
    let states: Vec<&str> = states.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(states, vec!["SUCCESS", "SUCCESS", "SUCCESS", "RUNNING"]);
    let (status, problem) = json(
        app.post("/v1/completions", json!({"completions": []}))
            .await,
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(problem["errors"][0]["field"], "completions");
    let (status, problem) = json(
        app.post(
            "/v1/completions",
            json!({"completions": [{"id": "x", "lease_token": uuid::Uuid::new_v4()}]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(problem["errors"][0]["field"], "completions[0].id");
}

#[sqlx::test]
async fn concurrent_batches_and_the_reaper_over_the_same_tasks_never_deadlock(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let tasks: Vec<String> = (0..16).map(|k| format!("t{k:02}")).collect();
    for t in &tasks {
        manual_task(
            &app,
            t,
            "dl",
            json!({"concurrency_limit": 1000, "max_retries": 5}),
        )
        .await;
    }
    // Enough other tasks that the planner reaches task rows by index, in the order the
    // batch's rows come (request order), not by one scan in table order.
    sqlx::query(
        "insert into tasks (id, agent_id, spec, trigger_type, dispatch_mode) \
         select 'filler' || g, 'other', spec, trigger_type, dispatch_mode \
         from tasks, generate_series(1, 2000) g where id = 't00'",
    )
    .execute(&pool)
    .await
    .expect("filler tasks");
    sqlx::query("analyze tasks")
        .execute(&pool)
        .await
        .expect("analyze");
    for round in 0..3 {
        // The last round's reaps may have opened circuits (which also write the task rows).
        sqlx::query("update tasks set paused = false, paused_reason = null, resume_at = null")
            .execute(&pool)
            .await
            .expect("close circuits");
        for t in &tasks {
            sqlx::query("delete from task_instance where task_id = $1")
                .bind(t)
                .execute(&pool)
                .await
                .expect("clear the last round");
            pending(&pool, t, "dl", 12, 6).await;
        }
        let mut by_task: HashMap<String, Vec<Value>> = HashMap::new();
        loop {
            let got = claim(&app, "dl", "w", 100, json!({})).await;
            if got.is_empty() {
                break;
            }
            for i in got {
                let task = i["task_id"].as_str().unwrap_or("").to_owned();
                by_task.entry(task).or_default().push(i);
            }
        }
        assert_eq!(by_task.values().map(Vec::len).sum::<usize>(), 16 * 12);
        // Every task has a failure count, so every success writes its task row; a third of
        // the leases are expired, so the reaper writes the same task rows at the same time.
        sqlx::query("update tasks set consecutive_failures = 1")
            .execute(&pool)
            .await
            .expect("failure counts");
        let mut batches: Vec<Vec<Value>> = Vec::new();
        let mut expired: Vec<String> = Vec::new();
        // The slot-th claimed instance of each task, in ascending or descending task order.
        let nth =
            |slot: usize, t: &String| by_task[t.as_str()].get(slot).cloned().unwrap_or_default();
        for slot in 0..12 {
            let mut order: Vec<&String> = tasks.iter().collect();
            if slot % 2 == 1 {
                order.reverse();
            }
            if slot >= 8 {
                expired.extend(order.iter().map(|t| id_of(&nth(slot, t))));
                continue;
            }
            batches.push(
                order
                    .iter()
                    .map(|t| {
                        let i = nth(slot, t);
                        json!({"id": i["id"], "lease_token": i["lease_token"]})
                    })
                    .collect(),
            );
        }
        sqlx::query(
            "update task_instance set lease_expires_at = now() - interval '1 second' \
             where id = any($1::text[]::uuid[])",
        )
        .bind(&expired)
        .execute(&pool)
        .await
        .expect("expire leases");

        let mut work = tokio::task::JoinSet::new();
        for items in batches {
            let client = app.client.clone();
            let url = app.url("/v1/completions");
            work.spawn(async move {
                let resp = client
                    .post(url)
                    .json(&json!({"completions": items}))
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let status = resp.status().as_u16();
                let body: Value = resp.json().await.map_err(|e| e.to_string())?;
                let ok = status == 200
                    && body["results"]
                        .as_array()
                        .is_some_and(|r| r.iter().all(|r| r["status"] == 200));
                if ok {
                    Ok(())
                } else {
                    Err(format!("{status}: {body}"))
                }
            });
        }
        for node in ["r1", "r2"] {
            let reaper = TimeoutReaper::new(
                pool.clone(),
                TimeoutReaperConfig::new(node),
                Heartbeats::default(),
            );
            work.spawn(async move {
                reaper
                    .run_once()
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("reaper: {e:?}"))
            });
        }
        while let Some(done) = work.join_next().await {
            let outcome = done.expect("joined");
            assert!(outcome.is_ok(), "round {round}: {outcome:?}");
        }
        let counts: Vec<(String, i64)> = sqlx::query_as(
            "select status, count(*) from task_instance group by status order by status",
        )
        .fetch_all(&pool)
        .await
        .expect("counts");
        assert_eq!(
            counts,
            vec![
                ("FAILED".to_owned(), 16 * 4),
                ("SUCCESS".to_owned(), 16 * 8)
            ],
            "round {round}"
        );
    }
}

#[sqlx::test]
async fn an_attempt_given_back_with_retry_at_once_is_claimable_without_the_backoff(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    // A claimed attempt of a fresh manual task (agent = task id) with a 10-minute backoff.
    let claimed = |task: &'static str| {
        let app = &app;
        async move {
            let (status, _) = json(
                app.put(
                    &format!("/v1/tasks/{task}"),
                    serde_json::json!({"agent_id": task, "trigger": {"type": "manual"},
                        "execution": {"max_retries": 2,
                            "retry_backoff": {"base_seconds": 600, "max_seconds": 600, "jitter": 0}}}),
                )
                .await,
            )
            .await;
            assert_eq!(status, 201);
            app.post(&format!("/v1/tasks/{task}/trigger"), serde_json::json!({}))
                .await;
            let (_, page) = json(
                app.post(
                    "/v1/claims",
                    serde_json::json!({"agent_id": task, "worker_id": "w", "max_instances": 1}),
                )
                .await,
            )
            .await;
            page["instances"][0].clone()
        }
    };
    let fail = |inst: Value, body: Value| {
        let app = &app;
        async move {
            let id = inst["id"].as_str().expect("claimed one").to_owned();
            let mut body = body;
            body["lease_token"] = inst["lease_token"].clone();
            body["error"] = "shutting down".into();
            let (status, answer) =
                json(app.post(&format!("/v1/instances/{id}/fail"), body).await).await;
            (status, answer, id)
        }
    };
    let wait_of = |id: String| {
        let pool = &pool;
        async move {
            sqlx::query_scalar::<_, f64>(
                "select extract(epoch from available_at - now())::float8 from task_instance \
                 where id = $1::uuid",
            )
            .bind(&id)
            .fetch_one(pool)
            .await
            .expect("instance")
        }
    };

    let (status, answer, id) = fail(claimed("plain_fail").await, serde_json::json!({})).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("FAILED")));
    let backoff = wait_of(id).await;
    assert!(
        backoff > 500.0,
        "a plain failure waits the backoff: {backoff} s"
    );

    let (status, answer, id) = fail(
        claimed("given_back").await,
        serde_json::json!({"retry_at_once": true}),
    )
    .await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("FAILED")));
    let at_once = wait_of(id).await;
    assert!(
        at_once <= 1.0,
        "a given-back attempt is retryable at once: {at_once} s"
    );

    // A failure that is not retried has nothing to hurry: it ends DEAD as without the flag.
    let (status, answer, _) = fail(
        claimed("fatal_at_once").await,
        serde_json::json!({"retryable": false, "retry_at_once": true}),
    )
    .await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("DEAD")));
}

/// Claims sent at the same moment, `max_instances` 1 each, spread over `apps`; the instances
/// they got.
async fn claim_together(apps: &[&TestApp], agent: &str, n: usize) -> Vec<String> {
    let client = reqwest::Client::new();
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(n));
    let mut set = tokio::task::JoinSet::new();
    for k in 0..n {
        let url = apps[k % apps.len()].url("/v1/claims");
        let body = json!({"agent_id": agent, "worker_id": format!("w{k}"), "max_instances": 1});
        let (client, start) = (client.clone(), start.clone());
        set.spawn(async move {
            start.wait().await;
            let resp = client.post(url).json(&body).send().await.expect("claim");
            assert_eq!(resp.status().as_u16(), 200);
            let v: Value = resp.json().await.expect("claim body");
            v["instances"].as_array().cloned().unwrap_or_default()
        });
    }
    set.join_all()
        .await
        .into_iter()
        .flatten()
        .map(|i| id_of(&i))
        .collect()
}

#[sqlx::test]
async fn claims_sent_together_take_every_waiting_instance_between_them(pool: PgPool) {
    // A claim locks what it reads until it commits; a claim that read more than it took hid
    // the rest from the claims beside it, which answered [] with work waiting (openapi.yaml:
    // a claim returns claimable work whenever the agent has any).
    let app = TestApp::spawn(pool.clone()).await;
    let other = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "one", "crowd", json!({"concurrency_limit": 100})).await;
    for (round, apps) in [(0, vec![&app]), (1, vec![&app, &other])] {
        for n in [2usize, 8, 2, 8, 2, 8] {
            for _ in 0..n {
                let (status, _) = json(app.post("/v1/tasks/one/trigger", json!({})).await).await;
                assert_eq!(status, 201);
            }
            let got = claim_together(&apps, "crowd", n).await;
            let distinct: HashSet<&String> = got.iter().collect();
            assert_eq!(distinct.len(), got.len(), "an instance was claimed twice");
            assert_eq!(
                got.len(),
                n,
                "round {round}: {n} claims sent together over {} replica(s) took {} of {n} waiting instances",
                apps.len(),
                got.len()
            );
        }
    }
}

#[sqlx::test]
async fn a_task_moved_to_another_agent_takes_its_waiting_instances_along(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "moving", "old_agent", json!({"concurrency_limit": 5})).await;
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let (_, i) = json(app.post("/v1/tasks/moving/trigger", json!({})).await).await;
        waiting.push(id_of(&i));
    }
    let first = claim(&app, "old_agent", "w_old", 1, json!({})).await;
    let (running, held_token) = (id_of(&first[0]), token_of(&first[0]));
    let (status, moved) = json(
        app.put(
            "/v1/tasks/moving",
            json!({"agent_id": "new_agent", "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 5}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{moved}");
    // The old agent finds nothing more; the new one takes the two still waiting; the running
    // one stays with its worker and completes under its lease.
    assert!(
        claim(&app, "old_agent", "w_old", 10, json!({}))
            .await
            .is_empty()
    );
    let taken: HashSet<String> = claim(&app, "new_agent", "w_new", 10, json!({}))
        .await
        .iter()
        .map(id_of)
        .collect();
    let expected: HashSet<String> = waiting.into_iter().filter(|i| *i != running).collect();
    assert_eq!(taken, expected);
    let (_, held) = json(app.get(&format!("/v1/instances/{running}")).await).await;
    assert_eq!(held["agent_id"], "old_agent");
    assert_eq!(held["status"], "RUNNING");
    // That attempt fails; its retry comes back to the task's new agent.
    let (status, failed) = json(
        app.post(
            &format!("/v1/instances/{running}/fail"),
            json!({"lease_token": held_token, "error": "boom", "retryable": true}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{failed}");
    sqlx::query("update task_instance set available_at = now() where id = $1::uuid")
        .bind(&running)
        .execute(&pool)
        .await
        .expect("due now");
    scanner(&pool, "mover").run_once().await.expect("scan");
    let retried = claim(&app, "new_agent", "w_new", 10, json!({})).await;
    assert_eq!(retried.len(), 1);
    assert_eq!(id_of(&retried[0]), running);
    assert_eq!(retried[0]["agent_id"], "new_agent");
}

#[sqlx::test]
async fn an_instance_listed_twice_in_a_batch_gets_each_item_tried_in_order(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "twice", "ag2", json!({"concurrency_limit": 5})).await;
    for _ in 0..2 {
        app.post("/v1/tasks/twice/trigger", json!({})).await;
    }
    let held = claim(&app, "ag2", "w", 2, json!({})).await;
    let (a, b) = (&held[0], &held[1]);
    let stale = uuid::Uuid::new_v4().to_string();
    let item = |i: &Value, token: &str| json!({"id": i["id"], "lease_token": token});
    let (status, batch) = json(
        app.post(
            "/v1/completions",
            json!({"completions": [
                item(a, &stale), item(a, &token_of(a)),
                item(b, &token_of(b)), item(b, &token_of(b)),
            ]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{batch}");
    let answers = common::item_statuses(&batch);
    // A stale token first does not cost the current one its completion; a second complete
    // under the token that completed it is answered as the first was, and writes nothing.
    assert_eq!(answers, [409, 200, 200, 200], "{batch}");
    for i in [a, b] {
        let (_, now) = json(app.get(&format!("/v1/instances/{}", id_of(i))).await).await;
        assert_eq!(now["status"], "SUCCESS");
    }
}

/// `n` long polls of `agent`, the k-th sent `k * gap` after the call, each waiting up to
/// `wait_s`: when each answered, and what it took.
fn long_polls(
    app: &TestApp,
    agent: &str,
    n: u32,
    gap: Duration,
    wait_s: u64,
) -> tokio::task::JoinSet<(Instant, Vec<Value>)> {
    let mut polls = tokio::task::JoinSet::new();
    for k in 0..n {
        let client = app.client.clone();
        let url = app.url("/v1/claims");
        let body = json!({"agent_id": agent, "worker_id": format!("w{k}"), "wait_seconds": wait_s});
        polls.spawn(async move {
            tokio::time::sleep(gap * k).await;
            let (status, body) =
                json(client.post(url).json(&body).send().await.expect("sent")).await;
            assert_eq!(status, 200, "{body}");
            let got = body["instances"].as_array().cloned().unwrap_or_default();
            (Instant::now(), got)
        });
    }
    polls
}

/// Claim rounds run so far (each is one claim transaction), from `/metrics`.
fn claim_rounds(metrics: &str) -> f64 {
    ["settled", "unsettled", "skipped"]
        .iter()
        .map(|o| {
            common::sample(
                metrics,
                &format!("kairos_claim_head_total{{outcome=\"{o}\"}}"),
            )
        })
        .sum()
}

/// A paused task's row keeps its agent's waiting claims relooking every second. Fifty of them
/// must cost the database about what one does: one shared read of the agent's next
/// `available_at` and a few shared claim rounds a second, not fifty of each.
#[sqlx::test]
async fn waiting_claims_of_one_agent_relook_at_held_work_together_not_each_on_its_own(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "held", "herd", json!({})).await;
    pending(&pool, "held", "herd", 1, 3).await;
    let (status, body) = json(app.post("/v1/tasks/held/pause", json!({})).await).await;
    assert_eq!(status, 200, "{body}");
    // Fifty workers start waiting over the first second, as an agent's workers come and go.
    let mut polls = long_polls(&app, "herd", 50, Duration::from_millis(20), 6);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let reads = "kairos_claim_next_available_total{source=\"database\"}";
    let before = app.get("/metrics").await.text().await.expect("metrics");
    let span = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = app.get("/metrics").await.text().await.expect("metrics");
    let secs = span.elapsed().as_secs_f64();
    let read = common::sample(&after, reads) - common::sample(&before, reads);
    let rounds = claim_rounds(&after) - claim_rounds(&before);
    assert!(
        read <= 3.0 * secs,
        "{read} reads of the next available_at in {secs:.1} s for 50 waiters of one agent"
    );
    assert!(
        rounds <= 4.0 * secs,
        "{rounds} claim rounds in {secs:.1} s for 50 waiters of one agent"
    );
    while let Some(done) = polls.join_next().await {
        assert!(
            done.expect("poll").1.is_empty(),
            "a paused task's work is held"
        );
    }
}

/// Resuming a task announces nothing: its agent's waiting claims find its work on their
/// fallback relook, within a second.
#[sqlx::test]
async fn a_waiting_claim_takes_work_within_a_second_of_its_task_resuming(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "resumes", "herd2", json!({})).await;
    pending(&pool, "resumes", "herd2", 1, 3).await;
    let (status, body) = json(app.post("/v1/tasks/resumes/pause", json!({})).await).await;
    assert_eq!(status, 200, "{body}");
    let mut polls = long_polls(&app, "herd2", 20, Duration::from_millis(10), 10);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let resumed = Instant::now();
    let (status, body) = json(app.post("/v1/tasks/resumes/resume", json!({})).await).await;
    assert_eq!(status, 200, "{body}");
    let mut taken = Vec::new();
    while let Some(done) = polls.join_next().await {
        let (at, got) = done.expect("poll");
        if !got.is_empty() {
            taken.push(at.saturating_duration_since(resumed));
        }
    }
    assert_eq!(taken.len(), 1, "one waiter takes the one instance");
    // A relook comes at least every second; the bound leaves room for a loaded machine.
    assert!(
        taken[0] < Duration::from_secs(5),
        "taken {:?} after the resume",
        taken[0]
    );
}
