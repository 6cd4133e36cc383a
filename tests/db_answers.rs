//! What agents and operators get while the database misbehaves, in one process over a real
//! PostgreSQL: errors of a restarting or failed-over database answer 503 with `Retry-After`,
//! a claim whose caller went away gives its rows back, a claim repeated under its `claim_id`
//! gets the same instances, and leases that expired during an outage are renewed, not charged.

mod common;

use std::time::Duration;

use common::{TestApp, backlog, claim, json};
use kairos::services::timeout_reaper::{TimeoutReaper, TimeoutReaperConfig};
use serde_json::{Value, json};
use sqlx::PgPool;

async fn manual_task(app: &TestApp, id: &str, agent: &str) {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{id}"),
            json!({"agent_id": agent, "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 100, "max_retries": 1}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

fn ids(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|i| format!("{}/{}", i["id"], i["lease_token"]))
        .collect()
}

#[sqlx::test]
async fn a_claim_repeated_with_its_claim_id_gets_the_same_instances_and_tokens(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "cid", "ca").await;
    backlog(&pool, "cid", "ca", 10, 60, 2).await;
    let first = claim(&app, "ca", "w1", 3, json!({"claim_id": "c-1"})).await;
    assert_eq!(first.len(), 3);
    let again = claim(&app, "ca", "w1", 3, json!({"claim_id": "c-1"})).await;
    assert_eq!(
        ids(&again),
        ids(&first),
        "the same answer, nothing more taken"
    );
    let running: i64 =
        sqlx::query_scalar("select count(*) from task_instance where status = 'RUNNING'")
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(running, 3);
    // Another worker's claim_id space is its own; a new claim_id takes more.
    let other = claim(&app, "ca", "w2", 3, json!({"claim_id": "c-1"})).await;
    assert_eq!(other.len(), 3);
    assert!(ids(&other).iter().all(|i| !ids(&first).contains(i)));
    // Once the first answer's instances are all reported, the claim_id claims anew.
    for i in &first {
        let (status, _) = json(
            app.post(
                &format!("/v1/instances/{}/complete", i["id"].as_str().unwrap_or("")),
                json!({"lease_token": i["lease_token"]}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200);
    }
    let fresh = claim(&app, "ca", "w1", 3, json!({"claim_id": "c-1"})).await;
    assert_eq!(fresh.len(), 3);
    assert!(ids(&fresh).iter().all(|i| !ids(&first).contains(i)));
    // Bad claim ids are refused naming the field.
    for bad in [
        json!(""),
        json!("x".repeat(129)),
        json!(7),
        json!("a\u{0}b"),
    ] {
        let (status, body) = json(
            app.post(
                "/v1/claims",
                json!({"agent_id": "ca", "worker_id": "w1", "claim_id": bad}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 422, "{body}");
        assert!(
            body["detail"].as_str().unwrap_or("").contains("claim_id"),
            "{body}"
        );
    }
}

#[sqlx::test]
async fn a_claim_whose_caller_went_away_gives_its_rows_back_without_spending_an_attempt(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "gone", "ga").await;
    backlog(&pool, "gone", "ga", 5, 60, 2).await;
    // Writes to task_instance wait while this is held: the claim's update blocks, and its
    // caller gives up before the claim commits.
    let mut blocker = pool.begin().await.expect("begin");
    sqlx::query("lock table task_instance in share mode")
        .execute(&mut *blocker)
        .await
        .expect("lock");
    let url = app.url("/v1/claims");
    let caller = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .json(&json!({"agent_id": "ga", "worker_id": "w", "max_instances": 5}))
            .send()
            .await
    });
    // The caller gives up (its connection closes) once the claim waits for the lock, however
    // long the claim took to get there.
    common::eventually(Duration::from_secs(10), "the claim waiting", || async {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity \
             where datname = current_database() and wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        .expect("activity");
        (waiting > 0).then_some(())
    })
    .await;
    caller.abort();
    assert!(
        caller.await.is_err_and(|e| e.is_cancelled()),
        "the caller gave up"
    );
    blocker.commit().await.expect("release");
    // The claim commits, finds nobody to answer, and gives every row back.
    common::eventually(Duration::from_secs(10), "rows given back", || async {
        let (pending, given_back): (i64, i64) = sqlx::query_as(
            "select (select count(*) from task_instance where status = 'PENDING' and attempt = 1), \
                    (select count(*) from instance_events where to_status = 'PENDING' \
                        and reason like 'given back%')",
        )
        .fetch_one(&pool)
        .await
        .expect("count");
        (pending == 5 && given_back == 5).then_some(())
    })
    .await;
    let failures: i32 =
        sqlx::query_scalar("select consecutive_failures from tasks where id = 'gone'")
            .fetch_one(&pool)
            .await
            .expect("task");
    assert_eq!(failures, 0);
    // And they are claimable at once.
    assert_eq!(claim(&app, "ga", "w2", 5, json!({})).await.len(), 5);
}

#[sqlx::test]
async fn errors_of_a_database_that_turned_read_only_answer_503_with_retry_after(pool: PgPool) {
    let db: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&pool)
        .await
        .expect("db");
    // What a primary that became a standby answers to writes: SQLSTATE 25006.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "alter database \"{db}\" set default_transaction_read_only = on"
    )))
    .execute(&pool)
    .await
    .expect("read only");
    let opts: sqlx::postgres::PgConnectOptions = pool.connect_options().as_ref().clone();
    let fresh = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect_with(opts)
        .await
        .expect("pool");
    let app = TestApp::spawn(fresh).await;
    let resp = app
        .put(
            "/v1/tasks/ro",
            json!({"agent_id": "ra", "trigger": {"type": "manual"}}),
        )
        .await;
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let (_, body) = json(resp).await;
    assert_eq!(
        body["type"], "https://kairos.dev/problems/unavailable",
        "{body}"
    );
}

