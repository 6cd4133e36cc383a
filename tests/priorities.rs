//! Priorities over real HTTP and a real PostgreSQL: a claim takes the most urgent claimable
//! work first, keeps the fairness rule within a priority, and passes over urgent work that
//! waits on a limit; instances are listed by priority.

mod common;

use common::{TestApp, claim, json, trigger};
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
    trigger(&app, "low", 6, json!({})).await;
    trigger(&app, "mid", 6, json!({})).await;
    trigger(&app, "urgent", 6, json!({})).await;
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
    trigger(&app, "big", 10, json!({})).await;
    trigger(&app, "small", 2, json!({})).await;
    trigger(&app, "other", 3, json!({})).await;
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
    trigger(&app, "urgent", 5, json!({})).await;
    trigger(&app, "routine", 3, json!({})).await;
    let got = claim(&app, "agent", "w", 10, json!({})).await;
    let mut names = tasks_of(&got);
    names.sort();
    assert_eq!(names, vec!["routine", "routine", "routine", "urgent"]);

    // A routine instance waiting behind urgent work says so.
    trigger(&app, "routine", 1, json!({})).await;
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

#[sqlx::test]
async fn instances_are_listed_by_priority_and_a_bad_priority_filter_is_refused(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    task(&app, "incident", json!({"priority": 0})).await;
    task(&app, "nightly", json!({"priority": 8})).await;
    task(&app, "routine", json!({})).await;
    trigger(&app, "incident", 2, json!({})).await;
    trigger(&app, "nightly", 3, json!({})).await;
    trigger(&app, "routine", 1, json!({})).await;

    for (filter, task, n) in [(0, "incident", 2), (8, "nightly", 3), (5, "routine", 1)] {
        let (status, page) = json(app.get(&format!("/v1/instances?priority={filter}")).await).await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().expect("items");
        assert_eq!(items.len(), n, "{page}");
        assert!(
            items
                .iter()
                .all(|i| i["task_id"] == task && i["priority"] == filter),
            "{page}"
        );
    }
    let (_, none) = json(app.get("/v1/instances?priority=9").await).await;
    assert_eq!(none["items"], json!([]), "{none}");
    // With the other filters (AND) and across pages.
    let (_, page) = json(
        app.get("/v1/instances?priority=8&task_id=nightly&status=PENDING&limit=2")
            .await,
    )
    .await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2), "{page}");
    let cursor = page["next_cursor"].as_str().expect("a next page");
    let (_, rest) = json(
        app.get(&format!(
            "/v1/instances?priority=8&task_id=nightly&status=PENDING&limit=2&cursor={cursor}"
        ))
        .await,
    )
    .await;
    assert_eq!(rest["items"].as_array().map(Vec::len), Some(1), "{rest}");
    assert_eq!(rest["next_cursor"], Value::Null, "{rest}");
    let (_, mismatch) = json(app.get("/v1/instances?priority=0&task_id=nightly").await).await;
    assert_eq!(mismatch["items"], json!([]), "{mismatch}");

    for bad in ["-1", "10", "high", "2.5", ""] {
        let (status, body) = json(app.get(&format!("/v1/instances?priority={bad}")).await).await;
        assert_eq!(status, 422, "priority={bad:?}: {body}");
        assert_eq!(body["errors"][0]["field"], "priority", "{body}");
    }
}

#[sqlx::test]
async fn a_trigger_a_backfill_and_a_retry_may_set_their_own_priority(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    task(&app, "job", json!({"concurrency_limit": 100})).await;
    let (status, body) = json(
        app.post("/v1/tasks/job/trigger", json!({"priority": 1}))
            .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["priority"], 1, "{body}");
    let (status, body) = json(
        app.post("/v1/tasks/job/trigger", json!({"priority": 12}))
            .await,
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errors"][0]["field"], "priority", "{body}");
    let (status, body) = json(app.post("/v1/tasks/job/trigger", json!({})).await).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["priority"], 5, "{body}");

    // The urgent run goes first although it was triggered first anyway; fail it for good and
    // retry it at priority 0.
    let got = claim(&app, "agent", "w", 1, json!({})).await;
    assert_eq!(got[0]["priority"], 1, "{got:?}");
    let id = got[0]["id"].as_str().unwrap_or_default().to_owned();
    let (status, body) = json(
        app.post(
            &format!("/v1/instances/{id}/fail"),
            json!({"lease_token": got[0]["lease_token"], "error": "boom", "retryable": false}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = json(
        app.post(&format!("/v1/instances/{id}/retry"), json!({"priority": 0}))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["priority"], 0, "{body}");

    let (status, body) = json(
        app.put(
            "/v1/tasks/hourly",
            json!({"agent_id": "agent", "trigger": {"type": "cron", "expr": "0 * * * *", "timezone": "UTC"},
                   "execution": {"concurrency_limit": 100}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // Three hours of yesterday, whatever today is.
    let day = chrono::Utc::now().date_naive() - chrono::Days::new(1);
    let (status, body) = json(
        app.post(
            "/v1/tasks/hourly/backfill",
            json!({"from": format!("{day}T00:00:00Z"), "to": format!("{day}T03:00:00Z"), "priority": 8}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, page) = json(app.get("/v1/instances?task_id=hourly").await).await;
    let prios: Vec<&Value> = page["items"]
        .as_array()
        .map(|a| a.iter().map(|i| &i["priority"]).collect())
        .unwrap_or_default();
    assert_eq!(prios.len(), 3, "{page}");
    assert!(prios.iter().all(|p| **p == 8), "{page}");
}
