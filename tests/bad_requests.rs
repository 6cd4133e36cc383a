//! Bad input gets a clear 4xx problem+json naming the field, never a 500 and never a
//! half-written row.

mod common;

use common::TestApp;
use reqwest::Method;
use sqlx::PgPool;

struct Case {
    method: Method,
    path: &'static str,
    body: Option<String>,
    content_type: Option<&'static str>,
    status: u16,
    /// The field `errors[]` must name (422 only).
    field: Option<&'static str>,
}

fn put(path: &'static str, body: &str, status: u16, field: Option<&'static str>) -> Case {
    Case {
        method: Method::PUT,
        path,
        body: Some(body.to_owned()),
        content_type: Some("application/json"),
        status,
        field,
    }
}

fn get(path: &'static str, status: u16, field: Option<&'static str>) -> Case {
    Case {
        method: Method::GET,
        path,
        body: None,
        content_type: None,
        status,
        field,
    }
}

fn post(path: &'static str, body: &str, status: u16, field: Option<&'static str>) -> Case {
    Case {
        method: Method::POST,
        path,
        body: Some(body.to_owned()),
        content_type: Some("application/json"),
        status,
        field,
    }
}

const OK_TRIGGER: &str = r#""trigger": {"type": "cron", "expr": "0 8 * * *", "timezone": "UTC"}"#;

