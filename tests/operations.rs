//! Operability: metrics move by the right amounts, retention prunes old history in batches,
//! and SIGTERM stops a real `kairos serve` cleanly while long polls are waiting.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestApp, eventually, json, sample};
use kairos::services::Heartbeats;
use kairos::services::pruner::{Pruner, PrunerConfig};
use kairos::services::stats::StatsSampler;
use kairos::services::trigger_loop::{TriggerLoop, TriggerLoopConfig};
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test]
async fn metrics_move_by_the_right_amounts(pool: PgPool) {
    assert!(
        kairos::telemetry::metrics_handle().is_some(),
        "recorder installed"
    );
    let app = TestApp::spawn(pool.clone()).await;
    let before = app.get("/metrics").await.text().await.expect("metrics");
    for name in [
        "kairos_windows_created_total",
        "kairos_window_conflicts_total",
        "kairos_fence_rejections_total",
        "kairos_retries_total",
    ] {
        assert!(before.contains(name), "{name} is exported before it moves");
    }

    app.put(
        "/v1/tasks/m",
        json!({"agent_id": "ma", "trigger": {"type": "interval", "every_seconds": 1}}),
    )
    .await;
    // Three windows due at once; one of them already exists (made by "another replica").
    // Which windows are due depends on the second the pass runs in: start early in a second,
    // so that the rewind and the pass fall in the same one even on a loaded machine.
    eventually(Duration::from_secs(5), "the start of a second", || {
        let pool = pool.clone();
        async move {
            let frac: f64 = sqlx::query_scalar(
                "select (extract(epoch from clock_timestamp()) \
                     - floor(extract(epoch from clock_timestamp())))::float8",
            )
            .fetch_one(&pool)
            .await
            .ok()?;
            (frac < 0.2).then_some(())
        }
    })
    .await;
    sqlx::query(
        "update task_cursor set next_fire_at = date_trunc('second', now()) - interval '2 seconds'",
    )
    .execute(&pool)
    .await
    .expect("rewind");
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
             max_attempts, available_at, finished_at, skip_reason) \
         select gen_random_uuid(), 'm', to_char(next_fire_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
             next_fire_at, 'SKIPPED', 'schedule', 'ma', 4, next_fire_at, now(), 'test' from task_cursor where task_id = 'm'",
    )
    .execute(&pool)
    .await
    .expect("pre-existing window");
    let report = TriggerLoop::new(
        pool.clone(),
        TriggerLoopConfig::new("n"),
        Heartbeats::default(),
    )
    .run_once()
    .await
    .expect("pass");
    assert_eq!(report.num_conflicts, 1, "{report:?}");
    assert_eq!(report.num_created, 1, "{report:?}");
    assert_eq!(report.num_skipped, 1, "{report:?}");

    let (_, claimed) = json(
        app.post("/v1/claims", json!({"agent_id": "ma", "worker_id": "w"}))
            .await,
    )
    .await;
    let id = claimed["instances"][0]["id"]
        .as_str()
        .expect("claimed")
        .to_owned();
    for _ in 0..2 {
        let (status, _) = json(
            app.post(
                &format!("/v1/instances/{id}/complete"),
                json!({"lease_token": uuid::Uuid::new_v4()}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 409);
    }
    StatsSampler::new(pool.clone(), Duration::from_secs(5), Heartbeats::default())
        .run_once()
        .await
        .expect("stats");

    let after = app.get("/metrics").await.text().await.expect("metrics");
    let moved = |series: &str| sample(&after, series) - sample(&before, series);
    assert_eq!(moved("kairos_windows_created_total"), 1.0);
    assert_eq!(moved("kairos_window_conflicts_total"), 1.0);
    assert_eq!(moved("kairos_skipped_total{reason=\"overlap\"}"), 1.0);
    assert_eq!(moved("kairos_fence_rejections_total"), 2.0);
    assert_eq!(sample(&after, "kairos_instances{status=\"RUNNING\"}"), 1.0);
    assert_eq!(sample(&after, "kairos_instances{status=\"SKIPPED\"}"), 2.0);
    assert!(
        after.contains("kairos_schedule_lag_seconds_bucket{le=\"0.001\"}"),
        "lag is a histogram resolving 1 ms"
    );
    assert!(
        after.contains("kairos_schedule_lag_seconds_bucket{le=\"60\"}"),
        "… to 60 s"
    );
    assert_eq!(sample(&after, "kairos_schedule_lag_seconds_count"), 1.0);

    // Windows created by a backfill or a manual trigger count too (a dry run does not).
    app.put(
        "/v1/tasks/bf",
        json!({"agent_id": "ma", "trigger": {"type": "interval", "every_seconds": 60},
               "execution": {"overlap": "queue"}}),
    )
    .await;
    // Yesterday, within retention whatever the date the suite runs on.
    let day = (chrono::Utc::now() - chrono::Duration::days(1)).format("%Y-%m-%d");
    let range = json!({"from": format!("{day}T00:00:00Z"), "to": format!("{day}T00:03:00Z")});
    let mut dry = range.clone();
    dry["dry_run"] = json!(true);
    let (status, _) = json(app.post("/v1/tasks/bf/backfill", dry).await).await;
    assert_eq!(status, 200);
    let (status, report) = json(app.post("/v1/tasks/bf/backfill", range).await).await;
    assert_eq!(
        (status, report["created"].as_u64()),
        (200, Some(3)),
        "{report}"
    );
    app.put(
        "/v1/tasks/man",
        json!({"agent_id": "ma", "trigger": {"type": "manual"}}),
    )
    .await;
    let (status, _) = json(app.post("/v1/tasks/man/trigger", json!({})).await).await;
    assert_eq!(status, 201);
    let later = app.get("/metrics").await.text().await.expect("metrics");
    assert_eq!(
        sample(&later, "kairos_windows_created_total")
            - sample(&after, "kairos_windows_created_total"),
        4.0
    );
}

#[sqlx::test]
async fn retention_prunes_old_terminal_history_in_batches_and_keeps_the_rest(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/old",
        json!({"agent_id": "a", "trigger": {"type": "manual"}}),
    )
    .await;
    // 25 old finished, 5 recent finished, 3 old but still pending.
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
             max_attempts, available_at, finished_at) \
         select gen_random_uuid(), 'old', 'f' || g, now() - interval '40 days', 'SUCCESS', 'manual', 'a', 1, \
             now() - interval '40 days', \
             case when g <= 25 then now() - interval '40 days' else now() - interval '1 day' end \
         from generate_series(1, 30) g",
    )
    .execute(&pool)
    .await
    .expect("finished");
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
             max_attempts, available_at) \
         select gen_random_uuid(), 'old', 'p' || g, now() - interval '40 days', 'PENDING', 'manual', 'a', 1, \
             now() - interval '40 days' from generate_series(1, 3) g",
    )
    .execute(&pool)
    .await
    .expect("pending");
    sqlx::query(
        "insert into instance_events (instance_id, attempt, from_status, to_status, actor) \
         select id, 1, null, status, 'test' from task_instance",
    )
    .execute(&pool)
    .await
    .expect("events");
    let pruner = Pruner::new(
        pool.clone(),
        PrunerConfig {
            batch_size: 10,
            ..PrunerConfig::default()
        },
        Heartbeats::default(),
    );
    let mut rounds = Vec::new();
    loop {
        let r = pruner.run_once().await.expect("prune");
        rounds.push(r.num_instances);
        if r.num_instances == 0 {
            break;
        }
    }
    assert_eq!(rounds, vec![10, 10, 5, 0], "bounded batches");
    let (left, events): (i64, i64) = sqlx::query_as(
        "select (select count(*) from task_instance), (select count(*) from instance_events)",
    )
    .fetch_one(&pool)
    .await
    .expect("counts");
    assert_eq!(left, 8, "recent and unfinished instances stay");
    assert_eq!(events, 8, "events of pruned instances go with them");
}

