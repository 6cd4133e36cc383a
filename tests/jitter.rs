//! Trigger jitter against a real PostgreSQL: every replica, pass and preview agrees on each
//! window's offset, offsets spread over the whole range, a staged window is never claimable
//! before its jittered instant, and jitter that could reorder windows is refused.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use common::{TestApp, claim, eventually, json};
use kairos::domain::jitter::offset_ms;
use kairos::services::Heartbeats;
use kairos::services::trigger_loop::{TriggerLoop, TriggerLoopConfig};
use serde_json::{Value, json};
use sqlx::PgPool;

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("RFC 3339")
}

/// `(window_key, scheduled_at, available_at)` of each previewed window of `task`.
async fn preview(app: &TestApp, task: &str, query: &str) -> Vec<(String, String, String)> {
    let (status, body) = json(app.get(&format!("/v1/tasks/{task}/preview?{query}")).await).await;
    assert_eq!(status, 200, "{body}");
    body["windows"]
        .as_array()
        .expect("windows")
        .iter()
        .map(|w| {
            let s = |k: &str| w[k].as_str().expect(k).to_owned();
            (s("window_key"), s("scheduled_at"), s("available_at"))
        })
        .collect()
}

/// `(task_id, window_key, scheduled_at, available_at, created_by)` of a written window.
type WrittenWindow = (String, String, DateTime<Utc>, DateTime<Utc>, String);

