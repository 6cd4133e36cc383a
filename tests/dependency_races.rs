//! A dependent window inserted by an upstream success races the downstream task's deletion and
//! its move to another agent: whichever commits first, no PENDING instance is left that nothing
//! will claim or cancel. Each race is forced: the test holds a lock that stops the delete (or
//! the move) half-way, after it wrote the task row, while the upstream completes.

mod common;

use std::time::Duration;

use common::{TestApp, backlog, claim, eventually, json};
use serde_json::{Value, json};
use sqlx::PgPool;

/// Upstream `up` (manual, agent `a_up`) with one claimed instance, downstream `down` (after
/// `up`, agent `a_down`) with one PENDING instance `held` of its own. Returns the claimed
/// upstream instance.
async fn upstream_running_with_a_dependent(app: &TestApp, pool: &PgPool) -> Value {
    let (s, _) = json(
        app.put(
            "/v1/tasks/up",
            json!({"agent_id": "a_up", "trigger": {"type": "manual"}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201);
    let (s, _) = json(
        app.put(
            "/v1/tasks/down",
            json!({"agent_id": "a_down", "trigger": {"type": "after", "task": "up", "on": "success"}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201);
    backlog(pool, "down", "a_down", 1, 60, 3).await;
    let (s, _) = json(
        app.post("/v1/tasks/up/trigger", json!({"window_key": "w-race"}))
            .await,
    )
    .await;
    assert_eq!(s, 201);
    claim(app, "a_up", "w1", 1, json!({})).await.remove(0)
}

/// Lock the downstream task's own PENDING instance in a transaction of the test: a delete or a
/// move of the task stops there, with the task row already written, until the test lets go.
async fn hold_downstream_instance(pool: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("select 1 from task_instance where task_id = 'down' for update")
        .execute(&mut *tx)
        .await
        .expect("lock the downstream instance");
    tx
}

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

/// Complete the upstream instance while the other side waits; the call may itself wait for
/// the other side (then it is awaited after the test lets go).
async fn complete_upstream(app: &TestApp, up: &Value) -> tokio::task::JoinHandle<u16> {
    let client = app.client.clone();
    let url = app.url(&format!(
        "/v1/instances/{}/complete",
        up["id"].as_str().unwrap_or("")
    ));
    let body = json!({"lease_token": up["lease_token"], "result": {"ok": true}});
    tokio::spawn(async move {
        client
            .post(url)
            .json(&body)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    })
}

/// Either the completion answered, or it waits for a lock beside the first waiter.
async fn completion_ran_or_waits(pool: &PgPool, done: &tokio::task::JoinHandle<u16>) {
    eventually(
        Duration::from_secs(10),
        "the completion to run or wait",
        || async { (done.is_finished() || lock_waiters(pool).await >= 2).then_some(()) },
    )
    .await;
}

async fn pending_of(pool: &PgPool, task: &str, agent: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from task_instance \
         where task_id = $1 and agent_id = $2 and status = 'PENDING'",
    )
    .bind(task)
    .bind(agent)
    .fetch_one(pool)
    .await
    .expect("count pending")
}

#[sqlx::test]
async fn a_dependent_window_never_outlives_a_concurrent_delete_of_its_task(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let up = upstream_running_with_a_dependent(&app, &pool).await;

    let held = hold_downstream_instance(&pool).await;
    let delete = tokio::spawn({
        let (client, url) = (app.client.clone(), app.url("/v1/tasks/down"));
        async move {
            client
                .delete(url)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    });
    wait_for_lock_waiters(&pool, 1, "the delete to wait on the held instance").await;
    let completion = complete_upstream(&app, &up).await;
    completion_ran_or_waits(&pool, &completion).await;
    held.rollback().await.expect("let go");

    assert_eq!(delete.await.unwrap_or(0), 204);
    assert_eq!(completion.await.unwrap_or(0), 200);
    let left: i64 = sqlx::query_scalar(
        "select count(*) from task_instance where task_id = 'down' and status = 'PENDING'",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(
        left, 0,
        "no PENDING instance of a deleted task is left behind"
    );
}

#[sqlx::test]
async fn a_dependent_window_follows_its_task_to_the_new_agent(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let up = upstream_running_with_a_dependent(&app, &pool).await;

    let held = hold_downstream_instance(&pool).await;
    let moved = tokio::spawn({
        let (client, url) = (app.client.clone(), app.url("/v1/tasks/down"));
        async move {
            client
                .put(url)
                .json(&json!({"agent_id": "a_new", "trigger": {"type": "after", "task": "up", "on": "success"}}))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    });
    wait_for_lock_waiters(&pool, 1, "the move to wait on the held instance").await;
    let completion = complete_upstream(&app, &up).await;
    completion_ran_or_waits(&pool, &completion).await;
    held.rollback().await.expect("let go");

    assert_eq!(moved.await.unwrap_or(0), 200);
    assert_eq!(completion.await.unwrap_or(0), 200);
    assert_eq!(
        pending_of(&pool, "down", "a_down").await,
        0,
        "nothing of the moved task waits under its old agent"
    );
    assert_eq!(
        pending_of(&pool, "down", "a_new").await,
        2,
        "its own instance and the dependent window wait under the new agent"
    );
}
