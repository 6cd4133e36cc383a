//! Group commit (CONTRACT §8): concurrent single `complete`, `fail` and `heartbeat` calls share
//! transactions, yet each is its own compare-and-swap with its own answer, and one item the
//! database refuses fails only itself.

mod common;

use std::sync::Arc;

use common::{TestApp, backlog, claim, json};
use serde_json::{Value, json};
use sqlx::PgPool;

async fn setup(app: &TestApp, pool: &PgPool, n: i32) -> Vec<Value> {
    let (status, body) = json(
        app.put(
            "/v1/tasks/g",
            json!({"agent_id": "ga", "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 1000, "max_retries": 1}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    backlog(pool, "g", "ga", n, 60, 2).await;
    let mut all = Vec::new();
    while all.len() < n as usize {
        let got = claim(app, "ga", "w", 100, json!({})).await;
        assert!(!got.is_empty(), "claims ran dry at {}", all.len());
        all.extend(got);
    }
    all
}

#[sqlx::test]
async fn concurrent_single_calls_each_get_their_own_answer(pool: PgPool) {
    let app = Arc::new(TestApp::spawn(pool.clone()).await);
    let claimed = setup(&app, &pool, 300).await;
    // 300 calls at once: completes, completes with a stale token, fails, heartbeats, and one
    // complete whose result PostgreSQL refuses (U+0000 in jsonb).
    let mut calls = Vec::new();
    for (k, i) in claimed.iter().enumerate() {
        let app = app.clone();
        let id = i["id"].as_str().unwrap_or_default().to_owned();
        let token = i["lease_token"].clone();
        calls.push(tokio::spawn(async move {
            let (path, body, expect) = match k % 5 {
                0 | 1 => (
                    "complete",
                    json!({"lease_token": token, "result": {"k": k}}),
                    200,
                ),
                2 => (
                    "complete",
                    json!({"lease_token": "00000000-0000-0000-0000-000000000000"}),
                    409,
                ),
                3 => (
                    "fail",
                    json!({"lease_token": token, "error": "e", "retryable": true}),
                    200,
                ),
                _ => (
                    "heartbeat",
                    json!({"lease_token": token, "lease_seconds": 120}),
                    200,
                ),
            };
            let (path, body, expect) = if k == 7 {
                (
                    "complete",
                    json!({"lease_token": token, "result": {"bad": "a\u{0}b"}}),
                    0,
                )
            } else {
                (path, body, expect)
            };
            let (status, answer) =
                json(app.post(&format!("/v1/instances/{id}/{path}"), body).await).await;
            (k, id, path, status, expect, answer)
        }));
    }
    let mut refused = 0;
    for c in calls {
        let (k, id, path, status, expect, answer) = c.await.expect("call");
        if expect == 0 {
            assert!((400..600).contains(&status), "{status} {answer}");
            refused += 1;
            continue;
        }
        assert_eq!(status, expect, "call {k} ({path}): {answer}");
        if status == 200 {
            assert_eq!(
                answer["id"],
                id.as_str(),
                "each caller gets its own instance"
            );
            let want = match path {
                "complete" => "SUCCESS",
                "fail" => "FAILED",
                _ => "RUNNING",
            };
            assert_eq!(answer["status"], want, "call {k}: {answer}");
        }
    }
    assert_eq!(refused, 1);
    let counts: Vec<(String, i64)> = sqlx::query_as(
        "select status, count(*) from task_instance where task_id = 'g' group by 1 order by 1",
    )
    .fetch_all(&pool)
    .await
    .expect("counts");
    // 120 completes; 60 fails; the 60 stale completes (k = 7 among them, refused instead) and
    // the 60 heartbeats leave their instances RUNNING.
    assert_eq!(
        counts,
        vec![
            ("FAILED".to_owned(), 60),
            ("RUNNING".to_owned(), 120),
            ("SUCCESS".to_owned(), 120),
        ]
    );
}
