//! An instance's `events` list for every transition path, now that happy-path transitions are
//! kept on the instance row; and the upgrade of a version-1 database holding rows in every
//! status (migration 2), after which every history and guarantee still holds; and the move of
//! the trigger cursor out of the task row (migration 5) on a database holding tasks.

mod common;

use common::{TestApp, json};
use kairos::services::Heartbeats;
use kairos::services::retry_scanner::{RetryScanner, RetryScannerConfig};
use kairos::services::timeout_reaper::{TimeoutReaper, TimeoutReaperConfig};
use kairos::services::trigger_loop::{TriggerLoop, TriggerLoopConfig};
use kairos::store::MIGRATOR;
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

/// `(from, to, attempt, actor)` of each event, in order.
async fn history(app: &TestApp, id: &str) -> Vec<(String, String, i64, String)> {
    let (status, detail) = json(app.get(&format!("/v1/instances/{id}")).await).await;
    assert_eq!(status, 200, "{detail}");
    detail["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap_or("-").to_owned(),
                e["to"].as_str().unwrap_or("").to_owned(),
                e["attempt"].as_i64().unwrap_or(0),
                e["actor"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn ev(from: &str, to: &str, attempt: i64, actor: &str) -> (String, String, i64, String) {
    (from.to_owned(), to.to_owned(), attempt, actor.to_owned())
}

async fn claim_one(app: &TestApp, agent: &str, worker: &str, lease: i64) -> Value {
    let got = common::claim(app, agent, worker, 1, json!({"lease_seconds": lease})).await;
    got.into_iter().next().unwrap_or(Value::Null)
}

/// Let every backoff end now, so the retry scanner takes the FAILED rows at once.
async fn end_backoffs(pool: &PgPool) {
    sqlx::query("update task_instance set available_at = now() where status = 'FAILED'")
        .execute(pool)
        .await
        .expect("end backoffs");
}

fn s(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_owned()
}

/// POST an instance action and expect 200; returns the answer.
async fn act(app: &TestApp, id: &str, action: &str, body: Value) -> Value {
    let (status, answer) = json(
        app.post(&format!("/v1/instances/{id}/{action}"), body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{action} {id}: {answer}");
    answer
}

async fn manual_task(app: &TestApp, id: &str, agent: &str) {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{id}"),
            json!({
                "agent_id": agent,
                "trigger": {"type": "manual"},
                "execution": {"max_retries": 2, "concurrency_limit": 10,
                              "retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0.0}},
            }),
        )
        .await,
    )
    .await;
    assert!(status == 201 || status == 200, "{body}");
}

async fn trigger(app: &TestApp, task: &str, key: &str) -> String {
    let (status, body) = json(
        app.post(
            &format!("/v1/tasks/{task}/trigger"),
            json!({"window_key": key}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    s(&body, "id")
}

#[sqlx::test]
async fn every_transition_path_shows_its_events_in_order(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "h", "ha").await;

    // Success: created, claimed, succeeded; nothing of it in instance_events.
    let id = trigger(&app, "h", "ok").await;
    let c = claim_one(&app, "ha", "w1", 60).await;
    assert_eq!(s(&c, "id"), id);
    act(
        &app,
        &id,
        "complete",
        json!({"lease_token": c["lease_token"]}),
    )
    .await;
    assert_eq!(
        history(&app, &id).await,
        vec![
            ev("-", "PENDING", 1, "api"),
            ev("PENDING", "RUNNING", 1, "agent:w1"),
            ev("RUNNING", "SUCCESS", 1, "agent:w1"),
        ]
    );
    let rows: i64 =
        sqlx::query_scalar("select count(*) from instance_events where instance_id = $1")
            .bind(Uuid::parse_str(&id).expect("uuid"))
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(rows, 0, "the happy path writes no event rows");

    // Fail, retry, reap, retry, succeed: each attempt's claim stays in the history.
    let id = trigger(&app, "h", "bumpy").await;
    let c = claim_one(&app, "ha", "w1", 60).await;
    let (status, body) = json(
        app.post(
            &format!("/v1/instances/{id}/fail"),
            json!({"lease_token": c["lease_token"], "error": "boom", "retryable": true}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let scanner = RetryScanner::new(
        pool.clone(),
        RetryScannerConfig::new("n1"),
        Heartbeats::default(),
    );
    end_backoffs(&pool).await;
    assert_eq!(scanner.run_once().await.expect("scan").num_retried, 1);
    let c2 = claim_one(&app, "ha", "w2", 1).await;
    assert_eq!(s(&c2, "id"), id);
    sqlx::query(
        "update task_instance set lease_expires_at = now() - interval '1 second' where id = $1",
    )
    .bind(Uuid::parse_str(&id).expect("uuid"))
    .execute(&pool)
    .await
    .expect("expire");
    let reaper = TimeoutReaper::new(
        pool.clone(),
        TimeoutReaperConfig::new("n1"),
        Heartbeats::default(),
    );
    assert_eq!(reaper.run_once().await.expect("reap").num_reaped, 1);
    end_backoffs(&pool).await;
    assert_eq!(scanner.run_once().await.expect("scan").num_retried, 1);
    let c3 = claim_one(&app, "ha", "w3", 60).await;
    act(
        &app,
        &id,
        "complete",
        json!({"lease_token": c3["lease_token"]}),
    )
    .await;
    assert_eq!(
        history(&app, &id).await,
        vec![
            ev("-", "PENDING", 1, "api"),
            ev("PENDING", "RUNNING", 1, "agent:w1"),
            ev("RUNNING", "FAILED", 1, "agent:w1"),
            ev("FAILED", "PENDING", 2, "retry_scanner:n1"),
            ev("PENDING", "RUNNING", 2, "agent:w2"),
            ev("RUNNING", "FAILED", 2, "reaper:n1"),
            ev("FAILED", "PENDING", 3, "retry_scanner:n1"),
            ev("PENDING", "RUNNING", 3, "agent:w3"),
            ev("RUNNING", "SUCCESS", 3, "agent:w3"),
        ]
    );

    // Cancel while running, then an operator retry.
    let id = trigger(&app, "h", "cancelled").await;
    let c = claim_one(&app, "ha", "w4", 60).await;
    assert_eq!(s(&c, "id"), id);
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/cancel"),
            json!({"reason": "stop"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{id}/retry"),
            json!({"reason": "again"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        history(&app, &id).await,
        vec![
            ev("-", "PENDING", 1, "api"),
            ev("PENDING", "RUNNING", 1, "agent:w4"),
            ev("RUNNING", "CANCELLED", 1, "operator"),
            ev("CANCELLED", "PENDING", 2, "operator"),
        ]
    );
}

/// The first schema version.
const V1: i64 = 20261129000001;

#[sqlx::test(migrations = false)]
async fn a_version_1_database_with_rows_in_every_status_upgrades_in_place(pool: PgPool) {
    MIGRATOR.run_to(V1, &pool).await.expect("migrate to v1");
    let spec = json!({
        "agent_id": "la", "trigger": {"type": "manual"},
        "execution": {"max_retries": 2, "concurrency_limit": 10,
                      "retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0.0}},
    });
    let sub = kairos::domain::task::parse_submission("legacy", &spec).expect("spec");
    sqlx::query(
        "insert into tasks (id, agent_id, spec, trigger_type) values ('legacy', 'la', $1, 'manual')",
    )
    .bind(serde_json::to_value(&sub.spec).expect("json"))
    .execute(&pool)
    .await
    .expect("task");
    // One row per status, with the explicit events version 1 wrote for each.
    let token = Uuid::new_v4();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
             attempt, max_attempts, available_at, lease_token, lease_expires_at, worker_id, \
             started_at, deadline_at, finished_at, error, error_kind, skip_reason, result) values \
         ('00000000-0000-0000-0000-000000000001', 'legacy', 'p', now() - interval '1 hour', 'PENDING', 'schedule', 'la', 1, 3, now() - interval '1 hour', null, null, null, null, null, null, null, null, null, null), \
         ('00000000-0000-0000-0000-000000000002', 'legacy', 'r', now() - interval '2 hour', 'RUNNING', 'schedule', 'la', 1, 3, now() - interval '2 hour', '{token}', now() + interval '1 hour', 'w-old', now() - interval '1 minute', now() + interval '1 hour', null, null, null, null, null), \
         ('00000000-0000-0000-0000-000000000003', 'legacy', 's', now() - interval '3 hour', 'SUCCESS', 'schedule', 'la', 1, 3, now() - interval '3 hour', null, null, 'w-old', now() - interval '3 hour', null, now() - interval '3 hour', null, null, null, '{{\"ok\": true}}'), \
         ('00000000-0000-0000-0000-000000000004', 'legacy', 'f', now() - interval '4 hour', 'FAILED', 'schedule', 'la', 1, 3, now() - interval '1 second', null, null, 'w-old', now() - interval '4 hour', null, null, 'boom', 'agent', null, null), \
         ('00000000-0000-0000-0000-000000000005', 'legacy', 'd', now() - interval '5 hour', 'DEAD', 'schedule', 'la', 3, 3, now() - interval '5 hour', null, null, 'w-old', now() - interval '5 hour', null, now() - interval '5 hour', 'boom', 'agent', null, null), \
         ('00000000-0000-0000-0000-000000000006', 'legacy', 'k', now() - interval '6 hour', 'SKIPPED', 'schedule', 'la', 1, 3, now() - interval '6 hour', null, null, null, null, null, now() - interval '6 hour', null, null, 'overlap: window x unfinished', null), \
         ('00000000-0000-0000-0000-000000000007', 'legacy', 'c', now() - interval '7 hour', 'CANCELLED', 'schedule', 'la', 1, 3, now() - interval '7 hour', null, null, null, null, null, now() - interval '7 hour', 'stop', 'cancelled', null, null); \
         insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason) values \
         ('00000000-0000-0000-0000-000000000001', 1, null, 'PENDING', 'trigger:old', 'schedule'), \
         ('00000000-0000-0000-0000-000000000002', 1, null, 'PENDING', 'trigger:old', 'schedule'), \
         ('00000000-0000-0000-0000-000000000002', 1, 'PENDING', 'RUNNING', 'agent:w-old', 'claimed by worker w-old'), \
         ('00000000-0000-0000-0000-000000000003', 1, null, 'PENDING', 'trigger:old', 'schedule'), \
         ('00000000-0000-0000-0000-000000000003', 1, 'PENDING', 'RUNNING', 'agent:w-old', 'claimed by worker w-old'), \
         ('00000000-0000-0000-0000-000000000003', 1, 'RUNNING', 'SUCCESS', 'agent:w-old', null), \
         ('00000000-0000-0000-0000-000000000004', 1, null, 'PENDING', 'trigger:old', 'schedule'), \
         ('00000000-0000-0000-0000-000000000004', 1, 'PENDING', 'RUNNING', 'agent:w-old', 'claimed by worker w-old'), \
         ('00000000-0000-0000-0000-000000000004', 1, 'RUNNING', 'FAILED', 'agent:w-old', 'agent: boom'), \
         ('00000000-0000-0000-0000-000000000005', 1, null, 'PENDING', 'trigger:old', 'schedule'), \
         ('00000000-0000-0000-0000-000000000005', 3, 'RUNNING', 'DEAD', 'agent:w-old', 'agent: boom'), \
         ('00000000-0000-0000-0000-000000000006', 1, null, 'SKIPPED', 'trigger:old', 'overlap: window x unfinished'), \
         ('00000000-0000-0000-0000-000000000007', 1, null, 'PENDING', 'trigger:old', 'schedule'), \
         ('00000000-0000-0000-0000-000000000007', 1, 'PENDING', 'CANCELLED', 'operator', 'stop');"
    )))
    .execute(&pool)
    .await
    .expect("v1 rows");

    MIGRATOR
        .run(&pool)
        .await
        .expect("upgrade to the latest schema");
    let app = TestApp::spawn(pool.clone()).await;
    let id = |n: u8| format!("00000000-0000-0000-0000-00000000000{n}");

    // Every old history reads as before.
    assert_eq!(
        history(&app, &id(3)).await,
        vec![
            ev("-", "PENDING", 1, "trigger:old"),
            ev("PENDING", "RUNNING", 1, "agent:w-old"),
            ev("RUNNING", "SUCCESS", 1, "agent:w-old"),
        ]
    );
    assert_eq!(
        history(&app, &id(6)).await,
        vec![ev("-", "SKIPPED", 1, "trigger:old")]
    );
    assert_eq!(history(&app, &id(7)).await.len(), 2);

    // The RUNNING row's lease from before the upgrade still completes, and its history grows.
    let (status, body) = json(
        app.post(
            &format!("/v1/instances/{}/complete", id(2)),
            json!({"lease_token": token}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        history(&app, &id(2)).await,
        vec![
            ev("-", "PENDING", 1, "trigger:old"),
            ev("PENDING", "RUNNING", 1, "agent:w-old"),
            ev("RUNNING", "SUCCESS", 1, "agent:w-old"),
        ]
    );

    // The FAILED row is retried by the scanner; PENDING rows are claimable, oldest first.
    let scanner = RetryScanner::new(
        pool.clone(),
        RetryScannerConfig::new("n2"),
        Heartbeats::default(),
    );
    end_backoffs(&pool).await;
    assert_eq!(scanner.run_once().await.expect("scan").num_retried, 1);
    let (status, body) = json(
        app.post(
            "/v1/claims",
            json!({"agent_id": "la", "worker_id": "w-new", "max_instances": 10}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let claimed: Vec<String> = body["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .map(|i| s(i, "window_key"))
        .collect();
    // Availability order: the retried row became available when its backoff ended, just now.
    assert_eq!(claimed, vec!["p".to_owned(), "f".to_owned()]);
    let f = &body["instances"][1];
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{}/fail", id(4)),
            json!({"lease_token": f["lease_token"], "error": "again", "retryable": true}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        history(&app, &id(4)).await,
        vec![
            ev("-", "PENDING", 1, "trigger:old"),
            ev("PENDING", "RUNNING", 1, "agent:w-old"),
            ev("RUNNING", "FAILED", 1, "agent:w-old"),
            ev("FAILED", "PENDING", 2, "retry_scanner:n2"),
            ev("PENDING", "RUNNING", 2, "agent:w-new"),
            ev("RUNNING", "FAILED", 2, "agent:w-new"),
        ]
    );

    // Operator retry of the old DEAD row, and the DEAD queue query.
    let (status, body) = json(app.get("/v1/instances?status=DEAD").await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["items"].as_array().map(Vec::len), Some(1));
    let (status, body) = json(
        app.post(
            &format!("/v1/instances/{}/retry", id(5)),
            json!({"reason": "after upgrade"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "PENDING");

    // The window key stays unique: the same key answers the existing instance.
    let (status, body) = json(
        app.post("/v1/tasks/legacy/trigger", json!({"window_key": "s"}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(s(&body, "id"), id(3));
}

/// The last schema version with the cursor on the task row.
const V4: i64 = 20261201000004;

#[sqlx::test(migrations = false)]
async fn a_version_4_database_keeps_every_cursor_and_pause_when_the_cursor_moves_out(pool: PgPool) {
    MIGRATOR.run_to(V4, &pool).await.expect("migrate to v4");
    let spec = |id: &str| {
        let sub = kairos::domain::task::parse_submission(
            id,
            &json!({"agent_id": "ca", "trigger": {"type": "interval", "every_seconds": 3600}}),
        )
        .expect("spec");
        serde_json::to_value(&sub.spec).expect("json")
    };
    // Due a second ago; the same but paused; due tomorrow; fired once and done (null).
    for (id, next, paused) in [
        (
            "due",
            "date_trunc('second', now()) - interval '1 second'",
            false,
        ),
        (
            "held",
            "date_trunc('second', now()) - interval '1 second'",
            true,
        ),
        (
            "later",
            "date_trunc('second', now()) + interval '1 day'",
            false,
        ),
        ("done", "null", false),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "insert into tasks (id, agent_id, spec, trigger_type, next_fire_at, last_window_at, \
                 paused, paused_reason) \
             values ($1, 'ca', $2, 'interval', {next}, now() - interval '2 hours', $3, \
                 case when $3 then 'held by operator' end)"
        )))
        .bind(id)
        .bind(spec(id))
        .bind(paused)
        .execute(&pool)
        .await
        .expect("v4 task");
    }
    let before: Vec<(String, Option<chrono::DateTime<chrono::Utc>>)> =
        sqlx::query_as("select id, next_fire_at from tasks order by id")
            .fetch_all(&pool)
            .await
            .expect("v4 cursors");

    MIGRATOR
        .run(&pool)
        .await
        .expect("upgrade to the latest schema");
    let app = TestApp::spawn(pool.clone()).await;

    // The API shows every cursor and pause as before.
    for (id, next) in &before {
        let (status, task) = json(app.get(&format!("/v1/tasks/{id}")).await).await;
        assert_eq!(status, 200, "{task}");
        let shown = task["next_fire_at"]
            .as_str()
            .map(|s| s.parse::<chrono::DateTime<chrono::Utc>>().expect("instant"));
        assert_eq!(shown, *next, "{id}");
        assert_eq!(task["paused"], json!(*id == "held"), "{id}");
    }
    let last: i64 = sqlx::query_scalar(
        "select count(*) from task_cursor where last_window_at < now() - interval '1 hour'",
    )
    .fetch_one(&pool)
    .await
    .expect("last windows");
    assert_eq!(last, 4, "last_window_at moved with the cursor");

    // One pass fires the due task only, the paused one stays held, and a second pass adds
    // nothing.
    let lp = TriggerLoop::new(
        pool.clone(),
        TriggerLoopConfig::new("n5"),
        Heartbeats::default(),
    );
    assert_eq!(lp.run_once().await.expect("pass").num_created, 1);
    assert_eq!(lp.run_once().await.expect("pass").num_created, 0);
    let fired: Vec<String> = sqlx::query_scalar("select task_id from task_instance")
        .fetch_all(&pool)
        .await
        .expect("windows");
    assert_eq!(fired, vec!["due".to_owned()]);

    // Resuming the paused task moves its cursor to now (paused time is not missed); pausing
    // and deleting keep the cursor row in step with the task row.
    let (status, resumed) = json(app.post("/v1/tasks/held/resume", json!({})).await).await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["paused"], json!(false));
    let (status, paused) = json(
        app.post("/v1/tasks/later/pause", json!({"reason": "hold"}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{paused}");
    let status = app
        .request(reqwest::Method::DELETE, "/v1/tasks/done", None)
        .await
        .status();
    assert!(status.is_success(), "{status}");
    let cursors: Vec<(String, bool, bool)> = sqlx::query_as(
        "select task_id, paused, next_fire_at > now() - interval '1 minute' from task_cursor \
         order by task_id",
    )
    .fetch_all(&pool)
    .await
    .expect("cursors");
    assert_eq!(
        cursors,
        vec![
            ("due".to_owned(), false, true),
            ("held".to_owned(), false, true),
            ("later".to_owned(), true, true),
        ]
    );
    // A task registered after the upgrade gets its cursor with its row.
    let (status, created) = json(
        app.put(
            "/v1/tasks/fresh",
            json!({"agent_id": "ca", "trigger": {"type": "interval", "every_seconds": 60}}),
        )
        .await,
    )
    .await;
    assert!((200..300).contains(&status), "{created}");
    assert!(created["next_fire_at"].is_string(), "{created}");
}
