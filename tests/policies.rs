//! Scheduling policies against a real PostgreSQL: overlap replace, catch-up latest/all, manual
//! and delayed runs, backfill, dependencies, and the circuit breaker.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestApp, early_in_a_second, eventually, json, windows};
use kairos::services::Heartbeats;
use kairos::services::retry_scanner::{RetryScanner, RetryScannerConfig};
use kairos::services::trigger_loop::{TriggerLoop, TriggerLoopConfig};
use serde_json::{Value, json};
use sqlx::PgPool;

/// Midnight UTC `days` from today: fixed dates would fall out of `retention_days` as time passes.
fn midnight(days: i64) -> chrono::DateTime<chrono::Utc> {
    let today = chrono::Utc::now().date_naive() + chrono::Duration::days(days);
    today.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc()
}

fn key(at: chrono::DateTime<chrono::Utc>) -> String {
    kairos::domain::schedule::window_key(at)
}

/// A trigger loop of one batch: a pass reads each due task once. With several batches, one
/// that starts after another's commit finds a task due again once the clock has passed its
/// next window, and writes that window in the same pass.
fn trigger(pool: &PgPool) -> TriggerLoop {
    let mut cfg = TriggerLoopConfig::new("n1");
    cfg.parallelism = 1;
    TriggerLoop::new(pool.clone(), cfg, Heartbeats::default())
}

