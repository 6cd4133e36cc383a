//! Priorities over real HTTP and a real PostgreSQL: a claim takes the most urgent claimable
//! work first, keeps the fairness rule within a priority, and passes over urgent work that
//! waits on a limit.

mod common;

use common::{TestApp, claim, json};
use serde_json::{Value, json};
use sqlx::PgPool;

async fn task(app: &TestApp, id: &str, execution: Value) {
    let (status, body) = json(
        app.put(
            &format!("/v1/tasks/{id}"),
            json!({"agent_id": "agent", "trigger": {"type": "manual"}, "execution": execution}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

async fn trigger(app: &TestApp, id: &str, n: usize) {
    for _ in 0..n {
        let (status, body) = json(
            app.post(&format!("/v1/tasks/{id}/trigger"), json!({}))
                .await,
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
}

fn tasks_of(got: &[Value]) -> Vec<String> {
    got.iter()
        .map(|i| i["task_id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[sqlx::test]
async fn the_most_urgent_backlog_goes_first_then_the_next(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    // Created least urgent first, so availability order is the opposite of priority order.
    task(
        &app,
        "low",
        json!({"priority": 9, "concurrency_limit": 100}),
    )
    .await;
    task(&app, "mid", json!({"concurrency_limit": 100})).await;
    task(
        &app,
        "urgent",
        json!({"priority": 0, "concurrency_limit": 100}),
    )
    .await;
    trigger(&app, "low", 6).await;
    trigger(&app, "mid", 6).await;
    trigger(&app, "urgent", 6).await;
    let (_, view) = json(app.get("/v1/tasks/mid").await).await;
    assert_eq!(view["execution"]["priority"], 5, "{view}");

    let first = claim(&app, "agent", "w", 4, json!({})).await;
    assert_eq!(tasks_of(&first), vec!["urgent"; 4]);
    assert!(first.iter().all(|i| i["priority"] == 0), "{first:?}");
    let second = claim(&app, "agent", "w", 4, json!({})).await;
    assert_eq!(tasks_of(&second), vec!["urgent", "urgent", "mid", "mid"]);
    let third = claim(&app, "agent", "w", 6, json!({})).await;
    assert_eq!(
        tasks_of(&third),
        vec!["mid", "mid", "mid", "mid", "low", "low"]
    );
    let rest = claim(&app, "agent", "w", 10, json!({})).await;
    assert_eq!(tasks_of(&rest), vec!["low"; 4]);
}

#[sqlx::test]
async fn within_a_priority_a_backlogged_task_takes_one_slot_a_round(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    task(
        &app,
        "big",
        json!({"priority": 1, "concurrency_limit": 100}),
    )
    .await;
    task(
        &app,
        "small",
        json!({"priority": 1, "concurrency_limit": 100}),
    )
    .await;
    task(
        &app,
        "other",
        json!({"priority": 2, "concurrency_limit": 100}),
    )
    .await;
    trigger(&app, "big", 10).await;
    trigger(&app, "small", 2).await;
    trigger(&app, "other", 3).await;
    let got = claim(&app, "agent", "w", 6, json!({})).await;
    // Round 1 and 2 of priority 1 (big, small each), then big's rounds 3 and 4.
    let mut names = tasks_of(&got);
    names.sort();
    assert_eq!(names, vec!["big", "big", "big", "big", "small", "small"]);
}

#[sqlx::test]
async fn urgent_work_held_by_a_limit_does_not_hold_back_less_urgent_work(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let (status, body) = json(app.put("/v1/limits/api", json!({"concurrency": 1})).await).await;
    assert_eq!(status, 201, "{body}");
    task(
        &app,
        "urgent",
        json!({"priority": 0, "concurrency_limit": 100, "limits": [{"name": "api"}]}),
    )
    .await;
    task(
        &app,
        "routine",
        json!({"priority": 7, "concurrency_limit": 100}),
    )
    .await;
    trigger(&app, "urgent", 5).await;
    trigger(&app, "routine", 3).await;
    let got = claim(&app, "agent", "w", 10, json!({})).await;
    let mut names = tasks_of(&got);
    names.sort();
    assert_eq!(names, vec!["routine", "routine", "routine", "urgent"]);

    // A routine instance waiting behind urgent work says so.
    trigger(&app, "routine", 1).await;
    let (status, body) = json(app.put("/v1/limits/api", json!({"concurrency": 2})).await).await;
    assert_eq!(status, 200, "{body}");
    let (_, page) = json(
        app.get("/v1/instances?task_id=routine&status=PENDING")
            .await,
    )
    .await;
    let id = page["items"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (_, detail) = json(app.get(&format!("/v1/instances/{id}")).await).await;
    let reasons: Vec<&str> = detail["waiting_on"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["reason"].as_str()).collect())
        .unwrap_or_default();
    assert!(reasons.contains(&"priority"), "{detail}");
}

#[sqlx::test]
async fn a_priority_outside_zero_to_nine_is_refused_naming_the_field(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    for bad in [json!(-1), json!(10), json!("high"), json!(2.5)] {
        let (status, body) = json(
            app.put(
                "/v1/tasks/bad",
                json!({"agent_id": "a", "trigger": {"type": "manual"}, "execution": {"priority": bad}}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["errors"][0]["field"], "execution.priority", "{body}");
    }
}