#[sqlx::test]
async fn sigterm_during_long_polls_exits_cleanly(pool: PgPool) {
    kairos::outbound::install_crypto_provider();
    let name: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&pool)
        .await
        .expect("db");
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let db = format!(
        "{}/{name}",
        base.rsplit_once('/').map(|(p, _)| p).unwrap_or(&base)
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let client = reqwest::Client::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kairos"))
        .arg("serve")
        .env("DATABASE_URL", &db)
        .env("KAIROS_CONFIG", "config/kairos.toml")
        .env("KAIROS_LISTEN", format!("127.0.0.1:{port}"))
        .env("KAIROS_NODE_ID", "term")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let base_url = format!("http://127.0.0.1:{port}");
    eventually(Duration::from_secs(30), "ready", || {
        let (client, base_url) = (&client, &base_url);
        async move {
            let r = client.get(format!("{base_url}/readyz")).send().await.ok()?;
            (r.status().as_u16() == 200).then_some(())
        }
    })
    .await;
    // One instance RUNNING under an agent's lease, and three agents long-polling for more.
    client
        .put(format!("{base_url}/v1/tasks/t"))
        .json(&json!({"agent_id": "ag", "trigger": {"type": "manual"}}))
        .send()
        .await
        .expect("put");
    client
        .post(format!("{base_url}/v1/tasks/t/trigger"))
        .json(&json!({}))
        .send()
        .await
        .expect("trigger");
    let held = client
        .post(format!("{base_url}/v1/claims"))
        .json(&json!({"agent_id": "ag", "worker_id": "w0"}))
        .send()
        .await
        .expect("claim");
    assert_eq!(held.status().as_u16(), 200);
    let mut polls = Vec::new();
    for w in 1..=3 {
        let (client, url) = (client.clone(), format!("{base_url}/v1/claims"));
        polls.push(tokio::spawn(async move {
            let started = Instant::now();
            let resp = client
                .post(url)
                .json(&json!({"agent_id": "ag", "worker_id": format!("w{w}"), "wait_seconds": 30}))
                .send()
                .await;
            (resp.map(|r| r.status().as_u16()), started.elapsed())
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = Instant::now();
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    // For the drain period (config/kairos.toml: 1000 ms) the replica still answers: once it
    // has taken the signal, a new claim on a new connection is told to go elsewhere (503 with
    // Retry-After) rather than refused at connect, and /readyz says it is not ready.
    let late = eventually(Duration::from_secs(1), "a 503 for a new claim", || async {
        let r = reqwest::Client::new()
            .post(format!("{base_url}/v1/claims"))
            .json(&json!({"agent_id": "ag", "worker_id": "late"}))
            .send()
            .await
            .expect("the listener is still open while draining");
        (r.status().as_u16() == 503).then_some(r)
    })
    .await;
    assert!(late.headers().contains_key("retry-after"));
    let ready = reqwest::Client::new()
        .get(format!("{base_url}/readyz"))
        .send()
        .await
        .expect("readyz while draining");
    assert_eq!(ready.status().as_u16(), 503);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "did not exit within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0), "exit 0 on SIGTERM");
    for p in polls {
        let (resp, waited) = p.await.expect("poll");
        assert_eq!(
            resp.ok(),
            Some(200),
            "long polls answer instead of being cut"
        );
        assert!(waited < Duration::from_secs(10), "{waited:?}");
    }
    // Leases live in the database: the agent's RUNNING instance is untouched and consistent.
    let (status, lease): (String, bool) = sqlx::query_as(
        "select status, lease_token is not null and lease_expires_at > now() from task_instance",
    )
    .fetch_one(&pool)
    .await
    .expect("instance");
    assert_eq!((status.as_str(), lease), ("RUNNING", true));
    eventually(Duration::from_secs(10), "sessions to close", || {
        let pool = pool.clone();
        async move {
            let others: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()",
            )
            .fetch_one(&pool)
            .await
            .ok()?;
            (others <= pool.size() as i64).then_some(())
        }
    })
    .await;
}

#[sqlx::test]
async fn readiness_fails_and_says_why_when_the_database_is_gone(pool: PgPool) {
    let app = TestApp::spawn_with_trigger(pool.clone(), "ready").await;
    eventually(Duration::from_secs(10), "ready", || {
        let app = &app;
        async move { (app.get("/readyz").await.status().as_u16() == 200).then_some(()) }
    })
    .await;
    pool.close().await;
    let resp = app.get("/readyz").await;
    assert_eq!(resp.status().as_u16(), 503);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["database"], "unreachable");
    assert!(
        body["problems"][0]
            .as_str()
            .unwrap_or("")
            .starts_with("database unreachable"),
        "{body}"
    );
    // Liveness does not depend on the database.
    assert_eq!(app.get("/healthz").await.status().as_u16(), 200);
}
