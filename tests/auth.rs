//! Access control over real HTTP: who may read, register, claim and complete.

mod common;

use std::sync::Arc;

use common::{TestApp, json};
use kairos::app::Options;
use kairos::domain::access::Tokens;
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::PgPool;

const ADMIN: &str = "admin-token-123";
const AGENT_A: &str = "agent-a-token-123";
const VIEWER: &str = "viewer-token-123";

async fn secured(pool: PgPool) -> TestApp {
    let mut opts = Options::api_only("auth");
    opts.tokens = Arc::new(
        Tokens::parse(&format!(
            "{ADMIN}:admin,{AGENT_A}:agent:agent_a,{VIEWER}:viewer"
        ))
        .expect("tokens"),
    );
    TestApp::spawn_opts(pool, opts).await
}

async fn call(
    app: &TestApp,
    token: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = app.client.request(method, app.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    json(req.send().await.expect("sent")).await
}

#[sqlx::test]
async fn requests_without_a_valid_token_get_401(pool: PgPool) {
    let app = secured(pool).await;
    let resp = app.get("/v1/tasks").await;
    assert_eq!(resp.status().as_u16(), 401);
    // Every answer, refusals included, carries the safety headers.
    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
    assert_eq!(resp.headers()["referrer-policy"], "same-origin");
    assert_eq!(
        resp.headers()["www-authenticate"],
        "Bearer realm=\"kairos\""
    );
    let (status, problem) = call(
        &app,
        Some("wrong-token-xyz"),
        Method::GET,
        "/v1/tasks",
        None,
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(problem["status"], 401);
    let (status, _) = call(&app, None, Method::GET, "/metrics", None).await;
    assert_eq!(status, 401, "metrics need a viewer token");
    // Two Authorization headers, in either order, are no credential: 401, nothing done.
    for pair in [[ADMIN, VIEWER], [VIEWER, ADMIN]] {
        let resp = app
            .client
            .post(app.url("/v1/limits/two-tokens/hold"))
            .header("authorization", format!("Bearer {}", pair[0]))
            .header("authorization", format!("Bearer {}", pair[1]))
            .json(&json!({"seconds": 60}))
            .send()
            .await
            .expect("sent");
        assert_eq!(resp.status().as_u16(), 401, "{pair:?}");
    }
    // Probes need no token.
    assert_eq!(app.get("/healthz").await.status().as_u16(), 200);
    assert_ne!(app.get("/readyz").await.status().as_u16(), 401);
}

#[sqlx::test]
async fn roles_limit_what_a_token_may_do(pool: PgPool) {
    let app = secured(pool.clone()).await;
    let task = |agent: &str| json!({"agent_id": agent, "trigger": {"type": "manual"}});
    let (status, _) = call(
        &app,
        Some(VIEWER),
        Method::PUT,
        "/v1/tasks/t_a",
        Some(task("agent_a")),
    )
    .await;
    assert_eq!(status, 403, "a viewer cannot register");
    let (status, _) = call(
        &app,
        Some(AGENT_A),
        Method::PUT,
        "/v1/tasks/t_a",
        Some(task("agent_a")),
    )
    .await;
    assert_eq!(status, 403, "an agent cannot register");
    for (id, agent) in [("t_a", "agent_a"), ("t_b", "agent_b")] {
        let (status, _) = call(
            &app,
            Some(ADMIN),
            Method::PUT,
            &format!("/v1/tasks/{id}"),
            Some(task(agent)),
        )
        .await;
        assert_eq!(status, 201);
        let (status, _) = call(
            &app,
            Some(ADMIN),
            Method::POST,
            &format!("/v1/tasks/{id}/trigger"),
            Some(json!({})),
        )
        .await;
        assert_eq!(status, 201);
    }
    let (status, list) = call(&app, Some(VIEWER), Method::GET, "/v1/tasks", None).await;
    assert_eq!(status, 200);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2));
    let (status, _) = call(&app, Some(VIEWER), Method::GET, "/metrics", None).await;
    assert_eq!(status, 200);

    // Agent A may not claim agent B's work ...
    let (status, problem) = call(
        &app,
        Some(AGENT_A),
        Method::POST,
        "/v1/claims",
        Some(json!({"agent_id": "agent_b", "worker_id": "w"})),
    )
    .await;
    assert_eq!(status, 403, "{problem}");
    // ... nor complete it, even holding its lease token.
    let (_, b_claim) = call(
        &app,
        Some(ADMIN),
        Method::POST,
        "/v1/claims",
        Some(json!({"agent_id": "agent_b", "worker_id": "w"})),
    )
    .await;
    let b = &b_claim["instances"][0];
    let path = format!("/v1/instances/{}/complete", b["id"].as_str().unwrap_or(""));
    let (status, _) = call(
        &app,
        Some(AGENT_A),
        Method::POST,
        &path,
        Some(json!({"lease_token": b["lease_token"]})),
    )
    .await;
    assert_eq!(status, 403);
    // Its own work is fine.
    let (status, a_claim) = call(
        &app,
        Some(AGENT_A),
        Method::POST,
        "/v1/claims",
        Some(json!({"agent_id": "agent_a", "worker_id": "w"})),
    )
    .await;
    assert_eq!(status, 200);
    let a = &a_claim["instances"][0];
    // In a batch each item is answered on its own (openapi.yaml): agent B's item is refused
    // without naming agent B, A's own item completes, and A's item listed again is answered
    // as the first was (a repeated report under the lease that made it).
    let item = |i: &Value| json!({"id": i["id"], "lease_token": i["lease_token"]});
    let (status, batch) = call(
        &app,
        Some(AGENT_A),
        Method::POST,
        "/v1/completions",
        Some(json!({"completions": [item(b), item(a), item(a)]})),
    )
    .await;
    assert_eq!(status, 200, "{batch}");
    let answers = common::item_statuses(&batch);
    assert_eq!(answers, [403, 200, 200], "{batch}");
    let refusal = batch["results"][0]["detail"].as_str().unwrap_or("");
    assert!(!refusal.contains("agent_b"), "{refusal}");
    assert_eq!(batch["results"][1]["instance"]["status"], "SUCCESS");
    let (_, b_now) = call(
        &app,
        Some(ADMIN),
        Method::GET,
        &format!("/v1/instances/{}", b["id"].as_str().unwrap_or("")),
        None,
    )
    .await;
    assert_eq!(b_now["status"], "RUNNING", "the refused item wrote nothing");
    // Operator actions are admin only.
    let path = format!("/v1/instances/{}/retry", a["id"].as_str().unwrap_or(""));
    let (status, _) = call(&app, Some(AGENT_A), Method::POST, &path, Some(json!({}))).await;
    assert_eq!(status, 403);
}

