//! Shared test harness: a real kairos (real axum server on a loopback port 0) over the fresh
//! database `#[sqlx::test]` created, plus helpers to wait with deadlines instead of sleeping.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kairos::app::{self, Options, Running};
use kairos::services::trigger_loop::TriggerLoopConfig;
use reqwest::{Client, Method, Response};
use serde_json::Value;
use sqlx::PgPool;
use tokio::net::TcpListener;

pub struct TestApp {
    pub addr: SocketAddr,
    pub pool: PgPool,
    pub client: Client,
    running: Option<Running>,
}

impl TestApp {
    /// The API only; tests drive loops by hand.
    pub async fn spawn(pool: PgPool) -> TestApp {
        Self::spawn_with(pool, None).await
    }

    /// The API plus a trigger loop named `node_id`.
    pub async fn spawn_with_trigger(pool: PgPool, node_id: &str) -> TestApp {
        let mut cfg = TriggerLoopConfig::new(node_id);
        cfg.max_sleep = Duration::from_millis(500);
        Self::spawn_with(pool, Some(cfg)).await
    }

    pub async fn spawn_with(pool: PgPool, trigger: Option<TriggerLoopConfig>) -> TestApp {
        let mut opts = Options::api_only("test-node");
        opts.trigger = trigger;
        opts.shutdown_grace = Duration::from_secs(5);
        Self::spawn_opts(pool, opts).await
    }

    /// Any combination of loops and limits.
    pub async fn spawn_opts(pool: PgPool, opts: Options) -> TestApp {
        Self::spawn_pools(pool.clone(), app::Pools::shared(pool), opts).await
    }

    /// As `spawn_opts`, with the process's own pools; `pool` stays the test's.
    pub async fn spawn_pools(pool: PgPool, pools: app::Pools, opts: Options) -> TestApp {
        kairos::outbound::install_crypto_provider();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let running = app::start(pools, listener, opts).expect("start kairos");
        TestApp {
            addr: running.addr,
            pool,
            client: Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client"),
            running: Some(running),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn request(&self, method: Method, path: &str, body: Option<Value>) -> Response {
        let mut req = self.client.request(method, self.url(path));
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().await.expect("request sent")
    }

    pub async fn get(&self, path: &str) -> Response {
        self.request(Method::GET, path, None).await
    }

    pub async fn put(&self, path: &str, body: Value) -> Response {
        self.request(Method::PUT, path, Some(body)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Response {
        self.request(Method::POST, path, Some(body)).await
    }

    /// Die at once, as a SIGKILL would: no loop or request finishes.
    pub fn kill(mut self) {
        if let Some(r) = self.running.take() {
            r.abort();
        }
    }

    /// The first step of a shutdown: no new work is taken.
    pub fn stop_taking_work(&self) {
        if let Some(r) = &self.running {
            r.stop_taking_work();
        }
    }

    pub async fn shutdown(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

/// Status and JSON body of a response.
pub async fn json(resp: Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

/// The string `key` of every item of a list page (`{"items": [...]}`).
pub fn item_strings<'a>(page: &'a Value, key: &str) -> Vec<&'a str> {
    page["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|i| i[key].as_str()).collect())
        .unwrap_or_default()
}

/// Wait until the database clock is early in a second. Every-second windows are decided
/// against that clock, and a pass that straddles a second boundary sees one window more (its
/// parallel batches may even each see one): a step that must see an exact set of due windows
/// starts here, with most of a second to spare.
pub async fn early_in_a_second(pool: &PgPool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let frac: f64 =
            sqlx::query_scalar("select (extract(epoch from clock_timestamp()) % 1)::float8")
                .fetch_one(pool)
                .await
                .expect("clock");
        if frac < 0.4 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "clock never early in a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Poll `check` until it returns `Some`, or panic after `deadline`.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Rows of `task_instance` for a task: (window_key, status, source, skip_reason), window order.
pub async fn windows(
    pool: &PgPool,
    task_id: &str,
) -> Vec<(String, String, String, Option<String>)> {
    sqlx::query_as(
        "select window_key, status, source, skip_reason from task_instance \
         where task_id = $1 order by scheduled_at",
    )
    .bind(task_id)
    .fetch_all(pool)
    .await
    .expect("query windows")
}

pub fn cron_task(agent: &str, expr: &str) -> Value {
    serde_json::json!({
        "agent_id": agent,
        "trigger": {"type": "cron", "expr": expr, "timezone": "UTC"},
    })
}

/// Claim over HTTP (`extra` adds fields to the body) and expect 200; the claimed instances.
pub async fn claim(app: &TestApp, agent: &str, worker: &str, max: i64, extra: Value) -> Vec<Value> {
    let mut body =
        serde_json::json!({"agent_id": agent, "worker_id": worker, "max_instances": max});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (status, resp) = json(app.post("/v1/claims", body).await).await;
    assert_eq!(status, 200, "{resp}");
    resp["instances"].as_array().cloned().unwrap_or_default()
}

/// A manual task of `agent` (concurrency_limit 100) drawing on the shared `limits`.
pub async fn manual_task(app: &TestApp, id: &str, agent: &str, limits: Value) {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{id}"),
            serde_json::json!({"agent_id": agent, "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 100, "limits": limits}}),
        )
        .await,
    )
    .await;
    assert!(status == 201 || status == 200, "{body}");
}

/// Trigger `task` `n` times with `context`.
pub async fn trigger(app: &TestApp, task: &str, n: usize, context: Value) {
    for _ in 0..n {
        let (status, body) = json(
            app.post(
                &format!("/v1/tasks/{task}/trigger"),
                serde_json::json!({"context": context}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
}

/// Insert `n` PENDING instances of `task` directly, available `age_s` seconds ago and one
/// millisecond apart, oldest first, window keys `b000001`, `b000002`, ...
pub async fn backlog(
    pool: &PgPool,
    task: &str,
    agent: &str,
    n: i32,
    age_s: i32,
    max_attempts: i32,
) {
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
             agent_id, max_attempts, available_at) \
         select gen_random_uuid(), $1, 'b' || lpad(g::text, 6, '0'), \
             now() - make_interval(secs => $4) + g * interval '1 millisecond', 'PENDING', \
             'manual', $2, $5, now() - make_interval(secs => $4) + g * interval '1 millisecond' \
         from generate_series(1, $3) g",
    )
    .bind(task)
    .bind(agent)
    .bind(n)
    .bind(f64::from(age_s))
    .bind(max_attempts)
    .execute(pool)
    .await
    .expect("insert backlog");
}

/// The value of one sample in Prometheus text, e.g. `kairos_skipped_total{reason="overlap"}`
/// (0 when absent).
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// The per-item statuses of a `POST /v1/completions` answer, in order.
pub fn item_statuses(batch: &Value) -> Vec<u64> {
    batch["results"]
        .as_array()
        .map(|r| r.iter().filter_map(|x| x["status"].as_u64()).collect())
        .unwrap_or_default()
}
