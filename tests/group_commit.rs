//! Group commit (openapi.yaml): concurrent single `complete`, `fail` and `heartbeat` calls share
//! transactions, yet each is its own compare-and-swap with its own answer, and one item the
//! database refuses fails only itself.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestApp, backlog, claim, json};
use kairos::batching::group_commit::GroupCommit;
use kairos::store::instances::{Completion, FailureReport, LeaseExtension};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

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

/// Claim `n` instances of a fresh manual task `task` (agent `fa`), with up to 3 attempts each.
async fn claimed_of(app: &TestApp, pool: &PgPool, task: &str, n: i32) -> Vec<(Uuid, Uuid)> {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{task}"),
            json!({"agent_id": "fa", "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 100, "max_retries": 2}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    backlog(pool, task, "fa", n, 60, 3).await;
    let got = claim(app, "fa", "w", 100, json!({})).await;
    assert_eq!(got.len(), n as usize);
    got.iter()
        .map(|i| {
            let id = i["id"].as_str().and_then(|s| s.parse().ok()).expect("id");
            let token = i["lease_token"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .expect("token");
            (id, token)
        })
        .collect()
}

/// Holds a row lock on instance `id` in an open transaction until dropped or committed, so the
/// only committer's next transaction waits and the calls sent meanwhile share one batch.
async fn block_committer(
    pool: &PgPool,
    gc: &GroupCommit,
    (id, token): (Uuid, Uuid),
) -> (
    sqlx::Transaction<'static, sqlx::Postgres>,
    tokio::task::JoinHandle<()>,
) {
    let mut blocker = pool.begin().await.expect("begin");
    sqlx::query("select 1 from task_instance where id = $1 for update")
        .bind(id)
        .execute(&mut *blocker)
        .await
        .expect("lock");
    let first = gc.clone();
    let held = tokio::spawn(async move {
        let _ = first
            .heartbeat(LeaseExtension {
                id,
                lease_token: token,
                lease_seconds: 60,
            })
            .await;
    });
    // The committer is inside its transaction, waiting for the row lock.
    common::eventually(Duration::from_secs(10), "the committer waits", || async {
        let waiting: i64 = sqlx::query_scalar("select count(*) from pg_locks where not granted")
            .fetch_one(pool)
            .await
            .expect("locks");
        (waiting > 0).then_some(())
    })
    .await;
    (blocker, held)
}

#[sqlx::test]
async fn a_stale_fail_and_the_live_fail_in_one_batch_each_get_their_own_answer(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let claimed = claimed_of(&app, &pool, "fence", 2).await;
    let gc = GroupCommit::start(pool.clone(), 1, 1000);
    let (blocker, held) = block_committer(&pool, &gc, claimed[0]).await;
    let (id, live) = claimed[1];
    let stale = Uuid::new_v4();
    let report = |token: Uuid, error: &str, retryable: bool| FailureReport {
        id,
        lease_token: token,
        error: error.to_owned(),
        retryable,
        retry_at_once: false,
        error_kind: "agent",
        actor: None,
        throttle_seconds: None,
        throttle_until: None,
    };
    // Polled in order: the stale report is queued first, then the live one; both wait for the
    // blocked committer and so share its next batch.
    let both = {
        let gc = gc.clone();
        let (s, l) = (
            report(stale, "stale worker", false),
            report(live, "live worker", true),
        );
        tokio::spawn(async move { tokio::join!(gc.fail(s), gc.fail(l)) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker.commit().await.expect("release");
    held.await.expect("first call");
    let (stale_answer, live_answer) = both.await.expect("answers");
    assert!(
        matches!(stale_answer, Err(kairos::store::Error::Fenced { .. })),
        "the stale holder is fenced out: {stale_answer:?}"
    );
    let inst = live_answer.expect("the live holder's failure is recorded");
    assert_eq!(inst.status.as_str(), "FAILED", "{inst:?}");
    assert_eq!(inst.error.as_deref(), Some("live worker"));
}

#[sqlx::test]
async fn a_stale_complete_and_the_live_complete_in_one_batch_each_get_their_own_answer(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    let claimed = claimed_of(&app, &pool, "fence", 2).await;
    let gc = GroupCommit::start(pool.clone(), 1, 1000);
    let (blocker, held) = block_committer(&pool, &gc, claimed[0]).await;
    let (id, live) = claimed[1];
    let done = |token: Uuid, k: i64| Completion {
        id,
        lease_token: token,
        result: Some(json!({"by": k})),
        actor: None,
    };
    let both = {
        let gc = gc.clone();
        let (s, l) = (done(Uuid::new_v4(), 0), done(live, 1));
        tokio::spawn(async move { tokio::join!(gc.complete(s), gc.complete(l)) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker.commit().await.expect("release");
    held.await.expect("first call");
    let (stale_answer, live_answer) = both.await.expect("answers");
    assert!(
        matches!(stale_answer, Err(kairos::store::Error::Fenced { .. })),
        "{stale_answer:?}"
    );
    let inst = live_answer.expect("the live holder's completion is recorded");
    assert_eq!(inst.result, Some(json!({"by": 1})));
}

#[sqlx::test]
async fn a_repeated_report_under_the_same_lease_is_answered_as_the_first_was(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let claimed = claimed_of(&app, &pool, "again", 3).await;
    let [
        (done, done_token),
        (failed, failed_token),
        (other, other_token),
    ] = claimed[..]
    else {
        panic!("three claimed");
    };
    for _ in 0..2 {
        let (status, body) = json(
            app.post(
                &format!("/v1/instances/{done}/complete"),
                json!({"lease_token": done_token, "result": {"n": 1}}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "a repeated complete is answered 200: {body}");
        assert_eq!(body["status"], "SUCCESS");
        let (status, body) = json(
            app.post(
                &format!("/v1/instances/{failed}/fail"),
                json!({"lease_token": failed_token, "error": "boom", "retryable": true}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "a repeated fail is answered 200: {body}");
        assert_eq!(body["status"], "FAILED");
    }
    // The lease itself is gone: a heartbeat, or another outcome under that token, is fenced.
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{done}/heartbeat"),
            json!({"lease_token": done_token}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 409);
    let (status, _) = json(
        app.post(
            &format!("/v1/instances/{failed}/complete"),
            json!({"lease_token": failed_token}),
        )
        .await,
    )
    .await;
    assert_eq!(
        status, 409,
        "a complete after the holder's own fail is refused"
    );
    // A batch completion whose items were committed before is answered 200 item by item.
    let (status, body) = json(
        app.post(
            "/v1/completions",
            json!({"completions": [
                {"id": done, "lease_token": done_token},
                {"id": other, "lease_token": other_token}]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let failed_attempts: i64 =
        sqlx::query_scalar("select count(*) from instance_events where to_status = 'FAILED'")
            .fetch_one(&pool)
            .await
            .expect("events");
    assert_eq!(failed_attempts, 1, "the repeated fail wrote nothing");
}

#[sqlx::test]
async fn one_blocked_heartbeat_does_not_hold_up_the_batch_it_shares(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let claimed = claimed_of(&app, &pool, "busy", 4).await;
    let gc = GroupCommit::start(pool.clone(), 1, 1000);
    // The first call waits for its row; the next three are queued behind it, one batch.
    let (blocked_tx, first) = block_committer(&pool, &gc, claimed[0]).await;
    let beats: Vec<_> = claimed[1..]
        .iter()
        .map(|&(id, token)| {
            let gc = gc.clone();
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let r = gc
                    .heartbeat(LeaseExtension {
                        id,
                        lease_token: token,
                        lease_seconds: 60,
                    })
                    .await;
                (started.elapsed(), r.is_ok())
            })
        })
        .collect();
    // Another blocked call in the same batch as the three: hold a second row, heartbeat it too.
    let mut second = pool.begin().await.expect("begin");
    sqlx::query("select 1 from task_instance where id = $1 for update")
        .bind(claimed[1].0)
        .execute(&mut *second)
        .await
        .expect("lock");
    // Release the committer's first wait; the batch of three meets the second lock.
    blocked_tx.commit().await.expect("release");
    first.await.expect("first call");
    for (k, b) in beats.into_iter().enumerate().skip(1) {
        let (waited, ok) = b.await.expect("join");
        assert!(ok, "heartbeat {k}");
        assert!(
            waited < Duration::from_secs(5),
            "an unrelated heartbeat waited {waited:?} for a row it does not touch"
        );
    }
    second.commit().await.expect("release");
}

/// `complete_each` (the webhook dispatcher's successes, queued in one go): each item is its own
/// compare-and-swap with its own answer, in item order; a stale token is fenced and a result
/// PostgreSQL refuses fails only its own item.
#[sqlx::test]
async fn completions_queued_together_each_get_their_own_answer(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let claimed = claimed_of(&app, &pool, "lot", 40).await;
    let gc = GroupCommit::start(pool.clone(), 3, 1000);
    let items: Vec<Completion> = claimed
        .iter()
        .enumerate()
        .map(|(k, &(id, token))| Completion {
            id,
            lease_token: if k == 5 { Uuid::new_v4() } else { token },
            result: Some(if k == 9 {
                json!({"bad": "a\u{0}b"})
            } else {
                json!({"k": k})
            }),
            actor: Some("webhook:test".to_owned()),
        })
        .collect();
    let answers = gc.complete_each(items).await;
    assert_eq!(answers.len(), claimed.len());
    for (k, (answer, &(id, _))) in answers.iter().zip(&claimed).enumerate() {
        match k {
            5 => assert!(
                matches!(answer, Err(kairos::store::Error::Fenced { .. })),
                "{answer:?}"
            ),
            9 => assert!(answer.is_err(), "a result with U+0000: {answer:?}"),
            _ => {
                let inst = answer.as_ref().expect("recorded");
                assert_eq!((inst.id, inst.status.as_str()), (id, "SUCCESS"));
                assert_eq!(inst.result, Some(json!({"k": k})));
            }
        }
    }
    let (done, running): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where status = 'SUCCESS'), \
             count(*) filter (where status = 'RUNNING') \
         from task_instance where task_id = 'lot'",
    )
    .fetch_one(&pool)
    .await
    .expect("counts");
    assert_eq!((done, running), (38, 2));
}
