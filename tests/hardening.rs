//! Resource limits, open mode and shutdown over real sockets: slow or idle clients cannot hold
//! the server, long polls are capped and do not wake as a herd, API load cannot starve the
//! background loops, and a stopping replica refuses new claims at once.

mod common;

use std::time::Duration;

use common::{TestApp, claim, eventually, json};
use kairos::app::{Options, Pools};
use kairos::http::server::ServerLimits;
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn manual_task(app: &TestApp, id: &str, agent: &str) {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{id}"),
            json!({"agent_id": agent, "trigger": {"type": "manual"}, "execution": {"concurrency_limit": 100}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

async fn trigger(app: &TestApp, id: &str) {
    let (status, body) = json(
        app.post(&format!("/v1/tasks/{id}/trigger"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

/// Read until the server closes the connection; `true` if it did within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[sqlx::test]
async fn a_client_trickling_its_headers_is_cut_off(pool: PgPool) {
    let mut opts = Options::api_only("slowloris");
    opts.server.header_read_timeout = Duration::from_secs(1);
    let app = TestApp::spawn_opts(pool, opts).await;
    let mut stream = TcpStream::connect(app.addr).await.expect("connect");
    let start = std::time::Instant::now();
    let trickle = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut cut_off = false;
    for byte in trickle {
        if stream.write_all(&[*byte]).await.is_err() {
            cut_off = true;
            break;
        }
        if closed_within(&mut stream, Duration::from_millis(200)).await {
            cut_off = true;
            break;
        }
    }
    assert!(
        cut_off,
        "a client sending one header byte per 200 ms kept its connection"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "cut off only after {:?}",
        start.elapsed()
    );
    // Well-behaved clients are still served.
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
}

#[sqlx::test]
async fn a_client_that_connects_and_sends_nothing_is_cut_off(pool: PgPool) {
    let mut opts = Options::api_only("idle");
    opts.server.header_read_timeout = Duration::from_secs(1);
    let app = TestApp::spawn_opts(pool, opts).await;
    let mut silent = TcpStream::connect(app.addr).await.expect("connect");
    assert!(
        closed_within(&mut silent, Duration::from_secs(5)).await,
        "a connection that never sent a byte was kept past the header-read timeout"
    );
    // So is one that idles after a first request (keep-alive).
    let mut idle = TcpStream::connect(app.addr).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    assert!(
        closed_within(&mut idle, Duration::from_secs(5)).await,
        "an idle keep-alive connection was kept past the header-read timeout"
    );
}

#[sqlx::test]
async fn connections_past_the_cap_wait_until_one_closes(pool: PgPool) {
    let mut opts = Options::api_only("cap");
    opts.server = ServerLimits {
        header_read_timeout: Duration::from_secs(30),
        max_connections: 2,
    };
    let app = TestApp::spawn_opts(pool, opts).await;
    let idle1 = TcpStream::connect(app.addr).await.expect("connect");
    let _idle2 = TcpStream::connect(app.addr).await.expect("connect");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(700))
        .build()
        .expect("client");
    let refused = client.get(app.url("/healthz")).send().await;
    assert!(
        refused.is_err(),
        "a third connection was served past a cap of 2"
    );
    drop(idle1);
    let ok = eventually(Duration::from_secs(10), "a free connection slot", || {
        let client = client.clone();
        let url = app.url("/healthz");
        async move {
            client
                .get(url)
                .send()
                .await
                .ok()
                .filter(|r| r.status() == 200)
        }
    })
    .await;
    assert_eq!(ok.status(), StatusCode::OK);
}

#[sqlx::test]
async fn a_request_whose_body_never_arrives_gets_408(pool: PgPool) {
    let mut opts = Options::api_only("slow-body");
    opts.request_timeout = Duration::from_secs(1);
    let app = TestApp::spawn_opts(pool, opts).await;
    let mut stream = TcpStream::connect(app.addr).await.expect("connect");
    stream
        .write_all(
            b"PUT /v1/tasks/t HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
        )
        .await
        .expect("write");
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 1024];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer within 10 s");
    let head = String::from_utf8_lossy(&buf);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    let (n,): (i64,) = sqlx::query_as("select count(*) from tasks")
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(n, 0);
    // A body declared larger than max_body_bytes is refused at once, not awaited.
    let mut stream = TcpStream::connect(app.addr).await.expect("connect");
    stream
        .write_all(
            b"PUT /v1/tasks/t HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\ncontent-length: 99999999999\r\n\r\n",
        )
        .await
        .expect("write");
    let mut chunk = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_millis(900), stream.read(&mut chunk))
        .await
        .expect("answered before the request timeout")
        .expect("read");
    let head = String::from_utf8_lossy(&chunk[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
}

#[sqlx::test]
async fn past_claim_max_waiters_a_claim_that_would_wait_gets_429(pool: PgPool) {
    // The default cap: 1,024 long polls wait, the 1,025th is refused.
    let _ = kairos::telemetry::metrics_handle();
    let opts = Options::api_only("waiters");
    let max = opts.claims.max_waiters;
    assert_eq!(max, 1024);
    let app = TestApp::spawn_opts(pool, opts).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..max {
        let client = client.clone();
        let url = app.url("/v1/claims");
        waiters.spawn(async move {
            client
                .post(url)
                .json(&json!({"agent_id": "w", "worker_id": format!("w{i}"), "wait_seconds": 20}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        });
    }
    eventually(Duration::from_secs(60), "1,024 waiting claims", || async {
        (metric("kairos_claim_waiters") >= max as u64).then_some(())
    })
    .await;
    let refused = app
        .post(
            "/v1/claims",
            json!({"agent_id": "w", "worker_id": "one-too-many", "wait_seconds": 1}),
        )
        .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    // A claim that does not wait is still answered, and so is one that finds work.
    assert!(claim(&app, "w", "no-wait", 1, json!({})).await.is_empty());
    manual_task(&app, "t", "other").await;
    trigger(&app, "t").await;
    assert_eq!(
        claim(&app, "other", "x", 1, json!({"wait_seconds": 5}))
            .await
            .len(),
        1
    );
    // When the waiters leave, their slots are free again.
    app.stop_taking_work();
    while let Some(r) = waiters.join_next().await {
        assert_eq!(r.expect("join").expect("waiter answered"), 200);
    }
}

/// The value of a counter or gauge (`name{labels}`) in this process's metrics.
fn metric(name_and_labels: &str) -> u64 {
    let Some(handle) = kairos::telemetry::metrics_handle() else {
        panic!("metrics recorder not installed");
    };
    handle
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// `n` PENDING instances of `task` (agent `agent`) due now, then `kairos_work` notifications
/// with `payloads`, in one transaction.
async fn due_now(app: &TestApp, task: &str, agent: &str, n: i32, payloads: &[String]) {
    let mut tx = app.pool.begin().await.expect("begin");
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, max_attempts, available_at) \
         select gen_random_uuid(), $1, 'm' || g, now(), 'PENDING', 'manual', $2, 3, now() from generate_series(1, $3) g",
    )
    .bind(task)
    .bind(agent)
    .bind(n)
    .execute(&mut *tx)
    .await
    .expect("insert");
    sqlx::query("select pg_notify('kairos_work', p) from unnest($1::text[]) as p")
        .bind(payloads)
        .execute(&mut *tx)
        .await
        .expect("notify");
    tx.commit().await.expect("commit");
}

/// `n` long polls (8 s) of `agent` for up to `max` instances each; each answers how many it got.
fn long_polls(app: &TestApp, agent: &str, n: usize, max: i64) -> tokio::task::JoinSet<usize> {
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..n {
        let client = app.client.clone();
        let url = app.url("/v1/claims");
        let body = json!({"agent_id": agent, "worker_id": format!("w{i}"), "max_instances": max, "wait_seconds": 8});
        waiters.spawn(async move {
            let resp = client.post(url).json(&body).send().await.expect("sent");
            let body: serde_json::Value = resp.json().await.expect("json");
            body["instances"].as_array().map_or(0, Vec::len)
        });
    }
    waiters
}

#[sqlx::test]
async fn waiters_of_one_agent_wake_only_as_many_as_there_is_work_for(pool: PgPool) {
    let _ = kairos::telemetry::metrics_handle();
    let app = TestApp::spawn(pool).await;
    manual_task(&app, "h", "herd").await;
    let empty = r#"kairos_claims_total{outcome="empty"}"#;
    let mut waiters = long_polls(&app, "herd", 20, 1);
    eventually(Duration::from_secs(10), "20 waiters", || async {
        (metric(empty) >= 20).then_some(())
    })
    .await;
    // A waiter counts its empty look before it reads when its agent's next work is due; one
    // that reads that after the trigger below sees work due now and rightly looks again.
    // Give the last ones time to fall asleep, so only wake-ups are measured.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = metric(empty);

    // One trigger, one notification: one waiter looks and takes it; nobody else looks.
    trigger(&app, "h").await;
    eventually(Duration::from_secs(5), "a waiter answered", || async {
        (metric(r#"kairos_claims_total{outcome="claimed"}"#) >= 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let woken_empty = metric(empty) - before;
    assert!(
        woken_empty <= 1,
        "{woken_empty} waiters woke for one instance and found nothing"
    );

    // Three instances in one transaction, one notification: a full claim passes the wake-up
    // on, so three waiters take one each and the fourth finds nothing.
    due_now(&app, "h", "herd", 3, &["herd".to_owned()]).await;
    eventually(Duration::from_secs(5), "three more claimed", || async {
        (metric(r#"kairos_claims_total{outcome="claimed"}"#) >= 4).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let woken_empty = metric(empty) - before;
    assert!(
        woken_empty <= 2,
        "{woken_empty} empty looks for four instances"
    );
    app.stop_taking_work();
    let mut got = 0;
    while let Some(n) = waiters.join_next().await {
        got += n.expect("join");
    }
    assert_eq!(got, 4);
}

#[sqlx::test]
async fn waiters_of_one_agent_wake_together_for_a_batch_of_work(pool: PgPool) {
    let _ = kairos::telemetry::metrics_handle();
    let app = TestApp::spawn(pool).await;
    manual_task(&app, "c", "crowd").await;
    let mut waiters = long_polls(&app, "crowd", 8, 10);
    eventually(Duration::from_secs(10), "8 waiters", || async {
        (metric("kairos_claim_waiters") >= 8).then_some(())
    })
    .await;
    let rounds_before = metric("kairos_claim_round_requests_count");

    // 80 instances in one transaction, announced as such (the trigger's payload): the eight
    // waiters wake at once and share claim rounds, instead of waking one after another.
    due_now(
        &app,
        "c",
        "crowd",
        80,
        &kairos::store::work_payloads("crowd", 80),
    )
    .await;
    let mut got = Vec::new();
    while let Some(n) = waiters.join_next().await {
        got.push(n.expect("join"));
    }
    assert_eq!(got, vec![10; 8], "each waiter took a full claim");
    let rounds = metric("kairos_claim_round_requests_count") - rounds_before;
    assert!(
        rounds < 8,
        "eight waiters woken one after another would each claim in a round of their own; {rounds} rounds"
    );
}

#[sqlx::test]
async fn the_background_loops_keep_their_connections_when_the_api_has_none(pool: PgPool) {
    let options = pool.connect_options().as_ref().clone();
    let api = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(1))
        .connect_with(options.clone())
        .await
        .expect("api pool");
    let loops = PgPoolOptions::new()
        .max_connections(6)
        .connect_with(options)
        .await
        .expect("loops pool");
    let mut opts = Options::api_only("pools");
    let mut trigger = kairos::services::trigger_loop::TriggerLoopConfig::new("pools");
    trigger.max_sleep = Duration::from_millis(200);
    opts.trigger = Some(trigger);
    let app = TestApp::spawn_pools(
        pool.clone(),
        Pools {
            api: api.clone(),
            listen: loops.clone(),
            watch: loops.clone(),
            loops,
            health: Default::default(),
        },
        opts,
    )
    .await;
    let (status, body) = json(
        app.put(
            "/v1/tasks/every-second",
            common::cron_task("a", "* * * * * *"),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // Every API connection is taken (as by a flood of slow requests)...
    let _held = (
        api.begin().await.expect("hold 1"),
        api.begin().await.expect("hold 2"),
    );
    let (status, _) = json(app.get("/v1/tasks").await).await;
    assert_eq!(status, 503, "the API has no connection left");
    // ...and the trigger loop still materialises windows on its own pool.
    let (before,): (i64,) = sqlx::query_as("select count(*) from task_instance")
        .fetch_one(&pool)
        .await
        .expect("count");
    eventually(Duration::from_secs(10), "two more windows", || {
        let pool = pool.clone();
        async move {
            let (n,): (i64,) = sqlx::query_as("select count(*) from task_instance")
                .fetch_one(&pool)
                .await
                .ok()?;
            (n >= before + 2).then_some(())
        }
    })
    .await;
}

#[sqlx::test]
async fn after_shutdown_begins_new_claims_get_503_and_waiting_ones_return(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    manual_task(&app, "s", "sd").await;
    trigger(&app, "s").await;
    let held = claim(&app, "sd", "w1", 1, json!({})).await;
    assert_eq!(held.len(), 1);
    let client = app.client.clone();
    let url = app.url("/v1/claims");
    let waiting = tokio::spawn(async move {
        let start = std::time::Instant::now();
        let resp = client
            .post(url)
            .json(&json!({"agent_id": "sd", "worker_id": "w2", "wait_seconds": 20}))
            .send()
            .await
            .expect("sent");
        (
            resp.status(),
            resp.text().await.unwrap_or_default(),
            start.elapsed(),
        )
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.stop_taking_work();
    let (status, body, took) = waiting.await.expect("join");
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("\"instances\":[]"), "{body}");
    assert!(
        took < Duration::from_secs(5),
        "the waiting claim returned after {took:?}"
    );

    let resp = app
        .post(
            "/v1/claims",
            json!({"agent_id": "sd", "worker_id": "w3", "wait_seconds": 20}),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    // Agents can still report what they hold.
    let i = &held[0];
    let (status, body) = json(
        app.post(
            &format!("/v1/instances/{}/complete", i["id"].as_str().expect("id")),
            json!({"lease_token": i["lease_token"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

async fn raw(
    app: &TestApp,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut req = app.client.request(method, app.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if !body.is_empty() {
        req = req.body(body.to_owned());
    }
    let resp = req.send().await.expect("sent");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

#[sqlx::test]
async fn open_mode_refuses_what_a_web_page_could_send(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let task = r#"{"agent_id": "a", "trigger": {"type": "manual"}}"#;
    // A form post, or a text/plain "simple request", is 415.
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, body) = raw(
            &app,
            Method::PUT,
            "/v1/tasks/f",
            &[("content-type", ct)],
            task,
        )
        .await;
        assert_eq!(status, 415, "{ct}: {body}");
    }
    let (status, body) = raw(&app, Method::PUT, "/v1/tasks/f", &[], task).await;
    assert_eq!(status, 415, "no content type: {body}");
    // A page on another origin is refused even without a body.
    let (status, body) = raw(
        &app,
        Method::POST,
        "/v1/tasks/f/pause",
        &[("origin", "https://evil.example")],
        "",
    )
    .await;
    assert_eq!(status, 403, "{body}");
    // A name that resolves to 127.0.0.1 through rebinding still says so in Host: 421.
    for host in [
        "evil.example",
        "evil.example:8080",
        "10.1.2.3",
        "localhost.evil.example",
    ] {
        let (status, body) = raw(&app, Method::GET, "/v1/tasks", &[("host", host)], "").await;
        assert_eq!(status, 421, "{host}: {body}");
    }
    let (n,): (i64,) = sqlx::query_as("select count(*) from tasks")
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(n, 0, "a refused request wrote a task");
    // What a local client sends is served.
    for host in ["localhost:8080", "127.0.0.1", "[::1]:8080"] {
        let (status, body) = raw(&app, Method::GET, "/v1/tasks", &[("host", host)], "").await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    let (status, body) = raw(
        &app,
        Method::PUT,
        "/v1/tasks/f",
        &[
            ("content-type", "application/json"),
            ("origin", "http://localhost:3000"),
        ],
        task,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = raw(&app, Method::POST, "/v1/tasks/f/pause", &[], "").await;
    assert_eq!(status, 200);
    // Probes answer whatever the Host.
    let (status, _) = raw(
        &app,
        Method::GET,
        "/healthz",
        &[("host", "kairos.internal")],
        "",
    )
    .await;
    assert_eq!(status, 200);
}

#[sqlx::test]
async fn readiness_does_not_echo_database_errors(pool: PgPool) {
    let own = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(pool.connect_options().as_ref().clone())
        .await
        .expect("pool");
    let app = TestApp::spawn_pools(
        pool.clone(),
        Pools::shared(own.clone()),
        Options::api_only("ready"),
    )
    .await;
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
    own.close().await;
    let (status, body) = json(app.get("/readyz").await).await;
    assert_eq!(status, 503);
    assert_eq!(body["problems"], json!(["database unreachable"]));
    assert_eq!(body["database"], "unreachable");
}
