//! The task registry over real HTTP and a real PostgreSQL.

mod common;

use common::{TestApp, cron_task, json};
use reqwest::Method;
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test]
async fn put_creates_then_an_identical_put_is_a_no_op(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let body = json!({
        "agent_id": "report_agent",
        "trigger": {"type": "cron", "expr": "0 30 8 * * *", "timezone": "Asia/Shanghai"},
        "context": {"params": {"region": "cn-north"}},
    });
    let (status, created) = json(app.put("/v1/tasks/daily_report_001", body.clone()).await).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["id"], "daily_report_001");
    assert_eq!(created["version"], 1);
    assert_eq!(created["execution"]["max_retries"], 3);
    assert_eq!(created["execution"]["overlap"], "skip");
    assert_eq!(created["circuit_breaker"]["failure_threshold"], 5);
    assert_eq!(created["paused"], false);
    let next = created["next_fire_at"].as_str().expect("next_fire_at");
    assert!(
        next.ends_with(":30:00Z") && next.contains("T00:30:00Z"),
        "{next}"
    );

    let resp = app.put("/v1/tasks/daily_report_001", body.clone()).await;
    assert_eq!(resp.headers()["etag"], "\"1\"");
    let (status, again) = json(resp).await;
    assert_eq!(status, 200);
    assert_eq!(again["version"], 1);
    assert_eq!(again["updated_at"], created["updated_at"]);

    let mut changed = body;
    changed["context"] = json!({"params": {"region": "eu-west"}});
    let (status, replaced) = json(app.put("/v1/tasks/daily_report_001", changed).await).await;
    assert_eq!(status, 200);
    assert_eq!(replaced["version"], 2);
    assert_eq!(replaced["context"]["params"]["region"], "eu-west");
    // The trigger did not change, so neither did the next window.
    assert_eq!(replaced["next_fire_at"], created["next_fire_at"]);
}

#[sqlx::test]
async fn if_match_guards_replacement(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.put("/v1/tasks/t1", cron_task("a", "*/5 * * * *")).await;
    let resp = app
        .client
        .put(app.url("/v1/tasks/t1"))
        .header("If-Match", "\"7\"")
        .json(&cron_task("a", "*/10 * * * *"))
        .send()
        .await
        .expect("sent");
    let (status, problem) = json(resp).await;
    assert_eq!(status, 412, "{problem}");
    assert_eq!(problem["status"], 412);

    let resp = app
        .client
        .put(app.url("/v1/tasks/t1"))
        .header("If-Match", "1")
        .json(&cron_task("a", "*/10 * * * *"))
        .send()
        .await
        .expect("sent");
    let (status, task) = json(resp).await;
    assert_eq!(status, 200, "{task}");
    assert_eq!(task["version"], 2);
    assert_eq!(task["trigger"]["expr"], "*/10 * * * *");

    let resp = app
        .client
        .put(app.url("/v1/tasks/nope"))
        .header("If-Match", "*")
        .json(&cron_task("a", "*/10 * * * *"))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 412);
}