fn cases() -> Vec<Case> {
    let big_context = format!(
        r#"{{"agent_id": "a", {OK_TRIGGER}, "context": {{"blob": "{}"}}}}"#,
        "x".repeat(70 * 1024)
    );
    let huge_body = format!(
        r#"{{"agent_id": "a", "pad": "{}"}}"#,
        "x".repeat(300 * 1024)
    );
    vec![
        put("/v1/tasks/t1", "{not json", 400, None),
        put("/v1/tasks/t1", "", 400, None),
        put("/v1/tasks/t1", "[1, 2]", 422, Some("")),
        put(
            "/v1/tasks/t1",
            &format!(r#"{{{OK_TRIGGER}}}"#),
            422,
            Some("agent_id"),
        ),
        put("/v1/tasks/t1", r#"{"agent_id": "a"}"#, 422, Some("trigger")),
        put(
            "/v1/tasks/Bad_Id",
            &format!(r#"{{"agent_id": "a", {OK_TRIGGER}}}"#),
            422,
            Some("id"),
        ),
        put(
            "/v1/tasks/t1",
            r#"{"agent_id": "a", "trigger": {"type": "cron", "expr": "61 * * * *"}}"#,
            422,
            Some("trigger.expr"),
        ),
        put(
            "/v1/tasks/t1",
            r#"{"agent_id": "a", "trigger": {"type": "cron", "expr": "0 0 0 * * * 2027"}}"#,
            422,
            Some("trigger.expr"),
        ),
        put(
            "/v1/tasks/t1",
            r#"{"agent_id": "a", "trigger": {"type": "cron", "expr": "0 8 * * *", "timezone": "Mars/Olympus"}}"#,
            422,
            Some("trigger.timezone"),
        ),
        put(
            "/v1/tasks/t1",
            r#"{"agent_id": "a", "trigger": {"type": "hourly"}}"#,
            422,
            Some("trigger.type"),
        ),
        put(
            "/v1/tasks/t1",
            r#"{"agent_id": "a", "trigger": {"type": "interval", "every_seconds": -5}}"#,
            422,
            Some("trigger.every_seconds"),
        ),
        put(
            "/v1/tasks/t1",
            r#"{"agent_id": "a", "trigger": {"type": "once", "at": "next tuesday"}}"#,
            422,
            Some("trigger.at"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(r#"{{"agent_id": "a", {OK_TRIGGER}, "execution": {{"max_retries": 1000}}}}"#),
            422,
            Some("execution.max_retries"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(
                r#"{{"agent_id": "a", {OK_TRIGGER}, "execution": {{"concurrency_limit": 0}}}}"#
            ),
            422,
            Some("execution.concurrency_limit"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(
                r#"{{"agent_id": "a", {OK_TRIGGER}, "execution": {{"timeout_seconds": 604801}}}}"#
            ),
            422,
            Some("execution.timeout_seconds"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(
                r#"{{"agent_id": "a", {OK_TRIGGER}, "execution": {{"overlap": "parallel"}}}}"#
            ),
            422,
            Some("execution.overlap"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(r#"{{"agent_id": "a", {OK_TRIGGER}, "execution": {{"catchup": "some"}}}}"#),
            422,
            Some("execution.catchup"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(
                r#"{{"agent_id": "a", {OK_TRIGGER}, "execution": {{"retry_backoff": {{"jitter": 1.5}}}}}}"#
            ),
            422,
            Some("execution.retry_backoff.jitter"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(
                r#"{{"agent_id": "a", {OK_TRIGGER}, "dispatch": {{"mode": "carrier-pigeon"}}}}"#
            ),
            422,
            Some("dispatch.mode"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(
                r#"{{"agent_id": "a", {OK_TRIGGER}, "notify": {{"on_failure": ["javascript:alert(1)"]}}}}"#
            ),
            422,
            Some("notify.on_failure[0]"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(r#"{{"agent_id": "a", {OK_TRIGGER}, "context": "params"}}"#),
            422,
            Some("context"),
        ),
        put("/v1/tasks/t1", &big_context, 422, Some("context")),
        put(
            "/v1/tasks/t1",
            &format!(r#"{{"agent_id": "a", {OK_TRIGGER}, "colour": "blue"}}"#),
            422,
            Some("colour"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(r#"{{"agent_id": "a b", {OK_TRIGGER}}}"#),
            422,
            Some("agent_id"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(
                r#"{{"agent_id": "a", {OK_TRIGGER}, "circuit_breaker": {{"failure_threshold": 0}}}}"#
            ),
            422,
            Some("circuit_breaker.failure_threshold"),
        ),
        put("/v1/tasks/t1", &huge_body, 413, None),
        Case {
            method: Method::PUT,
            path: "/v1/tasks/t1",
            body: Some("agent_id=a".to_owned()),
            content_type: Some("application/x-www-form-urlencoded"),
            status: 415,
            field: None,
        },
        get("/v1/tasks/nope", 404, None),
        get("/v1/tasks?limit=0", 422, Some("limit")),
        get("/v1/tasks?limit=501", 422, Some("limit")),
        get("/v1/tasks?paused=maybe", 422, Some("paused")),
        get("/v1/tasks?cursor=zz", 422, Some("cursor")),
        get("/v1/tasks?colour=blue", 422, Some("colour")),
        get("/v1/instances?status=LOST", 422, Some("status")),
        get("/v1/instances?from=yesterday", 422, Some("from")),
        get(
            "/v1/instances?from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z",
            422,
            Some("to"),
        ),
        get("/v1/instances/not-a-uuid", 404, None),
        get(
            "/v1/instances/00000000-0000-0000-0000-000000000000",
            404,
            None,
        ),
        get("/v1/cron/preview", 422, Some("expr")),
        get("/v1/cron/preview?expr=*%20*%20*", 422, Some("expr")),
        get(
            "/v1/cron/preview?expr=*%20*%20*%20*%20*&count=1001",
            422,
            Some("count"),
        ),
        get(
            "/v1/cron/preview?expr=*%20*%20*%20*%20*&timezone=Nowhere/City",
            422,
            Some("timezone"),
        ),
        get("/v1/no-such-route", 404, None),
        Case {
            method: Method::PATCH,
            path: "/v1/tasks/t1",
            body: None,
            content_type: None,
            status: 405,
            field: None,
        },
        post(
            "/v1/tasks/t1/pause",
            r#"{"reason": 5}"#,
            422,
            Some("reason"),
        ),
    ]
}

/// U+0000 (which PostgreSQL stores neither in text nor in jsonb) wherever input reaches SQL:
/// bodies, keys, path parameters, query parameters and cursors.
fn nul_cases() -> Vec<Case> {
    let some_instance = "/v1/instances/00000000-0000-0000-0000-000000000001";
    vec![
        put(
            "/v1/tasks/t1",
            &format!(
                r#"{{"agent_id": "a", {OK_TRIGGER}, "context": {{"params": {{"region": "cn\u0000north"}}}}}}"#
            ),
            422,
            Some("context.params.region"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(r#"{{"agent_id": "a", {OK_TRIGGER}, "context": {{"k\u0000": 1}}}}"#),
            422,
            Some("context"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(r#"{{"agent_id": "a\u0000", {OK_TRIGGER}}}"#),
            422,
            Some("agent_id"),
        ),
        put(
            "/v1/tasks/t1",
            &format!(
                r#"{{"agent_id": "a", {OK_TRIGGER}, "notify": {{"on_failure": ["https://x.example/\u0000"]}}}}"#
            ),
            422,
            Some("notify.on_failure[0]"),
        ),
        get("/v1/tasks?cursor=00", 422, Some("cursor")),
        get(
            Box::leak(format!("/v1/tasks?cursor={}", "0".repeat(1000)).into_boxed_str()),
            422,
            Some("cursor"),
        ),
        get("/v1/tasks?cursor=610074", 422, Some("cursor")),
        get("/v1/tasks?agent_id=a%00", 422, Some("agent_id")),
        get("/v1/instances?cursor=00", 422, Some("cursor")),
        get("/v1/instances?task_id=%00", 422, Some("task_id")),
        get("/v1/instances?window_key=w%00", 422, Some("window_key")),
        get(
            "/v1/cron/preview?expr=*%20*%20*%20*%20*%00",
            422,
            Some("expr"),
        ),
        get("/v1/tasks/a%00b", 422, Some("id")),
        get("/v1/tasks/a%00b/preview", 422, Some("id")),
        get("/v1/instances/%00", 422, Some("id")),
        get("/v1/tasks/%FF", 400, None),
        Case {
            method: Method::DELETE,
            path: "/v1/tasks/a%00b",
            body: None,
            content_type: None,
            status: 422,
            field: Some("id"),
        },
        post("/v1/tasks/a%00b/resume", "", 422, Some("id")),
        post(
            "/v1/tasks/t1/pause",
            r#"{"reason": "r\u0000"}"#,
            422,
            Some("reason"),
        ),
        post(
            "/v1/tasks/t1/trigger",
            r#"{"context": {"a": ["ok", "\u0000"]}}"#,
            422,
            Some("context.a[1]"),
        ),
        post(
            "/v1/tasks/t1/trigger",
            r#"{"window_key": "w\u0000"}"#,
            422,
            Some("window_key"),
        ),
        post(
            "/v1/tasks/t1/backfill",
            r#"{"from": "2026-11-01T00:00:00Z\u0000", "to": "2026-11-02T00:00:00Z"}"#,
            422,
            Some("from"),
        ),
        post(
            Box::leak(format!("{some_instance}/fail").into_boxed_str()),
            r#"{"lease_token": "00000000-0000-0000-0000-000000000002", "error": "boom\u0000"}"#,
            422,
            Some("error"),
        ),
        post(
            Box::leak(format!("{some_instance}/complete").into_boxed_str()),
            r#"{"lease_token": "00000000-0000-0000-0000-000000000002", "result": {"x": "\u0000"}}"#,
            422,
            Some("result.x"),
        ),
        post(
            Box::leak(format!("{some_instance}/cancel").into_boxed_str()),
            r#"{"reason": "\u0000"}"#,
            422,
            Some("reason"),
        ),
        post(
            Box::leak(format!("{some_instance}/retry").into_boxed_str()),
            r#"{"reason": "\u0000"}"#,
            422,
            Some("reason"),
        ),
        post(
            "/v1/claims",
            r#"{"agent_id": "a\u0000", "worker_id": "w"}"#,
            422,
            Some("agent_id"),
        ),
    ]
}

#[sqlx::test]
async fn every_bad_request_gets_a_4xx_problem_naming_the_field(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    // Only for the pause case: the task must exist for its body to be looked at.
    let (status, _) = common::json(
        app.put("/v1/tasks/paused_one", common::cron_task("a", "0 8 * * *"))
            .await,
    )
    .await;
    assert_eq!(status, 201);
    let cases = cases();
    assert!(cases.len() >= 20);
    assert_refused(&app, cases).await;
    // Nothing was half-written: only the one valid task exists.
    let count: i64 = sqlx::query_scalar("select count(*) from tasks")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(count, 1);
}

#[sqlx::test]
async fn nul_anywhere_in_input_is_a_422_naming_the_field_and_writes_nothing(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let (status, _) = common::json(
        app.put("/v1/tasks/paused_one", common::cron_task("a", "0 8 * * *"))
            .await,
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = common::json(
        app.put("/v1/tasks/t1", common::cron_task("a", "0 8 * * *"))
            .await,
    )
    .await;
    assert_eq!(status, 201);
    assert_refused(&app, nul_cases()).await;
    let (tasks, instances, paused): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from tasks), (select count(*) from task_instance), \
                (select count(*) from tasks where paused)",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!((tasks, instances, paused), (2, 0, 0));
}

/// Send each case and check the problem+json answer.
async fn assert_refused(app: &TestApp, cases: Vec<Case>) {
    for case in cases {
        let path = if case.path == "/v1/tasks/t1/pause" {
            "/v1/tasks/paused_one/pause"
        } else {
            case.path
        };
        let mut req = app.client.request(case.method.clone(), app.url(path));
        if let Some(ct) = case.content_type {
            req = req.header("content-type", ct);
        }
        if let Some(b) = &case.body {
            req = req.body(b.clone());
        }
        let resp = req.send().await.expect("sent");
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = resp.text().await.expect("body");
        let what = format!("{} {} -> {status} {text}", case.method, case.path);
        assert_eq!(status, case.status, "{what}");
        assert_eq!(ct, "application/problem+json", "{what}");
        let problem: serde_json::Value = serde_json::from_str(&text).expect("problem json");
        assert_eq!(problem["status"], case.status, "{what}");
        assert!(
            problem["type"].is_string() && problem["title"].is_string(),
            "{what}"
        );
        assert!(problem["detail"].is_string(), "{what}");
        if let Some(field) = case.field {
            let fields: Vec<&str> = problem["errors"]
                .as_array()
                .map(|a| a.iter().filter_map(|e| e["field"].as_str()).collect())
                .unwrap_or_default();
            assert!(fields.contains(&field), "{what}: fields {fields:?}");
        }
    }
}

/// Four RUNNING instances of a manual task, claimed: (id, lease_token) each.
async fn four_running(app: &TestApp) -> Vec<(String, String)> {
    let (status, _) = common::json(
        app.put(
            "/v1/tasks/batch",
            serde_json::json!({"agent_id": "batcher", "trigger": {"type": "manual"},
                               "execution": {"concurrency_limit": 10, "overlap": "queue"}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201);
    for _ in 0..4 {
        let (status, _) = common::json(
            app.post("/v1/tasks/batch/trigger", serde_json::json!({}))
                .await,
        )
        .await;
        assert_eq!(status, 201);
    }
    let claimed = common::claim(app, "batcher", "w1", 4, serde_json::json!({})).await;
    assert_eq!(claimed.len(), 4);
    claimed
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap_or_default().to_owned(),
                c["lease_token"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

async fn statuses(pool: &PgPool) -> Vec<(String, Option<serde_json::Value>)> {
    sqlx::query_as("select status, result from task_instance order by id")
        .fetch_all(pool)
        .await
        .expect("statuses")
}

#[sqlx::test]
async fn a_completions_batch_with_one_nul_result_is_refused_whole_and_writes_nothing(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let running = four_running(&app).await;
    let items = |bad: bool| -> Vec<serde_json::Value> {
        running
            .iter()
            .enumerate()
            .map(|(n, (id, token))| {
                let result = if bad && n == 3 {
                    serde_json::json!({"note": "a\u{0}b"})
                } else {
                    serde_json::json!({"n": n})
                };
                serde_json::json!({"id": id, "lease_token": token, "result": result})
            })
            .collect()
    };
    let (status, problem) = common::json(
        app.post(
            "/v1/completions",
            serde_json::json!({"completions": items(true)}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["errors"][0]["field"], "completions[3].result.note");
    let after = statuses(&pool).await;
    assert!(
        after.iter().all(|(s, r)| s == "RUNNING" && r.is_none()),
        "nothing written: {after:?}"
    );
    // The leases still hold: the same batch without the bad value completes every item.
    let (status, body) = common::json(
        app.post(
            "/v1/completions",
            serde_json::json!({"completions": items(false)}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let codes: Vec<i64> = body["results"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["status"].as_i64()).collect())
        .unwrap_or_default();
    assert_eq!(codes, vec![200; 4], "{body}");
}

#[sqlx::test]
async fn a_nul_result_or_error_leaves_the_lease_running(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let running = four_running(&app).await;
    let (id, token) = &running[0];
    let (status, problem) = common::json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            serde_json::json!({"lease_token": token, "result": ["\u{0}"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["errors"][0]["field"], "result[0]");
    let (status, problem) = common::json(
        app.post(
            &format!("/v1/instances/{id}/fail"),
            serde_json::json!({"lease_token": token, "error": "boom\u{0}"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["errors"][0]["field"], "error");
    assert!(statuses(&pool).await.iter().all(|(s, _)| s == "RUNNING"));
    let (status, inst) = common::json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            serde_json::json!({"lease_token": token, "result": {"ok": true}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{inst}");
    assert_eq!(inst["status"], "SUCCESS");
}

#[sqlx::test]
async fn the_store_maps_values_the_database_refuses_to_invalid(pool: PgPool) {
    // The last line of defence, under the edge checks: SQLSTATE 22021 (NUL in text) from a
    // store call is invalid input, not a server error.
    let app = TestApp::spawn(pool.clone()).await;
    let (status, _) = common::json(
        app.put("/v1/tasks/t1", common::cron_task("a", "0 8 * * *"))
            .await,
    )
    .await;
    assert_eq!(status, 201);
    let err = kairos::store::tasks::pause_task(&pool, "t1", "r\u{0}")
        .await
        .expect_err("the database refuses NUL");
    assert!(matches!(err, kairos::store::Error::Invalid(_)), "{err:?}");
    let api = kairos::http::error::ApiError::from(err);
    assert_eq!(api.status().as_u16(), 422);
    let err = kairos::store::tasks::get_task(&pool, "t\u{0}")
        .await
        .expect_err("the database refuses NUL");
    assert!(matches!(err, kairos::store::Error::Invalid(_)), "{err:?}");
}

#[sqlx::test]
async fn a_completions_item_whose_traceparent_is_no_string_is_refused_and_writes_nothing(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    let running = four_running(&app).await;
    let items: Vec<serde_json::Value> = running
        .iter()
        .enumerate()
        .map(|(n, (id, token))| {
            let mut item = serde_json::json!({"id": id, "lease_token": token, "result": {"n": n}});
            if n == 2 {
                item["traceparent"] = serde_json::json!({});
            }
            item
        })
        .collect();
    let (status, problem) = common::json(
        app.post("/v1/completions", serde_json::json!({"completions": items}))
            .await,
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["errors"][0]["field"], "completions[2].traceparent");
    let after = statuses(&pool).await;
    assert!(
        after.iter().all(|(s, r)| s == "RUNNING" && r.is_none()),
        "nothing written: {after:?}"
    );
    // A string that is no traceparent is ignored, not refused.
    let (id, token) = &running[0];
    let (status, body) = common::json(
        app.post(
            "/v1/completions",
            serde_json::json!({"completions": [
                {"id": id, "lease_token": token, "traceparent": "not a traceparent"}]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["status"], 200, "{body}");
}