async fn claimed_and_expired(app: &TestApp, pool: &PgPool, task: &str) {
    manual_task(app, task, "ra").await;
    backlog(pool, task, "ra", 2, 60, 3).await;
    assert_eq!(
        claim(app, "ra", "w", 2, json!({"lease_seconds": 30}))
            .await
            .len(),
        2
    );
    // The leases were renewed 40 s ago and expired 10 s ago.
    sqlx::query(
        "update task_instance set updated_at = now() - interval '40 seconds', \
             lease_expires_at = now() - interval '10 seconds' where task_id = $1",
    )
    .bind(task)
    .execute(pool)
    .await
    .expect("expire");
}

#[sqlx::test]
async fn leases_that_expired_during_a_recorded_outage_are_renewed_not_charged(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    claimed_and_expired(&app, &pool, "outage").await;
    sqlx::query(
        "insert into db_unreachable (node_id, started_at, ended_at) \
         values ('n1', now() - interval '30 seconds', now() - interval '1 second')",
    )
    .execute(&pool)
    .await
    .expect("outage");
    let reaper = TimeoutReaper::new(
        pool.clone(),
        TimeoutReaperConfig::new("r"),
        Default::default(),
    );
    let report = reaper.run_once().await.expect("reap");
    assert_eq!(
        (report.num_reaped, report.num_renewed),
        (0, 2),
        "{report:?}"
    );
    let (running, failures): (i64, i32) = sqlx::query_as(
        "select (select count(*) from task_instance where status = 'RUNNING' \
                    and lease_expires_at > now() + interval '25 seconds'), \
                (select consecutive_failures from tasks where id = 'outage')",
    )
    .fetch_one(&pool)
    .await
    .expect("state");
    assert_eq!((running, failures), (2, 0));
    // Renewed once: when the renewed lease expires too, the attempt is charged as usual.
    sqlx::query("update task_instance set lease_expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .expect("expire again");
    let report = reaper.run_once().await.expect("reap");
    assert_eq!(
        (report.num_reaped, report.num_renewed),
        (2, 0),
        "{report:?}"
    );
}

#[sqlx::test]
async fn leases_that_expired_without_an_outage_are_reaped(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    claimed_and_expired(&app, &pool, "plain").await;
    // An outage that ended before the leases were last renewed does not excuse them.
    sqlx::query(
        "insert into db_unreachable (node_id, started_at, ended_at) \
         values ('n1', now() - interval '90 seconds', now() - interval '60 seconds')",
    )
    .execute(&pool)
    .await
    .expect("outage");
    let reaper = TimeoutReaper::new(
        pool.clone(),
        TimeoutReaperConfig::new("r"),
        Default::default(),
    );
    let report = reaper.run_once().await.expect("reap");
    assert_eq!(
        (report.num_reaped, report.num_renewed),
        (2, 0),
        "{report:?}"
    );
}

#[sqlx::test]
async fn a_lost_listen_connection_wakes_waiting_claims(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "quiet", "la").await;
    let waiting = {
        let (client, url) = (app.client.clone(), app.url("/v1/claims"));
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let resp = client
                .post(url)
                .json(&json!({"agent_id": "la", "worker_id": "w", "wait_seconds": 20}))
                .send()
                .await
                .expect("claim");
            (started.elapsed(), json(resp).await)
        })
    };
    // The long poll is asleep, with no work and so no relook due.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Work appears without a notification (as one sent while the connection is gone would be
    // lost), and the LISTEN connection is cut.
    backlog(&pool, "quiet", "la", 1, 1, 2).await;
    let cut: i64 = sqlx::query_scalar(
        "select count(pg_terminate_backend(pid)) from pg_stat_activity \
         where datname = current_database() and query ilike 'listen%'",
    )
    .fetch_one(&pool)
    .await
    .expect("terminate");
    assert_eq!(cut, 1, "the work signal's LISTEN connection");
    let (waited, (status, body)) = waiting.await.expect("join");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["instances"].as_array().map(Vec::len),
        Some(1),
        "{body}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "woken when the connection was lost, not at the deadline: {waited:?}"
    );
}