#[sqlx::test]
async fn list_pages_with_a_cursor_and_filters(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    for i in 0..7 {
        let agent = if i % 2 == 0 { "even" } else { "odd" };
        let (status, _) = json(
            app.put(&format!("/v1/tasks/t{i}"), cron_task(agent, "0 * * * *"))
                .await,
        )
        .await;
        assert_eq!(status, 201);
    }
    let mut seen = Vec::new();
    let mut path = "/v1/tasks?limit=3".to_owned();
    loop {
        let (status, page) = json(app.get(&path).await).await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().expect("items");
        assert!(items.len() <= 3);
        seen.extend(
            items
                .iter()
                .map(|t| t["id"].as_str().unwrap_or("").to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/tasks?limit=3&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen, vec!["t0", "t1", "t2", "t3", "t4", "t5", "t6"]);

    let (_, odd) = json(app.get("/v1/tasks?agent_id=odd").await).await;
    assert_eq!(odd["items"].as_array().map(Vec::len), Some(3));
    app.post("/v1/tasks/t1/pause", json!({})).await;
    let (_, paused) = json(app.get("/v1/tasks?paused=true").await).await;
    assert_eq!(paused["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(paused["items"][0]["id"], "t1");
}

#[sqlx::test]
async fn pause_and_resume_move_next_fire_at(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put("/v1/tasks/t1", cron_task("a", "* * * * * *")).await;
    let (status, paused) = json(
        app.post("/v1/tasks/t1/pause", json!({"reason": "maintenance"}))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["paused_reason"], "maintenance");

    // Let the old next_fire_at fall into the past while paused.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let before = kairos::store::now(&pool).await.expect("now");
    let (status, resumed) =
        json(app.request(Method::POST, "/v1/tasks/t1/resume", None).await).await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["paused"], false);
    assert_eq!(resumed["paused_reason"], serde_json::Value::Null);
    let next: chrono::DateTime<chrono::Utc> = resumed["next_fire_at"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("next_fire_at");
    // Recomputed from the moment of resume: the first whole second after it, not the old,
    // missed window.
    assert!(
        next > before,
        "resume recomputes from now: {next} vs {before}"
    );
}

#[sqlx::test]
async fn delete_removes_the_task_and_cancels_pending_work(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    // Hourly, so exactly one window is due below however slow the pass is (with a per-second
    // cron, a pass that crossed a second boundary also wrote the next window, skipped).
    app.put(
        "/v1/tasks/t1",
        json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 3600}}),
    )
    .await;
    // Make one window due now and materialise it.
    sqlx::query("update task_cursor set next_fire_at = date_trunc('second', now())")
        .execute(&pool)
        .await
        .expect("update");
    let trigger = kairos::services::trigger_loop::TriggerLoop::new(
        pool.clone(),
        kairos::services::trigger_loop::TriggerLoopConfig::new("n1"),
        Default::default(),
    );
    let report = trigger.run_once().await.expect("pass");
    assert_eq!(report.num_created, 1);

    let resp = app.request(Method::DELETE, "/v1/tasks/t1", None).await;
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(app.get("/v1/tasks/t1").await.status().as_u16(), 404);
    assert_eq!(
        app.request(Method::DELETE, "/v1/tasks/t1", None)
            .await
            .status()
            .as_u16(),
        404
    );
    let rows = common::windows(&pool, "t1").await;
    assert_eq!(rows.len(), 1, "history is kept");
    assert_eq!(rows[0].1, "CANCELLED");
    let (_, list) = json(app.get("/v1/instances?task_id=t1").await).await;
    let id = list["items"][0]["id"].as_str().expect("id").to_owned();
    let (_, detail) = json(app.get(&format!("/v1/instances/{id}")).await).await;
    let events = detail["events"].as_array().expect("events");
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["from"], "PENDING");
    assert_eq!(events[1]["to"], "CANCELLED");
    assert_eq!(events[1]["reason"], "task deleted");
}

#[sqlx::test]
async fn dependency_triggers_need_an_existing_upstream_and_no_cycle(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let after = |task: &str| json!({"agent_id": "a", "trigger": {"type": "after", "task": task, "on": "success"}});
    let (status, problem) = json(app.put("/v1/tasks/b", after("a")).await).await;
    assert_eq!(status, 422);
    assert_eq!(problem["errors"][0]["field"], "trigger.task");

    app.put("/v1/tasks/a", cron_task("x", "0 * * * *")).await;
    assert_eq!(
        app.put("/v1/tasks/b", after("a")).await.status().as_u16(),
        201
    );
    assert_eq!(
        app.put("/v1/tasks/c", after("b")).await.status().as_u16(),
        201
    );
    let (status, problem) = json(app.put("/v1/tasks/a", after("c")).await).await;
    assert_eq!(status, 422, "{problem}");
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("cycle")
    );
    let (status, task) = json(app.get("/v1/tasks/b").await).await;
    assert_eq!(status, 200);
    assert_eq!(task["next_fire_at"], serde_json::Value::Null);
}

