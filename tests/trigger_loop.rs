//! The trigger loop against a real PostgreSQL: exactly one row per window however many
//! replicas run, catch-up after downtime, overlap skips, pause, and NOTIFY wake-ups.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use common::{TestApp, claim, cron_task, eventually, json, windows};
use kairos::services::Heartbeats;
use kairos::services::trigger_loop::{TriggerLoop, TriggerLoopConfig};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio_util::sync::CancellationToken;

fn loop_config(node: &str) -> TriggerLoopConfig {
    let mut cfg = TriggerLoopConfig::new(node);
    cfg.max_sleep = Duration::from_millis(500);
    cfg
}

fn parse(key: &str) -> DateTime<Utc> {
    key.parse().expect("window key is RFC 3339")
}

/// One trigger pass of a fresh loop, as a replica named `n` would make it.
async fn one_pass(pool: &PgPool) -> kairos::services::trigger_loop::TriggerReport {
    TriggerLoop::new(
        pool.clone(),
        TriggerLoopConfig::new("n"),
        Heartbeats::default(),
    )
    .run_once()
    .await
    .expect("pass")
}

/// Keys must be consecutive seconds with no gap and no repeat.
fn assert_every_second_once(keys: &[String]) {
    let unique: HashSet<&String> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "duplicate windows: {keys:?}");
    for pair in keys.windows(2) {
        let gap = parse(&pair[1]) - parse(&pair[0]);
        assert_eq!(
            gap.num_seconds(),
            1,
            "gap between {} and {}",
            pair[0],
            pair[1]
        );
    }
}

/// Three replicas' pools, each its own, as three processes would have.
async fn replica_pools(pool_opts: &PgPoolOptions, conn_opts: &PgConnectOptions) -> Vec<PgPool> {
    let mut pools = Vec::new();
    for _ in 0..3 {
        pools.push(
            pool_opts
                .clone()
                .max_connections(4)
                .connect_with(conn_opts.clone())
                .await
                .expect("pool"),
        );
    }
    pools
}

#[sqlx::test]
async fn three_replicas_materialise_every_second_exactly_once(
    pool_opts: PgPoolOptions,
    conn_opts: PgConnectOptions,
) {
    let pools = replica_pools(&pool_opts, &conn_opts).await;
    let api = TestApp::spawn(pools[0].clone()).await;
    let (status, _) = json(
        api.put("/v1/tasks/every_second", cron_task("a", "* * * * * *"))
            .await,
    )
    .await;
    assert_eq!(status, 201);

    let stop = CancellationToken::new();
    let mut handles = Vec::new();
    for (i, pool) in pools.iter().enumerate() {
        let lp = TriggerLoop::new(
            pool.clone(),
            loop_config(&format!("node-{i}")),
            Heartbeats::default(),
        );
        handles.push(tokio::spawn(lp.run(stop.child_token())));
    }
    let pool = pools[0].clone();
    let rows = eventually(Duration::from_secs(20), "six windows", || {
        let pool = pool.clone();
        async move {
            let rows = windows(&pool, "every_second").await;
            (rows.len() >= 6).then_some(rows)
        }
    })
    .await;
    stop.cancel();
    for h in handles {
        h.await.expect("loop stopped");
    }
    let rows_after = windows(&pool, "every_second").await;
    assert!(rows_after.len() >= rows.len());
    let keys: Vec<String> = rows_after.iter().map(|r| r.0.clone()).collect();
    assert_every_second_once(&keys);
    // Concurrency 1 with overlap skip and no agent: the first window waits, the rest are skipped
    // naming it.
    assert_eq!(rows_after[0].1, "PENDING");
    for r in &rows_after[1..] {
        assert_eq!(r.1, "SKIPPED");
        assert_eq!(
            r.3.as_deref(),
            Some(format!("overlap: window {} still unfinished", rows_after[0].0).as_str())
        );
    }
    // Which replicas did the work is visible in the events.
    let actors: Vec<String> = sqlx::query_scalar(
        "select distinct actor from instance_history e join task_instance i on i.id = e.instance_id \
         where i.task_id = 'every_second'",
    )
    .fetch_all(&pool)
    .await
    .expect("actors");
    assert!(
        actors.iter().all(|a| a.starts_with("trigger:node-")),
        "{actors:?}"
    );
}

