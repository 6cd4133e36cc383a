//! One agent's many workers (openapi.yaml: a claim returns claimable work whenever the agent
//! has any): concurrent claims of one agent share claim rounds on a replica, and a round that
//! ran beside another must not answer `[]` for work the other held only until its commit.
//! Real PostgreSQL, real HTTP, real concurrency; nothing here is timed.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::{TestApp, backlog, json};
use serde_json::{Value, json};
use sqlx::PgPool;

async fn manual_task(app: &TestApp, id: &str, agent: &str, limit: i64) {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{id}"),
            json!({"agent_id": agent, "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": limit, "max_retries": 0}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

fn id_of(i: &Value) -> String {
    i["id"].as_str().expect("id").to_owned()
}

/// One claim over HTTP, expected 200: the instances it took.
async fn claim_once(
    client: &reqwest::Client,
    url: &str,
    agent: &str,
    worker: &str,
    max: i64,
    wait_s: i64,
) -> Vec<Value> {
    let body = json!({"agent_id": agent, "worker_id": worker, "max_instances": max,
                      "wait_seconds": wait_s});
    let resp = client
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("claim sent");
    let status = resp.status().as_u16();
    let answer: Value = resp.json().await.expect("claim body");
    assert_eq!(status, 200, "{answer}");
    answer["instances"].as_array().cloned().unwrap_or_default()
}

/// Available PENDING instances of `agent` (during a drain this only ever goes down).
async fn pending_now(pool: &PgPool, agent: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from task_instance \
         where agent_id = $1 and status = 'PENDING' and available_at <= now()",
    )
    .bind(agent)
    .fetch_one(pool)
    .await
    .expect("count pending")
}

/// Sixteen workers of one agent long-poll a backlog of one task and report each batch in one
/// `POST /v1/completions`. Sixteen claims of 50 never reach the task's limit of 1000, and
/// PENDING only goes down during the drain (no retries, no reaper): so an empty answer while
/// PENDING rows remain, counted after the answer, is an empty answer while claimable work
/// existed.
#[sqlx::test]
async fn sixteen_long_polling_workers_of_one_agent_get_work_whenever_its_backlog_has_any(
    pool: PgPool,
) {
    const N: i32 = 4000;
    let app = Arc::new(TestApp::spawn(pool.clone()).await);
    manual_task(&app, "drained", "crew", 1000).await;
    backlog(&pool, "drained", "crew", N, 60, 1).await;

    let mut workers = tokio::task::JoinSet::new();
    for w in 0..16 {
        let (app, pool) = (app.clone(), pool.clone());
        workers.spawn(async move {
            let (claims, completions) = (app.url("/v1/claims"), app.url("/v1/completions"));
            let mut mine = Vec::new();
            let mut empty_while_pending = Vec::new();
            loop {
                let got = claim_once(&app.client, &claims, "crew", &format!("w{w}"), 50, 1).await;
                if got.is_empty() {
                    let left = pending_now(&pool, "crew").await;
                    if left == 0 {
                        return (mine, empty_while_pending);
                    }
                    empty_while_pending.push(left);
                    continue;
                }
                let items: Vec<Value> = got
                    .iter()
                    .map(|i| json!({"id": i["id"], "lease_token": i["lease_token"]}))
                    .collect();
                let (status, answer) = json(
                    app.client
                        .post(&completions)
                        .json(&json!({"completions": items}))
                        .send()
                        .await
                        .expect("completions sent"),
                )
                .await;
                assert_eq!(status, 200, "{answer}");
                assert!(
                    common::item_statuses(&answer).iter().all(|s| *s == 200),
                    "{answer}"
                );
                mine.extend(got.iter().map(id_of));
            }
        });
    }
    let mut all = Vec::new();
    let mut empties = Vec::new();
    while let Some(done) = workers.join_next().await {
        let (mine, empty) = done.expect("worker");
        all.extend(mine);
        empties.extend(empty);
    }
    assert!(
        empties.is_empty(),
        "{} long polls came back [] while PENDING instances remained (counted after: {empties:?})",
        empties.len()
    );
    let distinct: HashSet<&String> = all.iter().collect();
    assert_eq!(all.len(), N as usize, "instances claimed in total");
    assert_eq!(distinct.len(), N as usize, "no instance claimed twice");
    let (success, first_attempt, claims): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from task_instance \
                 where task_id = 'drained' and status = 'SUCCESS'), \
                (select count(*) from task_instance \
                 where task_id = 'drained' and status = 'SUCCESS' and attempt = 1), \
                (select count(*) from instance_history where to_status = 'RUNNING' \
                 and instance_id in (select id from task_instance where task_id = 'drained'))",
    )
    .fetch_one(&pool)
    .await
    .expect("counts");
    assert_eq!(
        (success, first_attempt, claims),
        (i64::from(N), i64::from(N), i64::from(N)),
        "every instance claimed once and completed at its first attempt"
    );
}

