//! Probes on the hot path read the index meant for them whatever the statistics say. A plan is
//! the one thing here checked by its shape: a wrong one returns the same rows, only slower,
//! and the slowness grows with the history of the task.

mod common;

use common::backlog;
use kairos::store::instances::queued_work_sql;
use serde_json::Value;
use sqlx::PgPool;

/// Every node of a plan (EXPLAIN's JSON), in plan order.
fn plan_nodes(plan: &Value) -> Vec<&serde_json::Map<String, Value>> {
    let mut out = Vec::new();
    let mut stack = vec![plan];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                out.push(map);
                stack.extend(map.values().rev());
            }
            Value::Array(items) => stack.extend(items.iter().rev()),
            _ => {}
        }
    }
    out
}

/// The names of the indexes a plan reads, in plan order.
fn indexes_read(plan: &Value) -> Vec<&str> {
    plan_nodes(plan)
        .into_iter()
        .filter_map(|n| n.get("Index Name")?.as_str())
        .collect()
}

/// Manual tasks `{prefix}0` to `{prefix}99` of agent `plans`.
async fn manual_tasks(pool: &PgPool, prefix: &str) {
    sqlx::query(
        "insert into tasks (id, agent_id, spec, trigger_type) \
         select $1 || g, 'plans', '{}', 'manual' from generate_series(0, 99) g",
    )
    .bind(prefix)
    .execute(pool)
    .await
    .expect("tasks");
}