#[sqlx::test]
async fn task_preview_lists_upcoming_windows(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.put(
        "/v1/tasks/t1",
        json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "0 30 8 * * *", "timezone": "Asia/Shanghai"}}),
    )
    .await;
    let (status, body) = json(
        app.get("/v1/tasks/t1/preview?count=3&from=2026-11-29T00:00:00Z")
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["windows"],
        json!([
            {"scheduled_at": "2026-11-29T00:30:00Z", "window_key": "2026-11-29T00:30:00Z",
             "available_at": "2026-11-29T00:30:00Z"},
            {"scheduled_at": "2026-11-30T00:30:00Z", "window_key": "2026-11-30T00:30:00Z",
             "available_at": "2026-11-30T00:30:00Z"},
            {"scheduled_at": "2026-12-01T00:30:00Z", "window_key": "2026-12-01T00:30:00Z",
             "available_at": "2026-12-01T00:30:00Z"},
        ])
    );
    app.put(
        "/v1/tasks/iv",
        json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 900, "start_at": "2026-11-29T00:05:00Z"}}),
    )
    .await;
    let (_, body) = json(
        app.get("/v1/tasks/iv/preview?count=2&from=2026-11-29T01:00:00Z")
            .await,
    )
    .await;
    assert_eq!(body["windows"][0]["window_key"], "2026-11-29T01:05:00Z");
    assert_eq!(body["windows"][1]["window_key"], "2026-11-29T01:20:00Z");
}

