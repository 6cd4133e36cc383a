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
        Case {
            method: Method::POST,
            path: "/v1/tasks/t1/pause",
            body: Some(r#"{"reason": 5}"#.to_owned()),
            content_type: Some("application/json"),
            status: 422,
            field: Some("reason"),
        },
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
    // Nothing was half-written: only the one valid task exists.
    let count: i64 = sqlx::query_scalar("select count(*) from tasks")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(count, 1);
}
