//! Debounced manual runs against a real PostgreSQL and real HTTP: concurrent triggers on several
//! replicas coalesce into one instance that every trigger answers with, `max_wait_seconds`
//! bounds the postponement, an instance that became available or was claimed is never joined,
//! a trigger with a window key is never debounced, and bad input is refused naming the field.

mod common;

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use common::{TestApp, claim, json};
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

fn at(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("timestamp").parse().expect("RFC 3339")
}

async fn put_task(app: &TestApp, id: &str, body: Value) {
    let (status, task) = json(app.put(&format!("/v1/tasks/{id}"), body).await).await;
    assert!(status == 201 || status == 200, "{task}");
}

async fn trigger(app: &TestApp, task: &str, body: Value) -> (u16, Value) {
    json(app.post(&format!("/v1/tasks/{task}/trigger"), body).await).await
}

/// `(id, debounce_key, available_at, scheduled_at, created_at)` of every instance of `task`.
type Row = (
    Uuid,
    Option<String>,
    DateTime<Utc>,
    DateTime<Utc>,
    DateTime<Utc>,
);

async fn rows(pool: &PgPool, task: &str) -> Vec<Row> {
    sqlx::query_as(
        "select id, debounce_key, available_at, scheduled_at, created_at from task_instance \
         where task_id = $1 order by created_at, id",
    )
    .bind(task)
    .fetch_all(pool)
    .await
    .expect("rows")
}

#[sqlx::test]
async fn fifty_concurrent_triggers_on_three_replicas_make_one_instance_that_all_answer_with(
    pool_opts: PgPoolOptions,
    conn_opts: PgConnectOptions,
) {
    let mut apps = Vec::new();
    for _ in 0..3 {
        let pool = pool_opts
            .clone()
            .max_connections(8)
            .connect_with(conn_opts.clone())
            .await
            .expect("pool");
        apps.push(TestApp::spawn(pool).await);
    }
    let (status, limit) = json(
        apps[0]
            .put(
                "/v1/limits/tenants",
                json!({"concurrency": 5, "per_key": true}),
            )
            .await,
    )
    .await;
    assert_eq!(status, 201, "{limit}");
    put_task(
        &apps[0],
        "burst",
        json!({"agent_id": "b", "trigger": {"type": "manual"},
               "context": {"params": {"tenant": "none"}},
               "execution": {"debounce": {"seconds": 300},
                             "limits": [{"name": "tenants", "key": "{{params.tenant}}"}]}}),
    )
    .await;

    let mut triggers = tokio::task::JoinSet::new();
    for i in 0..50 {
        let app = &apps[i % 3];
        let (client, url) = (app.client.clone(), app.url("/v1/tasks/burst/trigger"));
        triggers.spawn(async move {
            let resp = client
                .post(url)
                .json(&json!({"context": {"params": {"tenant": format!("t{i}")}}}))
                .send()
                .await
                .expect("trigger");
            json(resp).await
        });
    }
    let mut answers = Vec::new();
    while let Some(done) = triggers.join_next().await {
        answers.push(done.expect("trigger task"));
    }
    let ids: HashSet<&str> = answers
        .iter()
        .map(|(_, b)| {
            b["id"]
                .as_str()
                .expect("every trigger answers with an instance")
        })
        .collect();
    assert_eq!(ids.len(), 1, "{answers:?}");
    let created: Vec<&(u16, Value)> = answers.iter().filter(|(s, _)| *s == 201).collect();
    assert_eq!(created.len(), 1, "exactly one trigger made the instance");
    assert_eq!(created[0].1["debounced"], false);
    for (status, body) in &answers {
        assert!(*status == 201 || *status == 200, "{body}");
        assert_eq!(body["debounced"], *status == 200, "{body}");
        assert_eq!(body["status"], "PENDING");
        assert_eq!(body["source"], "manual");
    }

    let pool = &apps[0].pool;
    let stored: Vec<(Uuid, String, Value, Value)> = sqlx::query_as(
        "select id, debounce_key, context_override, limit_draws from task_instance \
         where task_id = 'burst'",
    )
    .fetch_all(pool)
    .await
    .expect("instances");
    assert_eq!(stored.len(), 1, "one instance");
    let (id, key, context, draws) = &stored[0];
    assert!(ids.contains(id.to_string().as_str()));
    assert_eq!(key, "burst", "the default debounce key is the task");
    // The latest trigger's context, and the limit key rendered from it.
    let tenant = context["params"]["tenant"]
        .as_str()
        .expect("a trigger's tenant");
    assert!(tenant.starts_with('t'), "{context}");
    assert_eq!(
        draws,
        &json!([{"name": "tenants", "key": tenant, "cost": 1}]),
        "{context}"
    );
    let metrics = apps[0].get("/metrics").await.text().await.expect("metrics");
    assert!(
        metrics.contains("kairos_debounced_triggers_total"),
        "exported"
    );
    for app in apps {
        app.shutdown().await;
    }
}