#[sqlx::test]
async fn windows_end_at_the_last_instant_a_timestamp_can_write(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let (status, task) = json(
        app.put(
            "/v1/tasks/far",
            json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 86400,
                   "start_at": "9999-12-30T12:00:00Z", "jitter_seconds": 3600}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{task}");
    assert_eq!(task["next_fire_at"], "9999-12-30T12:00:00Z");
    let (status, body) = json(app.get("/v1/tasks/far/preview?count=5").await).await;
    assert_eq!(status, 200, "{body}");
    let windows = body["windows"].as_array().expect("windows");
    let keys: Vec<&str> = windows
        .iter()
        .filter_map(|w| w["window_key"].as_str())
        .collect();
    assert_eq!(keys, ["9999-12-30T12:00:00Z", "9999-12-31T12:00:00Z"]);
    for w in windows {
        let available = w["available_at"].as_str().expect("available_at");
        assert!(available.starts_with("9999-12-3"), "{w}");
    }
}

#[sqlx::test]
async fn cron_preview_follows_new_york_dst_rules(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let fire = |expr: &str, from: &str| {
        let url = format!(
            "/v1/cron/preview?expr={}&timezone=America/New_York&count=3&from={from}",
            expr.replace(' ', "%20")
        );
        let app = &app;
        async move {
            let (status, body) = json(app.get(&url).await).await;
            assert_eq!(status, 200, "{body}");
            body["fire_times"].clone()
        }
    };
    // Spring forward: 02:30 does not exist on 2026-03-08; a fixed-time job fires once at 03:00 EDT.
    assert_eq!(
        fire("30 2 * * *", "2026-03-07T12:00:00Z").await,
        json!([
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:30:00Z",
            "2026-03-10T06:30:00Z"
        ])
    );
    // Fall back: 01:30 happens twice on 2026-11-01; a fixed-time job fires on the first only.
    assert_eq!(
        fire("30 1 * * *", "2026-10-31T12:00:00Z").await,
        json!([
            "2026-11-01T05:30:00Z",
            "2026-11-02T06:30:00Z",
            "2026-11-03T06:30:00Z"
        ])
    );
    let (status, problem) = json(
        app.get("/v1/cron/preview?expr=0%200%200%20*%20*%20*%202027")
            .await,
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(problem["errors"][0]["field"], "expr");
}

#[sqlx::test]
async fn expressions_that_never_fire_and_reboot_are_refused_and_midnight_is_daily(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    for expr in ["0 0 30 2 *", "0 0 0 31 4 *", "@reboot"] {
        let (status, problem) = json(app.put("/v1/tasks/never", cron_task("a", expr)).await).await;
        assert_eq!(status, 422, "{expr}: {problem}");
        assert_eq!(problem["errors"][0]["field"], "trigger.expr", "{problem}");
        let message = problem["errors"][0]["message"].as_str().unwrap_or("");
        let why = if expr == "@reboot" {
            "no boot event"
        } else {
            "no fire time within 5 years"
        };
        assert!(message.contains(why), "{expr}: {message}");

        let url = format!("/v1/cron/preview?expr={}", expr.replace(' ', "%20"));
        let (status, problem) = json(app.get(&url).await).await;
        assert_eq!(status, 422, "{expr}: {problem}");
        assert_eq!(problem["errors"][0]["field"], "expr", "{problem}");
    }
    let (count,): (i64,) = sqlx::query_as("select count(*) from tasks")
        .fetch_one(&pool)
        .await
        .expect("count tasks");
    assert_eq!(count, 0, "nothing half-written");

    // Replacing a working task's trigger with one that never fires is refused too, and the
    // stored task keeps its schedule.
    let (status, _) = json(app.put("/v1/tasks/t", cron_task("a", "@midnight")).await).await;
    assert_eq!(status, 201);
    let (status, _) = json(app.put("/v1/tasks/t", cron_task("a", "0 0 30 2 *")).await).await;
    assert_eq!(status, 422);
    let (_, task) = json(app.get("/v1/tasks/t").await).await;
    assert_eq!(task["trigger"]["expr"], "@midnight");
    assert!(
        task["next_fire_at"]
            .as_str()
            .is_some_and(|t| t.ends_with("T00:00:00Z")),
        "{task}"
    );
    let (status, body) = json(
        app.get("/v1/cron/preview?expr=@midnight&count=2&from=2026-11-29T08:00:00Z")
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["fire_times"],
        json!(["2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"])
    );
}

#[sqlx::test]
async fn integral_numbers_count_as_integers_as_json_schema_counts_them(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let mut body = cron_task("a", "0 8 * * *");
    body["execution"] = json!({"timeout_seconds": 120.0, "max_retries": 2e0});
    let (status, task) = common::json(app.put("/v1/tasks/floaty", body.clone()).await).await;
    assert_eq!(status, 201, "{task}");
    assert_eq!(task["execution"]["timeout_seconds"], 120);
    assert_eq!(task["execution"]["max_retries"], 2);
    body["execution"] = json!({"timeout_seconds": 120.5});
    let (status, problem) = common::json(app.put("/v1/tasks/floaty", body).await).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["errors"][0]["field"], "execution.timeout_seconds");
}

#[sqlx::test]
async fn a_window_key_that_is_an_instant_names_one_window_however_it_is_spelled(pool: PgPool) {
    // Keys years ahead: a window key is accepted within retention_days of the run.
    let mut opts = kairos::app::Options::api_only("n1");
    opts.retention_days = 3650;
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    app.put(
        "/v1/tasks/rerun",
        json!({"agent_id": "a", "trigger": {"type": "manual"}}),
    )
    .await;
    // A manual run of `rerun` under this window key.
    let rerun = async |key: &str| {
        json(
            app.post("/v1/tasks/rerun/trigger", json!({"window_key": key}))
                .await,
        )
        .await
    };
    let (status, first) = rerun("2030-12-01T08:00:00+08:00").await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["window_key"], "2030-12-01T00:00:00Z");
    assert_eq!(first["idempotency_key"], "rerun:2030-12-01T00:00:00Z");
    for spelling in [
        "2030-12-01T00:00:00Z",
        "2030-12-01T00:00:00+00:00",
        "2030-12-01T00:00:00.000Z",
        "2030-12-01t00:00:00z",
    ] {
        let (status, again) = rerun(spelling).await;
        assert_eq!(status, 200, "{spelling}: {again}");
        assert_eq!(again["id"], first["id"], "{spelling}");
    }
    // A fraction of a second is another instant, kept in the key; other keys stay as given.
    let (status, frac) = rerun("2030-12-01T08:00:00.5+08:00").await;
    assert_eq!(status, 201, "{frac}");
    assert_eq!(frac["window_key"], "2030-12-01T00:00:00.500Z");
    let (status, free) = rerun("Batch 7").await;
    assert_eq!(status, 201, "{free}");
    assert_eq!(free["window_key"], "Batch 7");
    // Keys are measured in characters (as JSON Schema's maxLength and PostgreSQL's length()).
    let wide = "批".repeat(256);
    let (status, body) = rerun(&wide).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = rerun(&"批".repeat(257)).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(common::windows(&pool, "rerun").await.len(), 4);
    // The list filter takes any spelling too.
    let (_, page) = json(
        app.get("/v1/instances?task_id=rerun&window_key=2030-12-01T08:00:00%2B08:00")
            .await,
    )
    .await;
    assert_eq!(page["items"][0]["id"], first["id"], "{page}");
    // A window stored under another spelling before keys were canonical still answers to it.
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
             agent_id, max_attempts, available_at) \
         values (gen_random_uuid(), 'rerun', '2030-12-02T08:00:00+08:00', now(), 'PENDING', \
             'manual', 'a', 1, now())",
    )
    .execute(&pool)
    .await
    .expect("legacy row");
    let (status, legacy) = rerun("2030-12-02T08:00:00+08:00").await;
    assert_eq!(status, 200, "{legacy}");
    assert_eq!(legacy["window_key"], "2030-12-02T08:00:00+08:00");
}