/// Two claims of 100 sent together against 150 claimable instances: 100 of the oldest task
/// (1) and 50 of a newer one (2). The fair pick takes 50 of each, so a claim that reads the
/// oldest rows first holds task 1's other 50 locked until it commits; a claim beside it that
/// found everything locked used to answer `[]` with those 50 claimable a moment later. Between
/// them the two claims take all 150, every time.
#[sqlx::test]
async fn two_claims_beside_each_other_take_every_claimable_instance_between_them(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let url = app.url("/v1/claims");
    for round in 0..10 {
        let (older, newer) = (format!("older{round}"), format!("newer{round}"));
        manual_task(&app, &older, "pair", 1000).await;
        manual_task(&app, &newer, "pair", 1000).await;
        backlog(&pool, &older, "pair", 100, 120, 1).await;
        backlog(&pool, &newer, "pair", 50, 60, 1).await;
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let mut claims = tokio::task::JoinSet::new();
        for w in 0..2 {
            let (client, url, start) = (app.client.clone(), url.clone(), start.clone());
            claims.spawn(async move {
                start.wait().await;
                claim_once(&client, &url, "pair", &format!("w{w}"), 100, 0).await
            });
        }
        let got: Vec<String> = claims
            .join_all()
            .await
            .into_iter()
            .flatten()
            .map(|i| id_of(&i))
            .collect();
        let distinct: HashSet<&String> = got.iter().collect();
        assert_eq!(distinct.len(), got.len(), "round {round}: claimed twice");
        assert_eq!(
            got.len(),
            150,
            "round {round}: two claims of 100 sent together took {} of 150 claimable instances",
            got.len()
        );
        assert_eq!(pending_now(&pool, "pair").await, 0, "round {round}");
    }
}

/// No completions: the agent's claimable work only goes down (RUNNING only grows), so a claim
/// that comes back `[]` must find none claimable after it. Four tasks of 600 instances with
/// `concurrency_limit` 500 each: 2,000 claimable, 400 held by the limits. Sixteen long polls
/// of 100 claim side by side until every one comes back `[]`: between them they take exactly
/// the 2,000, each once, and none of them came back `[]` while any of it was left.
#[sqlx::test]
async fn sixteen_long_polls_take_exactly_the_claimable_work_and_come_back_empty_only_without_any(
    pool: PgPool,
) {
    let app = Arc::new(TestApp::spawn(pool.clone()).await);
    for t in 0..4 {
        let task = format!("capped{t}");
        manual_task(&app, &task, "capped", 500).await;
        backlog(&pool, &task, "capped", 600, 60 + t, 1).await;
    }
    // Claimable now: per task, its available PENDING rows up to its room under the limit.
    let claimable = |pool: PgPool| async move {
        sqlx::query_scalar::<_, i64>(
            "select coalesce(sum(least(p.n, greatest(500 - coalesce(r.n, 0), 0))), 0)::bigint \
             from (select task_id, count(*) as n from task_instance \
                   where agent_id = 'capped' and status = 'PENDING' and available_at <= now() \
                   group by task_id) p \
             left join (select task_id, count(*) as n from task_instance \
                        where agent_id = 'capped' and status = 'RUNNING' group by task_id) r \
               on r.task_id = p.task_id",
        )
        .fetch_one(&pool)
        .await
        .expect("claimable")
    };
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..16 {
        let (app, pool) = (app.clone(), pool.clone());
        workers.spawn(async move {
            let url = app.url("/v1/claims");
            let mut mine = Vec::new();
            loop {
                let got = claim_once(&app.client, &url, "capped", &format!("w{w}"), 100, 1).await;
                if got.is_empty() {
                    return (mine, claimable(pool).await);
                }
                mine.extend(got.iter().map(id_of));
            }
        });
    }
    let mut all = Vec::new();
    while let Some(done) = workers.join_next().await {
        let (mine, left) = done.expect("worker");
        assert_eq!(
            left, 0,
            "a long poll came back [] with {left} instances claimable"
        );
        all.extend(mine);
    }
    let distinct: HashSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "no instance claimed twice");
    assert_eq!(all.len(), 2000, "the claimable work, all of it");
    let per_task: Vec<(String, i64, i64)> = sqlx::query_as(
        "select task_id, count(*) filter (where status = 'RUNNING'), \
                count(*) filter (where status = 'PENDING') \
         from task_instance where agent_id = 'capped' group by task_id order by task_id",
    )
    .fetch_all(&pool)
    .await
    .expect("per task");
    for (task, running, pending) in per_task {
        assert_eq!((running, pending), (500, 100), "{task}: RUNNING, PENDING");
    }
}
