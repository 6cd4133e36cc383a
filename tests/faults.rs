//! Database faults against the real daemon: each test starts its own PostgreSQL cluster, runs
//! `kairos serve` as a child process over it, drives agents over HTTP, and then breaks the
//! database under it — a crash restart, a 30 s stop, a connection that silently stops answering —
//! and checks, by reading the database directly, that nothing was lost, nothing ran twice,
//! nothing was paused, and the daemon itself kept running.

#[path = "faults/agent.rs"]
mod agent;
#[path = "faults/cluster.rs"]
mod cluster;
#[path = "faults/daemon.rs"]
mod daemon;
#[path = "faults/proxy.rs"]
mod proxy;
#[path = "faults/steps.rs"]
mod steps;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::{AgentConfig, Runs, Workers};
use cluster::Cluster;
use daemon::Kairos;
use proxy::BlackHoleProxy;
use serde_json::{Value, json};
use steps::{Due, Windows, client, connect, phase, scalar, send_until, within};

const TASKS: usize = 20;
/// Committer tasks of kairos's group commit (`group_commit::DEFAULT_COMMITTERS`).
const COMMITTERS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_restart_and_a_30s_stop_under_load_lose_nothing_and_pause_nothing() {
    let t0 = Instant::now();
    let pg = Cluster::start().await;
    let mut kairos = Kairos::start(&pg.url(), pg.dir(), &[]).await;
    let http = client(Duration::from_secs(10));
    phase(t0, "cluster and kairos up");

    // Every window of an outage must still run: a grace longer than the outage keeps them
    // on time, `queue` keeps a window due behind an unfinished one, and catch-up `all` covers
    // whatever would still count as missed.
    for i in 0..TASKS {
        let (status, body) = send_until(
            &http,
            reqwest::Method::PUT,
            &kairos.url(&format!("/v1/tasks/fa-{i:02}")),
            &json!({
                "agent_id": "fa",
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
            agent_id: "fa".to_owned(),
            max_instances: 10,
            lease_seconds: 5,
            wait_seconds: 1,
            timeout: Duration::from_secs(3),
        },
        4,
        &runs,
    );
    let pid = kairos.pid();

    tokio::time::sleep(Duration::from_secs(5)).await;
    runs.assert_no_fatal();
    phase(t0, "restart -m immediate");
    pg.restart_immediate().await;
    phase(t0, "PostgreSQL back after the crash");
    tokio::time::sleep(Duration::from_secs(5)).await;
    phase(t0, "stop -m fast: 30 s outage");
    pg.stop_fast().await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    pg.start_again().await;
    phase(t0, "PostgreSQL started again");
    tokio::time::sleep(Duration::from_secs(15)).await;
    runs.assert_no_fatal();

    // A new task, registered after all this, runs at once.
    phase(t0, "a new manual task");
    let (status, body) = send_until(
        &http,
        reqwest::Method::PUT,
        &kairos.url("/v1/tasks/fa-new"),
        &json!({"agent_id": "fa", "trigger": {"type": "manual"}}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = send_until(
        &http,
        reqwest::Method::POST,
        &kairos.url("/v1/tasks/fa-new/trigger"),
        &json!({}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let triggered = Instant::now();
    let claimed = within(Duration::from_secs(5), || {
        let runs = runs.clone();
        async move { runs.first_run("fa-new") }
    })
    .await;
    let claim_lag = claimed.map(|at| at.saturating_duration_since(triggered));
    phase(t0, &format!("new task claimed after {claim_lag:?}"));

    // Let the workers drain every window due until a moment ago, then stop them.
    let pool = connect(&pg.url()).await;
    let due = Due::now(&pool, "fa-%").await;
    let drained = due.drained_within(Duration::from_secs(60)).await;
    phase(t0, &format!("drained: {drained}; stopping the workers"));
    workers.stop(Duration::from_secs(20)).await;
    let seen = runs.snapshot();

    // Windows: from each task's first window to its last, one row per second, each once.
    let w = Windows::of(&pool, "fa-__").await;
    let Windows {
        windows,
        lost,
        duplicate_keys,
        misspelled,
        fewest,
        ..
    } = w;
    let statuses: Vec<(String, String, i64)> = sqlx::query_as(
        "select status, source, count(*) from task_instance where task_id like 'fa-%' \
         group by 1, 2 order by 1, 2",
    )
    .fetch_all(&pool)
    .await
    .expect("statuses");
    let skipped = scalar(
        &pool,
        "select count(*) from task_instance where task_id like 'fa-%' and status = 'SKIPPED'",
    )
    .await;
    let not_drained = due.undrained().await;
    let success = scalar(
        &pool,
        "select count(*) from task_instance where task_id like 'fa-%' and status = 'SUCCESS'",
    )
    .await;
    // The breaker and pauses.
    let paused = scalar(
        &pool,
        "select count(*) from tasks where paused or consecutive_failures > 0",
    )
    .await;
    // Attempts spent: by the reaper (lease_expired, timeout) or anything else.
    let spent = scalar(
        &pool,
        "select count(*) from task_instance where task_id like 'fa-%' \
         and (attempt > 1 or status in ('FAILED', 'DEAD') or error_kind is not null)",
    )
    .await;
    let failure_events = scalar(
        &pool,
        "select count(*) from instance_events e join task_instance i on i.id = e.instance_id \
         where i.task_id like 'fa-%' and e.to_status in ('FAILED', 'DEAD')",
    )
    .await;
    let error_kinds: Vec<(Option<String>, i64)> = sqlx::query_as(
        "select error_kind, count(*) from task_instance where task_id like 'fa-%' \
         and (attempt > 1 or error_kind is not null) group by 1 order by 1",
    )
    .fetch_all(&pool)
    .await
    .expect("error kinds");
    let twice = seen.twice();
    let exited = kairos.exited();

    eprintln!("---- counts ----");
    eprintln!(
        "tasks {} (fewest windows {fewest}); windows {windows}; lost {lost}; duplicate keys \
         {duplicate_keys}; misspelled keys {misspelled}; skipped {skipped}; SUCCESS {success}; \
         not drained by the cutoff {not_drained}",
        w.tasks
    );
    eprintln!("statuses (status, source, count): {statuses:?}");
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
    eprintln!(
        "paused or failing tasks {paused}; instances with an attempt spent {spent}; \
         FAILED/DEAD events {failure_events}; error kinds {error_kinds:?}"
    );
    eprintln!("new task claimed after {claim_lag:?}; kairos pid {pid}, exited: {exited:?}");
    kairos.print_problems(12);

    assert!(seen.fatal.is_empty(), "a worker stopped: {:?}", seen.fatal);
    assert_eq!(w.tasks, TASKS, "every task has windows");
    assert!(
        fewest >= 50,
        "each task saw ~60 s of windows, fewest {fewest}"
    );
    assert_eq!(misspelled, 0, "window keys are the RFC 3339 instant");
    assert_eq!(lost, 0, "windows missing between a task's first and last");
    assert_eq!(duplicate_keys, 0);
    assert_eq!(skipped, 0, "windows recorded SKIPPED instead of run");
    assert!(
        twice.is_empty(),
        "(task, window) run twice by the workers: {} e.g. {:?}; lost leases {:?}",
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>(),
        seen.lost_leases.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        seen.retried.is_empty(),
        "instances re-run after a lost lease: {:?}",
        seen.retried.iter().take(5).collect::<Vec<_>>()
    );
    assert!(seen.lost_leases.is_empty(), "{:?}", seen.lost_leases);
    assert_eq!(paused, 0, "tasks paused or counting failures");
    assert_eq!(
        spent, 0,
        "instances that spent an attempt (error kinds {error_kinds:?})"
    );
    assert_eq!(failure_events, 0, "FAILED/DEAD transitions");
    assert!(
        drained,
        "{not_drained} windows due before the cutoff not SUCCESS"
    );
    assert!(
        claim_lag.is_some(),
        "a task triggered after the outages was not claimed within 5 s"
    );
    assert_eq!(exited, None, "kairos (pid {pid}) exited");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_black_holed_connection_is_given_up_within_the_configured_timeouts() {
    let t0 = Instant::now();
    let pg = Cluster::start().await;
    let proxy = BlackHoleProxy::start(pg.port()).await;
    // Short bounds on kairos's side: an answer within 1 s, a pass (a loop's, a claim round's, a
    // group commit's) stuck on a silent connection abandoned after 5 s. The server's statement
    // and lock timeouts are long: the statements caught below wait for a lock for seconds, and
    // no server timeout can help a client whose answers the network drops.
    let mut kairos = Kairos::start(
        &pg.url_at(proxy.port()),
        pg.dir(),
        &[
            ("KAIROS_DATABASE_UNAVAILABLE_ANSWER_MS", "1000"),
            ("KAIROS_DB_STATEMENT_TIMEOUT_MS", "30000"),
            ("KAIROS_DB_LOCK_TIMEOUT_MS", "30000"),
            ("KAIROS_DB_KEEPALIVE_SECONDS", "1"),
            ("KAIROS_LOOP_PASS_TIMEOUT_MS", "5000"),
        ],
    )
    .await;
    let http = client(Duration::from_secs(3));
    let pool = connect(&pg.url()).await;
    phase(t0, "cluster, proxy and kairos up");

    let (status, body) = send_until(
        &http,
        reqwest::Method::PUT,
        &kairos.url("/v1/tasks/bh-tick"),
        &json!({"agent_id": "bh", "trigger": {"type": "interval", "every_seconds": 1}}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let runs = Arc::new(Runs::default());
    let workers = Workers::start(
        &AgentConfig {
            base: kairos.base.clone(),
            agent_id: "bh".to_owned(),
            max_instances: 10,
            lease_seconds: 5,
            wait_seconds: 1,
            timeout: Duration::from_secs(3),
        },
        1,
        &runs,
    );
    let warm = within(Duration::from_secs(20), || {
        let runs = runs.clone();
        async move { (runs.snapshot().runs.len() >= 3).then_some(()) }
    })
    .await;
    runs.assert_no_fatal();
    assert!(
        warm.is_some(),
        "the worker ran no 3 windows before the fault"
    );

    // Leases to complete while the database is locked below.
    let (status, body) = send_until(
        &http,
        reqwest::Method::PUT,
        &kairos.url("/v1/tasks/bh-hold"),
        &json!({"agent_id": "bh-hold", "trigger": {"type": "manual"},
                "execution": {"concurrency_limit": COMMITTERS}}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    for _ in 0..COMMITTERS {
        let (status, body) = send_until(
            &http,
            reqwest::Method::POST,
            &kairos.url("/v1/tasks/bh-hold/trigger"),
            &json!({}),
            &[201],
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    // One instance of a backlogged task per claim round (the fairness rule): claim until all
    // are held.
    let mut held: Vec<(String, Value)> = Vec::new();
    while held.len() < COMMITTERS {
        let (status, body) = send_until(
            &http,
            reqwest::Method::POST,
            &kairos.url("/v1/claims"),
            &json!({"agent_id": "bh-hold", "worker_id": "holder", "max_instances": COMMITTERS,
                    "lease_seconds": 120, "wait_seconds": 1}),
            &[200],
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let got = body["instances"].as_array().cloned().unwrap_or_default();
        assert!(
            !got.is_empty(),
            "a claim of bh-hold came back empty: {body}"
        );
        held.extend(got.iter().map(|i| {
            (
                i["id"].as_str().unwrap_or_default().to_owned(),
                i["lease_token"].clone(),
            )
        }));
    }

    // Catch kairos's statements mid-flight: with task_instance locked, two claim rounds of the
    // worker's agent (as many as run at once) and a single completion on each committer of the
    // group commit wait in the database for the lock, on connections the black hole then
    // silences. Without a bound on those passes they would wait forever, and every later claim
    // of the agent and every later completion with them.
    let mut locker = pool.begin().await.expect("begin the locking transaction");
    sqlx::query("lock table task_instance in access exclusive mode")
        .execute(&mut *locker)
        .await
        .expect("lock task_instance");
    // A statement is known by patterns near its start: `pg_stat_activity` keeps only
    // the first `track_activity_query_size` bytes (1 kB), which a long header comment fills.
    let waiting = |patterns: &'static [&'static str]| {
        let pool = pool.clone();
        move || {
            let pool = pool.clone();
            async move {
                let n: i64 = sqlx::query_scalar(
                    "select count(*) from pg_stat_activity \
                     where wait_event_type = 'Lock' and query ilike any($1)",
                )
                .bind(patterns)
                .fetch_one(&pool)
                .await
                .ok()?;
                Some(n)
            }
        }
    };
    let stuck = client(Duration::from_secs(60));
    let mut calls = tokio::task::JoinSet::new();
    let mut seen = Vec::new();
    for round in 0..2 {
        let (stuck, url) = (stuck.clone(), kairos.url("/v1/claims"));
        calls.spawn(async move {
            let body = json!({"agent_id": "bh", "worker_id": format!("stuck-{round}"),
                              "max_instances": 1, "wait_seconds": 0});
            let _ = stuck.post(url).json(&body).send().await;
        });
        seen.push(
            within(Duration::from_secs(10), || {
                // The head read or the per-task read of the agent's claim round.
                let count = waiting(&[
                    "%-- The head of an agent's work%",
                    "%-- Per task of an agent's poll tasks%",
                ]);
                async move { count().await.filter(|&n| n > round) }
            })
            .await,
        );
    }
    for (k, (id, token)) in held.iter().enumerate() {
        let (stuck, url) = (
            stuck.clone(),
            kairos.url(&format!("/v1/instances/{id}/complete")),
        );
        let body = json!({"lease_token": token});
        calls.spawn(async move {
            let _ = stuck.post(url).json(&body).send().await;
        });
        seen.push(
            within(Duration::from_secs(10), || {
                let count = waiting(&["%-- Many completions, each a compare-and-swap%"]);
                async move { count().await.filter(|&n| n > k as i64) }
            })
            .await,
        );
    }
    let queries: Option<String> = sqlx::query_scalar(
        "select string_agg(left(regexp_replace(query, '\\s+', ' ', 'g'), 70), ' | ') \
         from pg_stat_activity where wait_event_type = 'Lock'",
    )
    .fetch_one(&pool)
    .await
    .unwrap_or_default();
    phase(
        t0,
        &format!(
            "black hole: every existing connection stops answering (waiting for the lock: \
             {seen:?}: {queries:?})"
        ),
    );
    let flipped_db: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("select now()")
        .fetch_one(&pool)
        .await
        .expect("the database clock");
    proxy.black_hole();
    let flipped = Instant::now();
    locker.commit().await.expect("release the lock");
    assert!(
        seen.iter().all(Option::is_some),
        "not every claim round and committer was waiting for the lock when the black hole \
         opened: {seen:?}"
    );
    let bound = Duration::from_secs(30);

    // (a) A task registered now gets its first window created and claimed.
    let (status, body) = send_until(
        &http,
        reqwest::Method::PUT,
        &kairos.url("/v1/tasks/bh-new"),
        &json!({"agent_id": "bh", "trigger": {"type": "interval", "every_seconds": 1}}),
        &[201],
        bound,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let registered = flipped.elapsed();
    phase(
        t0,
        &format!("bh-new registered {registered:?} after the flip"),
    );
    let created = within(bound.saturating_sub(flipped.elapsed()), || {
        let pool = pool.clone();
        async move {
            let n: i64 =
                sqlx::query_scalar("select count(*) from task_instance where task_id = 'bh-new'")
                    .fetch_one(&pool)
                    .await
                    .ok()?;
            (n > 0).then(|| flipped.elapsed())
        }
    })
    .await;
    let claimed = within(bound.saturating_sub(flipped.elapsed()), || {
        let runs = runs.clone();
        async move {
            runs.first_run("bh-new")
                .map(|at| at.saturating_duration_since(flipped))
        }
    })
    .await;
    phase(
        t0,
        &format!("first window created {created:?}, claimed {claimed:?} after the flip"),
    );

    // (b) Readiness recovers.
    let ready = within(bound.saturating_sub(flipped.elapsed()), || {
        let kairos = &kairos;
        let http = &http;
        async move { (kairos.readyz(http).await == Some(200)).then(|| flipped.elapsed()) }
    })
    .await;
    phase(t0, &format!("/readyz 200 {ready:?} after the flip"));

    // (c) Both LISTEN connections (claims' work signal, the trigger loop's task changes) listen
    // again, on connections opened after the black hole: the silent ones they left cost no
    // slot that a new listener needs.
    let listening = within(bound.saturating_sub(flipped.elapsed()), || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_activity \
                 where query ilike 'listen %' and backend_start > $1",
            )
            .bind(flipped_db)
            .fetch_one(&pool)
            .await
            .ok()?;
            (n >= 2).then(|| flipped.elapsed())
        }
    })
    .await;
    phase(
        t0,
        &format!("both listeners back {listening:?} after the flip"),
    );
    workers.stop(Duration::from_secs(20)).await;
    let exited = kairos.exited();
    let seen = runs.snapshot();
    let mut retries: Vec<_> = seen.retries.iter().collect();
    retries.sort();
    eprintln!(
        "recovery: registered {registered:?}, window created {created:?}, claimed {claimed:?}, \
         ready {ready:?}; worker retries {retries:?}; kairos exited: {exited:?}"
    );
    kairos.print_problems(12);

    assert!(seen.fatal.is_empty(), "a worker stopped: {:?}", seen.fatal);
    assert!(
        created.is_some(),
        "no window of a task registered after the black hole within {bound:?}"
    );
    assert!(
        claimed.is_some(),
        "no instance of a task registered after the black hole claimed within {bound:?}"
    );
    assert!(ready.is_some(), "/readyz not 200 within {bound:?}");
    assert!(
        listening.is_some(),
        "the two LISTEN connections were not opened again within {bound:?}"
    );
    assert_eq!(exited, None, "kairos exited");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn long_polls_wake_within_3s_after_the_database_returns() {
    let t0 = Instant::now();
    let pg = Cluster::start().await;
    let kairos = Kairos::start(&pg.url(), pg.dir(), &[]).await;
    let http = client(Duration::from_secs(3));
    let (status, body) = send_until(
        &http,
        reqwest::Method::PUT,
        &kairos.url("/v1/tasks/lp-manual"),
        &json!({"agent_id": "lp", "trigger": {"type": "manual"}}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    phase(t0, "stop -m fast: 10 s outage");
    pg.stop_fast().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    pg.start_again().await;
    phase(t0, "PostgreSQL started again");
    let ready = within(Duration::from_secs(30), || {
        let kairos = &kairos;
        let http = &http;
        async move { (kairos.readyz(http).await == Some(200)).then_some(()) }
    })
    .await;
    assert!(
        ready.is_some(),
        "/readyz not 200 within 30 s of the restart"
    );
    phase(t0, "kairos ready again");

    // One agent waits in a long poll (re-asking whenever a poll ends empty or fails).
    let base = kairos.base.clone();
    let poller = tokio::spawn(async move {
        let http = client(Duration::from_secs(30));
        loop {
            let answer = http
                .post(format!("{base}/v1/claims"))
                .json(
                    &json!({"agent_id": "lp", "worker_id": "lp-w", "max_instances": 1,
                              "wait_seconds": 20, "lease_seconds": 30}),
                )
                .send()
                .await;
            if let Ok(resp) = answer
                && resp.status().as_u16() == 200
                && let Ok(v) = resp.json::<Value>().await
                && v["instances"].as_array().is_some_and(|a| !a.is_empty())
            {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // Deliberate: let the poll settle into its wait before the work appears.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, body) = send_until(
        &http,
        reqwest::Method::POST,
        &kairos.url("/v1/tasks/lp-manual/trigger"),
        &json!({}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let triggered = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(25), poller).await;
    let lag = match got {
        Ok(Ok(at)) => Some(at.saturating_duration_since(triggered)),
        _ => None,
    };
    phase(
        t0,
        &format!("the waiting long poll got the instance after {lag:?}"),
    );
    kairos.print_problems(12);
    let lag = lag.expect("the waiting long poll never got the manual run (25 s)");
    assert!(
        lag < Duration::from_secs(3),
        "the waiting long poll got the manual run {lag:?} after it was created"
    );
}

const FAILOVER_CRON_TASKS: usize = 8;

/// Make `primary` wait on every commit for its standby (`synchronous_standby_names = '*'`), and
/// wait until the standby is synchronous: what the primary acknowledged, the standby has.
async fn require_synchronous_standby(primary: &Cluster) {
    let pool = connect(&primary.url()).await;
    sqlx::query("alter system set synchronous_standby_names = '*'")
        .execute(&pool)
        .await
        .expect("set synchronous_standby_names");
    sqlx::query("select pg_reload_conf()")
        .execute(&pool)
        .await
        .expect("reload the configuration");
    let sync = within(Duration::from_secs(30), || {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_replication where sync_state = 'sync'",
            )
            .fetch_one(&pool)
            .await
            .ok()?;
            (n == 1).then_some(())
        }
    })
    .await;
    assert!(sync.is_some(), "the standby did not become synchronous");
    pool.close().await;
}

/// The window key of the second after `t` (keys are RFC 3339 instants, UTC, whole seconds).
fn key_after(t: chrono::DateTime<chrono::Utc>) -> String {
    (t + chrono::Duration::seconds(1))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// How the primary is lost before its standby is promoted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrimaryLoss {
    /// `pg_ctl stop -m immediate`: every connection to it is cut, and it stays down.
    Killed,
    /// `default_transaction_read_only = on` (a fence before a switchover): it stays up and its
    /// connections answer SQLSTATE 25006 to every write.
    TurnedReadOnly,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_to_a_promoted_standby_loses_no_window_and_runs_nothing_twice() {
    failover(PrimaryLoss::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_turned_read_only_is_left_for_the_promoted_standby_without_loss() {
    failover(PrimaryLoss::TurnedReadOnly).await;
}

/// kairos over a primary and its synchronous standby (both in `database_url`), cron windows
/// every second and a stream of manual runs claimed and completed by agents; the primary is
/// lost as `loss` says and the standby promoted; claims resume without a restart, no window is
/// lost or doubled, nothing runs twice.
async fn failover(loss: PrimaryLoss) {
    let t0 = Instant::now();
    let primary = Cluster::start().await;
    let standby = primary.start_standby().await;
    require_synchronous_standby(&primary).await;
    // Killed: the primary first, so every scan meets the dead host first. Read-only: the
    // standby first, so kairos starts by skipping a host that accepts no writes.
    let (first, second) = match loss {
        PrimaryLoss::Killed => (primary.port(), standby.port()),
        PrimaryLoss::TurnedReadOnly => (standby.port(), primary.port()),
    };
    let url = format!("postgres://kairos@127.0.0.1:{first},127.0.0.1:{second}/postgres");
    let mut kairos = Kairos::start(
        &url,
        standby.dir(),
        &[("KAIROS_DATABASE_UNAVAILABLE_ANSWER_MS", "1000")],
    )
    .await;
    let http = client(Duration::from_secs(5));
    phase(
        t0,
        "primary, synchronous standby and kairos (both hosts) up",
    );

    // A window every second per task; catch-up `all` with a grace longer than the outage keeps
    // every window of the failover on time, `queue` keeps one due behind an unfinished one.
    for i in 0..FAILOVER_CRON_TASKS {
        let (status, body) = send_until(
            &http,
            reqwest::Method::PUT,
            &kairos.url(&format!("/v1/tasks/fo-c{i:02}")),
            &json!({
                "agent_id": "fo",
                "trigger": {"type": "cron", "expr": "* * * * * *", "timezone": "UTC"},
                "execution": {"misfire_grace_seconds": 300, "catchup": "all",
                              "overlap": "queue", "concurrency_limit": 1},
            }),
            &[201],
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = send_until(
        &http,
        reqwest::Method::PUT,
        &kairos.url("/v1/tasks/fo-manual"),
        &json!({"agent_id": "fo", "trigger": {"type": "manual"},
                "execution": {"concurrency_limit": 20}}),
        &[201],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // Manual instances, each with its own key (a retried trigger is then the same instance):
    // a backlog at once, then a steady stream through the failover.
    let produced = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop_producing = tokio_util::sync::CancellationToken::new();
    let producer = {
        let produced = produced.clone();
        let stop = stop_producing.clone();
        let url = kairos.url("/v1/tasks/fo-manual/trigger");
        let http = http.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                send_until(
                    &http,
                    reqwest::Method::POST,
                    &url,
                    &json!({"window_key": format!("m-{n:06}")}),
                    &[200, 201],
                    Duration::from_secs(60),
                )
                .await;
                n += 1;
                produced.store(n, std::sync::atomic::Ordering::SeqCst);
                if n > 300 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        })
    };
    let runs = Arc::new(Runs::default());
    let workers = Workers::start(
        &AgentConfig {
            base: kairos.base.clone(),
            agent_id: "fo".to_owned(),
            max_instances: 10,
            lease_seconds: 10,
            wait_seconds: 1,
            timeout: Duration::from_secs(3),
        },
        4,
        &runs,
    );
    let pid = kairos.pid();
    let warm = within(Duration::from_secs(30), || {
        let runs = runs.clone();
        async move {
            let s = runs.snapshot();
            let manual = s.runs.keys().filter(|(t, _)| t == "fo-manual").count();
            (manual >= 300 && s.runs.len() >= manual + 3 * FAILOVER_CRON_TASKS).then_some(())
        }
    })
    .await;
    runs.assert_no_fatal();
    assert!(
        warm.is_some(),
        "the workers did not drain the backlog and run cron windows before the fault"
    );

    match loss {
        PrimaryLoss::Killed => {
            phase(t0, "primary stopped -m immediate");
            primary.stop_immediate().await;
        }
        PrimaryLoss::TurnedReadOnly => {
            phase(
                t0,
                "primary turned read-only (default_transaction_read_only = on)",
            );
            let pool = connect(&primary.url()).await;
            for sql in [
                "alter system set default_transaction_read_only = on",
                "select pg_reload_conf()",
            ] {
                sqlx::query(sql).execute(&pool).await.expect(sql);
            }
            pool.close().await;
        }
    }
    let killed = Instant::now();
    // A failover manager takes a moment to decide: kairos meanwhile finds no host that
    // accepts writes (the standby answers read-only; so does a fenced primary).
    tokio::time::sleep(Duration::from_secs(2)).await;
    standby.promote().await;
    let promoted_at = chrono::Utc::now();
    let manual_at_promotion = produced.load(std::sync::atomic::Ordering::SeqCst);
    phase(t0, "standby promoted");

    // Claims and new windows resume without restarting kairos.
    let first_new_window = key_after(promoted_at);
    let resumed = within(
        Duration::from_secs(30).saturating_sub(killed.elapsed()),
        || {
            let runs = runs.clone();
            let first_new_window = first_new_window.clone();
            async move {
                let s = runs.snapshot();
                let window = s
                    .runs
                    .keys()
                    .any(|(t, w)| t.starts_with("fo-c") && *w >= first_new_window);
                let manual = s.runs.keys().any(|(t, w)| {
                    t == "fo-manual"
                        && w.strip_prefix("m-")
                            .and_then(|n| n.parse::<u64>().ok())
                            .is_some_and(|n| n > manual_at_promotion)
                });
                (window && manual).then(|| killed.elapsed())
            }
        },
    )
    .await;
    phase(
        t0,
        &format!("claims of new windows and new manual runs resumed {resumed:?} after the loss"),
    );
    if resumed.is_none() {
        kairos.print_problems(12);
    }
    assert!(
        resumed.is_some(),
        "new windows and new manual runs not claimed within 30 s of the loss of the primary"
    );

    // Run on the new primary for a while, then drain.
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop_producing.cancel();
    producer.await.expect("producer task");
    let produced = produced.load(std::sync::atomic::Ordering::SeqCst);
    let pool = connect(&standby.url()).await;
    let due = Due::now(&pool, "fo-%").await;
    let drained = due.drained_within(Duration::from_secs(30)).await;
    phase(t0, &format!("drained: {drained}; stopping the workers"));
    workers.stop(Duration::from_secs(20)).await;
    let seen = runs.snapshot();

    // Cron windows: from each task's first to its last, one row per second, each once.
    let w = Windows::of(&pool, "fo-c%").await;
    let Windows {
        windows,
        lost,
        duplicate_keys,
        ..
    } = w;
    let during_outage = scalar(
        &pool,
        "select count(*) from task_instance where task_id like 'fo-c%' \
         and scheduled_at > (select min(started_at) from db_unreachable) \
         and scheduled_at < (select max(ended_at) from db_unreachable)",
    )
    .await;
    let manual_rows = scalar(
        &pool,
        "select count(*) from task_instance where task_id = 'fo-manual'",
    )
    .await;
    let manual_success = scalar(
        &pool,
        "select count(*) from task_instance where task_id = 'fo-manual' and status = 'SUCCESS'",
    )
    .await;
    let skipped = scalar(
        &pool,
        "select count(*) from task_instance where task_id like 'fo-%' and status = 'SKIPPED'",
    )
    .await;
    let statuses: Vec<(String, String, i64)> = sqlx::query_as(
        "select status, source, count(*) from task_instance where task_id like 'fo-%' \
         group by 1, 2 order by 1, 2",
    )
    .fetch_all(&pool)
    .await
    .expect("statuses");
    let outages: Vec<(String, f64)> = sqlx::query_as(
        "select node_id, extract(epoch from ended_at - started_at)::float8 from db_unreachable",
    )
    .fetch_all(&pool)
    .await
    .expect("outages");
    let not_drained = due.undrained().await;
    let twice = seen.twice();
    let manual_runs = seen.runs.keys().filter(|(t, _)| t == "fo-manual").count() as i64;
    let exited = kairos.exited();
    let problems = kairos.problems();
    let failovers = problems
        .iter()
        .filter(|l| l.contains("database failover"))
        .count();
    let read_only_answers = problems
        .iter()
        .filter(|l| l.contains("read-only transaction"))
        .count();

    eprintln!("---- counts ----");
    eprintln!(
        "cron tasks {}; windows {windows}; lost {lost}; duplicate keys {duplicate_keys}; \
         windows scheduled during the outage {during_outage}; skipped {skipped}; not drained \
         by the cutoff {not_drained}",
        w.tasks
    );
    eprintln!(
        "manual: triggered {produced} ({manual_at_promotion} before the promotion); rows \
         {manual_rows}; SUCCESS {manual_success}; run by the workers {manual_runs}"
    );
    eprintln!("statuses (status, source, count): {statuses:?}; outages recorded {outages:?}");
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
    eprintln!(
        "{loss:?}: resumed {resumed:?} after the loss; failovers logged {failovers}; \
         read-only answers logged {read_only_answers}; kairos pid {pid}, exited: {exited:?}"
    );
    kairos.print_problems(12);

    assert!(seen.fatal.is_empty(), "a worker stopped: {:?}", seen.fatal);
    assert_eq!(exited, None, "kairos (pid {pid}) exited");
    assert!(failovers >= 1, "kairos logged no database failover");
    assert_eq!(w.tasks, FAILOVER_CRON_TASKS, "every task has windows");
    assert_eq!(lost, 0, "windows missing between a task's first and last");
    assert_eq!(duplicate_keys, 0);
    assert_eq!(skipped, 0, "windows recorded SKIPPED instead of run");
    assert_eq!(
        manual_rows, produced as i64,
        "one manual instance per key triggered"
    );
    assert_eq!(manual_success, manual_rows, "every manual instance ran");
    assert_eq!(manual_runs, manual_rows, "the workers ran every manual key");
    assert!(
        twice.is_empty(),
        "(task, window) run twice by the workers: {} e.g. {:?}; lost leases {:?}",
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>(),
        seen.lost_leases.iter().take(5).collect::<Vec<_>>()
    );
    assert!(seen.lost_leases.is_empty(), "{:?}", seen.lost_leases);
    assert!(
        drained,
        "{not_drained} instances due before the cutoff not SUCCESS"
    );
    pool.close().await;
}
