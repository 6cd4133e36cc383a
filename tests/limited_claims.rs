//! How claim rounds behave around shared limits and around each other, against a real
//! PostgreSQL: a budget that fills while a claim waits for it, the rounds' answer when a limit
//! holds the agent's work back, and the rows a round passes over because another round of its
//! agent chose them.

mod common;

use std::time::Duration;

use common::{TestApp, claim, eventually, json, manual_task, trigger};
use kairos::store::claim::{ClaimRequest, HeadRead, agent_limited, claim_round};
use serde_json::{Value, json};
use sqlx::PgPool;

async fn put_limit(app: &TestApp, name: &str, body: Value) {
    let (status, view) = json(app.put(&format!("/v1/limits/{name}"), body).await).await;
    assert!(status == 201 || status == 200, "{view}");
}

async fn running(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from task_instance where status = 'RUNNING'")
        .fetch_one(pool)
        .await
        .expect("running")
}

/// Units held on `limit` by rows that are not instances (`fake`: another claim's, as this test
/// writes them).
async fn fake_units(conn: &mut sqlx::PgConnection, limit: &str, n: i64) {
    sqlx::query(
        "insert into limit_units (instance_id, limit_name, key, cost) \
         select gen_random_uuid(), $1, '', 1 from generate_series(1, $2)",
    )
    .bind(limit)
    .bind(n)
    .execute(&mut *conn)
    .await
    .expect("fake units");
}

#[sqlx::test]
async fn a_budget_that_fills_while_a_claim_waits_for_it_admits_nobody_past_its_concurrency(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    put_limit(&app, "gpu", json!({"concurrency": 4})).await;
    manual_task(&app, "render", "renderer", json!([{"name": "gpu"}])).await;
    trigger(&app, "render", 6, json!({})).await;
    // Create the budget's row, so that another transaction can hold it.
    let first = claim(&app, "renderer", "w0", 1, json!({})).await;
    assert_eq!(first.len(), 1);
    // Another claimer holds the budget and has taken 2 more units, not yet committed: the
    // claim below reads room for 3 (without locks), takes 3 rows and writes their units, then
    // waits for the budget; once the other commits, the budget has room for 1 only.
    let mut other = pool.begin().await.expect("begin");
    sqlx::query("select 1 from limit_state where limit_name = 'gpu' for update")
        .execute(&mut *other)
        .await
        .expect("lock the budget");
    fake_units(&mut other, "gpu", 2).await;
    let claimer = {
        let (client, url) = (app.client.clone(), format!("http://{}/v1/claims", app.addr));
        tokio::spawn(async move {
            let resp = client
                .post(url)
                .json(&json!({"agent_id": "renderer", "worker_id": "w1", "max_instances": 10}))
                .send()
                .await
                .expect("claim");
            let body: Value = resp.json().await.expect("claim body");
            body["instances"].as_array().cloned().unwrap_or_default()
        })
    };
    eventually(
        Duration::from_secs(10),
        "the claim waits for the budget",
        || {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "select count(*) from pg_stat_activity \
                 where wait_event_type = 'Lock' and query like '%limit_state%'",
                )
                .fetch_one(&pool)
                .await
                .is_ok_and(|n| n >= 1)
                .then_some(())
            }
        },
    )
    .await;
    other.commit().await.expect("commit the other claim");
    let got = claimer.await.expect("claimer");
    assert_eq!(
        got.len(),
        1,
        "room for one once the other committed: {got:?}"
    );
    assert_eq!(
        running(&pool).await,
        2,
        "4 units: 2 RUNNING instances and 2 of the other"
    );
    let units: i64 = sqlx::query_scalar(
        "select coalesce(sum(cost), 0)::bigint from limit_units where limit_name = 'gpu'",
    )
    .fetch_one(&pool)
    .await
    .expect("units");
    assert_eq!(units, 4, "the rows it could not admit left no units behind");
    let pending: i64 =
        sqlx::query_scalar("select count(*) from task_instance where status = 'PENDING'")
            .fetch_one(&pool)
            .await
            .expect("pending");
    assert_eq!(pending, 4, "the rows it could not admit are PENDING again");
}

fn request(agent: &str, worker: &str, max: i64) -> (ClaimRequest, String) {
    (
        ClaimRequest {
            agent_id: agent.to_owned(),
            worker_id: worker.to_owned(),
            max_instances: max,
            lease_seconds: 60,
            claim_id: None,
        },
        format!("agent:{worker}"),
    )
}