#[sqlx::test]
async fn concurrent_passes_on_one_due_task_insert_each_window_once(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put("/v1/tasks/t1", json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 1}, "execution": {"overlap": "queue", "misfire_grace_seconds": 3600}}))
        .await;
    // Pretend the daemon was down for 30 s, with a long grace: every missed window should run.
    sqlx::query(
        "update task_cursor set next_fire_at = date_trunc('second', now()) - interval '30 seconds'",
    )
    .execute(&pool)
    .await
    .expect("rewind");
    let mut passes = Vec::new();
    for i in 0..4 {
        let lp = TriggerLoop::new(
            pool.clone(),
            TriggerLoopConfig::new(format!("n{i}")),
            Heartbeats::default(),
        );
        passes.push(tokio::spawn(async move { lp.run_once().await }));
    }
    let mut created = 0;
    for p in passes {
        created += p.await.expect("joined").expect("pass").num_created;
    }
    let rows = windows(&pool, "t1").await;
    assert_eq!(
        created,
        rows.len(),
        "each window created by exactly one pass"
    );
    assert!(rows.len() >= 31);
    let keys: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    assert_every_second_once(&keys);
    assert!(rows.iter().all(|r| r.1 == "PENDING"));
}

#[sqlx::test]
async fn restart_after_downtime_records_missed_windows_as_skipped(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let (status, body) = json(
        app.put(
            "/v1/tasks/per_second",
            json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "* * * * * *"},
                   "execution": {"overlap": "queue", "misfire_grace_seconds": 1}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // First life of the daemon.
    let stop = CancellationToken::new();
    let lp = TriggerLoop::new(pool.clone(), loop_config("first"), Heartbeats::default());
    let h = tokio::spawn(lp.run(stop.child_token()));
    eventually(Duration::from_secs(10), "two windows", || {
        let pool = pool.clone();
        async move { (windows(&pool, "per_second").await.len() >= 2).then_some(()) }
    })
    .await;
    stop.cancel();
    h.await.expect("stopped");
    let before = windows(&pool, "per_second").await.len();

    // Down for four seconds.
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Second life: one pass records the gap.
    let lp = TriggerLoop::new(pool.clone(), loop_config("second"), Heartbeats::default());
    let report = lp.run_once().await.expect("pass");
    assert!(report.num_skipped >= 2, "{report:?}");
    let rows = windows(&pool, "per_second").await;
    let keys: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    assert_every_second_once(&keys);
    let missed: Vec<_> = rows[before..].iter().filter(|r| r.1 == "SKIPPED").collect();
    assert_eq!(missed.len(), report.num_skipped);
    for r in &missed {
        assert_eq!(r.2, "catchup");
        assert_eq!(r.3.as_deref(), Some("missed"));
    }
    // The windows still inside the grace run normally.
    assert!(
        rows[before..]
            .iter()
            .any(|r| r.1 == "PENDING" && r.2 == "schedule")
    );
    // A second pass right away changes nothing.
    let again = lp.run_once().await.expect("pass");
    assert_eq!(again.num_conflicts, 0);
    assert_eq!(
        windows(&pool, "per_second").await.len(),
        rows.len() + again.num_created + again.num_skipped
    );
}

#[sqlx::test]
async fn a_grace_of_zero_runs_every_window_of_a_loop_that_keeps_up(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let (status, body) = json(
        app.put(
            "/v1/tasks/strict",
            json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "* * * * * *"},
                   "execution": {"overlap": "queue", "misfire_grace_seconds": 0}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // No staging: every window is written by the pass at its instant, a little after it.
    let mut cfg = loop_config("strict");
    cfg.lead = Duration::ZERO;
    let stop = CancellationToken::new();
    let lp = TriggerLoop::new(pool.clone(), cfg, Heartbeats::default());
    let h = tokio::spawn(lp.run(stop.child_token()));
    let rows = eventually(Duration::from_secs(10), "three windows", || {
        let pool = pool.clone();
        async move {
            let rows = windows(&pool, "strict").await;
            (rows.len() >= 3).then_some(rows)
        }
    })
    .await;
    stop.cancel();
    h.await.expect("stopped");
    let keys: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    assert_every_second_once(&keys);
    assert!(
        rows.iter().all(|r| r.1 == "PENDING" && r.2 == "schedule"),
        "{rows:?}"
    );
    app.shutdown().await;
}

#[sqlx::test]
async fn a_paused_task_gets_no_windows(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put("/v1/tasks/t1", json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 1}, "paused": true}))
        .await;
    sqlx::query("update task_cursor set next_fire_at = now() - interval '5 seconds'")
        .execute(&pool)
        .await
        .expect("rewind");
    assert_eq!(one_pass(&pool).await.num_tasks, 0);
    assert!(windows(&pool, "t1").await.is_empty());
}

