//! Webhook push and notifications against a real local HTTP receiver (a small axum server),
//! not a mocked client.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::{TestApp, eventually, json};
use hmac::{Hmac, KeyInit, Mac};
use kairos::app::Options;
use kairos::outbound::{self, Policy};
use kairos::services::Heartbeats;
use kairos::services::notifier::{Notifier, NotifierConfig};
use kairos::services::retry_scanner::{RetryScanner, RetryScannerConfig};
use kairos::services::trigger_loop::TriggerLoopConfig;
use kairos::services::webhook_dispatcher::{WebhookDispatcher, WebhookDispatcherConfig};
use serde_json::{Value, json};
use sha2::Sha256;
use sqlx::PgPool;

const SECRET: &str = "push-secret-123";

#[derive(Clone, Debug)]
enum Mode {
    Success,
    Status(u16),
    Accept,
    Sleep(Duration),
    Redirect(String),
    Huge,
    /// A 500 whose body is far past the bound, its head readable.
    HugeError,
    /// A 2xx success nested 200 levels deep in its result.
    Deep,
    /// A 2xx success whose result holds U+0000 (`\u0000` in the JSON).
    NulResult,
    /// A 500 whose body holds a NUL byte.
    NulError,
}

#[derive(Clone, Debug)]
struct Hit {
    headers: HeaderMap,
    body: Bytes,
    at: Instant,
}

#[derive(Clone)]
struct Receiver {
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<Hit>>>,
    mode: Arc<Mutex<Vec<Mode>>>,
}

async fn handle(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    let mode = {
        let mut modes = r.mode.lock().expect("mode");
        if modes.len() > 1 {
            modes.remove(0)
        } else {
            modes[0].clone()
        }
    };
    r.hits.lock().expect("hits").push(Hit {
        headers,
        body,
        at: Instant::now(),
    });
    match mode {
        Mode::Success => {
            axum::Json(json!({"status": "success", "result": {"pushed": true}})).into_response()
        }
        Mode::Status(s) => (
            StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "nope",
        )
            .into_response(),
        Mode::Accept => StatusCode::ACCEPTED.into_response(),
        Mode::Redirect(to) => (
            StatusCode::FOUND,
            [(axum::http::header::LOCATION, to)],
            "moved",
        )
            .into_response(),
        Mode::Huge => axum::Json(json!({"status": "success", "result": "x".repeat(100 * 1024)}))
            .into_response(),
        Mode::HugeError => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("quota exhausted: {}", "y".repeat(5 * 1024 * 1024)),
        )
            .into_response(),
        Mode::Deep => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            format!(
                r#"{{"status": "success", "result": {}1{}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            ),
        )
            .into_response(),
        Mode::NulResult => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            r#"{"status": "success", "result": {"text": "a\u0000b"}}"#,
        )
            .into_response(),
        Mode::NulError => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Bytes::from_static(b"bad\0body"),
        )
            .into_response(),
        Mode::Sleep(d) => {
            tokio::time::sleep(d).await;
            axum::Json(json!({"status": "success"})).into_response()
        }
    }
}

impl Receiver {
    /// A receiver on `addr` (port 0 for any) answering with `modes` in turn, the last one forever.
    async fn start_on(addr: &str, modes: Vec<Mode>) -> Receiver {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind receiver");
        let r = Receiver {
            addr: listener.local_addr().expect("addr"),
            hits: Arc::default(),
            mode: Arc::new(Mutex::new(modes)),
        };
        let app = Router::new().fallback(handle).with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        r
    }

    async fn start(modes: Vec<Mode>) -> Receiver {
        Self::start_on("127.0.0.1:0", modes).await
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().expect("hits").clone()
    }
}

/// Verify `Kairos-Signature: t=<unix>,v1=<hex>` independently of kairos' own code.
fn verify_signature(hit: &Hit, secret: &str) {
    let header = hit
        .headers
        .get("kairos-signature")
        .and_then(|v| v.to_str().ok())
        .expect("signature header");
    let (t, v1) = header.split_once(",v1=").expect("t=…,v1=…");
    let t = t.strip_prefix("t=").expect("t=");
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(&hit.body);
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(v1, expected, "signature over \"<t>.<body>\"");
    let age = chrono::Utc::now().timestamp() - t.parse::<i64>().expect("unix time");
    assert!((0..60).contains(&age), "fresh timestamp");
}

fn body_of(hit: &Hit) -> Value {
    serde_json::from_slice(&hit.body).expect("JSON body")
}

fn dispatcher(pool: &PgPool, app: &TestApp) -> WebhookDispatcher {
    dispatcher_with(pool, app, Policy::default())
}

/// A dispatcher whose outbound client follows `policy`.
fn dispatcher_with(pool: &PgPool, app: &TestApp, policy: Policy) -> WebhookDispatcher {
    WebhookDispatcher::new(
        pool.clone(),
        WebhookDispatcherConfig::new("d1", format!("http://{}", app.addr)),
        Heartbeats::default(),
        kairos::batching::group_commit::GroupCommit::start(pool.clone(), 1, 64),
        outbound::Client::new(policy).expect("outbound client"),
    )
}

/// A policy whose resolver answers `name` with `ip` (then checks it like any answer).
fn pinned(name: &str, ip: &str, deny_private: bool) -> Policy {
    let mut policy = Policy {
        deny_private,
        ..Policy::default()
    };
    policy
        .pinned
        .insert(name.to_owned(), vec![ip.parse().expect("address")]);
    policy
}