#[sqlx::test]
async fn a_round_says_when_a_full_limit_holds_its_agents_work_back(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    put_limit(&app, "openai", json!({"concurrency": 2})).await;
    manual_task(&app, "summaries", "writer", json!([{"name": "openai"}])).await;
    trigger(&app, "summaries", 5, json!({})).await;
    manual_task(&app, "digests", "free", json!([])).await;
    trigger(&app, "digests", 2, json!({})).await;
    let reqs = [request("writer", "w0", 10)];
    // Room for two: the round takes them, and passes over the other three.
    let round = claim_round(&pool, &reqs, HeadRead::Try, None)
        .await
        .expect("round");
    assert_eq!(round.claimed[0].len(), 2);
    assert!(round.limited, "three rows were passed over for the limit");
    // The budget is full. The head read hands over to the per-task read and says so; the
    // per-task read passes over the task whole, so the round cannot tell, and
    // `agent_limited` answers for it.
    let round = claim_round(&pool, &reqs, HeadRead::Try, None)
        .await
        .expect("round");
    assert!(round.claimed[0].is_empty() && round.limited);
    let round = claim_round(&pool, &reqs, HeadRead::Skip, None)
        .await
        .expect("round");
    assert!(round.claimed[0].is_empty());
    assert!(agent_limited(&pool, "writer").await.expect("agent_limited"));
    // An agent that draws on no limit: its rounds never say so, empty or not.
    let free = [request("free", "f0", 10)];
    let round = claim_round(&pool, &free, HeadRead::Skip, None)
        .await
        .expect("round");
    assert_eq!(round.claimed[0].len(), 2);
    assert!(!round.limited);
    let round = claim_round(&pool, &free, HeadRead::Skip, None)
        .await
        .expect("round");
    assert!(round.claimed[0].is_empty() && !round.limited);
    assert!(!agent_limited(&pool, "free").await.expect("agent_limited"));
    // Once the budget has room again, the writer's work is no longer held back.
    sqlx::query(
        "update limits set spec = jsonb_set(spec, '{concurrency}', '10') where name = 'openai'",
    )
    .execute(&pool)
    .await
    .expect("raise the limit");
    assert!(!agent_limited(&pool, "writer").await.expect("agent_limited"));
}

/// The agent's head read as the store runs it, passing over `beside`.
async fn head_read(
    conn: &mut sqlx::PgConnection,
    agent: &str,
    beside: &[uuid::Uuid],
) -> Vec<uuid::Uuid> {
    let rows: Vec<(Option<uuid::Uuid>,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select id from ({}) h",
        include_str!("../src/store/sql/claim/pick/read_head.sql")
    )))
    .bind(agent)
    .bind(10_i64)
    .bind(beside)
    .fetch_all(&mut *conn)
    .await
    .expect("head read");
    rows.into_iter().filter_map(|r| r.0).collect()
}

#[sqlx::test]
async fn a_round_neither_reads_nor_locks_the_rows_its_agents_other_rounds_chose(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    manual_task(&app, "notes", "scribe", json!([])).await;
    trigger(&app, "notes", 5, json!({})).await;
    let ids: Vec<uuid::Uuid> = sqlx::query_scalar(
        "select id from task_instance where task_id = 'notes' \
         order by available_at, scheduled_at, id",
    )
    .fetch_all(&pool)
    .await
    .expect("ids");
    let (chosen, rest) = ids.split_at(2);
    let mut round = pool.begin().await.expect("begin");
    let got = head_read(&mut round, "scribe", chosen).await;
    assert_eq!(got, rest, "the other round's rows are passed over");
    // Another claimer (a completion, say) can still lock the passed-over rows at once.
    let mut other = pool.begin().await.expect("begin");
    sqlx::query("set local lock_timeout = '100ms'")
        .execute(&mut *other)
        .await
        .expect("lock timeout");
    let locked: Vec<uuid::Uuid> =
        sqlx::query_scalar("select id from task_instance where id = any($1) for update")
            .bind(chosen)
            .fetch_all(&mut *other)
            .await
            .expect("the passed-over rows are not locked by the round");
    assert_eq!(locked.len(), 2);
    // The per-task read passes over them too.
    let per_task: Vec<(Option<uuid::Uuid>,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select id from ({}) r",
        include_str!("../src/store/sql/claim/pick/read_per_task_agent.sql")
    )))
    .bind("scribe")
    .bind(1000_i32)
    .bind(10_i64)
    .bind(None::<i64>)
    .bind(chosen)
    .fetch_all(&mut *round)
    .await
    .expect("per-task read");
    assert!(
        per_task
            .iter()
            .all(|r| r.0.is_some_and(|id| !chosen.contains(&id))),
        "{per_task:?}"
    );
}
