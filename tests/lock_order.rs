//! The lock order of `store::instances` (instance rows in id order, then task rows in id
//! order) against real interleavings: each test holds one side's transaction at the step that
//! used to invert the order and lets the other run into it. A deadlock would be reported as
//! SQLSTATE 40P01 to the side that waits with the short `deadlock_timeout`.

mod common;

use std::time::Duration;

use common::{TestApp, claim, eventually, json};
use kairos::batching::group_commit::GroupCommit;
use kairos::store::instances::{
    Completion, FailureReport, LeaseExtension, ReportedBy, lock_expired, record_failures,
};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

/// Sessions of this database waiting for a lock.
async fn lock_waiters(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "select count(*) from pg_stat_activity \
         where datname = current_database() and wait_event_type = 'Lock'",
    )
    .fetch_one(pool)
    .await
    .expect("read pg_stat_activity")
}

async fn wait_for_lock_waiters(pool: &PgPool, n: i64, what: &str) {
    eventually(Duration::from_secs(10), what, || async {
        (lock_waiters(pool).await >= n).then_some(())
    })
    .await;
}

fn uuid_of(v: &Value, key: &str) -> Uuid {
    v[key]
        .as_str()
        .and_then(|s| Uuid::parse_str(s).ok())
        .unwrap_or_default()
}

/// Task `t` (agent `a`, three at a time) with three claimed instances, and one failure
/// counted, so a completion resets the task's count (and locks its row).
async fn three_running(app: &TestApp, pool: &PgPool) -> Vec<Value> {
    let (s, _) = json(
        app.put(
            "/v1/tasks/t",
            json!({"agent_id": "a", "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 3}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201);
    for k in ["w1", "w2", "w3"] {
        app.post("/v1/tasks/t/trigger", json!({"window_key": k}))
            .await;
    }
    let running = claim(app, "a", "w", 3, json!({})).await;
    assert_eq!(running.len(), 3);
    sqlx::query("update tasks set consecutive_failures = 1 where id = 't'")
        .execute(pool)
        .await
        .expect("one failure counted");
    running
}

#[sqlx::test]
async fn the_reaper_and_a_group_commit_over_one_task_never_deadlock(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let running = three_running(&app, &pool).await;
    let (x, y, z) = (&running[0], &running[1], &running[2]);
    // x's lease expires: the reaper's to fail, and its holder reports the failure too.
    sqlx::query(
        "update task_instance set lease_expires_at = now() - interval '1 second' where id = $1",
    )
    .bind(uuid_of(x, "id"))
    .execute(&pool)
    .await
    .expect("expire x");

    // The reaper's transaction, up to its first step: x locked.
    let mut reaper = pool.begin().await.expect("begin");
    sqlx::query("set local deadlock_timeout = '50ms'")
        .execute(&mut *reaper)
        .await
        .expect("short deadlock timeout");
    let expired = lock_expired(&mut reaper, 10).await.expect("lock expired");
    assert_eq!(expired.len(), 1);

    // One committer, held on z, so that the next calls share one batch.
    let gc = GroupCommit::start(pool.clone(), 1, 100);
    let mut hold = pool.begin().await.expect("begin");
    sqlx::query("select 1 from task_instance where id = $1 for update")
        .bind(uuid_of(z, "id"))
        .execute(&mut *hold)
        .await
        .expect("hold z");
    let heartbeat = tokio::spawn({
        let (gc, item) = (
            gc.clone(),
            LeaseExtension {
                id: uuid_of(z, "id"),
                lease_token: uuid_of(z, "lease_token"),
                lease_seconds: 60,
            },
        );
        async move { gc.heartbeat(item).await.is_ok() }
    });
    wait_for_lock_waiters(&pool, 1, "the committer to wait on z").await;
    let complete = tokio::spawn({
        let (gc, item) = (
            gc.clone(),
            Completion {
                id: uuid_of(y, "id"),
                lease_token: uuid_of(y, "lease_token"),
                result: None,
                actor: None,
            },
        );
        async move {
            gc.complete(item)
                .await
                .map(|i| i.status.as_str().to_owned())
        }
    });
    let fail = tokio::spawn({
        let (gc, item) = (
            gc.clone(),
            FailureReport {
                id: uuid_of(x, "id"),
                lease_token: uuid_of(x, "lease_token"),
                error: "boom".to_owned(),
                retryable: true,
                retry_at_once: false,
                error_kind: "agent_error",
                actor: None,
                throttle_seconds: None,
                throttle_until: None,
            },
        );
        async move { gc.fail(item).await.map(|i| i.status.as_str().to_owned()) }
    });
    // Both calls queued behind the held one, then one batch takes them together.
    tokio::time::sleep(Duration::from_millis(100)).await;
    hold.rollback().await.expect("let z go");
    wait_for_lock_waiters(&pool, 1, "the batch to reach x").await;

    // The reaper's second step: the failure and the task's count.
    let failures: Vec<_> = expired
        .iter()
        .map(|a| a.plan_failure(true, "lease expired", "lease_expired", 0.5))
        .collect();
    let written = record_failures(&mut reaper, &failures, "reaper:test", ReportedBy::Kairos).await;
    let sqlstate = written.as_ref().err().and_then(|e| match e {
        kairos::store::Error::Db(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
        _ => None,
    });
    assert_eq!(sqlstate, None, "the reaper's write failed: {written:?}");
    reaper.commit().await.expect("reaper commits");

    assert!(heartbeat.await.unwrap_or(false), "z's heartbeat is written");
    assert_eq!(
        complete.await.ok().and_then(Result::ok).as_deref(),
        Some("SUCCESS"),
        "y completes"
    );
    // x was reaped first: its holder's report is fenced out.
    assert!(matches!(
        fail.await,
        Ok(Err(kairos::store::Error::Fenced { .. }))
    ));
}