#[sqlx::test]
async fn the_wake_up_probe_of_a_drained_task_reads_the_pending_index_not_its_history(pool: PgPool) {
    // 100 tasks with 300 PENDING windows each, analysed: the statistics of a fresh backlog.
    manual_tasks(&pool, "p").await;
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
    let read = indexes_read(&plan);
    assert!(
        read.contains(&"task_instance_task_pending_priority_idx"),
        "the probe should read the pending index; plan: {plan}"
    );
    assert!(
        !read.contains(&"task_instance_task_id_window_key_key"),
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

/// Node types of a plan with the relation each reads, in plan order.
fn scans(plan: &Value) -> Vec<(String, String)> {
    plan_nodes(plan)
        .into_iter()
        .filter_map(|n| {
            let node = n.get("Node Type")?.as_str()?;
            let rel = n.get("Relation Name")?.as_str()?;
            Some((node.to_owned(), rel.to_owned()))
        })
        .collect()
}

#[sqlx::test]
async fn a_hot_transaction_finds_rows_by_key_while_the_statistics_say_the_table_is_small(
    pool: PgPool,
) {
    // Statistics of an empty table, then 20,000 windows: a new database's first burst.
    manual_tasks(&pool, "h").await;
    sqlx::query("analyze task_instance")
        .execute(&pool)
        .await
        .expect("analyze");
    for k in 0..100 {
        backlog(&pool, &format!("h{k}"), "plans", 200, 3600, 1).await;
    }
    let ids: Vec<uuid::Uuid> = sqlx::query_scalar("select id from task_instance limit 300")
        .fetch_all(&pool)
        .await
        .expect("ids");
    // The shape of a claim's update and a completion: a batch of ids joined to the table.
    // Planned outside a hot transaction (PostgreSQL 15), it reads the whole table and hashes it.
    let explain = "explain (format json) \
         update task_instance i set updated_at = now() \
         from unnest($1::uuid[]) as g(id) \
         where i.id = g.id and (i.status || '') = 'PENDING'";
    let plan_in = |hot: bool| {
        let pool = pool.clone();
        let ids = ids.clone();
        async move {
            let mut tx = if hot {
                kairos::store::begin_hot(&pool).await.expect("begin hot")
            } else {
                pool.begin().await.expect("begin")
            };
            let (plan,): (Value,) = sqlx::query_as(explain)
                .bind(&ids)
                .fetch_one(&mut *tx)
                .await
                .expect("explain");
            let (setting,): (String,) = sqlx::query_as("show enable_seqscan")
                .fetch_one(&mut *tx)
                .await
                .expect("show");
            tx.commit().await.expect("commit");
            (scans(&plan), setting, plan)
        }
    };

    let (read, setting, plan) = plan_in(true).await;
    assert_eq!(setting, "off");
    assert!(
        read.iter()
            .any(|(node, rel)| node == "Index Scan" && rel == "task_instance"),
        "the hot update finds its rows by key; plan: {plan}"
    );
    assert!(
        !read
            .iter()
            .any(|(node, rel)| node == "Seq Scan" && rel == "task_instance"),
        "no whole-table read in a hot transaction; plan: {plan}"
    );

    // The setting ends with the transaction: other work plans as the server is configured.
    let (_, setting, _) = plan_in(false).await;
    assert_eq!(setting, "on");
}

#[sqlx::test]
async fn a_statement_left_with_a_sequential_scan_in_a_hot_transaction_is_not_jit_compiled(
    pool: PgPool,
) {
    // A table no index can answer: in a hot transaction its scan still runs, priced by
    // `enable_seqscan = off` far above `jit_above_cost`. Compiled, a statement of a few rows
    // took 405 ms of JIT in a hand-run EXPLAIN of the completion's shape.
    sqlx::query("create table no_index (n int)")
        .execute(&pool)
        .await
        .expect("table");
    sqlx::query("insert into no_index select generate_series(1, 100)")
        .execute(&pool)
        .await
        .expect("rows");
    let explain = "explain (analyze, format json) select sum(n) from no_index";
    let mut tx = kairos::store::begin_hot(&pool).await.expect("begin hot");
    let (plan,): (Value,) = sqlx::query_as(explain)
        .fetch_one(&mut *tx)
        .await
        .expect("explain");
    tx.commit().await.expect("commit");
    let read = scans(&plan);
    assert!(
        read.iter().any(|(node, _)| node == "Seq Scan"),
        "the scan still runs: {plan}"
    );
    assert!(
        plan[0].get("JIT").is_none(),
        "no JIT in a hot transaction: {plan}"
    );
}

/// Tuples a plan (EXPLAIN ANALYZE's JSON) read from `relation`: rows returned and rows its
/// filters removed, over every loop of every node that scans it.
fn tuples_read(plan: &Value, relation: &str) -> f64 {
    plan_nodes(plan)
        .into_iter()
        .filter(|n| n.get("Relation Name").and_then(Value::as_str) == Some(relation))
        .map(|n| {
            let num = |k: &str| n.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            (num("Actual Rows") + num("Rows Removed by Filter")) * num("Actual Loops")
        })
        .sum()
}

/// 100 tasks of agent `plans` draw on limit `shared` (1 at once), with 300 PENDING windows
/// each; one instance of p0 runs and holds the unit. Task q (10 at once) draws on nothing and
/// has 5; so does task f of agent `free`, which has 1,000 other tasks without work or limits.
async fn backlog_on_a_full_budget(pool: &PgPool) {
    let limits = r#"{"execution": {"limits": [{"name": "shared"}]}}"#;
    for stmt in [
        "insert into limits (name, spec) values \
             ('shared', '{\"concurrency\": 1, \"per_key\": false}')",
        "insert into tasks (id, agent_id, spec, trigger_type) \
             select 'p' || g, 'plans', $1::jsonb, 'manual' from generate_series(0, 99) g",
        "insert into tasks (id, agent_id, spec, trigger_type) values \
             ('q', 'plans', '{\"execution\": {\"concurrency_limit\": 10, \"limits\": []}}', 'manual'), \
             ('f', 'free', '{\"execution\": {\"concurrency_limit\": 10, \"limits\": []}}', 'manual')",
    ] {
        sqlx::query(stmt)
            .bind(limits)
            .execute(pool)
            .await
            .expect("limits and tasks");
    }
    for k in 0..100 {
        backlog(pool, &format!("p{k}"), "plans", 300, 3600, 1).await;
    }
    backlog(pool, "q", "plans", 5, 60, 1).await;
    backlog(pool, "f", "free", 5, 60, 1).await;
    // Agent `free` has 1,000 more tasks, none drawing on a limit, none with work.
    sqlx::query(
        "insert into tasks (id, agent_id, spec, trigger_type) \
         select 'f' || g, 'free', '{\"execution\": {\"limits\": []}}', 'manual' \
         from generate_series(1, 1000) g",
    )
    .execute(pool)
    .await
    .expect("free's other tasks");
    for stmt in [
        "update task_instance set limit_draws = \
             '[{\"name\": \"shared\", \"key\": \"\", \"cost\": 1}]' where task_id like 'p%'",
        "update task_instance set status = 'RUNNING', started_at = now(), attempt = 1, \
             lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute', \
             run_slot = 0 \
         where id = (select id from task_instance where task_id = 'p0' limit 1)",
        "insert into limit_units (instance_id, limit_name, key, cost) \
             select id, 'shared', '', 1 from task_instance where status = 'RUNNING'",
        "analyze task_instance",
    ] {
        sqlx::query(stmt)
            .execute(pool)
            .await
            .expect("backlog on a full limit");
    }
}

/// A claim's statement with its parameters `$1…` written in as `params` (EXPLAIN ANALYZE's
/// plan, and the rows' id and task), in a hot transaction rolled back after.
async fn explain_claim_read(
    pool: &PgPool,
    sql: &str,
    params: &[&str],
) -> (Value, Vec<(uuid::Uuid, String)>) {
    let mut sql: String = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    // From the last parameter down, so `$1` never rewrites the start of `$10`.
    for (n, p) in params.iter().enumerate().rev() {
        sql = sql.replace(&format!("${}", n + 1), p);
    }
    let mut tx = kairos::store::begin_hot(pool).await.expect("begin hot");
    let (plan,): (Value,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "explain (analyze, format json) {sql}"
    )))
    .fetch_one(&mut *tx)
    .await
    .expect("explain the read");
    let rows: Vec<(Option<uuid::Uuid>, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(
        format!("select id, task_id from ({sql}) r"),
    ))
    .fetch_all(&mut *tx)
    .await
    .expect("the read");
    tx.rollback().await.expect("rollback");
    let rows = rows
        .into_iter()
        .filter_map(|(id, task)| Some((id?, task?)))
        .collect();
    (plan, rows)
}