#[sqlx::test]
async fn a_stored_trigger_or_execution_that_no_longer_parses_pauses_only_its_task(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    for id in ["good", "bad_trigger", "bad_execution", "no_execution"] {
        app.put(
            &format!("/v1/tasks/{id}"),
            json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 60}}),
        )
        .await;
    }
    // Hand edits, or a definition written by another version.
    for (id, edit) in [
        (
            "bad_trigger",
            "jsonb_set(spec, '{trigger,type}', '\"hourly\"')",
        ),
        (
            "bad_execution",
            "jsonb_set(spec, '{execution,overlap}', '\"sometimes\"')",
        ),
        ("no_execution", "spec - 'execution'"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "update tasks set spec = {edit} where id = $1"
        )))
        .bind(id)
        .execute(&pool)
        .await
        .expect("spoil the spec");
    }
    // A point of the tasks' one-minute grid (it starts at the Unix epoch): the next point is
    // after now, so the pass owes exactly one window. `now() - 1 second` owed two whenever a
    // minute boundary fell within the last second.
    sqlx::query("update task_cursor set next_fire_at = date_trunc('minute', now())")
        .execute(&pool)
        .await
        .expect("rewind");
    let report = one_pass(&pool).await;
    assert_eq!((report.num_tasks, report.num_created), (1, 1));
    assert_eq!(windows(&pool, "good").await.len(), 1);
    let paused: Vec<(String, bool, Option<String>)> =
        sqlx::query_as("select id, paused, paused_reason from tasks order by id")
            .fetch_all(&pool)
            .await
            .expect("tasks");
    for (id, is_paused, reason) in paused {
        let reason = reason.unwrap_or_default();
        if id == "good" {
            assert!(!is_paused, "{id}: {reason}");
            continue;
        }
        assert!(is_paused, "{id}");
        assert!(windows(&pool, &id).await.is_empty(), "{id}");
        assert!(
            reason.starts_with("stored definition unreadable: "),
            "{id}: {reason}"
        );
        let part = if id == "bad_trigger" {
            "trigger"
        } else {
            "execution"
        };
        assert!(reason.contains(part), "{id}: {reason}");
    }
}

#[sqlx::test]
async fn a_new_task_wakes_a_sleeping_loop(pool: PgPool) {
    // The loop may sleep 60 s when nothing is due; only NOTIFY can wake it in time.
    let mut cfg = TriggerLoopConfig::new("sleeper");
    cfg.max_sleep = Duration::from_secs(60);
    let app = TestApp::spawn_with(pool.clone(), Some(cfg)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.put(
        "/v1/tasks/t1",
        json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 1}}),
    )
    .await;
    eventually(Duration::from_secs(5), "a window of the new task", || {
        let pool = pool.clone();
        async move { (!windows(&pool, "t1").await.is_empty()).then_some(()) }
    })
    .await;
    app.shutdown().await;
}

