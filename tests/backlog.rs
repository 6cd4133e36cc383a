//! Work that must not grow with a task's backlog: the trigger loop's overlap read, and the
//! cancellation of a deleted task's waiting instances.

mod common;

use common::{TestApp, backlog, early_in_a_second, json};
use kairos::services::Heartbeats;
use kairos::services::trigger_loop::{TriggerLoop, TriggerLoopConfig};
use serde_json::json;
use sqlx::PgPool;

const BACKLOG: i32 = 20_000;

#[sqlx::test]
async fn the_overlap_read_of_a_task_with_a_large_backlog_is_bounded(pool: PgPool) {
    backlog(&pool, "big", "a", BACKLOG, 3600, 3).await;
    backlog(&pool, "small", "a", 2, 60, 3).await;
    let mut conn = pool.acquire().await.expect("connection");
    let read = kairos::store::instances::unfinished_windows(&mut conn, &[("big", 1), ("small", 1)])
        .await
        .expect("overlap read");
    let big = read.get("big").map(|u| u.keys.clone()).unwrap_or_default();
    assert!(
        big.len() <= 2,
        "the read returned {} windows of a task with concurrency limit 1",
        big.len()
    );
    // The oldest (a `skip` names it as blocking) and the newest (a `replace` keeps it).
    assert_eq!(big, vec!["b000001".to_owned(), format!("b0{BACKLOG}")]);
    assert_eq!(read.get("big").map(|u| u.gap), Some(true));
    assert_eq!(
        read.get("small").map(|u| u.keys.clone()),
        Some(vec!["b000001".to_owned(), "b000002".to_owned()])
    );
}

#[sqlx::test]
async fn overlap_replace_supersedes_a_whole_backlog_it_did_not_read(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let (s, _) = json(
        app.put(
            "/v1/tasks/r",
            json!({"agent_id": "ra", "trigger": {"type": "interval", "every_seconds": 1},
                   "execution": {"overlap": "replace", "concurrency_limit": 2}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201);
    backlog(&pool, "r", "ra", 5_000, 3600, 3).await;
    // Exactly one window due: the pass starts early in a second, in one batch (a second batch
    // starting after the first's commit, past the next second, would write one more).
    early_in_a_second(&pool).await;
    sqlx::query(
        "update task_cursor set next_fire_at = date_trunc('second', now()) where task_id = 'r'",
    )
    .execute(&pool)
    .await
    .expect("window due");
    let mut cfg = TriggerLoopConfig::new("n1");
    cfg.parallelism = 1;
    let report = TriggerLoop::new(pool.clone(), cfg, Heartbeats::default())
        .run_once()
        .await
        .expect("pass");
    assert_eq!(report.num_cancelled, 4_999, "{report:?}");
    let waiting: Vec<String> = sqlx::query_scalar(
        "select window_key from task_instance where task_id = 'r' \
         and status in ('PENDING', 'RUNNING', 'FAILED') order by scheduled_at",
    )
    .fetch_all(&pool)
    .await
    .expect("waiting windows");
    assert_eq!(
        waiting.len(),
        2,
        "the newest of the backlog and the new window: {waiting:?}"
    );
    assert_eq!(waiting[0], "b005000");
}

#[sqlx::test]
async fn deleting_a_task_with_a_large_backlog_cancels_it_in_bounded_statements(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let (s, _) = json(
        app.put(
            "/v1/tasks/big",
            json!({"agent_id": "a", "trigger": {"type": "manual"}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201);
    backlog(&pool, "big", "a", BACKLOG, 3600, 3).await;
    let resp = app
        .request(reqwest::Method::DELETE, "/v1/tasks/big", None)
        .await;
    assert_eq!(resp.status().as_u16(), 204);

    let left: i64 = sqlx::query_scalar(
        "select count(*) from task_instance where task_id = 'big' \
         and status in ('PENDING', 'RUNNING', 'FAILED')",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(
        left, 0,
        "every waiting instance of the deleted task is cancelled"
    );
    // One event per cancelled instance; `cmin` is the statement of the deleting transaction
    // that wrote each, so the events per value are the rows one statement cancelled.
    let per_statement: Vec<i64> = sqlx::query_scalar(
        "select count(*) from instance_events e join task_instance i on i.id = e.instance_id \
         where i.task_id = 'big' and e.to_status = 'CANCELLED' group by e.cmin::text::int",
    )
    .fetch_all(&pool)
    .await
    .expect("events per statement");
    assert_eq!(per_statement.iter().sum::<i64>(), i64::from(BACKLOG));
    let largest = per_statement.iter().copied().max().unwrap_or(0);
    assert!(
        largest <= 1000,
        "one statement cancelled {largest} instances ({} statements)",
        per_statement.len()
    );
}