#[sqlx::test]
async fn an_instance_of_a_deleted_task_is_not_retried_into_work_nothing_can_claim(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/gone",
        json!({"agent_id": "a", "trigger": {"type": "manual"}}),
    )
    .await;
    let (_, inst) = json(app.post("/v1/tasks/gone/trigger", json!({})).await).await;
    let id = inst["id"].as_str().expect("id").to_owned();
    let resp = app.request(Method::DELETE, "/v1/tasks/gone", None).await;
    assert_eq!(resp.status().as_u16(), 204);
    let (status, refused) = json(
        app.post(&format!("/v1/instances/{id}/retry"), json!({"reason": "x"}))
            .await,
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap_or("").contains("deleted"),
        "{refused}"
    );
    let (_, after) = json(app.get(&format!("/v1/instances/{id}")).await).await;
    assert_eq!(after["status"], "CANCELLED", "nothing was written");
    // Registered again, the task's history can be retried.
    app.put(
        "/v1/tasks/gone",
        json!({"agent_id": "a", "trigger": {"type": "manual"}}),
    )
    .await;
    let (status, retried) = json(
        app.post(&format!("/v1/instances/{id}/retry"), json!({"reason": "x"}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(retried["status"], "PENDING");
}

#[sqlx::test]
async fn a_task_read_with_get_can_be_edited_and_put_back(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let (status, _) = json(
        app.put(
            "/v1/tasks/round",
            json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "0 * * * *", "timezone": "UTC"}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
    let (_, mut read) = json(app.get("/v1/tasks/round").await).await;
    for f in [
        "next_fire_at",
        "created_at",
        "updated_at",
        "version",
        "consecutive_failures",
    ] {
        assert!(read.get(f).is_some(), "GET shows {f}");
    }
    // Sent back unchanged: the read-only fields are ignored, nothing changes.
    let (status, same) = json(app.put("/v1/tasks/round", read.clone()).await).await;
    assert_eq!(status, 200, "{same}");
    assert_eq!(same["version"], 1);
    // Edited, with stale read-only values: the edit applies, the read-only values do not.
    read["context"] = json!({"k": 1});
    read["version"] = json!(99);
    read["consecutive_failures"] = json!(7);
    let (status, edited) = json(app.put("/v1/tasks/round", read).await).await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["version"], 2);
    assert_eq!(edited["consecutive_failures"], 0);
    assert_eq!(edited["context"], json!({"k": 1}));
}

#[sqlx::test]
async fn an_operator_retry_waits_for_a_task_write_instead_of_deadlocking_with_it(pool: PgPool) {
    // A PUT moving a task's waiting instances, a DELETE and a backfill's reprocess lock the task
    // row, then its instances. An operator retry that locked the instance first deadlocked with
    // them: PostgreSQL aborted one side after deadlock_timeout, answered 500.
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/locks",
        json!({"agent_id": "a", "trigger": {"type": "manual"}}),
    )
    .await;
    let (_, inst) = json(app.post("/v1/tasks/locks/trigger", json!({})).await).await;
    let id = inst["id"].as_str().expect("id").to_owned();
    sqlx::query("update task_instance set status = 'FAILED' where id = $1::uuid")
        .bind(&id)
        .execute(&pool)
        .await
        .expect("fail it");
    // The task write: task row first ...
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("select 1 from tasks where id = 'locks' for update")
        .execute(&mut *tx)
        .await
        .expect("lock task");
    let retry = {
        let url = app.url(&format!("/v1/instances/{id}/retry"));
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(url)
                .json(&json!({"reason": "again"}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // ... then the instance, while the retry waits.
    sqlx::query("update task_instance set updated_at = now() where id = $1::uuid")
        .bind(&id)
        .execute(&mut *tx)
        .await
        .expect("the task write reaches the instance: no deadlock");
    tx.commit().await.expect("commit");
    let status = retry.await.expect("join").expect("answer");
    assert_eq!(status, 200, "the retry went ahead after the task write");
}
