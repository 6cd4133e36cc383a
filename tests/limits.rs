//! `concurrency_limit` under real contention: 32 claimers racing completes, failures, the
//! reaper and pause/resume on one task, while a monitor samples the RUNNING count.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use common::{TestApp, backlog, json};
use kairos::services::Heartbeats;
use kairos::services::timeout_reaper::{TimeoutReaper, TimeoutReaperConfig};
use serde_json::{Value, json};
use sqlx::PgPool;

const LIMIT: i64 = 5;

#[sqlx::test]
async fn thirty_two_claimers_never_exceed_the_limit_while_completes_fails_reaps_and_pauses_race(
    pool: PgPool,
) {
    let app = Arc::new(TestApp::spawn(pool.clone()).await);
    let (status, body) = json(
        app.put(
            "/v1/tasks/lim",
            json!({
                "agent_id": "la",
                "trigger": {"type": "manual"},
                "execution": {"concurrency_limit": LIMIT, "overlap": "queue", "max_retries": 0},
            }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    backlog(&pool, "lim", "la", 400, 60, 1).await;

    let stop = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicI64::new(0));
    // The monitor: the RUNNING count, sampled as fast as the database answers.
    let monitor = {
        let (pool, stop, worst) = (pool.clone(), stop.clone(), worst.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n: i64 = sqlx::query_scalar(
                    "select count(*) from task_instance where task_id = 'lim' and status = 'RUNNING'",
                )
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
                worst.fetch_max(n, Ordering::Relaxed);
            }
        })
    };
    // The reaper, with some leases made to expire under it.
    let reaper = {
        let (pool, stop) = (pool.clone(), stop.clone());
        tokio::spawn(async move {
            let r = TimeoutReaper::new(
                pool.clone(),
                TimeoutReaperConfig::new("reaper"),
                Heartbeats::default(),
            );
            while !stop.load(Ordering::Relaxed) {
                let _ = sqlx::query(
                    "update task_instance set lease_expires_at = now() - interval '1 second' \
                     where id = (select id from task_instance where task_id = 'lim' \
                                 and status = 'RUNNING' order by random() limit 1)",
                )
                .execute(&pool)
                .await;
                let _ = r.run_once().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // Pause and resume, over and over.
    let pauser = {
        let (app, stop) = (app.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                app.post("/v1/tasks/lim/pause", json!({"reason": "race"}))
                    .await;
                tokio::time::sleep(Duration::from_millis(15)).await;
                app.post("/v1/tasks/lim/resume", json!({})).await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    // 32 claimers until 300 instances went through (or a deadline, for a very slow machine).
    let claimed_total = Arc::new(AtomicI64::new(0));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut claimers = Vec::new();
    for c in 0..32usize {
        let (app, claimed_total) = (app.clone(), claimed_total.clone());
        claimers.push(tokio::spawn(async move {
            let mut claimed = 0;
            let mut round = 0usize;
            while claimed_total.load(Ordering::Relaxed) < 300
                && std::time::Instant::now() < deadline
            {
                round += 1;
                let (status, body) = json(
                    app.post(
                        "/v1/claims",
                        json!({"agent_id": "la", "worker_id": format!("c{c}"), "max_instances": 3}),
                    )
                    .await,
                )
                .await;
                assert_eq!(status, 200, "{body}");
                let got: Vec<Value> = body["instances"].as_array().cloned().unwrap_or_default();
                claimed += got.len();
                claimed_total.fetch_add(got.len() as i64, Ordering::Relaxed);
                for (k, i) in got.iter().enumerate() {
                    let id = i["id"].as_str().unwrap_or_default();
                    let path = if (round + k + c).is_multiple_of(3) {
                        "fail"
                    } else {
                        "complete"
                    };
                    app.post(
                        &format!("/v1/instances/{id}/{path}"),
                        json!({"lease_token": i["lease_token"], "error": "x", "retryable": false}),
                    )
                    .await;
                }
            }
            claimed
        }));
    }
    let mut total = 0;
    for c in claimers {
        total += c.await.expect("claimer");
    }
    stop.store(true, Ordering::Relaxed);
    monitor.await.expect("monitor");
    reaper.await.expect("reaper");
    pauser.await.expect("pauser");
    assert!(
        total >= 300,
        "the race claimed too little to mean anything: {total}"
    );
    let worst = worst.load(Ordering::Relaxed);
    assert!(worst <= LIMIT, "{worst} RUNNING with limit {LIMIT}");
    assert!(worst >= 2, "claimers never overlapped: worst {worst}");
    // No permit is held twice, and every RUNNING row holds one within the limit.
    let bad: i64 = sqlx::query_scalar(
        "select count(*) from task_instance where task_id = 'lim' and status = 'RUNNING' \
         and (run_slot is null or run_slot < 0 or run_slot >= $1)",
    )
    .bind(LIMIT as i32)
    .fetch_one(&pool)
    .await
    .expect("slots");
    assert_eq!(bad, 0);
}

/// A limit lowered while instances run: no claim passes the new limit, whichever permits the
/// running instances hold, and claims resume once enough of them finish.
#[sqlx::test]
async fn a_lowered_limit_holds_while_instances_of_the_old_one_run(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let task = |limit: i64| {
        json!({
            "agent_id": "lo",
            "trigger": {"type": "manual"},
            "execution": {"concurrency_limit": limit, "overlap": "queue", "max_retries": 0},
        })
    };
    let (status, body) = json(app.put("/v1/tasks/low", task(6)).await).await;
    assert_eq!(status, 201, "{body}");
    backlog(&pool, "low", "lo", 40, 60, 1).await;
    let running = common::claim(&app, "lo", "w1", 6, json!({})).await;
    assert_eq!(running.len(), 6);
    let (status, body) = json(app.put("/v1/tasks/low", task(2)).await).await;
    assert_eq!(status, 200, "{body}");

    let running_now = |pool: PgPool| async move {
        let n: i64 = sqlx::query_scalar(
            "select count(*) from task_instance where task_id = 'low' and status = 'RUNNING'",
        )
        .fetch_one(&pool)
        .await
        .expect("count");
        n
    };
    // Finish the instances one by one, low permits first so that permits below the new limit
    // come free while higher ones are still held; after each, claim as much as is offered.
    let mut by_slot: Vec<(i32, Value)> = Vec::new();
    for inst in running {
        let id: uuid::Uuid = inst["id"].as_str().expect("id").parse().expect("uuid");
        let slot: i32 = sqlx::query_scalar("select run_slot from task_instance where id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .expect("slot");
        by_slot.push((slot, inst));
    }
    by_slot.sort_by_key(|(slot, _)| *slot);
    let mut claimed_after = 0;
    for (done, (_, inst)) in by_slot.into_iter().enumerate() {
        let (status, body) = json(
            app.post(
                &format!(
                    "/v1/instances/{}/complete",
                    inst["id"].as_str().expect("id")
                ),
                json!({"lease_token": inst["lease_token"]}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let got = common::claim(&app, "lo", "w2", 6, json!({})).await.len();
        let old_running = 6 - (done + 1);
        if old_running >= 2 {
            assert_eq!(
                got, 0,
                "claimed with {old_running} old instances still running"
            );
        }
        claimed_after += got;
        let n = running_now(pool.clone()).await;
        assert!(
            n <= old_running.max(2) as i64,
            "{n} RUNNING past the lowered limit"
        );
    }
    // Once the old instances are gone the task runs at its new limit.
    assert_eq!(running_now(pool.clone()).await, 2);
    assert_eq!(claimed_after, 2);
}