#[sqlx::test]
async fn a_claim_reads_none_of_the_backlog_of_tasks_whose_shared_limit_is_full(pool: PgPool) {
    backlog_on_a_full_budget(&pool).await;
    // The per-task read of a claim of 100 by agent `plans` (as the store runs it).
    let (plan, rows) = explain_claim_read(
        &pool,
        include_str!("../src/store/sql/claim/pick/read_per_task_agent.sql"),
        &[
            "'plans'::text",
            "1000",
            "100::bigint",
            "null",
            "'{}'::uuid[]",
        ],
    )
    .await;
    assert_eq!(rows.len(), 5, "q's five windows are the claimable work");
    assert!(rows.iter().all(|(_, task)| task == "q"), "{rows:?}");
    // The 30,000 rows waiting on the full budget are not read one by one: what is read is
    // bounded by the tasks (a probe each at most) and q's rows, not by the backlog.
    let read = tuples_read(&plan, "task_instance");
    assert!(
        read < 1_000.0,
        "the claim read {read} task_instance tuples with 30,000 waiting on a full budget; plan: {plan}"
    );
}

#[sqlx::test]
async fn the_head_read_of_an_agent_with_a_task_on_a_full_shared_limit_hands_over_at_once(
    pool: PgPool,
) {
    backlog_on_a_full_budget(&pool).await;
    // The head read of a claim of 100 by agent `plans`: its rows of tasks on the full budget
    // come first, so reading the head would walk them all; it hands over to the per-task read
    // (which the test above checks) without reading them.
    let sql = include_str!("../src/store/sql/claim/pick/read_head.sql");
    let (plan, rows) = explain_claim_read(
        &pool,
        sql,
        &["'plans'::text", "100::bigint", "'{}'::uuid[]"],
    )
    .await;
    let read = tuples_read(&plan, "task_instance");
    assert!(
        read < 1_000.0,
        "the head read {read} task_instance tuples with 30,000 waiting on a full budget"
    );
    assert!(rows.is_empty(), "{rows:?}");
}

#[sqlx::test]
async fn the_claim_reads_of_an_agent_that_draws_on_no_limit_never_read_the_budgets(pool: PgPool) {
    backlog_on_a_full_budget(&pool).await;
    // Agent `free` draws on no limit: however busy the budgets of others are, its claims do
    // not sum their units.
    for (sql, params) in [
        (
            include_str!("../src/store/sql/claim/pick/read_head.sql"),
            &["'free'::text", "100::bigint", "'{}'::uuid[]"][..],
        ),
        (
            include_str!("../src/store/sql/claim/pick/read_per_task_agent.sql"),
            &[
                "'free'::text",
                "1000",
                "100::bigint",
                "null",
                "'{}'::uuid[]",
            ][..],
        ),
    ] {
        let (plan, rows) = explain_claim_read(&pool, sql, params).await;
        assert_eq!(rows.len(), 5, "f's five windows");
        let read = tuples_read(&plan, "limit_units");
        assert_eq!(read, 0.0, "an agent without limits read {read} unit rows");
    }
}

