//! kairos behind a real PgBouncer in transaction pooling mode (stock settings otherwise): each
//! test starts its own PostgreSQL cluster and a PgBouncer in front of it, runs `kairos serve`
//! as a child process with `database_pooler = "pgbouncer"`, its API and loops going through
//! PgBouncer, LISTEN and migrations straight to the cluster, and checks by reading the database
//! directly that the flows work and that a PgBouncer restart under load loses nothing.
//!
//! Without PgBouncer installed the tests skip, loudly; under `CI=true` they fail instead.

#[path = "faults/agent.rs"]
#[allow(dead_code)]
mod agent;
#[path = "pgbouncer/bouncer.rs"]
mod bouncer;
#[path = "faults/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[path = "faults/daemon.rs"]
#[allow(dead_code)]
mod daemon;
#[path = "faults/steps.rs"]
#[allow(dead_code)]
mod steps;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::{AgentConfig, Runs, Workers};
use bouncer::Bouncer;
use cluster::Cluster;
use daemon::Kairos;
use kairos::config::DatabasePooler;
use kairos::store::{DbSettings, health::DbHealth};
use serde_json::json;
use sqlx::PgPool;
use steps::{Due, Windows, client, connect, phase, scalar, send_until, within};

/// `kairos serve` with its API and loops through `bouncer`, LISTEN (named by its
/// `application_name`) and migrations straight to `pg`.
async fn kairos_behind(pg: &Cluster, bouncer: &Bouncer, env: &[(&str, &str)]) -> Kairos {
    let listen = format!("{}?application_name=kairos-listen", pg.url());
    let direct = pg.url();
    let mut all = vec![
        ("KAIROS_DATABASE_POOLER", "pgbouncer"),
        ("KAIROS_LISTEN_DATABASE_URL", listen.as_str()),
        ("KAIROS_MIGRATE_DATABASE_URL", direct.as_str()),
    ];
    all.extend_from_slice(env);
    Kairos::start(&bouncer.url("postgres"), pg.dir(), &all).await
}