#[sqlx::test]
async fn two_replicas_and_every_preview_give_a_window_the_same_jittered_instant(pool: PgPool) {
    // Small batches, so the two loops share each instant's tasks between them.
    let replica = |node: &str| {
        let mut cfg = TriggerLoopConfig::new(node);
        cfg.max_sleep = Duration::from_millis(500);
        cfg.batch_size = 4;
        cfg.parallelism = 1;
        TestApp::spawn_with(pool.clone(), Some(cfg))
    };
    let a = replica("node-a").await;
    let b = replica("node-b").await;
    let tasks: Vec<String> = (0..24).map(|i| format!("jittered-{i:02}")).collect();
    for t in &tasks {
        let (status, body) = json(
            a.put(
                &format!("/v1/tasks/{t}"),
                json!({"agent_id": "j", "trigger": {"type": "interval", "every_seconds": 2, "jitter_seconds": 1}}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["trigger"]["jitter_seconds"], 1);
    }
    // Both replicas preview the same windows with the same instants, call after call.
    let mut expected: HashMap<(String, String), String> = HashMap::new();
    for t in &tasks {
        let from = a.get(&format!("/v1/tasks/{t}")).await;
        let (_, task) = json(from).await;
        let next = task["next_fire_at"].as_str().expect("next fire").to_owned();
        let from = (at(&next) - chrono::Duration::seconds(1)).to_rfc3339();
        let query = format!("count=5&from={}", from.replace('+', "%2B"));
        let first = preview(&a, t, &query).await;
        assert_eq!(first.len(), 5);
        assert_eq!(first, preview(&b, t, &query).await, "replica b");
        assert_eq!(first, preview(&a, t, &query).await, "a second preview");
        for (key, scheduled, available) in first {
            assert_eq!(scheduled, key, "the window keeps its nominal instant");
            let offset = (at(&available) - at(&scheduled)).num_milliseconds();
            assert_eq!(offset, offset_ms(t, &key, 1));
            assert!((0..1000).contains(&offset), "{t} {key}: {offset} ms");
            expected.insert((t.clone(), key), available);
        }
    }

    // Both loops materialise windows; every row, whoever wrote it, is what the previews said.
    let n = tasks.len();
    let rows = eventually(
        Duration::from_secs(30),
        "windows written by both replicas",
        || {
            let pool = pool.clone();
            let expected = &expected;
            async move {
                let rows: Vec<WrittenWindow> = sqlx::query_as(
                    "select task_id, window_key, scheduled_at, available_at, created_by \
                         from task_instance where task_id like 'jittered-%'",
                )
                .fetch_all(&pool)
                .await
                .expect("rows");
                let previewed = rows
                    .iter()
                    .filter(|r| expected.contains_key(&(r.0.clone(), r.1.clone())))
                    .count();
                let writers: HashSet<&str> = rows.iter().map(|r| r.4.as_str()).collect();
                (previewed >= 2 * n && writers.len() == 2).then_some(rows)
            }
        },
    )
    .await;
    let mut compared = 0;
    for (task, key, scheduled, available, writer) in &rows {
        assert!(writer.starts_with("trigger:node-"), "{writer}");
        assert_eq!(kairos::domain::schedule::window_key(*scheduled), *key);
        let offset = (*available - *scheduled).num_milliseconds();
        assert_eq!(offset, offset_ms(task, key, 1), "{task} {key} by {writer}");
        if let Some(previewed) = expected.get(&(task.clone(), key.clone())) {
            assert_eq!(*available, at(previewed), "{task} {key} by {writer}");
            compared += 1;
        }
    }
    assert!(compared >= 2 * tasks.len(), "{compared}");
    a.shutdown().await;
    b.shutdown().await;
}

#[sqlx::test]
async fn offsets_of_a_thousand_tasks_on_one_expression_spread_over_the_whole_jitter(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let jitter = 240;
    let mut puts = tokio::task::JoinSet::new();
    for i in 0..1000 {
        let client = app.client.clone();
        let url = app.url(&format!("/v1/tasks/fleet-{i:04}"));
        puts.spawn(async move {
            let resp = client
                .put(url)
                .json(&json!({"agent_id": "fleet", "trigger": {"type": "cron", "expr": "0 */5 * * * *", "jitter_seconds": jitter}}))
                .send()
                .await
                .expect("put");
            assert_eq!(resp.status().as_u16(), 201);
        });
        if puts.len() >= 8 {
            puts.join_next().await.expect("a put").expect("put ok");
        }
    }
    while let Some(done) = puts.join_next().await {
        done.expect("put ok");
    }

    let mut deciles = [0usize; 10];
    let mut distinct = HashSet::new();
    let mut own_offsets = 0;
    for i in 0..1000 {
        let task = format!("fleet-{i:04}");
        let windows = preview(&app, &task, "count=2&from=2026-12-01T00:00:00Z").await;
        if i % 100 == 0 {
            assert_eq!(
                windows,
                preview(&app, &task, "count=2&from=2026-12-01T00:00:00Z").await
            );
        }
        assert_eq!(windows[0].0, "2026-12-01T00:05:00Z");
        for (key, scheduled, available) in &windows {
            let offset = (at(available) - at(scheduled)).num_milliseconds();
            assert!((0..240_000).contains(&offset), "{task} {key}: {offset}");
            assert_eq!(offset, offset_ms(&task, key, jitter));
            if key == "2026-12-01T00:05:00Z" {
                deciles[(offset / 24_000) as usize] += 1;
                distinct.insert(offset);
            }
        }
        let second = &windows[1];
        if (at(&second.2) - at(&second.1)).num_milliseconds()
            != (at(&windows[0].2) - at(&windows[0].1)).num_milliseconds()
        {
            own_offsets += 1;
        }
    }
    // Each window of a task has an offset of its own.
    assert!(own_offsets > 990, "{own_offsets}");
    // 1,000 draws, 100 expected per tenth of the range: a hash that collapsed (all offsets
    // equal, or bunched in part of the range) fails this, a uniform one passes by far.
    for (d, n) in deciles.iter().enumerate() {
        assert!(
            (50..=150).contains(n),
            "decile {d} holds {n} of 1000: {deciles:?}"
        );
    }
    assert!(distinct.len() > 990, "{} distinct offsets", distinct.len());
    app.shutdown().await;
}

/// A task id whose window `key` has an offset of at least `min_ms` under `jitter` seconds.
fn task_with_offset(key: &str, jitter: i64, min_ms: i64) -> (String, i64) {
    (0..)
        .map(|n| format!("staged-jitter-{n}"))
        .map(|t| {
            let o = offset_ms(&t, key, jitter);
            (t, o)
        })
        .find(|(_, o)| *o >= min_ms)
        .expect("some id")
}

#[sqlx::test]
async fn a_staged_window_with_jitter_is_never_claimable_before_its_jittered_instant(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let now = kairos::store::now(&pool).await.expect("now");
    let instant = (now + chrono::Duration::seconds(5))
        .with_nanosecond(0)
        .expect("whole second");
    let key = kairos::domain::schedule::window_key(instant);
    let (task, offset) = task_with_offset(&key, 6, 3000);
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{task}"),
            json!({"agent_id": "stj", "trigger": {"type": "interval", "every_seconds": 3600,
                   "start_at": key, "jitter_seconds": 6}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["next_fire_at"], key);
    let expected = instant + chrono::Duration::milliseconds(offset);
    let previewed = preview(&app, &task, "count=1").await;
    assert_eq!(at(&previewed[0].2), expected);

    let mut cfg = TriggerLoopConfig::new("stager");
    cfg.lead = Duration::from_secs(10);
    let stager = TriggerLoop::new(pool.clone(), cfg, Heartbeats::default());
    let staging = tokio::spawn(async move { stager.run_staged(instant).await });

    // Claim again and again: while the window is written but before its jittered instant,
    // nothing is claimed; the claim that takes it does so at or after that instant.
    let early_looks = std::cell::Cell::new(0);
    let claimed: Value = eventually(Duration::from_secs(30), "the jittered claim", || {
        let (app, pool, task, early) = (&app, &pool, &task, &early_looks);
        async move {
            let (visible, before): (i64, bool) = sqlx::query_as(
                "select count(*), clock_timestamp() < $2 from task_instance where task_id = $1",
            )
            .bind(task)
            .bind(expected)
            .fetch_one(pool)
            .await
            .expect("look");
            let got = claim(app, "stj", "w1", 1, json!({})).await;
            if visible > 0 && before && got.is_empty() {
                early.set(early.get() + 1);
            }
            got.into_iter().next()
        }
    })
    .await;
    let report = staging.await.expect("join").expect("staged pass");
    assert_eq!(report.num_created, 1);
    assert!(
        early_looks.get() > 0,
        "the window was never seen waiting for its instant"
    );
    assert_eq!(claimed["window_key"], key);
    assert_eq!(claimed["scheduled_at"], key);
    assert_eq!(
        at(claimed["available_at"].as_str().expect("available_at")),
        expected
    );
    let (created, started): (DateTime<Utc>, DateTime<Utc>) =
        sqlx::query_as("select created_at, started_at from task_instance where task_id = $1")
            .bind(&task)
            .fetch_one(&pool)
            .await
            .expect("row");
    assert_eq!(created, instant, "published at its nominal instant");
    assert!(
        started >= expected,
        "claimed at {started}, before {expected}"
    );
    app.shutdown().await;
}

#[sqlx::test]
async fn jitter_that_could_reorder_windows_or_has_no_schedule_is_refused(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let refused = |trigger: Value| {
        let app = &app;
        async move {
            let (status, body) = json(
                app.put(
                    "/v1/tasks/bad-jitter",
                    json!({"agent_id": "a", "trigger": trigger}),
                )
                .await,
            )
            .await;
            assert_eq!(status, 422, "{trigger}: {body}");
            assert_eq!(
                body["errors"][0]["field"], "trigger.jitter_seconds",
                "{body}"
            );
            body["errors"][0]["message"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        }
    };
    let m = refused(json!({"type": "cron", "expr": "*/10 * * * * *", "jitter_seconds": 10})).await;
    assert!(m.contains("10 s"), "{m}");
    // The DST day brings 01:55 and 03:00 (for the missing 02:55) five minutes apart.
    refused(json!({"type": "cron", "expr": "0 55 1,2 * * *", "timezone": "America/New_York", "jitter_seconds": 300})).await;
    refused(json!({"type": "interval", "every_seconds": 30, "jitter_seconds": 30})).await;
    refused(json!({"type": "interval", "every_seconds": 7200, "jitter_seconds": 3601})).await;
    refused(json!({"type": "cron", "expr": "@daily", "jitter_seconds": -1})).await;
    refused(json!({"type": "cron", "expr": "@daily", "jitter_seconds": 1.5})).await;
    refused(json!({"type": "once", "at": "2030-01-01T00:00:00Z", "jitter_seconds": 5})).await;
    refused(json!({"type": "manual", "jitter_seconds": 0})).await;
    let (status, _) = json(app.get("/v1/tasks/bad-jitter").await).await;
    assert_eq!(status, 404, "nothing was registered");

    // Just below the gap is fine, and a changed jitter is a changed definition.
    let body = |jitter: i64| {
        json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "0 55 1,2 * * *",
               "timezone": "America/New_York", "jitter_seconds": jitter}})
    };
    let (status, task) = json(app.put("/v1/tasks/dst", body(299)).await).await;
    assert_eq!(status, 201, "{task}");
    let (status, again) = json(app.put("/v1/tasks/dst", body(299)).await).await;
    assert_eq!((status, &again["version"]), (200, &task["version"]));
    let (status, changed) = json(app.put("/v1/tasks/dst", body(120)).await).await;
    assert_eq!(status, 200);
    assert_eq!(changed["trigger"]["jitter_seconds"], 120);
    assert_ne!(changed["version"], task["version"]);
    app.shutdown().await;
}
