//! Probes on the hot path read the index meant for them whatever the statistics say. A plan is
//! the one thing here checked by its shape: a wrong one returns the same rows, only slower,
//! and the slowness grows with the history of the task.

mod common;

use common::backlog;
use kairos::store::instances::queued_work_sql;
use serde_json::Value;
use sqlx::PgPool;

/// The names of the indexes a plan (EXPLAIN's JSON) reads, in plan order.
fn indexes_read(plan: &Value, out: &mut Vec<String>) {
    match plan {
        Value::Object(map) => {
            if let Some(Value::String(name)) = map.get("Index Name") {
                out.push(name.clone());
            }
            map.values().for_each(|v| indexes_read(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| indexes_read(v, out)),
        _ => {}
    }
}

#[sqlx::test]
async fn the_wake_up_probe_of_a_drained_task_reads_the_pending_index_not_its_history(pool: PgPool) {
    // 100 tasks with 300 PENDING windows each, analysed: the statistics of a fresh backlog.
    sqlx::query(
        "insert into tasks (id, agent_id, spec, trigger_type) \
         select 'p' || g, 'plans', '{}', 'manual' from generate_series(0, 99) g",
    )
    .execute(&pool)
    .await
    .expect("tasks");
    for k in 0..100 {
        backlog(&pool, &format!("p{k}"), "plans", 300, 3600, 1).await;
    }
    sqlx::query("analyze task_instance")
        .execute(&pool)
        .await
        .expect("analyze");
    // Task p5 is drained: its 300 windows are history now.
    sqlx::query(
        "update task_instance set status = 'CANCELLED', finished_at = now(), \
             error_kind = 'cancelled' where task_id = 'p5'",
    )
    .execute(&pool)
    .await
    .expect("drain p5");

    let sql = format!(
        "select t.id from tasks t where t.id = $1 and {}",
        queued_work_sql()
    );
    let (plan,): (Value,) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("explain (format json) {sql}")))
            .bind("p5")
            .fetch_one(&pool)
            .await
            .expect("explain");
    let mut read = Vec::new();
    indexes_read(&plan, &mut read);
    assert!(
        read.iter().any(|n| n == "task_instance_task_pending_idx"),
        "the probe should read the pending index; plan: {plan}"
    );
    assert!(
        read.iter()
            .all(|n| n != "task_instance_task_id_window_key_key"),
        "the probe must not read the task's history; plan: {plan}"
    );
    let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
        .bind("p5")
        .fetch_all(&pool)
        .await
        .expect("probe p5");
    assert!(rows.is_empty(), "p5 has no PENDING work");
    let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind("p6")
        .fetch_all(&pool)
        .await
        .expect("probe p6");
    assert_eq!(rows, vec![("p6".to_owned(),)], "p6 has PENDING work");
}