#[test]
fn a_non_loopback_bind_without_tokens_is_refused_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kairos"))
        .arg("serve")
        .env("KAIROS_CONFIG", "config/kairos.toml")
        .env("KAIROS_LISTEN", "0.0.0.0:0")
        .env_remove("KAIROS_AUTH_TOKENS")
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .expect("run kairos");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without authentication"), "{stderr}");
}

#[sqlx::test]
async fn agent_tokens_read_only_their_agents_and_non_admins_see_no_url_paths(pool: PgPool) {
    let app = secured(pool).await;
    let hook = "https://hooks.example.com:8443/t/s3cr3t-path?key=s3cr3t-query";
    for (id, agent) in [("ta", "agent_a"), ("tb", "agent_b")] {
        let (status, body) = call(
            &app,
            Some(ADMIN),
            Method::PUT,
            &format!("/v1/tasks/{id}"),
            Some(json!({
                "agent_id": agent,
                "trigger": {"type": "manual"},
                "dispatch": {"mode": "webhook", "url": hook, "secret": "s3cret-s3cret-s3cret"},
                "notify": {"on_failure": ["https://alerts.example.com/hook/s3cr3t-notify?k=1"]},
            })),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let (status, body) = call(
            &app,
            Some(ADMIN),
            Method::POST,
            &format!("/v1/tasks/{id}/trigger"),
            Some(json!({})),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let instance_of = |task: &'static str| {
        let app = &app;
        async move {
            let (_, page) = call(
                app,
                Some(ADMIN),
                Method::GET,
                &format!("/v1/instances?task_id={task}"),
                None,
            )
            .await;
            page["items"][0]["id"].as_str().expect("id").to_owned()
        }
    };
    let (ia, ib) = (instance_of("ta").await, instance_of("tb").await);

    // Lists are filtered to the token's agents, whatever the filter asks.
    let (status, page) = call(&app, Some(AGENT_A), Method::GET, "/v1/tasks", None).await;
    assert_eq!(status, 200);
    let ids = common::item_strings(&page, "id");
    assert_eq!(ids, ["ta"]);
    let (_, page) = call(
        &app,
        Some(AGENT_A),
        Method::GET,
        "/v1/tasks?agent_id=agent_b",
        None,
    )
    .await;
    assert_eq!(page["items"], json!([]));
    for path in [
        "/v1/instances",
        "/v1/instances?task_id=tb",
        "/v1/instances?agent_id=agent_b",
    ] {
        let (status, page) = call(&app, Some(AGENT_A), Method::GET, path, None).await;
        assert_eq!(status, 200, "{path}");
        let tasks = common::item_strings(&page, "task_id");
        assert!(tasks.iter().all(|t| *t == "ta"), "{path}: {tasks:?}");
    }
    // Another agent's task and instance are 404, as if they did not exist.
    for path in [
        "/v1/tasks/tb".to_owned(),
        "/v1/tasks/tb/preview".to_owned(),
        format!("/v1/instances/{ib}"),
    ] {
        let (status, body) = call(&app, Some(AGENT_A), Method::GET, &path, None).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _) = call(
        &app,
        Some(AGENT_A),
        Method::GET,
        &format!("/v1/instances/{ia}"),
        None,
    )
    .await;
    assert_eq!(status, 200);

    // Non-admins see scheme and host only; admins see the whole URL.
    for token in [AGENT_A, VIEWER] {
        let (status, task) = call(&app, Some(token), Method::GET, "/v1/tasks/ta", None).await;
        assert_eq!(status, 200);
        assert_eq!(
            task["dispatch"]["url"],
            "https://hooks.example.com:8443/***"
        );
        assert_eq!(
            task["notify"]["on_failure"][0],
            "https://alerts.example.com/***"
        );
        let text = task.to_string();
        assert!(!text.contains("s3cr3t"), "{text}");
        let (_, page) = call(&app, Some(token), Method::GET, "/v1/tasks", None).await;
        assert!(!page.to_string().contains("s3cr3t"), "{page}");
    }
    let (_, task) = call(&app, Some(ADMIN), Method::GET, "/v1/tasks/ta", None).await;
    assert_eq!(task["dispatch"]["url"], hook);
    // A viewer reads every agent's work.
    let (_, page) = call(&app, Some(VIEWER), Method::GET, "/v1/tasks", None).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
}

/// The metrics page as `token` reads it.
async fn metrics_text(app: &TestApp, token: &str) -> String {
    app.client
        .get(app.url("/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .expect("sent")
        .text()
        .await
        .expect("metrics")
}

#[sqlx::test]
async fn a_token_limited_to_some_agents_reads_only_their_agent_metrics(pool: PgPool) {
    let mut opts = Options::api_only("auth");
    opts.tokens = Arc::new(
        Tokens::parse(&format!("{AGENT_A}:agent:agent_a,{VIEWER}:viewer")).expect("tokens"),
    );
    opts.stats_interval = Some(std::time::Duration::from_millis(100));
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    // Both agents were seen claiming (what a claim records).
    sqlx::query(
        "insert into agent_claims (agent_id, last_claim_at) \
         values ('agent_a', now()), ('agent_zz_other', now())",
    )
    .execute(&pool)
    .await
    .expect("claims seen");
    let series = |agent: &str| format!("kairos_agent_last_claim_seconds{{agent_id=\"{agent}\"}}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut all = String::new();
    while std::time::Instant::now() < deadline {
        all = metrics_text(&app, VIEWER).await;
        if all.contains(&series("agent_a")) && all.contains(&series("agent_zz_other")) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(all.contains(&series("agent_zz_other")), "{all}");
    let scoped = metrics_text(&app, AGENT_A).await;
    assert!(scoped.contains(&series("agent_a")), "{scoped}");
    assert!(!scoped.contains("agent_zz_other"), "{scoped}");
    assert!(scoped.contains("kairos_instances{"), "{scoped}");
}