#[sqlx::test]
async fn a_once_task_fires_once_and_then_has_no_next_window(pool: PgPool) {
    let app = TestApp::spawn_with_trigger(pool.clone(), "n1").await;
    let now = kairos::store::now(&pool).await.expect("now");
    let at = kairos::domain::schedule::window_key(now + chrono::Duration::seconds(1));
    let (status, body) = json(
        app.put(
            "/v1/tasks/once",
            json!({"agent_id": "a", "trigger": {"type": "once", "at": at}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    eventually(Duration::from_secs(10), "the once window", || {
        let pool = pool.clone();
        async move { (windows(&pool, "once").await.len() == 1).then_some(()) }
    })
    .await;
    let rows = windows(&pool, "once").await;
    assert_eq!(rows[0].0, at);
    let (_, task) = json(app.get("/v1/tasks/once").await).await;
    assert_eq!(task["next_fire_at"], serde_json::Value::Null);
    app.shutdown().await;
}

#[sqlx::test]
async fn instances_can_be_queried_by_status_and_paged(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.put(
        "/v1/tasks/t1",
        json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 1}}),
    )
    .await;
    sqlx::query(
        "update task_cursor set next_fire_at = date_trunc('second', now()) - interval '9 seconds'",
    )
    .execute(&pool)
    .await
    .expect("rewind");
    let report = one_pass(&pool).await;
    let total = report.num_created + report.num_skipped;
    assert!(total >= 10);

    let (_, pending) = json(app.get("/v1/instances?task_id=t1&status=PENDING").await).await;
    assert_eq!(pending["items"].as_array().map(Vec::len), Some(1));
    let first = &pending["items"][0];
    assert_eq!(first["attempt"], 1);
    assert_eq!(first["max_attempts"], 4);
    assert_eq!(
        first["idempotency_key"],
        format!("t1:{}", first["window_key"].as_str().unwrap_or(""))
    );

    let mut seen = Vec::new();
    let mut path = "/v1/instances?task_id=t1&limit=4".to_owned();
    loop {
        let (status, page) = json(app.get(&path).await).await;
        assert_eq!(status, 200, "{page}");
        for i in page["items"].as_array().expect("items") {
            seen.push(i["window_key"].as_str().unwrap_or("").to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/instances?task_id=t1&limit=4&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), total);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.reverse();
    assert_eq!(seen, sorted, "newest first");

    let key = seen[0].clone();
    let (_, one) = json(app.get(&format!("/v1/instances?window_key={key}")).await).await;
    assert_eq!(one["items"].as_array().map(Vec::len), Some(1));
    let id = one["items"][0]["id"].as_str().expect("id").to_owned();
    let (status, detail) = json(app.get(&format!("/v1/instances/{id}")).await).await;
    assert_eq!(status, 200);
    assert_eq!(detail["events"][0]["from"], serde_json::Value::Null);
    assert_eq!(detail["events"][0]["actor"], "trigger:n");
}

#[sqlx::test]
async fn health_and_readiness_report_the_loops(pool: PgPool) {
    let app = TestApp::spawn_with_trigger(pool, "n1").await;
    let (status, _) = json(app.get("/healthz").await).await;
    assert_eq!(status, 200);
    let ready = eventually(Duration::from_secs(10), "ready", || {
        let app = &app;
        async move {
            let (status, body) = json(app.get("/readyz").await).await;
            (status == 200).then_some(body)
        }
    })
    .await;
    assert_eq!(ready["database"], "ok");
    assert_eq!(ready["loops"]["trigger"], "ok");
    app.shutdown().await;
}

#[sqlx::test]
async fn only_changes_due_soon_wake_the_trigger_loops(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .expect("listener");
    listener
        .listen(kairos::store::TASKS_CHANNEL)
        .await
        .expect("listen");
    // 50 daily schedules far from now: registering them wakes nobody.
    let far = chrono::Utc::now() + chrono::Duration::hours(3);
    let expr = format!("0 {} {} * * *", far.format("%M"), far.format("%H"));
    for k in 0..50 {
        let (status, body) = json(
            app.put(
                &format!("/v1/tasks/far{k}"),
                serde_json::json!({"agent_id": "a", "trigger": {"type": "cron", "expr": expr, "timezone": "UTC"}}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    // One that fires every second: its change wakes the loops.
    let (status, body) = json(
        app.put(
            "/v1/tasks/soon",
            serde_json::json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "* * * * * *", "timezone": "UTC"}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let first = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("a notification")
        .expect("recv");
    assert_eq!(first.payload(), "soon", "far-off changes sent nothing");
}

#[sqlx::test]
async fn on_time_windows_inside_a_long_grace_are_materialised_in_bounded_passes(pool: PgPool) {
    use kairos::domain::policy::MAX_ON_TIME_ROWS;
    let app = TestApp::spawn(pool.clone()).await;
    app.put("/v1/tasks/t1", json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 1}, "execution": {"overlap": "queue", "misfire_grace_seconds": 86400}}))
        .await;
    // 2,500 windows due, every one inside the grace (on time, not missed).
    sqlx::query(
        "update task_cursor set next_fire_at = date_trunc('second', now()) - interval '2500 seconds'",
    )
    .execute(&pool)
    .await
    .expect("rewind");
    // One batch: the bound is per batch, and a second batch that starts after the first's
    // commit would find the task still due and write the next thousand in the same call.
    let mut cfg = loop_config("n1");
    cfg.parallelism = 1;
    let lp = TriggerLoop::new(pool.clone(), cfg, Heartbeats::default());
    let first = lp.run_once().await.expect("first pass");
    assert_eq!(first.num_created, MAX_ON_TIME_ROWS, "one pass is bounded");
    assert_eq!(first.num_skipped, 0);
    let still_due: bool = sqlx::query_scalar("select next_fire_at <= now() from task_cursor")
        .fetch_one(&pool)
        .await
        .expect("next_fire_at");
    assert!(still_due, "the rest stays due for the next pass");

    // Further passes pick up where the last one stopped, with no gap and no repeat.
    let mut total = first.num_created;
    for _ in 0..5 {
        let r = lp.run_once().await.expect("pass");
        assert!(r.num_created <= MAX_ON_TIME_ROWS);
        total += r.num_created;
    }
    let rows = windows(&pool, "t1").await;
    assert_eq!(rows.len(), total);
    assert!(rows.len() > 2500, "{}", rows.len());
    assert!(rows.iter().all(|r| r.1 == "PENDING" && r.2 == "schedule"));
    let keys: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    assert_every_second_once(&keys);
}

/// Pauses, resumes, redefinitions and deletions of tasks racing three trigger loops (the loops
/// lock cursors, the API locks task rows and then writes cursors): every request succeeds, no
/// window is written twice, and a paused task gets no window while it stays paused.
#[sqlx::test]
async fn task_changes_racing_three_trigger_loops_all_succeed(
    pool_opts: PgPoolOptions,
    conn_opts: PgConnectOptions,
) {
    let pools = replica_pools(&pool_opts, &conn_opts).await;
    let api = TestApp::spawn(pools[0].clone()).await;
    let ids: Vec<String> = (0..8).map(|k| format!("r{k}")).collect();
    let every_second = |ctx: u64| {
        json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "* * * * * *", "timezone": "UTC"},
               "execution": {"overlap": "queue", "concurrency_limit": 1000}, "context": {"v": ctx}})
    };
    for id in &ids {
        let (status, body) = json(api.put(&format!("/v1/tasks/{id}"), every_second(0)).await).await;
        assert_eq!(status, 201, "{body}");
    }
    let stop = CancellationToken::new();
    let mut handles = Vec::new();
    for (i, pool) in pools.iter().enumerate() {
        let lp = TriggerLoop::new(
            pool.clone(),
            loop_config(&format!("race-{i}")),
            Heartbeats::default(),
        );
        handles.push(tokio::spawn(lp.run(stop.child_token())));
    }
    let until = std::time::Instant::now() + Duration::from_millis(3500);
    let mut round = 0u64;
    while std::time::Instant::now() < until {
        round += 1;
        for (k, id) in ids.iter().enumerate() {
            let path = format!("/v1/tasks/{id}");
            let resp = match (round + k as u64) % 4 {
                0 => {
                    api.post(&format!("{path}/pause"), json!({"reason": "race"}))
                        .await
                }
                1 => api.post(&format!("{path}/resume"), json!({})).await,
                2 => api.put(&path, every_second(round)).await,
                _ if k == 0 => {
                    let gone = api.request(reqwest::Method::DELETE, &path, None).await;
                    assert!(gone.status().is_success(), "delete: {}", gone.status());
                    api.put(&path, every_second(round)).await
                }
                _ => api.get(&path).await,
            };
            let status = resp.status();
            assert!(status.is_success(), "round {round}, {id}: {status}");
        }
    }
    // Pause all but r1 (resumed, whatever the race left it as) and let the loops run on: the
    // paused tasks stop, r1 keeps firing.
    let (status, body) = json(api.post("/v1/tasks/r1/resume", json!({})).await).await;
    assert_eq!(status, 200, "{body}");
    for id in ids.iter().filter(|id| *id != "r1") {
        let (status, body) =
            json(api.post(&format!("/v1/tasks/{id}/pause"), json!({})).await).await;
        assert_eq!(status, 200, "{body}");
    }
    let pool = pools[0].clone();
    let count_of = |id: &str| {
        let pool = pool.clone();
        let id = id.to_owned();
        async move {
            let n: i64 =
                sqlx::query_scalar("select count(*) from task_instance where task_id = $1")
                    .bind(id)
                    .fetch_one(&pool)
                    .await
                    .expect("count");
            n
        }
    };
    let paused_before = count_of("r2").await;
    let r1_before = count_of("r1").await;
    eventually(Duration::from_secs(10), "r1 fires on", || {
        let c = count_of("r1");
        async move { (c.await >= r1_before + 2).then_some(()) }
    })
    .await;
    assert_eq!(
        count_of("r2").await,
        paused_before,
        "a paused task got a window"
    );
    stop.cancel();
    for h in handles {
        h.await.expect("loop stopped");
    }
    let dupes: i64 = sqlx::query_scalar(
        "select count(*) from (select task_id, scheduled_at from task_instance \
         group by 1, 2 having count(*) > 1) d",
    )
    .fetch_one(&pool)
    .await
    .expect("dupes");
    assert_eq!(dupes, 0, "a window was written twice");
}

/// A loop that stages up to `lead` ahead, in batches of `batch` tasks.
fn staging_loop(pool: &PgPool, lead: Duration, batch: i64) -> TriggerLoop {
    let mut cfg = loop_config("stager");
    cfg.lead = lead;
    cfg.batch_size = batch;
    cfg.parallelism = 2;
    TriggerLoop::new(pool.clone(), cfg, Heartbeats::default())
}

/// Whether a trigger pass (here: a staging one) holds the cursor of `task`.
async fn cursor_held(pool: &PgPool, task: &str) -> bool {
    let free: i64 = sqlx::query_scalar(
        "select count(*) from (select 1 from task_cursor where task_id = $1 \
         for update skip locked) c",
    )
    .bind(task)
    .fetch_one(pool)
    .await
    .expect("look at the cursor");
    free == 0
}

/// Wait until a staging pass holds the cursor of `task`.
async fn until_staged(pool: &PgPool, task: &str) {
    eventually(Duration::from_secs(5), "the staged cursor", || async move {
        cursor_held(pool, task).await.then_some(())
    })
    .await;
}

/// The next whole second at least `secs` seconds from now, by the database clock.
async fn instant_in(pool: &PgPool, secs: i64) -> DateTime<Utc> {
    let now = kairos::store::now(pool).await.expect("now");
    let at = now + chrono::Duration::seconds(secs + 1);
    at.with_nanosecond(0).expect("whole second")
}

#[sqlx::test]
async fn staged_windows_are_written_ahead_and_appear_at_their_instant_and_not_before(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let at = instant_in(&pool, 2).await;
    let key = kairos::domain::schedule::window_key(at);
    for i in 0..40 {
        let (status, body) = json(
            app.put(
                &format!("/v1/tasks/staged-{i}"),
                json!({"agent_id": "a", "trigger": {"type": "once", "at": key}}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let metrics = app.get("/metrics").await.text().await.expect("metrics");
    let staged_before = common::sample(&metrics, "kairos_windows_staged_total");
    // Batches of 16: each stager writes batch after batch in one transaction.
    let lp = staging_loop(&pool, Duration::from_secs(10), 16);
    let staging = tokio::spawn(async move { lp.run_staged(at).await });

    // Before the instant, nothing is visible; once everything is staged, every cursor is held.
    let mut looks_before = 0;
    let mut held_before = false;
    while !staging.is_finished() {
        let (visible, cursors_free, before): (i64, i64, bool) = sqlx::query_as(
            "select (select count(*) from task_instance), \
                    (select count(*) from (select 1 from task_cursor where task_id like 'staged-%' \
                         for update skip locked) c), \
                    clock_timestamp() < $1",
        )
        .bind(at)
        .fetch_one(&pool)
        .await
        .expect("look");
        if before {
            looks_before += 1;
            assert_eq!(visible, 0, "a staged window was visible before its instant");
            held_before |= cursors_free == 0;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(looks_before > 0, "the instant came before the first look");
    assert!(
        held_before,
        "the windows were not staged ahead of their instant"
    );
    let report = staging.await.expect("join").expect("staged pass");
    assert_eq!(report.num_created, 40);
    let now = kairos::store::now(&pool).await.expect("now");
    assert!(now >= at, "published at {now}, before {at}");

    let rows: Vec<(String, String, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        "select window_key, status, scheduled_at, created_at from task_instance order by task_id",
    )
    .fetch_all(&pool)
    .await
    .expect("rows");
    assert_eq!(rows.len(), 40);
    for (k, status, scheduled, created) in &rows {
        assert_eq!((k.as_str(), status.as_str()), (key.as_str(), "PENDING"));
        assert_eq!(*scheduled, at);
        assert_eq!(*created, at, "created when it became visible");
    }
    // The cursors moved with the windows: a once task has no next window.
    let left: i64 =
        sqlx::query_scalar("select count(*) from task_cursor where next_fire_at is not null")
            .fetch_one(&pool)
            .await
            .expect("cursors");
    assert_eq!(left, 0);
    assert_eq!(one_pass(&pool).await.num_created, 0);
    let metrics = app.get("/metrics").await.text().await.expect("metrics");
    assert_eq!(
        common::sample(&metrics, "kairos_windows_staged_total") - staged_before,
        40.0
    );
    app.shutdown().await;
}

#[sqlx::test]
async fn an_overlap_decision_is_made_at_the_instant_not_when_staged(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let at = instant_in(&pool, 3).await;
    let key = kairos::domain::schedule::window_key(at);
    // `blocked` is due a second before `free`, so a stager reads it first.
    let blocked_key = kairos::domain::schedule::window_key(at - chrono::Duration::seconds(1));
    for (id, k) in [("blocked", &blocked_key), ("free", &key)] {
        let (status, body) = json(
            app.put(
                &format!("/v1/tasks/{id}"),
                json!({"agent_id": "a", "trigger": {"type": "once", "at": k},
                       "execution": {"concurrency_limit": 1, "overlap": "skip"}}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    // An unfinished manual instance: at staging time, `blocked`'s window would be skipped.
    let (status, manual) = json(app.post("/v1/tasks/blocked/trigger", json!({})).await).await;
    assert_eq!(status, 201, "{manual}");

    // Batches of one: `blocked`, due first, is read past (it has unfinished work) and `free`
    // is staged.
    let lp = staging_loop(&pool, Duration::from_secs(10), 1);
    let staging = tokio::spawn(async move { lp.run_staged(at).await });
    until_staged(&pool, "free").await;
    assert!(!cursor_held(&pool, "blocked").await);
    // The blocking instance finishes before the instant (while the staged pass waits).
    let (status, body) = json(
        app.post(
            &format!(
                "/v1/instances/{}/cancel",
                manual["id"].as_str().expect("id")
            ),
            json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let staged = staging.await.expect("join").expect("staged pass");
    // `free` is staged. `blocked` is never staged while its blocker is unfinished; a stager
    // (there are two) that reads it only after the cancel finds nothing unfinished and may
    // stage it then, which is as right: either way it is never skipped.
    assert!(
        matches!(staged.num_created, 1 | 2),
        "`free`, and `blocked` only if read after the cancel: {staged:?}"
    );
    assert_eq!(staged.num_skipped, 0);
    assert!(kairos::store::now(&pool).await.expect("now") >= at);

    // The pass at the instant decides what was not staged: nothing is unfinished any more, so
    // `blocked` runs.
    let report = one_pass(&pool).await;
    assert_eq!(
        (report.num_created, report.num_skipped),
        (2 - staged.num_created, 0)
    );
    for (id, k) in [("blocked", &blocked_key), ("free", &key)] {
        let rows = windows(&pool, id).await;
        let scheduled: Vec<_> = rows.iter().filter(|r| r.2 == "schedule").collect();
        assert_eq!(scheduled.len(), 1, "{id}: {rows:?}");
        assert_eq!(
            (scheduled[0].0.as_str(), scheduled[0].1.as_str()),
            (k.as_str(), "PENDING")
        );
    }
    app.shutdown().await;
}

#[sqlx::test]
async fn three_staging_replicas_write_every_window_of_queued_tasks_exactly_once(
    pool_opts: PgPoolOptions,
    conn_opts: PgConnectOptions,
) {
    let pools = replica_pools(&pool_opts, &conn_opts).await;
    let api = TestApp::spawn(pools[0].clone()).await;
    // `queue` tasks are staged even with unfinished (never claimed) windows.
    for i in 0..20 {
        let mut task = cron_task("a", "* * * * * *");
        task["execution"] = json!({"overlap": "queue", "concurrency_limit": 1});
        let (status, body) = json(api.put(&format!("/v1/tasks/q{i:02}"), task).await).await;
        assert_eq!(status, 201, "{body}");
    }
    let stop = CancellationToken::new();
    let mut handles = Vec::new();
    for (i, pool) in pools.iter().enumerate() {
        let mut cfg = loop_config(&format!("node-{i}"));
        cfg.lead = Duration::from_millis(800);
        cfg.batch_size = 7;
        let lp = TriggerLoop::new(pool.clone(), cfg, Heartbeats::default());
        handles.push(tokio::spawn(lp.run(stop.child_token())));
    }
    let pool = pools[0].clone();
    eventually(
        Duration::from_secs(20),
        "five windows of every task",
        || {
            let pool = pool.clone();
            async move {
                let fewest: Option<i64> = sqlx::query_scalar(
                "select min(n) from (select count(*) as n from task_instance group by task_id) c \
                 having count(*) = 20",
            )
            .fetch_optional(&pool)
            .await
            .expect("count")
            .flatten();
                (fewest.unwrap_or(0) >= 5).then_some(())
            }
        },
    )
    .await;
    stop.cancel();
    for h in handles {
        h.await.expect("loop stopped");
    }
    for i in 0..20 {
        let rows = windows(&pool, &format!("q{i:02}")).await;
        let keys: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        assert_every_second_once(&keys);
        assert!(rows.iter().all(|r| r.1 == "PENDING"), "{rows:?}");
    }
    // No window was created before its instant.
    let early: i64 =
        sqlx::query_scalar("select count(*) from task_instance where created_at < scheduled_at")
            .fetch_one(&pool)
            .await
            .expect("early");
    assert_eq!(early, 0);
    // The stagers did write windows (created exactly at their instant).
    let staged: i64 =
        sqlx::query_scalar("select count(*) from task_instance where created_at = scheduled_at")
            .fetch_one(&pool)
            .await
            .expect("staged");
    assert!(staged > 0, "no window was staged");
}

#[sqlx::test]
async fn a_task_moved_to_another_agent_while_its_window_is_staged_takes_that_window_along(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    let at = instant_in(&pool, 2).await;
    let key = kairos::domain::schedule::window_key(at);
    let task = |agent: &str| json!({"agent_id": agent, "trigger": {"type": "once", "at": key}});
    let (status, body) = json(app.put("/v1/tasks/mover", task("old")).await).await;
    assert_eq!(status, 201, "{body}");

    let lp = staging_loop(&pool, Duration::from_secs(10), 500);
    let staging = tokio::spawn(async move { lp.run_staged(at).await });
    // Once the window is staged (the cursor is held), move the task.
    until_staged(&pool, "mover").await;
    let (status, body) = json(app.put("/v1/tasks/mover", task("new")).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(staging.await.expect("join").expect("staged").num_created, 1);
    let agents: Vec<(String, String)> =
        sqlx::query_as("select window_key, agent_id from task_instance where task_id = 'mover'")
            .fetch_all(&pool)
            .await
            .expect("rows");
    assert_eq!(agents, vec![(key, "new".to_owned())]);
    app.shutdown().await;
}

#[sqlx::test]
async fn a_task_due_while_another_instant_is_staged_is_written_when_due(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let far = instant_in(&pool, 4).await;
    let once = |at: DateTime<Utc>| {
        json!({"agent_id": "a", "trigger": {"type": "once", "at": kairos::domain::schedule::window_key(at)},
               "execution": {"misfire_grace_seconds": 1}})
    };
    let (status, body) = json(app.put("/v1/tasks/far", once(far)).await).await;
    assert_eq!(status, 201, "{body}");
    let stop = CancellationToken::new();
    let mut cfg = loop_config("r");
    cfg.lead = Duration::from_secs(10);
    let lp = TriggerLoop::new(pool.clone(), cfg, Heartbeats::default());
    let handle = tokio::spawn(lp.run(stop.child_token()));
    // The loop stages `far` (its cursor is held) ...
    until_staged(&pool, "far").await;
    // ... when a task due well before it is registered, with a grace of one second.
    let soon = instant_in(&pool, 0).await + chrono::Duration::seconds(1);
    assert!(soon < far);
    let (status, body) = json(app.put("/v1/tasks/soon", once(soon)).await).await;
    assert_eq!(status, 201, "{body}");
    let rows = eventually(Duration::from_secs(15), "both windows", || {
        let pool = pool.clone();
        async move {
            let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
                "select task_id, status, skip_reason from task_instance order by scheduled_at",
            )
            .fetch_all(&pool)
            .await
            .expect("rows");
            (rows.len() == 2).then_some(rows)
        }
    })
    .await;
    stop.cancel();
    handle.await.expect("loop stopped");
    // Written when due, not held back to the staged instant (which would miss its grace).
    assert_eq!(
        rows,
        vec![
            ("soon".to_owned(), "PENDING".to_owned(), None),
            ("far".to_owned(), "PENDING".to_owned(), None)
        ]
    );
    app.shutdown().await;
}

#[sqlx::test]
async fn a_manual_run_waits_for_a_staged_window_and_a_failure_of_other_work_never_does(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    let at = instant_in(&pool, 3).await;
    let key = kairos::domain::schedule::window_key(at);
    // `idle` has nothing unfinished and is staged; `busy` has a running attempt whose failure
    // opens its circuit, and is left to the pass at the instant, unlocked.
    for id in ["idle", "busy"] {
        let (status, body) = json(
            app.put(
                &format!("/v1/tasks/{id}"),
                json!({"agent_id": "a", "trigger": {"type": "once", "at": key},
                       "execution": {"max_retries": 0},
                       "circuit_breaker": {"failure_threshold": 1}}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = json(app.post("/v1/tasks/busy/trigger", json!({})).await).await;
    assert_eq!(status, 201, "{body}");
    let claimed = claim(&app, "a", "w", 1, json!({})).await;
    assert_eq!(claimed.len(), 1);

    let lp = staging_loop(&pool, Duration::from_secs(10), 500);
    let staging = tokio::spawn(async move { lp.run_staged(at).await });
    until_staged(&pool, "idle").await;
    assert!(
        !cursor_held(&pool, "busy").await,
        "a task with unfinished work is not held"
    );

    // The failure (which pauses `busy` and so writes its cursor) is answered before the instant.
    let (status, body) = json(
        app.post(
            &format!(
                "/v1/instances/{}/fail",
                claimed[0]["id"].as_str().expect("id")
            ),
            json!({"lease_token": claimed[0]["lease_token"], "error": "boom", "retryable": false}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(kairos::store::now(&pool).await.expect("now") < at);

    // A manual run of `idle` is answered only once its staged window is published, so it comes
    // after that window, as it would have had the window been written at its instant.
    let (status, manual) = json(app.post("/v1/tasks/idle/trigger", json!({})).await).await;
    assert_eq!(status, 201, "{manual}");
    assert!(kairos::store::now(&pool).await.expect("now") >= at);
    let staged = staging.await.expect("join").expect("staged");
    assert_eq!((staged.num_created, staged.num_skipped), (1, 0));
    let rows = windows(&pool, "idle").await;
    let statuses: Vec<(&str, &str)> = rows.iter().map(|r| (r.1.as_str(), r.2.as_str())).collect();
    assert_eq!(
        statuses,
        vec![("PENDING", "schedule"), ("PENDING", "manual")]
    );
    app.shutdown().await;
}