/// A TCP relay between kairos and PostgreSQL that can be cut: open connections are closed and
/// new ones refused until it is restored, as a database that went away would do.
struct Relay {
    addr: std::net::SocketAddr,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cuts: tokio::sync::watch::Sender<u64>,
}

impl Relay {
    async fn start(target: std::net::SocketAddr) -> Relay {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (cuts, _) = tokio::sync::watch::channel(0u64);
        let (flag, watch) = (up.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !flag.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let mut cut = watch.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Relay { addr, up, cuts }
    }

    fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[sqlx::test]
async fn while_the_database_is_unreachable_calls_answer_503_within_seconds_and_recover(
    pool: PgPool,
) {
    let direct = pool.connect_options();
    let target: std::net::SocketAddr = format!("{}:{}", direct.get_host(), direct.get_port())
        .parse()
        .expect("database address");
    let relay = Relay::start(target).await;
    let via_relay = direct
        .as_ref()
        .clone()
        .host("127.0.0.1")
        .port(relay.addr.port());
    let health = kairos::store::health::DbHealth::default();
    let settings = kairos::store::DbSettings {
        acquire_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let url = format!(
        "postgres://{}:kairos@127.0.0.1:{}/{}",
        via_relay.get_username(),
        relay.addr.port(),
        via_relay.get_database().unwrap_or("postgres")
    );
    let app_pool = kairos::store::connect(&url, 8, &settings, health.clone())
        .await
        .expect("pool");
    let mut opts = kairos::app::Options::api_only("cut");
    opts.database_unavailable_answer = Duration::from_secs(2);
    let app = TestApp::spawn_pools(
        pool.clone(),
        kairos::app::Pools {
            api: app_pool.clone(),
            listen: app_pool.clone(),
            watch: app_pool.clone(),
            loops: app_pool,
            health,
        },
        opts,
    )
    .await;
    manual_task(&app, "cut", "xa").await;
    relay.cut();
    // Once the watch has seen it (a probe a second), every call answers 503 at once.
    common::eventually(
        Duration::from_secs(10),
        "/readyz to name the database",
        || async {
            let (status, body) = json(app.get("/readyz").await).await;
            let seen = body["problems"]
                .to_string()
                .contains("database unreachable for");
            (status == 503 && body["database"] == "unreachable" && seen).then_some(())
        },
    )
    .await;
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let resp = app
            .post(
                "/v1/claims",
                json!({"agent_id": "xa", "worker_id": "w", "wait_seconds": 5}),
            )
            .await;
        assert_eq!(resp.status().as_u16(), 503);
        assert!(resp.headers().contains_key("retry-after"));
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "{:?}",
            started.elapsed()
        );
    }
    relay.restore();
    common::eventually(
        Duration::from_secs(15),
        "the database to be back",
        || async {
            let (status, _) = json(app.get("/readyz").await).await;
            (status == 200).then_some(())
        },
    )
    .await;
    app.post("/v1/tasks/cut/trigger", json!({})).await;
    assert_eq!(claim(&app, "xa", "w", 1, json!({})).await.len(), 1);
    let outages: i64 = sqlx::query_scalar("select count(*) from db_unreachable")
        .fetch_one(&pool)
        .await
        .expect("outages");
    assert_eq!(outages, 1, "the outage is recorded once");
}

#[sqlx::test]
async fn a_throttled_attempt_waits_unspent_and_never_opens_the_circuit(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let (status, body) = json(
        app.put(
            "/v1/tasks/quota",
            json!({"agent_id": "qa", "trigger": {"type": "manual"},
                   "execution": {"max_retries": 1},
                   "circuit_breaker": {"failure_threshold": 2}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    backlog(&pool, "quota", "qa", 1, 1, 2).await;
    // Five 429s in a row: each sends the instance back, unspent, for retry_after_seconds.
    for round in 0..5 {
        sqlx::query("update task_instance set available_at = now() where task_id = 'quota'")
            .execute(&pool)
            .await
            .expect("due now");
        let got = claim(&app, "qa", "w", 1, json!({})).await;
        assert_eq!(got.len(), 1, "round {round}: claimable again");
        let (id, token) = (got[0]["id"].clone(), got[0]["lease_token"].clone());
        let path = format!("/v1/instances/{}/fail", id.as_str().unwrap_or(""));
        // Refused values change nothing: the instance stays RUNNING under its lease.
        for bad in [
            json!({"lease_token": token, "error": "429", "retry_after_seconds": 0}),
            json!({"lease_token": token, "error": "429", "retry_after_seconds": 86_401}),
            json!({"lease_token": token, "error": "429", "retry_after_seconds": 5,
                   "hold_limit": "openai"}),
        ] {
            let (status, body) = json(app.post(&path, bad).await).await;
            assert_eq!(status, 422, "{body}");
            let (_, now) = json(
                app.get(&format!("/v1/instances/{}", id.as_str().unwrap_or("")))
                    .await,
            )
            .await;
            assert_eq!(now["status"], "RUNNING");
        }
        let (status, body) = json(
            app.post(
                &path,
                json!({"lease_token": token, "error": "HTTP 429 from the model API",
                       "retry_after_seconds": 30, "retryable": false}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "PENDING", "{body}");
        assert_eq!(body["attempt"], 1, "the attempt is not spent");
        assert_eq!(body["error_kind"], "throttled");
        let wait: f64 = sqlx::query_scalar(
            "select extract(epoch from available_at - now())::float8 from task_instance \
             where task_id = 'quota'",
        )
        .fetch_one(&pool)
        .await
        .expect("available_at");
        assert!(
            (25.0..=31.0).contains(&wait),
            "available in about 30 s: {wait}"
        );
        // Not claimable before its time.
        assert!(claim(&app, "qa", "w", 1, json!({})).await.is_empty());
    }
    let (paused, failures): (bool, i32) =
        sqlx::query_as("select paused, consecutive_failures from tasks where id = 'quota'")
            .fetch_one(&pool)
            .await
            .expect("task");
    assert_eq!(
        (paused, failures),
        (false, 0),
        "a quota never opens the circuit"
    );
}
