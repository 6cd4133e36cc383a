//! Fair claims (openapi.yaml): a task at its limit, paused, or holding a backlog never hides
//! another task's claimable work, for agents and for the webhook dispatcher.

mod common;

use std::collections::{HashMap, HashSet};

use common::{TestApp, backlog, claim, json, sample};
use kairos::store::claim::{
    ClaimRequest, ClaimScope, HeadRead, claim_many, claim_round, claim_scoped,
};
use serde_json::{Value, json};
use sqlx::PgPool;

async fn put_task(app: &TestApp, id: &str, body: Value) {
    let (status, resp) = json(app.put(&format!("/v1/tasks/{id}"), body).await).await;
    assert!(status == 201 || status == 200, "{resp}");
}

fn manual(agent: &str, execution: Value) -> Value {
    json!({"agent_id": agent, "trigger": {"type": "manual"}, "execution": execution})
}

fn task_of(i: &Value) -> String {
    i["task_id"].as_str().unwrap_or_default().to_owned()
}

#[sqlx::test]
async fn a_task_at_its_concurrency_limit_does_not_hide_the_agents_other_tasks(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    put_task(
        &app,
        "q",
        manual("fa", json!({"concurrency_limit": 1, "overlap": "queue"})),
    )
    .await;
    for k in 0..20 {
        let (status, body) = json(
            app.post(
                "/v1/tasks/q/trigger",
                json!({"window_key": format!("q{k:02}")}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    put_task(&app, "o", manual("fa", json!({}))).await;
    let (status, body) = json(app.post("/v1/tasks/o/trigger", json!({})).await).await;
    assert_eq!(status, 201, "{body}");

    let first = claim(&app, "fa", "w1", 1, json!({})).await;
    assert_eq!(first.len(), 1);
    assert_eq!(task_of(&first[0]), "q");
    assert_eq!(first[0]["window_key"], "q00", "oldest window of q first");

    let second = claim(&app, "fa", "w2", 5, json!({})).await;
    let tasks: Vec<String> = second.iter().map(task_of).collect();
    assert_eq!(
        tasks,
        vec!["o".to_owned()],
        "q is at its limit; o must be claimable"
    );

    // Nothing else is claimable: q is still at its limit.
    assert!(claim(&app, "fa", "w3", 5, json!({})).await.is_empty());
}

#[sqlx::test]
async fn a_claim_takes_several_rows_of_a_task_when_few_are_pending(pool: PgPool) {
    // Fewer rows than the head reads: the head settles the pick, so every head row of a task
    // must carry the task's room, not only its first.
    let app = TestApp::spawn(pool.clone()).await;
    put_task(&app, "a", manual("fs", json!({"concurrency_limit": 10}))).await;
    put_task(&app, "b", manual("fs", json!({"concurrency_limit": 10}))).await;
    put_task(&app, "c", manual("fs", json!({"concurrency_limit": 1}))).await;
    // Seven rows: fewer than the eight a claim of seven reads at its head.
    backlog(&pool, "a", "fs", 3, 120, 1).await;
    backlog(&pool, "b", "fs", 2, 60, 1).await;
    backlog(&pool, "c", "fs", 2, 30, 1).await;

    let got = claim(&app, "fs", "w", 7, json!({})).await;
    let tasks: Vec<String> = got.iter().map(task_of).collect();
    // All of a and b, and c up to its limit, in availability order.
    assert_eq!(tasks, vec!["a", "a", "a", "b", "b", "c"], "{got:?}");
    assert!(claim(&app, "fs", "w", 7, json!({})).await.is_empty());
}

#[sqlx::test]
async fn a_paused_task_with_a_backlog_does_not_hide_other_work(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    put_task(&app, "p", manual("fp", json!({"concurrency_limit": 100}))).await;
    backlog(&pool, "p", "fp", 500, 3600, 1).await;
    let (status, body) = json(
        app.post("/v1/tasks/p/pause", json!({"reason": "hold"}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    put_task(&app, "o", manual("fp", json!({}))).await;
    backlog(&pool, "o", "fp", 1, 1, 1).await;

    let got = claim(&app, "fp", "w", 10, json!({})).await;
    let tasks: Vec<String> = got.iter().map(task_of).collect();
    assert_eq!(tasks, vec!["o".to_owned()]);
}

#[sqlx::test]
async fn fifty_tasks_where_one_holds_a_10k_backlog_each_get_a_slot_in_the_first_claim(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    put_task(
        &app,
        "big",
        manual("fb", json!({"concurrency_limit": 1000})),
    )
    .await;
    backlog(&pool, "big", "fb", 10_000, 7200, 1).await;
    for k in 0..49 {
        let id = format!("small{k:02}");
        put_task(&app, &id, manual("fb", json!({}))).await;
        // Newer than every row of the backlog.
        backlog(&pool, &id, "fb", 1, 60, 1).await;
    }

    let got = claim(&app, "fb", "w1", 100, json!({})).await;
    assert_eq!(got.len(), 100);
    let mut per_task: HashMap<String, usize> = HashMap::new();
    for i in &got {
        *per_task.entry(task_of(i)).or_default() += 1;
    }
    assert_eq!(per_task.len(), 50, "every task got a slot: {per_task:?}");
    assert_eq!(
        per_task["big"], 51,
        "the backlog takes the rest: {per_task:?}"
    );
    // Within the backlog, the oldest windows went first.
    let mut big: Vec<String> = got
        .iter()
        .filter(|i| task_of(i) == "big")
        .map(|i| i["window_key"].as_str().unwrap_or_default().to_owned())
        .collect();
    big.sort();
    let expected: Vec<String> = (1..=51).map(|g| format!("b{g:06}")).collect();
    assert_eq!(big, expected);

    // New small work arriving behind the backlog is served by the very next claim.
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
             agent_id, max_attempts, available_at) \
         values (gen_random_uuid(), 'small00', 'late', now(), 'PENDING', 'manual', 'fb', 1, now())",
    )
    .execute(&pool)
    .await
    .expect("insert late window");
    // small00 is at its limit (1 RUNNING): its late window must wait, the backlog goes on.
    let next = claim(&app, "fb", "w2", 10, json!({})).await;
    assert!(next.iter().all(|i| task_of(i) == "big"), "{next:?}");
}

#[sqlx::test]
async fn concurrent_claimers_drain_a_backlog_and_fifty_tasks_exactly_once(pool: PgPool) {
    let app = std::sync::Arc::new(TestApp::spawn(pool.clone()).await);
    put_task(
        &app,
        "big",
        manual("fc", json!({"concurrency_limit": 1000})),
    )
    .await;
    backlog(&pool, "big", "fc", 2_000, 7200, 1).await;
    for k in 0..50 {
        let id = format!("t{k:02}");
        put_task(&app, &id, manual("fc", json!({"concurrency_limit": 5}))).await;
        backlog(&pool, &id, "fc", 10, 60, 1).await;
    }
    let total = 2_000 + 50 * 10;
    let mut workers = Vec::new();
    for w in 0..6 {
        let app = app.clone();
        workers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut empty = 0;
            while empty < 3 {
                let got = claim(&app, "fc", &format!("w{w}"), 50, json!({})).await;
                if got.is_empty() {
                    empty += 1;
                    continue;
                }
                empty = 0;
                let completions: Vec<Value> = got
                    .iter()
                    .map(|i| json!({"id": i["id"], "lease_token": i["lease_token"]}))
                    .collect();
                let (status, body) = json(
                    app.post("/v1/completions", json!({"completions": completions}))
                        .await,
                )
                .await;
                assert_eq!(status, 200, "{body}");
                seen.extend(
                    got.iter()
                        .map(|i| i["id"].as_str().unwrap_or_default().to_owned()),
                );
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.expect("worker"));
    }
    let distinct: HashSet<&String> = all.iter().collect();
    assert_eq!(all.len(), distinct.len(), "an instance was claimed twice");
    let done: i64 = sqlx::query_scalar(
        "select count(*) from task_instance where agent_id = 'fc' and status = 'SUCCESS'",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(done, total as i64);
    assert_eq!(all.len(), total);
}

#[sqlx::test]
async fn the_webhook_dispatcher_claims_fairly_across_tasks(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let hook = |agent: &str| {
        json!({
            "agent_id": agent,
            "trigger": {"type": "manual"},
            "dispatch": {"mode": "webhook", "url": "http://127.0.0.1:9/hook", "secret": "s3cret-s3cret-s3cret"},
            "execution": {"concurrency_limit": 1000},
        })
    };
    put_task(&app, "hbig", hook("ha")).await;
    backlog(&pool, "hbig", "ha", 3_000, 7200, 1).await;
    for k in 0..10 {
        let id = format!("hsmall{k}");
        put_task(&app, &id, hook("hb")).await;
        backlog(&pool, &id, "hb", 2, 60, 1).await;
    }
    // A poll task's work is not the dispatcher's.
    put_task(&app, "polled", manual("ha", json!({}))).await;
    backlog(&pool, "polled", "ha", 5, 9000, 1).await;

    let got = claim_scoped(
        &pool,
        ClaimScope::Webhook { max_per_task: 8 },
        "node",
        30,
        "webhook:node",
    )
    .await
    .expect("claim");
    let mut per_task: HashMap<String, usize> = HashMap::new();
    for c in &got {
        *per_task.entry(c.instance.task_id.clone()).or_default() += 1;
    }
    assert_eq!(got.len(), 28, "{per_task:?}");
    assert_eq!(
        per_task.get("hbig"),
        Some(&8),
        "capped at max_per_task: {per_task:?}"
    );
    for k in 0..10 {
        assert_eq!(
            per_task.get(&format!("hsmall{k}")),
            Some(&2),
            "{per_task:?}"
        );
    }
    assert!(!per_task.contains_key("polled"));
}

/// A shared claim (a claim round) deals one fair pick out in request order: the first request
/// gets what it would have got alone, the next what a claim right after it would have got,
/// each under its own worker, lease and actor.
#[sqlx::test]
async fn a_shared_claim_deals_the_pick_out_in_request_order_each_under_its_own_lease(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    put_task(&app, "d", manual("fd", json!({"concurrency_limit": 100}))).await;
    backlog(&pool, "d", "fd", 6, 60, 1).await;
    let req = |worker: &str, max: i64, lease: i64| ClaimRequest {
        agent_id: "fd".to_owned(),
        worker_id: worker.to_owned(),
        max_instances: max,
        lease_seconds: lease,
        claim_id: None,
    };
    let reqs = vec![
        (req("w1", 2, 30), "agent:w1".to_owned()),
        (req("w2", 3, 300), "agent:w2".to_owned()),
        (req("w3", 5, 60), "agent:w3".to_owned()),
    ];
    let got = claim_many(&pool, &reqs).await.expect("claim_many");
    let keys: Vec<Vec<String>> = got
        .iter()
        .map(|l| l.iter().map(|c| c.instance.window_key.clone()).collect())
        .collect();
    assert_eq!(
        keys,
        vec![
            vec!["b000001", "b000002"],
            vec!["b000003", "b000004", "b000005"],
            vec!["b000006"],
        ]
    );
    let rows: Vec<(String, String, String, f64)> = sqlx::query_as(
        "select window_key, worker_id, claimed_by, \
             extract(epoch from lease_expires_at - started_at)::float8 \
         from task_instance where status = 'RUNNING' order by window_key",
    )
    .fetch_all(&pool)
    .await
    .expect("rows");
    let expect = [
        ("w1", 30.0),
        ("w1", 30.0),
        ("w2", 300.0),
        ("w2", 300.0),
        ("w2", 300.0),
        ("w3", 60.0),
    ];
    assert_eq!(rows.len(), expect.len());
    for (row, (worker, lease)) in rows.iter().zip(expect) {
        assert_eq!(row.1, worker, "{row:?}");
        assert_eq!(row.2, format!("agent:{worker}"), "{row:?}");
        // The lease runs from the claim statement's moment, a little after `started_at` (the
        // transaction's start).
        assert!((row.3 - lease) >= 0.0 && (row.3 - lease) < 1.0, "{row:?}");
    }
    // Each answer carries its own lease token, and the tokens are distinct.
    let tokens: HashSet<String> = got
        .iter()
        .flatten()
        .map(|c| c.lease_token.to_string())
        .collect();
    assert_eq!(tokens.len(), 6);
}

/// Forty workers of one agent claim at once over HTTP (they share claim rounds on the
/// replica): every instance is claimed once, by the worker whose answer holds it, under that
/// worker's lease, and a full task limit is never exceeded.
#[sqlx::test]
async fn forty_simultaneous_claims_of_one_agent_each_get_their_own_rows_and_lease(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    put_task(&app, "s", manual("fs", json!({"concurrency_limit": 150}))).await;
    backlog(&pool, "s", "fs", 400, 60, 1).await;
    for k in 0..20 {
        let id = format!("t{k:02}");
        put_task(&app, &id, manual("fs", json!({}))).await;
        backlog(&pool, &id, "fs", 3, 30, 1).await;
    }
    let mut set = tokio::task::JoinSet::new();
    for k in 0..40 {
        let (client, url) = (app.client.clone(), app.url("/v1/claims"));
        set.spawn(async move {
            let worker = format!("w{k:02}");
            let body = json!({"agent_id": "fs", "worker_id": worker, "max_instances": 10,
                              "lease_seconds": 30 + k});
            let resp = client
                .post(url)
                .json(&body)
                .send()
                .await
                .expect("claim sent");
            assert_eq!(resp.status().as_u16(), 200);
            let v: Value = resp.json().await.expect("claim answer");
            (
                worker,
                v["instances"].as_array().cloned().unwrap_or_default(),
            )
        });
    }
    let answers: Vec<(String, Vec<Value>)> = set.join_all().await;
    let mut seen = HashSet::new();
    let mut by_worker: HashMap<String, String> = HashMap::new();
    for (worker, got) in &answers {
        assert!(got.len() <= 10, "{worker} got {}", got.len());
        for i in got {
            let id = i["id"].as_str().unwrap_or_default().to_owned();
            assert!(seen.insert(id.clone()), "instance {id} claimed twice");
            assert_eq!(i["worker_id"], worker.as_str());
            by_worker.insert(id, worker.clone());
        }
    }
    // 150 of s (its limit) + 20 × 1 (limit 1 each) can run at once.
    assert_eq!(seen.len(), 170, "every claimable instance is claimed");
    let rows: Vec<(String, String, f64)> = sqlx::query_as(
        "select id::text, worker_id, extract(epoch from lease_expires_at - started_at)::float8 \
         from task_instance where status = 'RUNNING'",
    )
    .fetch_all(&pool)
    .await
    .expect("rows");
    assert_eq!(rows.len(), 170);
    for (id, worker, lease) in rows {
        assert_eq!(
            by_worker.get(&id),
            Some(&worker),
            "row {id} answered to another worker"
        );
        let k: f64 = worker[1..].parse().expect("worker number");
        let over = lease - (30.0 + k);
        assert!((0.0..1.0).contains(&over), "{worker}: lease {lease}");
    }
}

/// Seed agent `agent` with `per_task.len()` tasks `<agent>-<k>` (limit 1000), task k holding
/// `per_task[k]` PENDING windows at fixed instants (window g of task k at base + 5g + k ms), so
/// two agents seeded alike have the same availability order.
async fn seed_alike(app: &TestApp, pool: &PgPool, agent: &str, per_task: &[i32]) {
    for (k, n) in per_task.iter().enumerate() {
        let task = format!("{agent}-{k}");
        put_task(
            app,
            &task,
            manual(agent, json!({"concurrency_limit": 1000})),
        )
        .await;
        sqlx::query(
            "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
                 agent_id, max_attempts, available_at) \
             select gen_random_uuid(), $1, 'b' || lpad(g::text, 6, '0'), t, 'PENDING', \
                 'manual', $2, 1, t \
             from generate_series(1, $3) g, \
                 lateral (select timestamptz '2026-01-01 00:00:00+00' \
                     + make_interval(secs => (g * 5 + $4) / 1000.0)) as x(t)",
        )
        .bind(&task)
        .bind(agent)
        .bind(n)
        .bind(i32::try_from(k).unwrap_or(0))
        .execute(pool)
        .await
        .expect("seed");
    }
}

/// One claim round of three requests for `agent`, reading the head first or not: per request,
/// the claimed (task number, window key) pairs, and whether the head was read in vain.
async fn round_of(
    pool: &PgPool,
    agent: &str,
    each: i64,
    head: HeadRead,
) -> (Vec<Vec<String>>, bool) {
    let reqs: Vec<(ClaimRequest, String)> = (0..3)
        .map(|w| {
            let req = ClaimRequest {
                agent_id: agent.to_owned(),
                worker_id: format!("w{w}"),
                max_instances: each,
                lease_seconds: 60,
                claim_id: None,
            };
            (req, format!("agent:w{w}"))
        })
        .collect();
    let round = claim_round(pool, &reqs, head, None)
        .await
        .expect("claim_round");
    let lists = round
        .claimed
        .iter()
        .map(|l| {
            l.iter()
                .map(|c| {
                    let k = c.instance.task_id.rsplit('-').next().unwrap_or_default();
                    format!("{k}/{}", c.instance.window_key)
                })
                .collect()
        })
        .collect();
    (lists, round.head_unsettled)
}

/// Skipping the head (the claim rounds' hint after a head read in vain) picks exactly the rows
/// the head-first claim picks, in the same order and dealt the same way; a head that settles
/// the pick reports so, one that cannot reports it.
#[sqlx::test]
async fn a_claim_that_skips_the_head_picks_what_the_head_first_claim_picks(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    // Five tasks, one with a backlog: 60 rows need up to 12 of each task, so the head of 60
    // rows (12 a task) cannot settle the pick.
    seed_alike(&app, &pool, "hta", &[40, 40, 40, 40, 200]).await;
    seed_alike(&app, &pool, "hsa", &[40, 40, 40, 40, 200]).await;
    let (tried, unsettled) = round_of(&pool, "hta", 20, HeadRead::Try).await;
    let (skipped, skip_unsettled) = round_of(&pool, "hsa", 20, HeadRead::Skip).await;
    assert!(
        unsettled,
        "a head of 12 rows a task cannot settle a pick that needs more"
    );
    assert!(
        !skip_unsettled,
        "a claim that skips the head never reads it"
    );
    assert_eq!(tried.iter().map(Vec::len).sum::<usize>(), 60);
    assert_eq!(tried, skipped);
    // Fifty tasks of one row each: 30 rows are round 1 only, so the head settles the pick.
    let ones = [1; 50];
    seed_alike(&app, &pool, "htb", &ones).await;
    seed_alike(&app, &pool, "hsb", &ones).await;
    let (tried, unsettled) = round_of(&pool, "htb", 10, HeadRead::Try).await;
    let (skipped, _) = round_of(&pool, "hsb", 10, HeadRead::Skip).await;
    assert!(!unsettled, "a head of round-1 rows settles the pick");
    assert_eq!(tried.iter().map(Vec::len).sum::<usize>(), 30);
    assert_eq!(tried, skipped);
}

/// Over HTTP: a claim whose head cannot settle the pick makes the agent's next claim skip the
/// head (the metric says which way each went), and both claims get the fair pick.
#[sqlx::test]
async fn after_a_head_read_in_vain_the_agents_next_claim_skips_the_head(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    seed_alike(&app, &pool, "hh", &[50, 50]).await;
    let before = app.get("/metrics").await.text().await.expect("metrics");
    let keys = |got: &[Value]| -> Vec<String> {
        got.iter()
            .map(|i| format!("{}/{}", task_of(i), i["window_key"].as_str().unwrap_or("")))
            .collect()
    };
    // 20 rows of two tasks: the head (20 rows, 10 a task) needs round 10, so it cannot settle.
    let first = claim(&app, "hh", "w1", 20, json!({})).await;
    let second = claim(&app, "hh", "w1", 20, json!({})).await;
    let want = |from: usize| -> Vec<String> {
        (from..from + 10)
            .flat_map(|g| [format!("hh-0/b{g:06}"), format!("hh-1/b{g:06}")])
            .collect()
    };
    assert_eq!(keys(&first), want(1));
    assert_eq!(keys(&second), want(11));
    let after = app.get("/metrics").await.text().await.expect("metrics");
    let moved = |outcome: &str| {
        let series = format!("kairos_claim_head_total{{outcome=\"{outcome}\"}}");
        sample(&after, &series) - sample(&before, &series)
    };
    assert_eq!(moved("unsettled"), 1.0);
    assert_eq!(moved("skipped"), 1.0);
    assert_eq!(moved("settled"), 0.0);
}