async fn claim(app: &TestApp, agent: &str, max: i64) -> Vec<Value> {
    let (status, body) = json(
        app.post(
            "/v1/claims",
            json!({"agent_id": agent, "worker_id": "w", "max_instances": max}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["instances"].as_array().cloned().unwrap_or_default()
}

async fn complete(app: &TestApp, i: &Value, result: Value) -> u16 {
    let id = i["id"].as_str().unwrap_or("");
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": i["lease_token"], "result": result}),
        )
        .await,
    )
    .await;
    status
}

async fn fail(app: &TestApp, i: &Value) -> Value {
    let id = i["id"].as_str().unwrap_or("");
    let (status, body) = json(
        app.post(
            &format!("/v1/instances/{id}/fail"),
            json!({"lease_token": i["lease_token"], "error": "downstream down"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Pretend the daemon was down: the task's next window is `secs` seconds in the past.
async fn rewind(pool: &PgPool, task: &str, secs: i64) {
    sqlx::query(
        "update task_cursor set next_fire_at = date_trunc('second', now()) - make_interval(secs => $2) \
         where task_id = $1",
    )
    .bind(task)
    .bind(secs as f64)
    .execute(pool)
    .await
    .expect("rewind");
}

#[sqlx::test]
async fn overlap_replace_cancels_the_running_instance_and_fences_its_lease(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/r",
        json!({"agent_id": "ra", "trigger": {"type": "interval", "every_seconds": 1},
               "execution": {"overlap": "replace", "misfire_grace_seconds": 30}}),
    )
    .await;
    early_in_a_second(&pool).await;
    rewind(&pool, "r", 0).await;
    let first = trigger(&pool).run_once().await.expect("pass");
    assert_eq!(
        (first.num_created, first.num_cancelled),
        (1, 0),
        "{first:?}"
    );
    let old = claim(&app, "ra", 1).await.remove(0);

    // Two newer windows come due in one pass while the old one still runs: the first of them
    // replaces the running instance, and is at once replaced by the second.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    early_in_a_second(&pool).await;
    rewind(&pool, "r", 1).await;
    let report = trigger(&pool).run_once().await.expect("pass");
    assert_eq!(report.num_cancelled, 1, "{report:?}");
    assert_eq!(
        complete(&app, &old, json!({"by": "old"})).await,
        409,
        "old lease fenced"
    );
    let new = claim(&app, "ra", 1).await;
    assert_eq!(new.len(), 1);
    assert_ne!(new[0]["id"], old["id"]);
    assert_eq!(complete(&app, &new[0], json!({"by": "new"})).await, 200);
    let rows = windows(&pool, "r").await;
    let statuses: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(statuses, ["CANCELLED", "SKIPPED", "SUCCESS"], "{rows:?}");
    // The window that came due in the same pass and was at once superseded is recorded, not lost.
    assert_eq!(
        rows[1].3.as_deref(),
        Some(format!("overlap: replaced by window {}", rows[2].0).as_str()),
        "{rows:?}"
    );
}

async fn catchup_outcome(
    pool: &PgPool,
    app: &TestApp,
    id: &str,
    policy: &str,
) -> Vec<(String, String, String, Option<String>)> {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{id}"),
            json!({"agent_id": "ca", "trigger": {"type": "cron", "expr": "* * * * * *"},
                   "execution": {"overlap": "queue", "catchup": policy, "misfire_grace_seconds": 0}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // Down for five seconds.
    rewind(pool, id, 5).await;
    trigger(pool).run_once().await.expect("pass");
    windows(pool, id).await
}

#[sqlx::test]
async fn catch_up_skip_latest_and_all_after_five_seconds_down(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;

    let skip = catchup_outcome(&pool, &app, "cu_skip", "skip").await;
    let missed: Vec<_> = skip.iter().filter(|r| r.2 == "catchup").collect();
    assert!(missed.len() >= 4, "{skip:?}");
    assert!(
        missed
            .iter()
            .all(|r| r.1 == "SKIPPED" && r.3.as_deref() == Some("missed"))
    );

    let latest = catchup_outcome(&pool, &app, "cu_latest", "latest").await;
    let missed: Vec<_> = latest.iter().filter(|r| r.2 == "catchup").collect();
    let ran: Vec<_> = missed.iter().filter(|r| r.1 == "PENDING").collect();
    assert_eq!(ran.len(), 1, "latest runs exactly one: {latest:?}");
    assert_eq!(
        ran[0].0,
        missed.last().map(|r| r.0.clone()).unwrap_or_default(),
        "the newest"
    );

    let all = catchup_outcome(&pool, &app, "cu_all", "all").await;
    let missed: Vec<_> = all.iter().filter(|r| r.2 == "catchup").collect();
    assert!(missed.len() >= 4);
    assert!(
        missed.iter().all(|r| r.1 == "PENDING"),
        "all runs each once: {all:?}"
    );
    let keys: std::collections::HashSet<&String> = all.iter().map(|r| &r.0).collect();
    assert_eq!(keys.len(), all.len());
}

#[sqlx::test]
async fn manual_trigger_with_one_key_creates_one_instance_and_delay_holds_it(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/m",
        json!({"agent_id": "ma", "trigger": {"type": "manual"}, "context": {"a": 1, "b": {"x": 1}}}),
    )
    .await;
    let (s1, first) = json(
        app.post(
            "/v1/tasks/m/trigger",
            json!({"window_key": "report-2026-11-29", "context": {"b": {"y": 2}}}),
        )
        .await,
    )
    .await;
    let (s2, second) = json(
        app.post(
            "/v1/tasks/m/trigger",
            json!({"window_key": "report-2026-11-29"}),
        )
        .await,
    )
    .await;
    assert_eq!((s1, s2), (201, 200), "{first} {second}");
    assert_eq!(first["id"], second["id"]);
    assert_eq!(first["source"], "manual");
    assert_eq!(windows(&pool, "m").await.len(), 1);
    let got = claim(&app, "ma", 5).await;
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0]["context"],
        json!({"a": 1, "b": {"y": 2}}),
        "top-level merge"
    );
    complete(&app, &got[0], json!(null)).await;

    let (status, delayed) = json(
        app.post("/v1/tasks/m/trigger", json!({"delay_seconds": 3}))
            .await,
    )
    .await;
    assert_eq!(status, 201);
    assert!(
        delayed["window_key"]
            .as_str()
            .unwrap_or("")
            .starts_with("manual:")
    );
    let created = std::time::Instant::now();
    assert!(
        claim(&app, "ma", 5).await.is_empty(),
        "not claimable before its time"
    );
    let got = eventually(Duration::from_secs(10), "the delayed run", || {
        let app = &app;
        async move {
            let got = claim(app, "ma", 5).await;
            (!got.is_empty()).then_some(got)
        }
    })
    .await;
    assert!(
        created.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        created.elapsed()
    );
    assert_eq!(got[0]["id"], delayed["id"]);

    let (status, problem) = json(
        app.post(
            "/v1/tasks/m/trigger",
            json!({"delay_seconds": 3, "run_at": "2026-11-29T08:30:00Z"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(problem["errors"][0]["field"], "run_at");
    let (status, _) = json(app.post("/v1/tasks/nope/trigger", json!({})).await).await;
    assert_eq!(status, 404);
}

#[sqlx::test]
async fn backfill_of_one_day_is_idempotent_even_when_run_twice_at_once(pool: PgPool) {
    let app = Arc::new(TestApp::spawn(pool.clone()).await);
    app.put(
        "/v1/tasks/hourly",
        json!({"agent_id": "ba", "trigger": {"type": "cron", "expr": "0 * * * *"}, "execution": {"overlap": "queue"}}),
    )
    .await;
    let range = json!({"from": key(midnight(-2)), "to": key(midnight(-1))});
    let mut dry = range.clone();
    dry["dry_run"] = json!(true);
    let (status, plan) = json(app.post("/v1/tasks/hourly/backfill", dry).await).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["created"], 24);
    assert_eq!(plan["windows"].as_array().map(Vec::len), Some(24));
    assert_eq!(
        plan["windows"][0],
        json!({"window_key": key(midnight(-2)), "outcome": "would_create"})
    );
    assert!(
        windows(&pool, "hourly").await.is_empty(),
        "a dry run writes nothing"
    );

    let (a, b) = tokio::join!(
        app.post("/v1/tasks/hourly/backfill", range.clone()),
        app.post("/v1/tasks/hourly/backfill", range.clone())
    );
    let (_, a) = json(a).await;
    let (_, b) = json(b).await;
    assert_eq!(
        a["created"].as_u64().unwrap_or(0) + b["created"].as_u64().unwrap_or(0),
        24,
        "{a} {b}"
    );
    let rows = windows(&pool, "hourly").await;
    assert_eq!(rows.len(), 24);
    assert!(rows.iter().all(|r| r.2 == "backfill" && r.1 == "PENDING"));

    let (_, again) = json(app.post("/v1/tasks/hourly/backfill", range).await).await;
    assert_eq!(again["created"], 0);
    assert_eq!(again["existing"], 24);

    app.put(
        "/v1/tasks/secondly",
        json!({"agent_id": "ba", "trigger": {"type": "interval", "every_seconds": 1}}),
    )
    .await;
    let (status, problem) = json(
        app.post(
            "/v1/tasks/secondly/backfill",
            json!({"from": key(midnight(-1)), "to": key(midnight(0))}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["errors"][0]["field"], "to");
}

#[sqlx::test]
async fn backfilled_windows_obey_overlap_skip(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/h",
        json!({"agent_id": "ba", "trigger": {"type": "cron", "expr": "0 * * * *"}}),
    )
    .await;
    let (_, report) = json(
        app.post(
            "/v1/tasks/h/backfill",
            json!({"from": key(midnight(-1)), "to": key(midnight(-1) + chrono::Duration::hours(3))}),
        )
        .await,
    )
    .await;
    assert_eq!(report["created"], 3);
    assert_eq!(report["skipped"], 2);
    let rows = windows(&pool, "h").await;
    assert_eq!(rows[0].1, "PENDING");
    assert_eq!(
        rows[1].3.as_deref(),
        Some(format!("overlap: window {} still unfinished", key(midnight(-1))).as_str())
    );
}

#[sqlx::test]
async fn a_dependency_fires_once_per_upstream_window(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let w1 = key(midnight(-2) + chrono::Duration::minutes(30));
    let w2 = key(midnight(-1) + chrono::Duration::minutes(30));
    app.put(
        "/v1/tasks/a",
        json!({"agent_id": "up", "trigger": {"type": "manual"}}),
    )
    .await;
    app.put(
        "/v1/tasks/b",
        json!({"agent_id": "down", "trigger": {"type": "after", "task": "a", "on": "success"}}),
    )
    .await;
    app.post("/v1/tasks/a/trigger", json!({"window_key": w1}))
        .await;
    let up = claim(&app, "up", 1).await.remove(0);
    assert_eq!(complete(&app, &up, json!({"rows": 42})).await, 200);

    let b_rows = windows(&pool, "b").await;
    assert_eq!(b_rows.len(), 1);
    assert_eq!(b_rows[0].0, w1);
    assert_eq!(b_rows[0].2, "dependency");
    let down = claim(&app, "down", 1).await.remove(0);
    assert_eq!(down["upstream_instance_id"], up["id"]);
    assert_eq!(
        down["upstream_result_digest"],
        kairos::domain::instance::result_digest(Some(&json!({"rows": 42})))
    );

    // Re-run the upstream window: it succeeds again, B is not triggered twice.
    let id = up["id"].as_str().unwrap_or("");
    let (status, _) = json(
        app.post(&format!("/v1/instances/{id}/retry"), json!({}))
            .await,
    )
    .await;
    assert_eq!(
        status, 409,
        "SUCCESS is terminal; a re-run is a new trigger with the same key"
    );
    let (status, _) = json(
        app.post("/v1/tasks/a/trigger", json!({"window_key": w1}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "same window: the existing instance");
    app.post("/v1/tasks/a/trigger", json!({"window_key": w2}))
        .await;
    let second = claim(&app, "up", 1).await.remove(0);
    let failed = fail(&app, &second).await;
    assert_eq!(failed["status"], "FAILED");
    let second_id = second["id"].as_str().unwrap_or("");
    app.post(&format!("/v1/instances/{second_id}/cancel"), json!({}))
        .await;
    app.post(&format!("/v1/instances/{second_id}/retry"), json!({}))
        .await;
    let again = claim(&app, "up", 1).await.remove(0);
    assert_eq!(complete(&app, &again, json!(1)).await, 200);
    let b_rows = windows(&pool, "b").await;
    assert_eq!(b_rows.len(), 2, "one B window per A window: {b_rows:?}");

    // Deleting the upstream reports the dependent instead of orphaning it silently.
    assert_eq!(
        app.request(reqwest::Method::DELETE, "/v1/tasks/a", None)
            .await
            .status()
            .as_u16(),
        204
    );
    let (_, b) = json(app.get("/v1/tasks/b").await).await;
    assert_eq!(b["paused"], true);
    assert_eq!(b["paused_reason"], "upstream task a was deleted");
}

#[sqlx::test]
async fn a_dependency_window_is_not_duplicated_when_the_upstream_window_succeeds_twice(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/a",
        json!({"agent_id": "up", "trigger": {"type": "manual"}, "execution": {"max_retries": 0}}),
    )
    .await;
    app.put(
        "/v1/tasks/b",
        json!({"agent_id": "down", "trigger": {"type": "after", "task": "a", "on": "success"}}),
    )
    .await;
    app.post("/v1/tasks/a/trigger", json!({"window_key": "w1"}))
        .await;
    let up = claim(&app, "up", 1).await.remove(0);
    assert_eq!(complete(&app, &up, json!(1)).await, 200);
    // An operator forces the same upstream window to run again (e.g. after a data fix).
    sqlx::query(
        "update task_instance set status = 'DEAD', finished_at = now() where task_id = 'a'",
    )
    .execute(&pool)
    .await
    .expect("force");
    let id = up["id"].as_str().unwrap_or("");
    let (status, _) = json(
        app.post(&format!("/v1/instances/{id}/retry"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    let again = claim(&app, "up", 1).await.remove(0);
    assert_eq!(complete(&app, &again, json!(2)).await, 200);
    assert_eq!(
        windows(&pool, "b").await.len(),
        1,
        "the unique window key holds"
    );
}

#[sqlx::test]
async fn five_consecutive_failures_open_the_circuit_and_cooldown_resumes(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/flaky",
        json!({"agent_id": "fa", "trigger": {"type": "manual"},
               "execution": {"max_retries": 0, "concurrency_limit": 10},
               "circuit_breaker": {"failure_threshold": 5, "cooldown_seconds": 2}}),
    )
    .await;
    for k in 0..6 {
        app.post(
            "/v1/tasks/flaky/trigger",
            json!({"window_key": format!("k{k}")}),
        )
        .await;
    }
    for _ in 0..5 {
        let i = claim(&app, "fa", 1).await.remove(0);
        fail(&app, &i).await;
    }
    let (_, task) = json(app.get("/v1/tasks/flaky").await).await;
    assert_eq!(task["paused"], true, "{task}");
    assert_eq!(
        task["paused_reason"],
        "circuit open: 5 consecutive failed attempts"
    );
    assert!(
        claim(&app, "fa", 1).await.is_empty(),
        "pending work is held while open"
    );

    // The cooldown resumes it (the retry scanner's pass does).
    let scanner = RetryScanner::new(
        pool.clone(),
        RetryScannerConfig::new("s"),
        Heartbeats::default(),
    );
    eventually(Duration::from_secs(10), "the cooldown", || {
        let scanner = &scanner;
        async move { (scanner.run_once().await.expect("scan").num_resumed == 1).then_some(()) }
    })
    .await;
    let (_, task) = json(app.get("/v1/tasks/flaky").await).await;
    assert_eq!(task["paused"], false);
    // Half-open: a success closes the circuit.
    let i = claim(&app, "fa", 1).await.remove(0);
    assert_eq!(complete(&app, &i, json!(null)).await, 200);
    let (_, task) = json(app.get("/v1/tasks/flaky").await).await;
    assert_eq!(task["consecutive_failures"], 0);
}

#[sqlx::test]
async fn a_manual_resume_after_the_breaker_starts_counting_afresh(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/flaky",
        json!({"agent_id": "fa", "trigger": {"type": "manual"},
               "execution": {"max_retries": 0, "concurrency_limit": 10},
               "circuit_breaker": {"failure_threshold": 2}}),
    )
    .await;
    for k in 0..3 {
        app.post(
            "/v1/tasks/flaky/trigger",
            json!({"window_key": format!("k{k}")}),
        )
        .await;
    }
    for _ in 0..2 {
        let i = claim(&app, "fa", 1).await.remove(0);
        fail(&app, &i).await;
    }
    let (_, task) = json(app.get("/v1/tasks/flaky").await).await;
    assert_eq!(task["paused"], true);
    let (status, task) = json(
        app.request(reqwest::Method::POST, "/v1/tasks/flaky/resume", None)
            .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(task["consecutive_failures"], 0);
    assert_eq!(claim(&app, "fa", 1).await.len(), 1);
}

#[sqlx::test]
async fn a_resume_by_definition_after_the_breaker_starts_counting_afresh_as_resume_does(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    let definition = |paused: bool| {
        json!({"agent_id": "fa", "trigger": {"type": "manual"},
               "execution": {"max_retries": 0, "concurrency_limit": 10},
               "circuit_breaker": {"failure_threshold": 2}, "paused": paused})
    };
    app.put("/v1/tasks/flaky", definition(false)).await;
    for k in 0..4 {
        app.post(
            "/v1/tasks/flaky/trigger",
            json!({"window_key": format!("k{k}")}),
        )
        .await;
    }
    for _ in 0..2 {
        let i = claim(&app, "fa", 1).await.remove(0);
        fail(&app, &i).await;
    }
    let (_, task) = json(app.get("/v1/tasks/flaky").await).await;
    assert_eq!(task["paused"], true, "{task}");
    assert_eq!(task["consecutive_failures"], 2, "{task}");
    let (status, task) = json(app.put("/v1/tasks/flaky", definition(false)).await).await;
    assert_eq!(status, 200, "{task}");
    assert_eq!(task["paused"], false, "{task}");
    assert_eq!(task["paused_reason"], Value::Null, "{task}");
    assert_eq!(task["consecutive_failures"], 0, "{task}");
    // One more failure does not open the circuit again at once: the count starts afresh.
    let i = claim(&app, "fa", 1).await.remove(0);
    fail(&app, &i).await;
    let (_, task) = json(app.get("/v1/tasks/flaky").await).await;
    assert_eq!(task["paused"], false, "{task}");
    assert_eq!(task["consecutive_failures"], 1, "{task}");

    // A one-shot whose instant passed while it was paused does not fire, as on `POST /resume`.
    let at = chrono::Utc::now() - chrono::Duration::seconds(5);
    let once = |paused: bool| json!({"agent_id": "fa", "trigger": {"type": "once", "at": key(at)}, "paused": paused});
    let (status, task) = json(app.put("/v1/tasks/once", once(true)).await).await;
    assert_eq!(status, 201, "{task}");
    let (status, task) = json(app.put("/v1/tasks/once", once(false)).await).await;
    assert_eq!(status, 200, "{task}");
    assert_eq!(task["paused"], false, "{task}");
    assert_eq!(task["next_fire_at"], Value::Null, "{task}");
}

#[sqlx::test]
async fn backfills_and_manual_windows_older_than_retention_are_refused(pool: PgPool) {
    let mut opts = kairos::app::Options::api_only("n1");
    opts.retention_days = 2;
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    app.put(
        "/v1/tasks/h",
        json!({"agent_id": "ra", "trigger": {"type": "cron", "expr": "0 * * * *"}, "execution": {"overlap": "queue"}}),
    )
    .await;
    let old = midnight(-3);
    let refused = [
        (
            "/v1/tasks/h/backfill",
            json!({"from": key(old), "to": key(midnight(-1))}),
            "from",
        ),
        (
            "/v1/tasks/h/backfill",
            json!({"from": key(old), "to": key(old + chrono::Duration::hours(2)), "dry_run": true}),
            "from",
        ),
        (
            "/v1/tasks/h/trigger",
            json!({"window_key": key(old)}),
            "window_key",
        ),
        ("/v1/tasks/h/trigger", json!({"run_at": key(old)}), "run_at"),
    ];
    for (path, body, field) in refused {
        let (status, problem) = json(app.post(path, body.clone()).await).await;
        assert_eq!(status, 422, "{body}: {problem}");
        assert_eq!(problem["errors"][0]["field"], field, "{problem}");
        assert!(
            problem["errors"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("retention_days (2 days")),
            "{problem}"
        );
    }
    assert!(windows(&pool, "h").await.is_empty(), "nothing written");

    // Inside retention both work; a caller's key that is not an instant is not a window time.
    let (status, report) = json(
        app.post(
            "/v1/tasks/h/backfill",
            json!({"from": key(midnight(-1)), "to": key(midnight(-1) + chrono::Duration::hours(2))}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["created"], 2);
    for body in [
        json!({"window_key": key(midnight(-1) + chrono::Duration::minutes(30))}),
        json!({"window_key": "report-of-last-year"}),
    ] {
        let (status, inst) = json(app.post("/v1/tasks/h/trigger", body).await).await;
        assert_eq!(status, 201, "{inst}");
    }
    assert_eq!(windows(&pool, "h").await.len(), 4);
}

#[sqlx::test]
async fn a_manual_run_keyed_further_ahead_than_retention_is_refused(pool: PgPool) {
    // Its row could be pruned before the instant comes, and the schedule would then run that
    // window a second time.
    let mut opts = kairos::app::Options::api_only("n1");
    opts.retention_days = 2;
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    app.put(
        "/v1/tasks/h",
        json!({"agent_id": "ra", "trigger": {"type": "cron", "expr": "0 * * * *"}, "execution": {"overlap": "queue"}}),
    )
    .await;
    let refused = [
        json!({"window_key": key(midnight(3))}),
        // Run yesterday: the key must be within retention of the run's own time.
        json!({"window_key": key(midnight(1) + chrono::Duration::hours(12)), "run_at": key(midnight(-1))}),
    ];
    for body in refused {
        let (status, problem) = json(app.post("/v1/tasks/h/trigger", body.clone()).await).await;
        assert_eq!(status, 422, "{body}: {problem}");
        assert_eq!(problem["errors"][0]["field"], "window_key", "{problem}");
        assert!(
            problem["errors"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("retention_days (2 days")),
            "{problem}"
        );
    }
    assert!(windows(&pool, "h").await.is_empty(), "nothing written");

    // Within retention of the run it is accepted, run now or later.
    for body in [
        json!({"window_key": key(midnight(1))}),
        json!({"window_key": key(midnight(2) + chrono::Duration::hours(12)), "delay_seconds": 86400}),
    ] {
        let (status, inst) = json(app.post("/v1/tasks/h/trigger", body.clone()).await).await;
        assert_eq!(status, 201, "{body}: {inst}");
    }
}

#[sqlx::test]
async fn a_backfill_may_choose_its_own_overlap_policy(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    // The task's policy is the default `skip` with a limit of 1.
    app.put(
        "/v1/tasks/h",
        json!({"agent_id": "oa", "trigger": {"type": "cron", "expr": "0 * * * *"}}),
    )
    .await;
    let from = midnight(-1);
    let range = |hours: i64, extra: Value| {
        let mut body = json!({"from": key(from + chrono::Duration::hours(hours - 3)), "to": key(from + chrono::Duration::hours(hours))});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        body
    };
    for (field, extra) in [
        ("overlap", json!({"overlap": "sometimes"})),
        ("overlap", json!({"overlap": 1})),
        ("reprocess", json!({"reprocess": "all"})),
    ] {
        let (status, problem) = json(app.post("/v1/tasks/h/backfill", range(3, extra)).await).await;
        assert_eq!(status, 422, "{problem}");
        assert_eq!(problem["errors"][0]["field"], field);
    }

    let (status, report) = json(
        app.post(
            "/v1/tasks/h/backfill",
            range(3, json!({"overlap": "queue"})),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["created"], 3);
    assert_eq!(
        report["skipped"], 0,
        "queue for this backfill: every window runs"
    );
    assert_eq!(report["reprocessed"], 0);
    // Without the override the task's own `skip` applies: the next range is all blocked.
    let (_, report) = json(app.post("/v1/tasks/h/backfill", range(6, json!({}))).await).await;
    assert_eq!(report["created"], 3);
    assert_eq!(report["skipped"], 3, "{report}");
    let rows = windows(&pool, "h").await;
    let statuses: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        statuses,
        [
            "PENDING", "PENDING", "PENDING", "SKIPPED", "SKIPPED", "SKIPPED"
        ]
    );
    let (_, task) = json(app.get("/v1/tasks/h").await).await;
    assert_eq!(
        task["execution"]["overlap"], "skip",
        "the task is unchanged"
    );
}

#[sqlx::test]
async fn a_backfill_with_reprocess_failed_retries_only_windows_that_did_not_succeed(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/h",
        json!({"agent_id": "rp", "trigger": {"type": "cron", "expr": "0 * * * *"},
               "execution": {"overlap": "queue", "concurrency_limit": 5, "max_retries": 1}}),
    )
    .await;
    let from = midnight(-1);
    let range = json!({"from": key(from), "to": key(from + chrono::Duration::hours(5))});
    let (_, report) = json(app.post("/v1/tasks/h/backfill", range.clone()).await).await;
    assert_eq!(report["created"], 5);
    // Oldest first: hour 0 succeeds, 1 is DEAD, 2 FAILED, 3 CANCELLED, 4 stays RUNNING.
    let got = claim(&app, "rp", 5).await;
    assert_eq!(got.len(), 5);
    let id = |i: usize| got[i]["id"].as_str().unwrap_or("").to_owned();
    assert_eq!(complete(&app, &got[0], json!({"ok": true})).await, 200);
    for (i, retryable) in [(1, false), (2, true)] {
        let (status, body) = json(
            app.post(
                &format!("/v1/instances/{}/fail", id(i)),
                json!({"lease_token": got[i]["lease_token"], "error": "boom", "retryable": retryable}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = json(
        app.post(&format!("/v1/instances/{}/cancel", id(3)), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    let before: Vec<String> = windows(&pool, "h").await.into_iter().map(|r| r.1).collect();
    assert_eq!(
        before,
        ["SUCCESS", "DEAD", "FAILED", "CANCELLED", "RUNNING"]
    );

    let mut dry = range.clone();
    dry["reprocess"] = json!("failed");
    dry["dry_run"] = json!(true);
    let (status, plan) = json(app.post("/v1/tasks/h/backfill", dry).await).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["reprocessed"], 3);
    let outcomes: Vec<&str> = plan["windows"]
        .as_array()
        .map(|w| w.iter().filter_map(|w| w["outcome"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        outcomes,
        [
            "exists",
            "would_reprocess",
            "would_reprocess",
            "would_reprocess",
            "exists"
        ]
    );
    let unchanged: Vec<String> = windows(&pool, "h").await.into_iter().map(|r| r.1).collect();
    assert_eq!(unchanged, before, "a dry run writes nothing");

    let mut body = range.clone();
    body["reprocess"] = json!("failed");
    let (status, report) = json(app.post("/v1/tasks/h/backfill", body.clone()).await).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["created"], 0);
    assert_eq!(report["existing"], 5);
    assert_eq!(report["reprocessed"], 3);
    let after: Vec<String> = windows(&pool, "h").await.into_iter().map(|r| r.1).collect();
    assert_eq!(
        after,
        ["SUCCESS", "PENDING", "PENDING", "PENDING", "RUNNING"]
    );

    // Each retry is an operator retry: one more attempt, an event by the backfill.
    for (i, from_status) in [(1, "DEAD"), (2, "FAILED"), (3, "CANCELLED")] {
        let (_, detail) = json(app.get(&format!("/v1/instances/{}", id(i))).await).await;
        assert_eq!(detail["max_attempts"], 3, "{detail}");
        let last = detail["events"]
            .as_array()
            .and_then(|e| e.last())
            .cloned()
            .unwrap_or_default();
        assert_eq!(last["from"], from_status, "{detail}");
        assert_eq!(last["to"], "PENDING");
        assert_eq!(last["actor"], "backfill");
    }
    let again = claim(&app, "rp", 5).await;
    assert_eq!(
        again.len(),
        3,
        "the reprocessed windows are claimable at once"
    );

    // Running it again reprocesses nothing: nothing is DEAD, FAILED or CANCELLED now.
    let (_, report) = json(app.post("/v1/tasks/h/backfill", body).await).await;
    assert_eq!(report["reprocessed"], 0);
}

#[sqlx::test]
async fn an_unreadable_retry_backoff_keeps_a_failed_attempt_failed_with_the_default_delay(
    pool: PgPool,
) {
    use kairos::services::timeout_reaper::{TimeoutReaper, TimeoutReaperConfig};
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/ub",
        json!({"agent_id": "ub", "trigger": {"type": "manual"}, "execution": {"concurrency_limit": 2}}),
    )
    .await;
    for k in ["a", "b"] {
        app.post("/v1/tasks/ub/trigger", json!({"window_key": k}))
            .await;
    }
    let got = claim(&app, "ub", 2).await;
    assert_eq!(got.len(), 2);
    // The stored definition's backoff becomes unreadable (another version, a hand edit).
    sqlx::query(
        "update tasks set spec = jsonb_set(spec, '{execution,retry_backoff}', '\"soon\"') \
         where id = 'ub'",
    )
    .execute(&pool)
    .await
    .expect("spoil the backoff");

    // An agent's fail: FAILED, retried after the default backoff (10 s ± 20%), not DEAD.
    let failed = fail(&app, &got[0]).await;
    assert_eq!(failed["status"], "FAILED", "{failed}");
    let delay: f64 = sqlx::query_scalar(
        "select extract(epoch from available_at - updated_at)::float8 from task_instance \
         where id = $1::text::uuid",
    )
    .bind(got[0]["id"].as_str().unwrap_or(""))
    .fetch_one(&pool)
    .await
    .expect("delay");
    assert!((7.9..=12.1).contains(&delay), "{delay}");

    // The reaper's path decides the same way.
    sqlx::query("update task_instance set lease_expires_at = now() - interval '1 second' where id = $1::text::uuid")
        .bind(got[1]["id"].as_str().unwrap_or(""))
        .execute(&pool)
        .await
        .expect("expire the lease");
    let reaper = TimeoutReaper::new(
        pool.clone(),
        TimeoutReaperConfig::new("n1"),
        Heartbeats::default(),
    );
    let report = reaper.run_once().await.expect("reap");
    assert_eq!(report.num_reaped, 1);
    assert_eq!(report.num_dead, 0);
    let statuses: Vec<String> = windows(&pool, "ub")
        .await
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(statuses, ["FAILED", "FAILED"]);
}