#[sqlx::test]
async fn the_head_read_looks_for_full_budgets_among_the_agents_limited_tasks_only(pool: PgPool) {
    backlog_on_a_full_budget(&pool).await;
    // Whether a task of `free` waits on a full budget is asked of its tasks that draw on
    // limits (none), not of its 1,001 tasks: the head read stays as small as the head.
    let sql = include_str!("../src/store/sql/claim/pick/read_head.sql");
    let (plan, rows) =
        explain_claim_read(&pool, sql, &["'free'::text", "100::bigint", "'{}'::uuid[]"]).await;
    assert_eq!(rows.len(), 5, "f's five windows");
    let read = tuples_read(&plan, "tasks");
    assert!(read < 100.0, "the head read {read} task rows");
}

/// EXPLAIN ANALYZE's plan of a statement outside any transaction (as a pool runs it), its
/// parameters `$1…` written in as `params`.
async fn explain_plain(pool: &PgPool, sql: &str, params: &[&str]) -> Value {
    let mut sql: String = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    for (n, p) in params.iter().enumerate().rev() {
        sql = sql.replace(&format!("${}", n + 1), p);
    }
    let (plan,): (Value,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "explain (analyze, format json) {sql}"
    )))
    .fetch_one(pool)
    .await
    .expect("explain");
    plan
}

#[sqlx::test]
async fn a_held_back_long_poll_reads_the_draws_of_its_agents_next_hundred_rows_only(pool: PgPool) {
    // 30,005 PENDING rows of agent `plans`, 30,000 of them on a full budget.
    backlog_on_a_full_budget(&pool).await;
    let plan = explain_plain(
        &pool,
        include_str!("../src/store/sql/claim/waiting_draws.sql"),
        &["'plans'"],
    )
    .await;
    assert_eq!(
        indexes_read(&plan),
        ["task_instance_claim_priority_idx"],
        "{plan:#}"
    );
    let read = tuples_read(&plan, "task_instance");
    assert!(read <= 100.0, "read {read} rows of the backlog: {plan:#}");
}

#[sqlx::test]
async fn the_webhook_dispatchers_look_for_kept_back_work_reads_only_tasks_drawing_on_limits(
    pool: PgPool,
) {
    // 2,000 webhook tasks, 3 of them drawing on a limit with 20 waiting rows each; one of the
    // others has 20,000. And 2,000 poll tasks drawing on the limit, which it must not read.
    for stmt in [
        "insert into limits (name, spec) values ('paced', '{\"rate\": {\"count\": 1, \
             \"per_seconds\": 60, \"burst\": 0}, \"per_key\": false}')",
        "insert into tasks (id, agent_id, spec, trigger_type, dispatch_mode) \
             select 'w' || g, 'hooks', '{\"execution\": {\"limits\": []}}', 'manual', 'webhook' \
             from generate_series(1, 2000) g",
        "update tasks set spec = '{\"execution\": {\"limits\": [{\"name\": \"paced\"}]}}' \
             where id in ('w1', 'w2', 'w3')",
        "insert into tasks (id, agent_id, spec, trigger_type) \
             select 'p' || g, 'polls', '{\"execution\": {\"limits\": [{\"name\": \"paced\"}]}}', \
                 'manual' from generate_series(1, 2000) g",
    ] {
        sqlx::query(stmt).execute(&pool).await.expect("tasks");
    }
    for id in ["w1", "w2", "w3"] {
        backlog(&pool, id, "hooks", 20, 60, 1).await;
    }
    backlog(&pool, "w4", "hooks", 20_000, 60, 1).await;
    for stmt in [
        "update task_instance set limit_draws = \
             '[{\"name\": \"paced\", \"key\": \"\", \"cost\": 1}]' where task_id <> 'w4'",
        "analyze tasks",
        "analyze task_instance",
    ] {
        sqlx::query(stmt).execute(&pool).await.expect("draws");
    }
    let plan = explain_plain(
        &pool,
        include_str!("../src/store/sql/claim/waiting_draws_webhook.sql"),
        &[],
    )
    .await;
    assert!(
        indexes_read(&plan).contains(&"tasks_webhook_limited_idx"),
        "{plan:#}"
    );
    let tasks = tuples_read(&plan, "tasks");
    assert!(tasks <= 3.0, "read {tasks} task rows: {plan:#}");
    let rows = tuples_read(&plan, "task_instance");
    assert!(rows <= 30.0, "read {rows} waiting rows: {plan:#}");
}