#[sqlx::test]
async fn triggers_racing_the_moment_their_instance_becomes_available_each_get_an_instance(
    pool_opts: PgPoolOptions,
    conn_opts: PgConnectOptions,
) {
    let mut apps = Vec::new();
    for _ in 0..3 {
        let pool = pool_opts
            .clone()
            .max_connections(6)
            .connect_with(conn_opts.clone())
            .await
            .expect("pool");
        apps.push(TestApp::spawn(pool).await);
    }
    // Each instance waits at most a second: waves of triggers keep finding the last one just
    // available (locked by the conflict, not updated) and must make the next one.
    put_task(
        &apps[0],
        "waves",
        json!({"agent_id": "w", "trigger": {"type": "manual"},
               "execution": {"debounce": {"seconds": 1, "max_wait_seconds": 1}}}),
    )
    .await;
    let mut answers = Vec::new();
    for wave in 0..6 {
        let mut triggers = tokio::task::JoinSet::new();
        for i in 0..12 {
            let app = &apps[i % 3];
            let (client, url) = (app.client.clone(), app.url("/v1/tasks/waves/trigger"));
            triggers.spawn(async move {
                let resp = client
                    .post(url)
                    .json(&json!({"context": {"wave": wave, "i": i}}))
                    .send()
                    .await
                    .expect("trigger");
                json(resp).await
            });
        }
        while let Some(done) = triggers.join_next().await {
            answers.push(done.expect("trigger task"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    let mut made = HashSet::new();
    let mut answered = HashSet::new();
    for (status, body) in &answers {
        assert!(*status == 201 || *status == 200, "{body}");
        let id = body["id"]
            .as_str()
            .expect("every trigger answers with an instance");
        assert_eq!(body["debounced"], *status == 200, "{body}");
        if *status == 201 {
            assert!(
                made.insert(id.to_owned()),
                "two creations answered with {id}"
            );
        }
        answered.insert(id.to_owned());
    }
    let stored: HashSet<String> = rows(&apps[0].pool, "waves")
        .await
        .into_iter()
        .map(|r| r.0.to_string())
        .collect();
    assert_eq!(stored, made, "every instance was answered as created, once");
    assert_eq!(answered, made);
    assert!(made.len() >= 2, "the instances' time came between waves");
    // No two instances ever waited for the same key at once: each was created after the one
    // before it became available.
    let r = rows(&apps[0].pool, "waves").await;
    for pair in r.windows(2) {
        assert!(pair[1].4 >= pair[0].2, "{pair:?}");
    }
    for app in apps {
        app.shutdown().await;
    }
}

#[sqlx::test]
async fn a_debounced_run_moves_with_each_trigger_up_to_its_max_wait(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let debounced = |seconds: i64, max_wait: i64| {
        json!({"agent_id": "d", "trigger": {"type": "manual"},
               "execution": {"debounce": {"seconds": seconds, "max_wait_seconds": max_wait}}})
    };
    put_task(&app, "capped", debounced(60, 60)).await;
    put_task(&app, "loose", debounced(60, 3600)).await;
    let (_, task) = json(app.get("/v1/tasks/capped").await).await;
    assert_eq!(
        task["execution"]["debounce"],
        json!({"seconds": 60, "max_wait_seconds": 60})
    );

    // capped: the second trigger would move it past its first trigger + 60 s: it stops there.
    let (status, first) = trigger(&app, "capped", json!({"context": {"n": 1}})).await;
    assert_eq!(
        (status, &first["debounced"]),
        (201, &json!(false)),
        "{first}"
    );
    let (status, second) = trigger(&app, "capped", json!({"context": {"n": 2}})).await;
    assert_eq!(
        (status, &second["debounced"]),
        (200, &json!(true)),
        "{second}"
    );
    assert_eq!(second["id"], first["id"]);
    let r = rows(&pool, "capped").await;
    assert_eq!(r.len(), 1);
    let (_, _, available, scheduled, created) = r[0];
    assert_eq!(available, created + chrono::Duration::seconds(60));
    assert_eq!(scheduled, available);
    assert_eq!(at(&second["available_at"]), available);
    assert_eq!(at(&first["available_at"]), available);

    // loose: each trigger moves it to its own now + 60 s, within the hour.
    let (_, first) = trigger(&app, "loose", json!({})).await;
    let (_, second) = trigger(&app, "loose", json!({})).await;
    assert_eq!(second["id"], first["id"]);
    assert!(at(&second["available_at"]) > at(&first["available_at"]));
    let r = rows(&pool, "loose").await;
    let (_, _, available, _, created) = r[0];
    assert!(available <= created + chrono::Duration::seconds(3600));
    assert!(available > created + chrono::Duration::seconds(60));
    app.shutdown().await;
}

#[sqlx::test]
async fn an_instance_that_became_available_or_was_claimed_is_never_joined(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    put_task(
        &app,
        "quiet",
        json!({"agent_id": "q", "trigger": {"type": "manual"},
               "execution": {"debounce": {"seconds": 600}, "concurrency_limit": 5}}),
    )
    .await;
    let (status, first) = trigger(&app, "quiet", json!({"debounce_key": "acme"})).await;
    assert_eq!(status, 201, "{first}");
    // Other keys wait on their own.
    let (status, other) = trigger(&app, "quiet", json!({"debounce_key": "globex"})).await;
    assert_eq!(status, 201, "{other}");
    assert_ne!(other["id"], first["id"]);
    let (status, joined) = trigger(&app, "quiet", json!({"debounce_key": "acme"})).await;
    assert_eq!((status, &joined["id"]), (200, &first["id"]));

    // Its time came: the next trigger of the key makes a new instance.
    sqlx::query(
        "update task_instance set available_at = now() - interval '1 second' where id = $1",
    )
    .bind(Uuid::parse_str(first["id"].as_str().expect("id")).expect("uuid"))
    .execute(&pool)
    .await
    .expect("make it due");
    let (status, second) = trigger(&app, "quiet", json!({"debounce_key": "acme"})).await;
    assert_eq!(
        (status, &second["debounced"]),
        (201, &json!(false)),
        "{second}"
    );
    assert_ne!(second["id"], first["id"]);

    // Claimed (and sent back by a throttled attempt, waiting again with its attempt): still
    // never joined.
    sqlx::query(
        "update task_instance set available_at = now() - interval '1 second' where id = $1",
    )
    .bind(Uuid::parse_str(second["id"].as_str().expect("id")).expect("uuid"))
    .execute(&pool)
    .await
    .expect("make it due");
    let taken = claim(&app, "q", "w1", 5, json!({})).await;
    let claimed: Vec<&str> = taken.iter().filter_map(|i| i["id"].as_str()).collect();
    assert!(
        claimed.contains(&second["id"].as_str().expect("id")),
        "{taken:?}"
    );
    let lease = taken
        .iter()
        .find(|i| i["id"] == second["id"])
        .expect("claimed")["lease_token"]
        .clone();
    let (status, throttled) = json(
        app.post(
            &format!("/v1/instances/{}/fail", second["id"].as_str().expect("id")),
            json!({"lease_token": lease, "error": "429", "retry_after_seconds": 600}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{throttled}");
    assert_eq!(throttled["status"], "PENDING");
    let (status, third) = trigger(&app, "quiet", json!({"debounce_key": "acme"})).await;
    assert_eq!(status, 201, "{third}");
    assert_ne!(third["id"], second["id"]);

    // Exactly the newest instance of each key holds it.
    let keys: Vec<(Uuid, Option<String>)> = sqlx::query_as(
        "select id, debounce_key from task_instance where task_id = 'quiet' \
         and debounce_key is not null order by debounce_key",
    )
    .fetch_all(&pool)
    .await
    .expect("keys");
    let holders: Vec<(String, Option<String>)> = keys
        .into_iter()
        .map(|(id, k)| (id.to_string(), k))
        .collect();
    assert_eq!(
        holders,
        vec![
            (
                third["id"].as_str().expect("id").to_owned(),
                Some("acme".to_owned())
            ),
            (
                other["id"].as_str().expect("id").to_owned(),
                Some("globex".to_owned())
            ),
        ]
    );
    assert_eq!(rows(&pool, "quiet").await.len(), 4);
    app.shutdown().await;
}

#[sqlx::test]
async fn a_trigger_with_a_window_key_is_never_debounced(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    put_task(
        &app,
        "keyed",
        json!({"agent_id": "k", "trigger": {"type": "manual"},
               "execution": {"debounce": {"seconds": 600}}}),
    )
    .await;
    let (status, waiting) = trigger(&app, "keyed", json!({})).await;
    assert_eq!(status, 201, "{waiting}");
    let (status, keyed) = trigger(&app, "keyed", json!({"window_key": "rerun-1"})).await;
    assert_eq!(
        (status, &keyed["debounced"]),
        (201, &json!(false)),
        "{keyed}"
    );
    assert_ne!(keyed["id"], waiting["id"]);
    assert_eq!(keyed["window_key"], "rerun-1");
    // Available now, not in ten minutes.
    assert!(at(&keyed["available_at"]) < at(&waiting["available_at"]));
    let (status, again) = trigger(&app, "keyed", json!({"window_key": "rerun-1"})).await;
    assert_eq!((status, &again["id"]), (200, &keyed["id"]));
    assert_eq!(again["debounced"], false);
    assert_eq!(rows(&pool, "keyed").await.len(), 2);
    app.shutdown().await;
}

#[sqlx::test]
async fn bad_debounce_input_is_refused_naming_the_field(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    for (debounce, field) in [
        (json!({"seconds": 0}), "execution.debounce.seconds"),
        (json!({"seconds": 86_401}), "execution.debounce.seconds"),
        (
            json!({"max_wait_seconds": 60}),
            "execution.debounce.seconds",
        ),
        (
            json!({"seconds": 60, "max_wait_seconds": 30}),
            "execution.debounce.max_wait_seconds",
        ),
        (
            json!({"seconds": 60, "jitter": 1}),
            "execution.debounce.jitter",
        ),
        (json!("30s"), "execution.debounce"),
    ] {
        let (status, body) = json(
            app.put(
                "/v1/tasks/bad",
                json!({"agent_id": "a", "trigger": {"type": "manual"},
                       "execution": {"debounce": debounce}}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 422, "{debounce}: {body}");
        assert_eq!(body["errors"][0]["field"], field, "{body}");
    }

    put_task(
        &app,
        "plain",
        json!({"agent_id": "a", "trigger": {"type": "manual"}}),
    )
    .await;
    put_task(
        &app,
        "debounced",
        json!({"agent_id": "a", "trigger": {"type": "manual"},
               "execution": {"debounce": {"seconds": 5}}}),
    )
    .await;
    for (task, body, field) in [
        ("plain", json!({"debounce_key": "k"}), "debounce_key"),
        ("debounced", json!({"debounce_key": ""}), "debounce_key"),
        (
            "debounced",
            json!({"debounce_key": "x".repeat(257)}),
            "debounce_key",
        ),
        ("debounced", json!({"debounce_key": 7}), "debounce_key"),
        (
            "debounced",
            json!({"debounce_key": "a\u{7}b"}),
            "debounce_key",
        ),
        (
            "debounced",
            json!({"debounce_key": "k", "window_key": "w"}),
            "debounce_key",
        ),
        ("debounced", json!({"delay_seconds": 10}), "delay_seconds"),
        (
            "debounced",
            json!({"run_at": "2030-01-01T00:00:00Z"}),
            "run_at",
        ),
    ] {
        let (status, answer) = trigger(&app, task, body.clone()).await;
        assert_eq!(status, 422, "{task} {body}: {answer}");
        assert_eq!(answer["errors"][0]["field"], field, "{answer}");
    }
    let (status, _) = trigger(&app, "missing", json!({"debounce_key": "k"})).await;
    assert_eq!(status, 404);
    assert!(rows(&pool, "debounced").await.is_empty());
    assert!(rows(&pool, "plain").await.is_empty());
    // A plain task's trigger says it was not debounced.
    let (status, plain) = trigger(&app, "plain", json!({})).await;
    assert_eq!((status, &plain["debounced"]), (201, &json!(false)));
    app.shutdown().await;
}