async fn webhook_task(app: &TestApp, id: &str, url: &str, execution: Value) {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{id}"),
            json!({"agent_id": "hooks", "trigger": {"type": "manual"}, "execution": execution,
                   "dispatch": {"mode": "webhook", "url": url, "secret": SECRET}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert!(
        body["dispatch"].get("secret").is_none(),
        "the secret is write-only: {body}"
    );
}

async fn instance(app: &TestApp, id: &str) -> Value {
    json(app.get(&format!("/v1/instances/{id}")).await).await.1
}

#[sqlx::test]
async fn each_window_is_pushed_once_signed_and_a_success_answer_completes_it(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::Success]).await;
    let mut opts = Options::api_only("push");
    let mut trigger = TriggerLoopConfig::new("push");
    trigger.max_sleep = Duration::from_millis(500);
    opts.trigger = Some(trigger);
    let mut wh = WebhookDispatcherConfig::new("push", "");
    wh.interval = Duration::from_millis(200);
    opts.webhook = Some(wh);
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    let (status, body) = json(
        app.put(
            "/v1/tasks/every_second",
            json!({"agent_id": "hooks", "trigger": {"type": "interval", "every_seconds": 1},
                   "execution": {"overlap": "queue"},
                   "dispatch": {"mode": "webhook", "url": receiver.url(), "secret": SECRET}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    eventually(
        Duration::from_secs(20),
        "three pushed windows to succeed",
        || {
            let pool = pool.clone();
            async move {
                let n: i64 = sqlx::query_scalar(
                    "select count(*) from task_instance where status = 'SUCCESS'",
                )
                .fetch_one(&pool)
                .await
                .ok()?;
                (n >= 3).then_some(())
            }
        },
    )
    .await;
    app.shutdown().await;

    let hits = receiver.hits();
    let mut keys: Vec<String> = Vec::new();
    for hit in &hits {
        verify_signature(hit, SECRET);
        let body = body_of(hit);
        let key = hit
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .expect("Idempotency-Key")
            .to_owned();
        assert_eq!(body["instance"]["idempotency_key"], key);
        assert!(body["instance"]["lease_token"].is_string());
        let id = body["instance"]["id"].as_str().unwrap_or("");
        assert_eq!(
            body["callbacks"]["complete"],
            format!("http://{}/v1/instances/{id}/complete", app_addr_of(&body))
        );
        keys.push(key);
    }
    let unique: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "one push per window: {keys:?}");
    let rows: Vec<(String, Option<Value>)> =
        sqlx::query_as("select status, result from task_instance where status = 'SUCCESS'")
            .fetch_all(&pool)
            .await
            .expect("rows");
    assert!(
        rows.iter()
            .all(|(_, r)| r.as_ref() == Some(&json!({"pushed": true})))
    );
}

/// The host:port of the callbacks in a push body.
fn app_addr_of(body: &Value) -> String {
    body["callbacks"]["complete"]
        .as_str()
        .and_then(|u| u.strip_prefix("http://"))
        .and_then(|u| u.split('/').next())
        .unwrap_or("")
        .to_owned()
}

#[sqlx::test]
async fn a_failing_endpoint_is_retried_with_backoff_until_dead(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::Status(500)]).await;
    let app = TestApp::spawn(pool.clone()).await;
    webhook_task(
        &app,
        "broken",
        &receiver.url(),
        json!({"max_retries": 2, "retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0}}),
    )
    .await;
    let (_, inst) = json(app.post("/v1/tasks/broken/trigger", json!({})).await).await;
    let id = inst["id"].as_str().expect("id").to_owned();
    let d = dispatcher(&pool, &app);
    let scanner = RetryScanner::new(
        pool.clone(),
        RetryScannerConfig::new("s"),
        Heartbeats::default(),
    );
    let dead = eventually(Duration::from_secs(20), "the instance to go DEAD", || {
        let (d, scanner, app, id) = (&d, &scanner, &app, &id);
        async move {
            d.run_once().await.expect("dispatch");
            scanner.run_once().await.expect("scan");
            let i = instance(app, id).await;
            (i["status"] == "DEAD").then_some(i)
        }
    })
    .await;
    assert_eq!(dead["error_kind"], "dispatch");
    assert!(
        dead["error"].as_str().unwrap_or("").contains("HTTP 500"),
        "{dead}"
    );
    assert_eq!(dead["attempt"], 3);
    let hits = receiver.hits();
    assert_eq!(hits.len(), 3, "one push per attempt");
    for pair in hits.windows(2) {
        assert!(
            pair[1].at - pair[0].at >= Duration::from_millis(900),
            "backoff between attempts"
        );
    }
}

#[sqlx::test]
async fn a_202_answer_waits_for_the_agents_callback(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::Accept]).await;
    let app = TestApp::spawn(pool.clone()).await;
    webhook_task(
        &app,
        "async",
        &receiver.url(),
        json!({"timeout_seconds": 300}),
    )
    .await;
    app.post("/v1/tasks/async/trigger", json!({})).await;
    let report = dispatcher(&pool, &app).run_once().await.expect("dispatch");
    assert_eq!(report.num_accepted, 1);
    let body = body_of(&receiver.hits()[0]);
    let id = body["instance"]["id"].as_str().expect("id").to_owned();
    assert_eq!(instance(&app, &id).await["status"], "RUNNING");
    // Accepted: the lease is now the execution timeout, not the dispatch wait.
    let lease_s: f64 = sqlx::query_scalar(
        "select extract(epoch from lease_expires_at - now())::float8 from task_instance where id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&pool)
    .await
    .expect("lease");
    assert!((290.0..=300.0).contains(&lease_s), "lease {lease_s}s");
    // The agent calls back on the URL it was given, with the lease token.
    let callback = body["callbacks"]["complete"]
        .as_str()
        .expect("callback")
        .to_owned();
    let resp = app
        .client
        .post(&callback)
        .json(&json!({"lease_token": body["instance"]["lease_token"], "result": {"async": true}}))
        .send()
        .await
        .expect("callback");
    assert_eq!(resp.status().as_u16(), 200);
    let done = instance(&app, &id).await;
    assert_eq!(done["status"], "SUCCESS");
    assert_eq!(done["result"], json!({"async": true}));
}

#[sqlx::test]
async fn a_receiver_slower_than_the_execution_timeout_fails_the_attempt_and_its_late_callback_gets_409(
    pool: PgPool,
) {
    let receiver = Receiver::start(vec![Mode::Sleep(Duration::from_secs(3))]).await;
    let app = TestApp::spawn(pool.clone()).await;
    // The execution timeout (1 s) is shorter than the default dispatch timeout: it bounds the wait.
    webhook_task(&app, "slow", &receiver.url(), json!({"timeout_seconds": 1})).await;
    app.post("/v1/tasks/slow/trigger", json!({})).await;
    let started = Instant::now();
    let report = dispatcher(&pool, &app).run_once().await.expect("dispatch");
    assert_eq!(report.num_failed, 1);
    assert!(
        started.elapsed() < Duration::from_millis(2900),
        "the timeout cut the wait"
    );
    let body = body_of(&receiver.hits()[0]);
    let id = body["instance"]["id"].as_str().expect("id").to_owned();
    let failed = instance(&app, &id).await;
    assert_eq!(failed["status"], "FAILED");
    assert_eq!(failed["error_kind"], "dispatch");
    assert_eq!(
        failed["error"],
        "no answer within 1s (execution.timeout_seconds)"
    );
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": body["instance"]["lease_token"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 409, "the late callback is fenced out");
}

#[sqlx::test]
async fn a_notification_written_before_a_crash_is_delivered_after_restart(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::Status(503), Mode::Success]).await;
    // First life: no notifier runs (the daemon dies right after the state change).
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/n",
        json!({"agent_id": "na", "trigger": {"type": "manual"},
               "notify": {"on_success": [receiver.url()], "secret": "notify-secret-1"}}),
    )
    .await;
    app.post("/v1/tasks/n/trigger", json!({})).await;
    let (_, claimed) = json(
        app.post("/v1/claims", json!({"agent_id": "na", "worker_id": "w"}))
            .await,
    )
    .await;
    let i = &claimed["instances"][0];
    let id = i["id"].as_str().expect("id");
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/complete"),
            json!({"lease_token": i["lease_token"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    app.kill();
    assert!(receiver.hits().is_empty());
    let event_id: uuid::Uuid = sqlx::query_scalar("select event_id from outbox")
        .fetch_one(&pool)
        .await
        .expect("the event is in the outbox with the transition");

    // Second life: the notifier delivers it; the first try fails, the retry succeeds.
    let config = NotifierConfig {
        backoff: kairos::domain::task::RetryBackoff {
            base_seconds: 1,
            max_seconds: 1,
            jitter: 0.0,
        },
        ..NotifierConfig::default()
    };
    let notifier = Notifier::new(
        pool.clone(),
        config,
        Heartbeats::default(),
        outbound::Client::new(Policy::default()).expect("outbound client"),
    );
    eventually(Duration::from_secs(10), "the delivery", || {
        let notifier = &notifier;
        async move { (notifier.run_once().await.expect("notify").num_delivered == 1).then_some(()) }
    })
    .await;
    let hits = receiver.hits();
    assert_eq!(
        hits.len(),
        2,
        "at least once: a failed try, then the delivery"
    );
    for hit in &hits {
        assert_eq!(
            hit.headers["kairos-event-id"].to_str().ok(),
            Some(event_id.to_string().as_str()),
            "same event id on every try"
        );
        verify_signature(hit, "notify-secret-1");
        let body = body_of(hit);
        assert_eq!(body["type"], "instance.succeeded");
        assert_eq!(body["data"]["instance"]["id"], id);
    }
    // Delivered: never sent again.
    assert_eq!(notifier.run_once().await.expect("notify").num_delivered, 0);
}

#[sqlx::test]
async fn a_down_receiver_gets_its_notifications_later_without_delaying_other_pushes(pool: PgPool) {
    // The notification receiver is down: its port is chosen but nothing listens yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let down_url = format!("http://127.0.0.1:{port}/hook");
    let pushes = Receiver::start(vec![Mode::Success]).await;

    let mut opts = Options::api_only("down");
    let mut wh = WebhookDispatcherConfig::new("down", "");
    wh.interval = Duration::from_millis(100);
    opts.webhook = Some(wh);
    opts.notifier = Some(NotifierConfig {
        interval: Duration::from_millis(200),
        timeout: Duration::from_secs(2),
        backoff: kairos::domain::task::RetryBackoff {
            base_seconds: 1,
            max_seconds: 2,
            jitter: 0.2,
        },
        ..NotifierConfig::default()
    });
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    app.put(
        "/v1/tasks/alerting",
        json!({"agent_id": "al", "trigger": {"type": "manual"}, "execution": {"max_retries": 0},
               "notify": {"on_failure": [down_url]}}),
    )
    .await;
    webhook_task(
        &app,
        "other",
        &pushes.url(),
        json!({"concurrency_limit": 10}),
    )
    .await;

    // A failure produces notifications for the receiver that is down.
    app.post("/v1/tasks/alerting/trigger", json!({})).await;
    let (_, claimed) = json(
        app.post("/v1/claims", json!({"agent_id": "al", "worker_id": "w"}))
            .await,
    )
    .await;
    let i = &claimed["instances"][0];
    let id = i["id"].as_str().expect("id");
    app.post(
        &format!("/v1/instances/{id}/fail"),
        json!({"lease_token": i["lease_token"], "error": "boom"}),
    )
    .await;

    // Meanwhile other tasks' pushes go out promptly.
    let down_for = Instant::now();
    for n in 0..5 {
        let sent = Instant::now();
        app.post("/v1/tasks/other/trigger", json!({})).await;
        eventually(Duration::from_secs(5), "the push", || {
            let pushes = &pushes;
            async move { (pushes.hits().len() > n).then_some(()) }
        })
        .await;
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "push {n} took {:?}",
            sent.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    let failures: i32 = sqlx::query_scalar("select max(attempts) from outbox")
        .fetch_one(&pool)
        .await
        .expect("attempts");
    assert!(
        failures >= 2,
        "the notifier kept trying while the receiver was down"
    );

    // The receiver comes back: the notification arrives.
    let back = Receiver::start_on(&format!("127.0.0.1:{port}"), vec![Mode::Status(200)]).await;
    let arrived = eventually(Duration::from_secs(15), "the late notification", || {
        let back = &back;
        async move {
            let hits = back.hits();
            (!hits.is_empty()).then_some(hits)
        }
    })
    .await;
    assert!(down_for.elapsed() >= Duration::from_secs(5));
    let body = body_of(&arrived[0]);
    assert_eq!(body["type"], "instance.dead");
    assert_eq!(body["task_id"], "alerting");
    app.shutdown().await;
}

#[sqlx::test]
async fn redirects_are_not_followed_and_count_as_a_failed_push(pool: PgPool) {
    let target = Receiver::start(vec![Mode::Success]).await;
    let redirector = Receiver::start(vec![Mode::Redirect(target.url())]).await;
    let app = TestApp::spawn(pool.clone()).await;
    webhook_task(&app, "moved", &redirector.url(), json!({})).await;
    app.post("/v1/tasks/moved/trigger", json!({})).await;
    let report = dispatcher(&pool, &app).run_once().await.expect("dispatch");
    assert_eq!(report.num_failed, 1);
    assert!(target.hits().is_empty(), "the redirect was not followed");
    let body = body_of(&redirector.hits()[0]);
    let failed = instance(&app, body["instance"]["id"].as_str().unwrap_or("")).await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("HTTP 302"),
        "{failed}"
    );
}

#[sqlx::test]
async fn outbound_urls_outside_the_allow_list_are_refused_at_registration(pool: PgPool) {
    let mut opts = Options::api_only("allow");
    opts.outbound.allow_list = kairos::outbound::AllowList::parse("hooks.example.com");
    let app = TestApp::spawn_opts(pool, opts).await;
    let (status, problem) = json(
        app.put(
            "/v1/tasks/x",
            json!({"agent_id": "a", "trigger": {"type": "manual"},
                   "dispatch": {"mode": "webhook", "url": "http://127.0.0.1:9/hook", "secret": SECRET},
                   "notify": {"on_failure": ["https://hooks.example.com/ok", "https://elsewhere.example/no"]}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    let fields: Vec<&str> = problem["errors"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["field"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(fields, vec!["dispatch.url", "notify.on_failure[1]"]);
}

#[sqlx::test]
async fn an_oversized_answer_is_not_read_past_its_bound(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::Huge]).await;
    let app = TestApp::spawn(pool.clone()).await;
    webhook_task(&app, "huge", &receiver.url(), json!({})).await;
    app.post("/v1/tasks/huge/trigger", json!({})).await;
    let report = dispatcher(&pool, &app).run_once().await.expect("dispatch");
    assert_eq!(report.num_failed, 1);
    let body = body_of(&receiver.hits()[0]);
    let failed = instance(&app, body["instance"]["id"].as_str().unwrap_or("")).await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or("")
            .contains("larger than 65536 bytes"),
        "{failed}"
    );
}

#[sqlx::test]
async fn an_oversized_error_is_quoted_from_its_head_and_deep_json_is_named(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::HugeError, Mode::Deep]).await;
    let app = TestApp::spawn(pool.clone()).await;
    webhook_task(&app, "loud", &receiver.url(), json!({})).await;
    let mut errors = Vec::new();
    for _ in 0..2 {
        app.post("/v1/tasks/loud/trigger", json!({})).await;
        let report = dispatcher(&pool, &app).run_once().await.expect("dispatch");
        assert_eq!(report.num_failed, 1);
        let hits = receiver.hits();
        let body = body_of(&hits[hits.len() - 1]);
        let failed = instance(&app, body["instance"]["id"].as_str().unwrap_or("")).await;
        errors.push(failed["error"].as_str().unwrap_or("").to_owned());
    }
    let quoted = format!("HTTP 500: quota exhausted: {}", "y".repeat(183));
    assert_eq!(errors[0], quoted, "the first 200 characters of a 5 MB body");
    assert_eq!(
        errors[1],
        "HTTP 200: the body is JSON nested too deeply to read"
    );
}

/// The `field` → `message` pairs of a problem's `errors`.
fn errors_of(problem: &Value) -> Vec<(String, String)> {
    problem["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["field"].as_str().unwrap_or("").to_owned(),
                        e["message"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[sqlx::test]
async fn a_webhook_to_a_link_local_address_is_refused_at_registration(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let (status, problem) = json(
        app.put(
            "/v1/tasks/metadata",
            json!({"agent_id": "a", "trigger": {"type": "manual"},
                   "dispatch": {"mode": "webhook", "url": "http://169.254.169.254/latest/meta-data", "secret": SECRET},
                   "notify": {"on_success": ["http://[::ffff:169.254.169.254]/x", "http://127.0.0.1:9/ok"],
                              "on_failure": ["http://0.0.0.0:8080/", "http://2852039166/", "http://[ff02::1]/"]}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(
        errors_of(&problem),
        vec![
            (
                "dispatch.url".to_owned(),
                "destination 169.254.169.254 refused: link-local".to_owned()
            ),
            (
                "notify.on_success[0]".to_owned(),
                "destination ::ffff:169.254.169.254 refused: link-local".to_owned()
            ),
            (
                "notify.on_failure[0]".to_owned(),
                "destination 0.0.0.0 refused: unspecified".to_owned()
            ),
            (
                "notify.on_failure[1]".to_owned(),
                "destination 169.254.169.254 refused: link-local".to_owned()
            ),
            (
                "notify.on_failure[2]".to_owned(),
                "destination ff02::1 refused: multicast".to_owned()
            ),
        ]
    );
    let (status, _) = json(app.get("/v1/tasks/metadata").await).await;
    assert_eq!(status, 404, "nothing was written");
}

#[sqlx::test]
async fn a_webhook_to_a_name_that_resolves_to_link_local_is_refused_at_connect(pool: PgPool) {
    // The replica's own dispatcher, with a resolver that answers the name with the metadata
    // address.
    let mut opts = Options::api_only("rebind");
    let mut wh = WebhookDispatcherConfig::new("rebind", "");
    wh.interval = Duration::from_millis(100);
    opts.webhook = Some(wh);
    opts.outbound = pinned("metadata.example", "169.254.169.254", false);
    // Being on the allow-list does not exempt a host from the address check.
    opts.outbound.allow_list = outbound::AllowList::parse("metadata.example");
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    // A name passes registration; its addresses are checked when the push connects.
    webhook_task(
        &app,
        "rebound",
        "http://metadata.example/latest",
        json!({"retry_backoff": {"base_seconds": 600, "max_seconds": 600, "jitter": 0}}),
    )
    .await;
    app.post("/v1/tasks/rebound/trigger", json!({})).await;
    let (error, kind, status): (String, String, String) =
        eventually(Duration::from_secs(10), "the failed push", || {
            let pool = pool.clone();
            async move {
                sqlx::query_as(
                    "select error, error_kind, status from task_instance \
                     where task_id = 'rebound' and error is not null",
                )
                .fetch_optional(&pool)
                .await
                .ok()
                .flatten()
            }
        })
        .await;
    app.shutdown().await;
    assert_eq!(status, "FAILED");
    assert_eq!(kind, "dispatch");
    assert_eq!(
        error,
        "destination 169.254.169.254 refused: link-local (metadata.example)"
    );
}

#[sqlx::test]
async fn a_pinned_name_connects_to_the_checked_address(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::Success]).await;
    let app = TestApp::spawn(pool.clone()).await;
    let url = format!("http://hooks.example:{}/hook", receiver.addr.port());
    webhook_task(&app, "pinned", &url, json!({})).await;
    app.post("/v1/tasks/pinned/trigger", json!({})).await;
    let policy = pinned("hooks.example", "127.0.0.1", false);
    let report = dispatcher_with(&pool, &app, policy)
        .run_once()
        .await
        .expect("dispatch");
    assert_eq!(report.num_succeeded, 1, "{report:?}");
    assert_eq!(receiver.hits().len(), 1);
}

#[sqlx::test]
async fn outbound_deny_private_refuses_loopback_receivers_which_are_allowed_by_default(
    pool: PgPool,
) {
    let receiver = Receiver::start(vec![Mode::Success]).await;
    let port = receiver.addr.port();

    // Registration: a literal loopback address is refused only with the setting on.
    let mut opts = Options::api_only("strict");
    opts.outbound.deny_private = true;
    let strict = TestApp::spawn_opts(pool.clone(), opts).await;
    let (status, problem) = json(
        strict
            .put(
                "/v1/tasks/local",
                json!({"agent_id": "a", "trigger": {"type": "manual"},
                   "dispatch": {"mode": "webhook", "url": receiver.url(), "secret": SECRET},
                   "notify": {"on_failure": ["http://10.1.2.3/alert"]}}),
            )
            .await,
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(
        errors_of(&problem),
        vec![
            (
                "dispatch.url".to_owned(),
                "destination 127.0.0.1 refused: loopback".to_owned()
            ),
            (
                "notify.on_failure[0]".to_owned(),
                "destination 10.1.2.3 refused: private".to_owned()
            ),
        ]
    );
    strict.shutdown().await;

    // A name resolving to loopback (localhost, through the system resolver) passes
    // registration and is refused when the push connects.
    let app = TestApp::spawn(pool.clone()).await;
    webhook_task(
        &app,
        "by_name",
        &format!("http://localhost:{port}/hook"),
        json!({"max_retries": 1, "retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0}}),
    )
    .await;
    app.post("/v1/tasks/by_name/trigger", json!({})).await;
    let strict_policy = Policy {
        deny_private: true,
        ..Policy::default()
    };
    let report = dispatcher_with(&pool, &app, strict_policy)
        .run_once()
        .await
        .expect("dispatch");
    assert_eq!(report.num_failed, 1);
    assert!(receiver.hits().is_empty(), "nothing reached the receiver");
    let (error, kind): (String, String) =
        sqlx::query_as("select error, error_kind from task_instance where task_id = 'by_name'")
            .fetch_one(&pool)
            .await
            .expect("instance");
    assert_eq!(kind, "dispatch");
    assert!(
        error.starts_with("destination ") && error.ends_with("refused: loopback (localhost)"),
        "{error}"
    );

    // With the setting off (the default) the same loopback receiver gets the retry.
    sqlx::query("update task_instance set status = 'PENDING', attempt = attempt + 1, available_at = now() where task_id = 'by_name'")
        .execute(&pool)
        .await
        .expect("retry now");
    let report = dispatcher(&pool, &app).run_once().await.expect("dispatch");
    assert_eq!(report.num_succeeded, 1, "{report:?}");
    assert_eq!(receiver.hits().len(), 1);
}

#[sqlx::test]
async fn a_refused_notification_is_a_failed_delivery_with_the_reason(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/n",
        json!({"agent_id": "na", "trigger": {"type": "manual"},
               "notify": {"on_success": ["http://metadata.example/hook"]}}),
    )
    .await;
    app.post("/v1/tasks/n/trigger", json!({})).await;
    let claimed = common::claim(&app, "na", "w", 1, json!({})).await;
    let (status, _) = json(
        app.post(
            &format!(
                "/v1/instances/{}/complete",
                claimed[0]["id"].as_str().unwrap_or("")
            ),
            json!({"lease_token": claimed[0]["lease_token"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    let notifier = Notifier::new(
        pool.clone(),
        NotifierConfig::default(),
        Heartbeats::default(),
        outbound::Client::new(pinned("metadata.example", "169.254.169.254", false))
            .expect("outbound client"),
    );
    let report = notifier.run_once().await.expect("notify");
    assert_eq!(report.num_retrying, 1, "{report:?}");
    let last_error: Option<String> = sqlx::query_scalar("select last_error from outbox")
        .fetch_one(&pool)
        .await
        .expect("outbox");
    assert_eq!(
        last_error.as_deref(),
        Some("destination 169.254.169.254 refused: link-local (metadata.example)")
    );
}

#[sqlx::test]
async fn receiver_answers_holding_nul_end_the_attempt_as_a_failed_dispatch(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::NulResult, Mode::NulError]).await;
    let app = TestApp::spawn(pool.clone()).await;
    webhook_task(
        &app,
        "nul",
        &receiver.url(),
        json!({"max_retries": 1, "retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0}}),
    )
    .await;
    app.post("/v1/tasks/nul/trigger", json!({})).await;
    let d = dispatcher(&pool, &app);

    // A 2xx result that jsonb cannot store fails the attempt, naming why.
    let report = d.run_once().await.expect("dispatch");
    assert_eq!(report.num_failed, 1, "{report:?}");
    let id = body_of(&receiver.hits()[0])["instance"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let failed = instance(&app, &id).await;
    assert_eq!(failed["status"], "FAILED", "{failed}");
    assert_eq!(failed["error_kind"], "dispatch");
    assert_eq!(
        failed["error"],
        "HTTP 200: receiver returned a result holding U+0000, which cannot be stored"
    );

    // A 500 whose body holds a NUL byte is recorded with the NUL removed.
    sqlx::query("update task_instance set available_at = now() where id = $1::uuid")
        .bind(&id)
        .execute(&pool)
        .await
        .expect("retry now");
    let scanner = RetryScanner::new(
        pool.clone(),
        RetryScannerConfig::new("s"),
        Heartbeats::default(),
    );
    scanner.run_once().await.expect("scan");
    let report = d.run_once().await.expect("dispatch");
    assert_eq!(report.num_failed, 1, "{report:?}");
    let dead = instance(&app, &id).await;
    assert_eq!(dead["status"], "DEAD", "{dead}");
    assert_eq!(dead["error_kind"], "dispatch");
    assert_eq!(dead["error"], "HTTP 500: badbody");
}

#[sqlx::test]
async fn a_receiver_slower_than_the_dispatch_timeout_fails_the_attempt_naming_it(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::Sleep(Duration::from_secs(4))]).await;
    let app = TestApp::spawn(pool.clone()).await;
    let (status, body) = json(
        app.put(
            "/v1/tasks/slow",
            json!({"agent_id": "hooks", "trigger": {"type": "manual"},
                   "dispatch": {"mode": "webhook", "url": receiver.url(), "secret": SECRET,
                                "timeout_seconds": 1}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["dispatch"]["timeout_seconds"], 1);
    app.post("/v1/tasks/slow/trigger", json!({})).await;
    let d = dispatcher(&pool, &app);
    let started = Instant::now();
    let pass = tokio::spawn(async move { d.run_once().await });
    // While the push waits, its lease is the dispatch wait plus a margin, not the execution
    // timeout (600 s by default), which still bounds the run as its deadline.
    let (lease_s, deadline_s): (f64, f64) =
        eventually(Duration::from_secs(5), "the push to be sent", || {
            let (pool, receiver) = (pool.clone(), receiver.clone());
            async move {
                if receiver.hits().is_empty() {
                    return None;
                }
                sqlx::query_as(
                    "select extract(epoch from lease_expires_at - started_at)::float8, \
                            extract(epoch from deadline_at - started_at)::float8 \
                     from task_instance where task_id = 'slow'",
                )
                .fetch_one(&pool)
                .await
                .ok()
            }
        })
        .await;
    let margin = kairos::store::claim::PUSH_LEASE_MARGIN_SECONDS as f64;
    assert!((lease_s - (1.0 + margin)).abs() < 1.0, "lease {lease_s}s");
    assert!((deadline_s - 600.0).abs() < 1.0, "deadline {deadline_s}s");
    let report = pass.await.expect("join").expect("dispatch");
    assert_eq!(report.num_failed, 1);
    assert!(
        started.elapsed() < Duration::from_millis(3500),
        "the dispatch timeout cut the wait: {:?}",
        started.elapsed()
    );
    let (error, kind, status): (String, String, String) = sqlx::query_as(
        "select error, error_kind, status from task_instance where task_id = 'slow'",
    )
    .fetch_one(&pool)
    .await
    .expect("instance");
    assert_eq!((kind.as_str(), status.as_str()), ("dispatch", "FAILED"));
    assert_eq!(error, "no answer within 1s (dispatch.timeout_seconds)");
}

#[sqlx::test]
async fn pushes_waiting_at_shutdown_are_given_back_without_spending_an_attempt(pool: PgPool) {
    let receiver = Receiver::start(vec![Mode::Sleep(Duration::from_secs(120))]).await;
    let mut opts = Options::api_only("stopping");
    let mut wh = WebhookDispatcherConfig::new("stopping", "");
    wh.interval = Duration::from_millis(100);
    opts.webhook = Some(wh);
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    webhook_task(
        &app,
        "hanging",
        &receiver.url(),
        json!({"retry_backoff": {"base_seconds": 600, "max_seconds": 600, "jitter": 0}}),
    )
    .await;
    app.post("/v1/tasks/hanging/trigger", json!({})).await;
    eventually(Duration::from_secs(10), "the push to be sent", || {
        let receiver = receiver.clone();
        async move { (!receiver.hits().is_empty()).then_some(()) }
    })
    .await;
    let stopping = Instant::now();
    app.shutdown().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "shutdown did not wait for the answer: {:?}",
        stopping.elapsed()
    );
    let (status, attempt, due, failures, reason): (String, i32, bool, i32, String) =
        sqlx::query_as(
            "select i.status, i.attempt, i.available_at <= now(), t.consecutive_failures, \
                 (select e.reason from instance_events e where e.instance_id = i.id \
                  order by e.id desc limit 1) \
             from task_instance i join tasks t on t.id = i.task_id \
             where i.task_id = 'hanging'",
        )
        .fetch_one(&pool)
        .await
        .expect("instance");
    assert_eq!((status.as_str(), attempt), ("PENDING", 1));
    assert!(due, "another replica may push it at once");
    assert_eq!(failures, 0, "kairos cut the push short: nothing is charged");
    assert_eq!(
        reason,
        format!(
            "given back: {}",
            kairos::services::webhook_dispatcher::SHUTDOWN_REASON
        )
    );
}

/// The webhook work of one agent reaches its receiver: the time from `trigger` to its push.
async fn pushed_after(app: &TestApp, receiver: &Receiver, task: &str) -> Duration {
    let before = receiver.hits().len();
    let asked = Instant::now();
    let (status, body) = json(
        app.post(&format!("/v1/tasks/{task}/trigger"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let hit = eventually(Duration::from_secs(10), "the window's push", || async {
        receiver.hits().get(before).cloned()
    })
    .await;
    hit.at.saturating_duration_since(asked)
}

/// Well below the dispatcher's 60 s interval in the test below, so a push this soon was made
/// by a notification; loose enough for a loaded machine (speed is measured by kairos-bench).
const PROMPTLY: Duration = Duration::from_secs(5);

/// Every replica's dispatcher hears every agent's work notifications. Those of an agent
/// without webhook tasks must not make it claim, while a webhook window, of a known agent or of
/// one whose first webhook task was just registered, is still pushed at once.
#[sqlx::test]
async fn poll_work_of_other_agents_wakes_no_webhook_claim_and_webhook_windows_are_pushed_at_once(
    pool: PgPool,
) {
    let receiver = Receiver::start(vec![Mode::Success]).await;
    let mut opts = Options::api_only("quiet");
    let mut wh = WebhookDispatcherConfig::new("quiet", "");
    // No pass of its own during the test: what it does, notifications made it do.
    wh.interval = Duration::from_secs(60);
    opts.webhook = Some(wh);
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    webhook_task(&app, "pushed", &receiver.url(), json!({})).await;
    let (status, body) = json(
        app.put(
            "/v1/tasks/polled",
            json!({"agent_id": "pollers", "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 1000}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert!(pushed_after(&app, &receiver, "pushed").await < PROMPTLY);

    let claims = "kairos_webhook_claims_total";
    let reads = "kairos_webhook_agent_reads_total";
    let before = app.get("/metrics").await.text().await.expect("metrics");
    let started = Instant::now();
    let mut taken = 0;
    for k in 0..100 {
        let (status, body) = json(
            app.post(
                "/v1/tasks/polled/trigger",
                json!({"window_key": format!("k{k:03}")}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
        if k % 10 == 9 {
            taken += common::claim(&app, "pollers", "w", 100, json!({}))
                .await
                .len();
        }
    }
    assert_eq!(taken, 100);
    let secs = started.elapsed().as_secs_f64();
    let after = app.get("/metrics").await.text().await.expect("metrics");
    let moved = |series: &str| common::sample(&after, series) - common::sample(&before, series);
    // One claim may follow the first push, whose end frees its slot.
    assert!(
        moved(claims) <= 1.0,
        "{} webhook claims for 100 windows of a poll-mode agent",
        moved(claims)
    );
    assert!(
        moved(reads) <= 10.0 * secs + 2.0,
        "{} reads of the webhook agents in {secs:.1} s",
        moved(reads)
    );

    assert!(pushed_after(&app, &receiver, "pushed").await < PROMPTLY);
    let (status, body) = json(
        app.put(
            "/v1/tasks/newcomer",
            json!({"agent_id": "late_hooks", "trigger": {"type": "manual"},
                   "dispatch": {"mode": "webhook", "url": receiver.url(), "secret": SECRET}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert!(pushed_after(&app, &receiver, "newcomer").await < PROMPTLY);
    app.shutdown().await;
}

#[sqlx::test]
async fn a_notification_occurs_at_the_database_time_of_its_transition(pool: PgPool) {
    use kairos::store::outbox::{self, Event, NotifyList};
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/n",
        json!({"agent_id": "na", "trigger": {"type": "manual"},
               "notify": {"on_failure": ["http://127.0.0.1:9/hook"]}}),
    )
    .await;
    // `occurred_at` is the transaction's time by the database clock, as `finished_at` and
    // every other time of the transition are, not the application's clock.
    let mut tx = pool.begin().await.expect("tx");
    let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("select now()")
        .fetch_one(&mut *tx)
        .await
        .expect("now");
    let written = outbox::enqueue(
        &mut tx,
        &[Event {
            kind: "instance.dead",
            task_id: "n".to_owned(),
            instance_id: None,
            list: NotifyList::OnFailure,
            data: json!({}),
        }],
    )
    .await
    .expect("enqueue");
    assert_eq!(written, 1);
    let payload: Value = sqlx::query_scalar("select payload from outbox where task_id = 'n'")
        .fetch_one(&mut *tx)
        .await
        .expect("payload");
    tx.commit().await.expect("commit");
    assert_eq!(
        payload["occurred_at"],
        kairos::domain::schedule::format_instant(now),
        "{payload}"
    );
    // Spelled as every instant of the API is, with 0, 3 or 6 sub-second digits.
    for at in [
        "2026-11-29T00:30:00Z",
        "2026-11-29T00:30:00.5Z",
        "2026-11-29T00:30:00.123Z",
        "2026-11-29T00:30:00.000001Z",
        "2026-11-29T00:30:00.123456Z",
    ] {
        let at: chrono::DateTime<chrono::Utc> = at.parse().expect("instant");
        let sql = outbox::OCCURRED_AT_SQL.replace("now()", "$1::timestamptz");
        let spelled: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("select {sql}")))
            .bind(at)
            .fetch_one(&pool)
            .await
            .expect("spelling");
        assert_eq!(spelled, kairos::domain::schedule::format_instant(at));
    }
    app.shutdown().await;
}

/// One task's backlog pushed by three replicas' dispatchers at once: every instance reaches
/// the receiver once and is recorded SUCCESS once, under the lease token its push carried,
/// and the task never has more RUNNING instances than its `concurrency_limit` (which is
/// below the dispatchers' per-task and per-replica bounds here, so it is the bound that holds).
#[sqlx::test]
async fn a_backlog_of_one_task_is_pushed_once_each_by_several_replicas_within_its_limit(
    pool: PgPool,
) {
    const N: usize = 1500;
    const LIMIT: i64 = 40;
    let receiver = Receiver::start(vec![Mode::Success]).await;
    let api = TestApp::spawn(pool.clone()).await;
    webhook_task(
        &api,
        "backlog",
        &receiver.url(),
        json!({"concurrency_limit": LIMIT, "max_retries": 3}),
    )
    .await;
    common::backlog(&pool, "backlog", "hooks", N as i32, 5, 4).await;
    let mut replicas = Vec::new();
    for k in 0..3 {
        let node = format!("replica{k}");
        let mut opts = Options::api_only(node.clone());
        let mut wh = WebhookDispatcherConfig::new(node, "");
        wh.interval = Duration::from_millis(100);
        assert!(wh.max_per_task > LIMIT && wh.max_in_flight as i64 > LIMIT);
        opts.webhook = Some(wh);
        replicas.push(TestApp::spawn_opts(pool.clone(), opts).await);
    }
    let most_running = Arc::new(std::sync::atomic::AtomicI64::new(0));
    eventually(Duration::from_secs(120), "the backlog to be pushed", || {
        let pool = pool.clone();
        let most_running = most_running.clone();
        async move {
            let (running, done): (i64, i64) = sqlx::query_as(
                "select count(*) filter (where status = 'RUNNING'), \
                     count(*) filter (where status = 'SUCCESS') \
                 from task_instance where task_id = 'backlog'",
            )
            .fetch_one(&pool)
            .await
            .ok()?;
            most_running.fetch_max(running, std::sync::atomic::Ordering::Relaxed);
            (done == N as i64).then_some(())
        }
    })
    .await;
    for r in replicas {
        r.shutdown().await;
    }
    let most_running = most_running.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        most_running <= LIMIT,
        "{most_running} RUNNING seen, concurrency_limit {LIMIT}"
    );

    // Each instance once at the receiver, with the lease token its success is recorded under.
    let hits = receiver.hits();
    assert_eq!(hits.len(), N, "one push per instance");
    let mut pushed: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for hit in &hits {
        let body = body_of(hit);
        let id = body["instance"]["id"]
            .as_str()
            .expect("instance id")
            .to_owned();
        let token = body["instance"]["lease_token"]
            .as_str()
            .expect("lease token")
            .to_owned();
        assert!(
            pushed.insert(id.clone(), token).is_none(),
            "{id} pushed twice"
        );
    }
    // (id, status, attempt, reported lease token, finished by) of every instance.
    type Row = (uuid::Uuid, String, i32, Option<uuid::Uuid>, Option<String>);
    let rows: Vec<Row> = sqlx::query_as(
        "select id, status, attempt, reported_lease_token, finished_by from task_instance \
         where task_id = 'backlog'",
    )
    .fetch_all(&pool)
    .await
    .expect("rows");
    assert_eq!(rows.len(), N);
    let mut pushers = std::collections::HashSet::new();
    for (id, status, attempt, reported, finished_by) in rows {
        assert_eq!((status.as_str(), attempt), ("SUCCESS", 1), "{id}");
        assert_eq!(
            reported.map(|t| t.to_string()).as_deref(),
            pushed.get(&id.to_string()).map(String::as_str),
            "{id} recorded under the lease its push carried"
        );
        pushers.insert(finished_by.unwrap_or_default());
    }
    assert!(
        pushers.iter().all(|p| p.starts_with("webhook:replica")),
        "{pushers:?}"
    );
    let events: i64 = sqlx::query_scalar(
        "select count(*) from instance_events e join task_instance i on i.id = e.instance_id \
         where i.task_id = 'backlog'",
    )
    .fetch_one(&pool)
    .await
    .expect("events");
    assert_eq!(events, 0, "no attempt left the happy path");
    api.shutdown().await;
}