/// A pool as `kairos serve` builds it, through `bouncer`.
async fn kairos_pool(bouncer: &Bouncer, pooler: DatabasePooler, size: u32) -> PgPool {
    let settings = DbSettings {
        pooler,
        ..DbSettings::default()
    };
    kairos::store::connect(
        &bouncer.url("postgres"),
        size,
        &settings,
        DbHealth::default(),
    )
    .await
    .expect("pool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_pgbouncer_statements_run_whole_and_the_flows_work() {
    let Some(bin) = bouncer::binary() else { return };
    let t0 = Instant::now();
    let pg = Cluster::start().await;
    let bouncer = Bouncer::start(bin, pg.port()).await;
    phase(t0, "cluster and PgBouncer up");

    // Stock PgBouncer refuses the startup packet of a plain connection: the test's PgBouncer is
    // the one kairos must cope with.
    let plain = kairos_pool(&bouncer, DatabasePooler::None, 2).await;
    let refused = sqlx::query("select 1")
        .execute(&plain)
        .await
        .expect_err("a plain sqlx connection through stock PgBouncer");
    assert!(
        refused
            .to_string()
            .contains("unsupported startup parameter"),
        "{refused}"
    );
    plain.close().await;

    // kairos's PgBouncer pool: many clients at once, each statement with parameters (Parse and
    // Bind in two round trips), on far fewer server connections than clients: every answer is
    // the answer to its own statement, and the session bounds hold in each transaction.
    let pool = kairos_pool(&bouncer, DatabasePooler::Pgbouncer, 40).await;
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..40i64 {
        let pool = pool.clone();
        clients.spawn(async move {
            for i in 0..100i64 {
                let (a, b): (i64, String) =
                    sqlx::query_as("select $1::bigint * 1000 + $2::bigint, $3::text || 'x'")
                        .bind(c)
                        .bind(i)
                        .bind(format!("c{c}i{i}"))
                        .fetch_one(&pool)
                        .await
                        .expect("a statement through PgBouncer");
                assert_eq!((a, b), (c * 1000 + i, format!("c{c}i{i}x")));
                if i % 10 == 0 {
                    let mut tx = kairos::store::begin_hot(&pool).await.expect("begin");
                    let (t, seq): (String, String) = sqlx::query_as(
                        "select current_setting('statement_timeout'), \
                             current_setting('enable_seqscan')",
                    )
                    .fetch_one(&mut *tx)
                    .await
                    .expect("settings");
                    assert_eq!((t.as_str(), seq.as_str()), ("15s", "off"));
                    tx.commit().await.expect("commit");
                }
            }
        });
    }
    while let Some(r) = clients.join_next().await {
        r.expect("client task");
    }
    pool.close().await;
    phase(t0, "4,000 statements from 40 clients answered right");

    let mut kairos = kairos_behind(&pg, &bouncer, &[]).await;
    let http = client(Duration::from_secs(10));
    let db = connect(&pg.url()).await;
    phase(t0, "kairos up behind PgBouncer");

    // LISTEN goes straight to PostgreSQL, on listen_database_url.
    let listeners = within(Duration::from_secs(20), || {
        let db = db.clone();
        async move {
            let n = scalar(
                &db,
                "select count(*) from pg_stat_activity where application_name = 'kairos-listen'",
            )
            .await;
            (n == 2).then_some(n)
        }
    })
    .await;
    assert_eq!(listeners, Some(2), "LISTEN sessions on listen_database_url");

    // A cron task and a manual one: windows fire, agents claim and complete.
    for (id, trigger) in [
        ("pb-cron", json!({"type": "cron", "expr": "* * * * * *"})),
        ("pb-manual", json!({"type": "manual"})),
    ] {
        let (status, body) = send_until(
            &http,
            reqwest::Method::PUT,
            &kairos.url(&format!("/v1/tasks/{id}")),
            &json!({"agent_id": "pb", "trigger": trigger}),
            &[201],
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let runs = Arc::new(Runs::default());
    let workers = Workers::start(
        &AgentConfig {
            base: kairos.base.clone(),
            agent_id: "pb".to_owned(),
            max_instances: 5,
            lease_seconds: 30,
            wait_seconds: 5,
            timeout: Duration::from_secs(10),
        },
        2,
        &runs,
    );
    let (status, body) = send_until(
        &http,
        reqwest::Method::POST,
        &kairos.url("/v1/tasks/pb-manual/trigger"),
        &json!({}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let ran = within(Duration::from_secs(30), || {
        let runs = runs.clone();
        async move {
            let s = runs.snapshot();
            let cron = s.runs.keys().filter(|(t, _)| t == "pb-cron").count();
            let manual = s.runs.keys().filter(|(t, _)| t == "pb-manual").count();
            (cron >= 5 && manual == 1).then_some(cron)
        }
    })
    .await;
    workers.stop(Duration::from_secs(20)).await;
    let seen = runs.snapshot();
    kairos.print_problems(10);
    assert!(seen.fatal.is_empty(), "{:?}", seen.fatal);
    assert!(
        ran.is_some(),
        "5 cron windows and the manual run claimed and run: {:?}",
        seen.runs
    );
    assert!(seen.twice().is_empty(), "{:?}", seen.twice());
    // Each run the workers completed is SUCCESS in the database, with the result they sent.
    let success = scalar(
        &db,
        "select count(*) from task_instance where task_id like 'pb-%' and status = 'SUCCESS'",
    )
    .await;
    assert_eq!(
        success as u64, seen.completions_ok,
        "SUCCESS rows vs completions"
    );
    assert_eq!(success as usize, seen.runs.len());
    assert_eq!(kairos.exited(), None, "kairos exited");
    let problems = kairos.problems();
    assert!(
        !problems.iter().any(|l| l.contains("prepared statement")
            || l.contains("portal")
            || l.contains("transaction")),
        "statement or transaction errors through PgBouncer: {problems:?}"
    );
    // Nor does PostgreSQL's log: no BEGIN inside a transaction, no COMMIT outside one.
    let pg_log = pg.log_tail(100_000);
    let stray: Vec<&str> = pg_log
        .lines()
        .filter(|l| l.contains("transaction in progress") || l.contains("prepared statement"))
        .take(5)
        .collect();
    assert!(stray.is_empty(), "PostgreSQL logged: {stray:?}");
    db.close().await;
}

const TASKS: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pgbouncer_restart_under_load_loses_no_window_and_runs_none_twice() {
    let Some(bin) = bouncer::binary() else { return };
    let t0 = Instant::now();
    let pg = Cluster::start().await;
    let bouncer = Bouncer::start(bin, pg.port()).await;
    let mut kairos = kairos_behind(&pg, &bouncer, &[]).await;
    let http = client(Duration::from_secs(10));
    phase(t0, "cluster, PgBouncer and kairos up");

    for i in 0..TASKS {
        let (status, body) = send_until(
            &http,
            reqwest::Method::PUT,
            &kairos.url(&format!("/v1/tasks/pr-{i:02}")),
            &json!({
                "agent_id": "pr",
                "trigger": {"type": "interval", "every_seconds": 1},
                "execution": {"misfire_grace_seconds": 300, "catchup": "all",
                              "overlap": "queue", "concurrency_limit": 1},
            }),
            &[201],
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let runs = Arc::new(Runs::default());
    let workers = Workers::start(
        &AgentConfig {
            base: kairos.base.clone(),
            agent_id: "pr".to_owned(),
            max_instances: 10,
            lease_seconds: 10,
            wait_seconds: 1,
            timeout: Duration::from_secs(3),
        },
        4,
        &runs,
    );
    let pid = kairos.pid();

    tokio::time::sleep(Duration::from_secs(5)).await;
    runs.assert_no_fatal();
    phase(t0, "PgBouncer killed (SIGKILL) and started again");
    bouncer.restart_hard().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    phase(t0, "PgBouncer stopped (SIGTERM) and started again");
    bouncer.restart().await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    runs.assert_no_fatal();

    // A new task, registered after the restarts, runs at once.
    let (status, body) = send_until(
        &http,
        reqwest::Method::PUT,
        &kairos.url("/v1/tasks/pr-new"),
        &json!({"agent_id": "pr", "trigger": {"type": "manual"}}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = send_until(
        &http,
        reqwest::Method::POST,
        &kairos.url("/v1/tasks/pr-new/trigger"),
        &json!({}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let claimed = within(Duration::from_secs(10), || {
        let runs = runs.clone();
        async move { runs.first_run("pr-new") }
    })
    .await;

    // Drain every window due until a moment ago, then stop the workers.
    let pool = connect(&pg.url()).await;
    let due = Due::now(&pool, "pr-%").await;
    let drained = due.drained_within(Duration::from_secs(60)).await;
    phase(t0, &format!("drained: {drained}; stopping the workers"));
    workers.stop(Duration::from_secs(20)).await;
    let seen = runs.snapshot();

    // Windows: from each task's first window to its last, one row per second, each once.
    let w = Windows::of(&pool, "pr-__").await;
    let Windows {
        windows,
        lost,
        duplicate_keys,
        fewest,
        ..
    } = w;
    let success = scalar(
        &pool,
        "select count(*) from task_instance where task_id like 'pr-%' and status = 'SUCCESS'",
    )
    .await;
    let not_drained = due.undrained().await;
    let spent = scalar(
        &pool,
        "select count(*) from task_instance where task_id like 'pr-%' \
         and (attempt > 1 or status in ('FAILED', 'DEAD') or error_kind is not null)",
    )
    .await;
    let paused = scalar(
        &pool,
        "select count(*) from tasks where paused or consecutive_failures > 0",
    )
    .await;
    let twice = seen.twice();
    let exited = kairos.exited();

    eprintln!("---- counts ----");
    eprintln!(
        "tasks {} (fewest windows {fewest}); windows {windows}; lost {lost}; duplicate keys \
         {duplicate_keys}; SUCCESS {success}; not drained by the cutoff {not_drained}",
        w.tasks
    );
    eprintln!(
        "worker runs {} over {} (task, window); run twice {}; received with attempt > 1 {}; \
         completions refused 409 {}; claims answered {}; completions answered {}",
        seen.total_runs(),
        seen.runs.len(),
        twice.len(),
        seen.retried.len(),
        seen.lost_leases.len(),
        seen.claims_ok,
        seen.completions_ok
    );
    let mut retries: Vec<_> = seen.retries.iter().collect();
    retries.sort();
    eprintln!("retried calls: {retries:?}");
    eprintln!("instances with an attempt spent {spent}; paused or failing tasks {paused}");
    eprintln!(
        "new task claimed: {}; kairos pid {pid}, exited: {exited:?}",
        claimed.is_some()
    );
    kairos.print_problems(12);

    assert!(seen.fatal.is_empty(), "a worker stopped: {:?}", seen.fatal);
    assert_eq!(w.tasks, TASKS, "every task has windows");
    assert!(
        fewest >= 15,
        "each task saw ~20 s of windows, fewest {fewest}"
    );
    assert_eq!(lost, 0, "windows missing between a task's first and last");
    assert_eq!(duplicate_keys, 0);
    assert!(
        drained,
        "{not_drained} windows due before the cutoff not SUCCESS"
    );
    // Effects: every SUCCESS row was run by a worker, and no window was run twice.
    assert!(
        twice.is_empty(),
        "(task, window) run twice: {:?}",
        twice.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(
        success as usize,
        seen.runs.len(),
        "SUCCESS rows vs (task, window) pairs the workers ran"
    );
    assert!(
        seen.retried.is_empty(),
        "instances re-run after a lost lease: {:?}",
        seen.retried.iter().take(5).collect::<Vec<_>>()
    );
    assert!(seen.lost_leases.is_empty(), "{:?}", seen.lost_leases);
    assert_eq!(spent, 0, "instances that spent an attempt");
    assert_eq!(paused, 0, "tasks paused or counting failures");
    assert!(
        claimed.is_some(),
        "a task triggered after the restarts was not claimed within 10 s"
    );
    assert_eq!(exited, None, "kairos (pid {pid}) exited");
    pool.close().await;
}
