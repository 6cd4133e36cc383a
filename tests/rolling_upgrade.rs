//! A rolling upgrade, as real processes: two replicas of the previous release serve a database
//! with windows every second, a stream of manual runs and a worker claiming and completing
//! through whichever replicas are up; this release's `kairos migrate` migrates the database under
//! them, then replicas of this release (`serve --no-migrate`) replace the old ones one by one.
//! Counted at the end: no error answer from any replica of either release, no window lost or
//! made twice, every manual run finished exactly once.
//!
//! The previous release's binary comes from `KAIROS_PREVIOUS_BIN` (and its configuration file
//! from `KAIROS_PREVIOUS_CONFIG`); `scripts/test` builds both from the commit named in
//! `scripts/lib/previous.sh`. Without them the test fails under CI and is skipped, saying so,
//! elsewhere; a clone without that commit (a shallow one) skips it, saying why.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

async fn database_url(pool: &PgPool) -> String {
    let name: String = sqlx::query_scalar("select current_database()")
        .fetch_one(pool)
        .await
        .expect("database name");
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let (prefix, rest) = base.rsplit_once('/').expect("URL with a path");
    let query = rest
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    format!("{prefix}/{name}{query}")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// One `kairos serve`, killed when dropped; its output in a log file.
struct Replica {
    name: String,
    child: Child,
    base: String,
    log: PathBuf,
}

impl Replica {
    async fn start(name: &str, bin: &str, config: &str, db: &str, args: &[&str]) -> Replica {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("kairos-upgrade-{}-{name}.log", port));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(bin)
            .arg("serve")
            .args(args)
            .env("DATABASE_URL", db)
            .env("KAIROS_CONFIG", config)
            .env("KAIROS_LISTEN", format!("127.0.0.1:{port}"))
            .env("KAIROS_NODE_ID", name)
            .env("KAIROS_LOG_FORMAT", "text")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("spawn kairos");
        let replica = Replica {
            name: name.to_owned(),
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = client.get(format!("{}/readyz", replica.base)).send().await
                && r.status().is_success()
            {
                return replica;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not ready within 60 s:\n{}",
                replica.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait for a clean exit.
    async fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "SIGTERM to {}", self.name);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(status.success(), "{} exited {status}", self.name);
                break;
            }
            assert!(Instant::now() < deadline, "{} did not stop", self.name);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = self.log_text();
        let _ = std::fs::remove_file(&self.log);
        text
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the worker and the producer saw, shared with the test.
#[derive(Default)]
struct Seen {
    /// Completed runs per instance id.
    effects: HashMap<String, u32>,
    /// Answers other than the expected ones, with the replica that gave them.
    errors: Vec<String>,
    /// Manual runs triggered (their window keys).
    triggered: Vec<String>,
}

/// The replicas to talk to now: the test takes one out before it stops it.
type Live = Arc<Mutex<Vec<String>>>;

fn pick(live: &Live, n: usize) -> String {
    let l = live.lock().expect("live replicas");
    l[n % l.len()].clone()
}

async fn worker(live: Live, seen: Arc<Mutex<Seen>>, stop: CancellationToken) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("http client");
    let mut n = 0usize;
    while !stop.is_cancelled() {
        n += 1;
        let base = pick(&live, n);
        let claim = json!({"agent_id": "up", "worker_id": "w1", "max_instances": 20,
                           "wait_seconds": 1});
        let resp = http
            .post(format!("{base}/v1/claims"))
            .json(&claim)
            .send()
            .await;
        let answer = match resp {
            Ok(r) if r.status().is_success() => r.json::<Value>().await.unwrap_or(Value::Null),
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                let mut s = seen.lock().expect("seen");
                s.errors.push(format!("claim via {base}: {status} {body}"));
                continue;
            }
            Err(e) => {
                seen.lock()
                    .expect("seen")
                    .errors
                    .push(format!("claim via {base}: {e}"));
                continue;
            }
        };
        for inst in answer["instances"].as_array().cloned().unwrap_or_default() {
            let id = inst["id"].as_str().unwrap_or_default().to_owned();
            let token = inst["lease_token"].clone();
            let base = pick(&live, n);
            let done = http
                .post(format!("{base}/v1/instances/{id}/complete"))
                .json(&json!({"lease_token": token, "result": {"ok": true}}))
                .send()
                .await;
            let mut s = seen.lock().expect("seen");
            match done {
                Ok(r) if r.status().is_success() => *s.effects.entry(id).or_default() += 1,
                Ok(r) => s
                    .errors
                    .push(format!("complete {id} via {base}: {}", r.status())),
                Err(e) => s.errors.push(format!("complete {id} via {base}: {e}")),
            }
        }
    }
}

async fn producer(live: Live, seen: Arc<Mutex<Seen>>, stop: CancellationToken) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("http client");
    let mut n = 0usize;
    while !stop.is_cancelled() {
        n += 1;
        let base = pick(&live, n);
        let key = format!("m-{n:05}");
        let resp = http
            .post(format!("{base}/v1/tasks/up-manual/trigger"))
            .json(&json!({"window_key": key}))
            .send()
            .await;
        {
            let mut s = seen.lock().expect("seen");
            match resp {
                Ok(r) if r.status().is_success() => s.triggered.push(key),
                Ok(r) => s
                    .errors
                    .push(format!("trigger {key} via {base}: {}", r.status())),
                Err(e) => s.errors.push(format!("trigger {key} via {base}: {e}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The log lines of a replica at WARN or above that say something went wrong.
fn problems(name: &str, log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("ERROR") || l.contains("panicked"))
        .map(|l| format!("{name}: {l}"))
        .collect()
}

#[sqlx::test(migrations = false)]
async fn replicas_of_the_previous_release_and_this_one_serve_side_by_side_through_a_migration(
    pool: PgPool,
) {
    let (Ok(old_bin), Ok(old_config)) = (
        std::env::var("KAIROS_PREVIOUS_BIN"),
        std::env::var("KAIROS_PREVIOUS_CONFIG"),
    ) else {
        if let Ok(why) = std::env::var("KAIROS_PREVIOUS_UNAVAILABLE") {
            eprintln!("SKIPPED: the previous release could not be built: {why}");
            return;
        }
        assert!(
            std::env::var("CI").is_err(),
            "KAIROS_PREVIOUS_BIN and KAIROS_PREVIOUS_CONFIG are not set: run the suite through \
             scripts/test, which builds the previous release"
        );
        eprintln!(
            "SKIPPED: KAIROS_PREVIOUS_BIN/KAIROS_PREVIOUS_CONFIG not set (scripts/test sets them)"
        );
        return;
    };
    kairos::outbound::install_crypto_provider();
    let new_bin = env!("CARGO_BIN_EXE_kairos");
    let db = database_url(&pool).await;

    // The previous release migrates the empty database to its own schema and serves.
    let old1 = Replica::start("old-1", &old_bin, &old_config, &db, &[]).await;
    let old2 = Replica::start("old-2", &old_bin, &old_config, &db, &[]).await;
    let http = reqwest::Client::new();
    for (id, body) in [
        (
            "up-tick",
            json!({"agent_id": "up",
                   "trigger": {"type": "cron", "expr": "* * * * * *", "timezone": "UTC"},
                   "execution": {"misfire_grace_seconds": 300, "catchup": "all",
                                 "overlap": "queue", "concurrency_limit": 50}}),
        ),
        (
            "up-manual",
            json!({"agent_id": "up", "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 50}}),
        ),
    ] {
        let r = http
            .put(format!("{}/v1/tasks/{id}", old1.base))
            .json(&body)
            .send()
            .await
            .expect("register a task");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        assert_eq!(status, 201, "{id}: {text}");
    }

    let live: Live = Arc::new(Mutex::new(vec![old1.base.clone(), old2.base.clone()]));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = CancellationToken::new();
    let tasks = [
        tokio::spawn(worker(live.clone(), seen.clone(), stop.clone())),
        tokio::spawn(producer(live.clone(), seen.clone(), stop.clone())),
    ];
    tokio::time::sleep(Duration::from_secs(3)).await;

    // This release's migrations, under the old replicas.
    let out = Command::new(new_bin)
        .arg("migrate")
        .env("DATABASE_URL", &db)
        .env("KAIROS_CONFIG", "config/kairos.toml")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("kairos migrate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    // One by one: a new replica joins, an old one leaves.
    let mut logs = Vec::new();
    let new1 = Replica::start(
        "new-1",
        new_bin,
        "config/kairos.toml",
        &db,
        &["--no-migrate"],
    )
    .await;
    live.lock().expect("live").push(new1.base.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    live.lock().expect("live").retain(|b| *b != old1.base);
    logs.push(("old-1", old1.stop().await));
    let new2 = Replica::start(
        "new-2",
        new_bin,
        "config/kairos.toml",
        &db,
        &["--no-migrate"],
    )
    .await;
    live.lock().expect("live").push(new2.base.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    live.lock().expect("live").retain(|b| *b != old2.base);
    logs.push(("old-2", old2.stop().await));
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Stop triggering and pause the windows, let the worker finish what was made, then stop.
    stop.cancel();
    let r = http
        .post(format!("{}/v1/tasks/up-tick/pause", new1.base))
        .json(&json!({"reason": "end of the test"}))
        .send()
        .await
        .expect("pause");
    assert!(r.status().is_success(), "pause: {}", r.status());
    // Windows due from now on stay PENDING (a paused task's are not claimed): the count below
    // covers the windows due before the pause.
    // (Less a margin: a window due just before the pause may not have been claimed by then.)
    let paused_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select now() - interval '3 seconds'")
            .fetch_one(&pool)
            .await
            .expect("now");
    for t in tasks {
        t.await.expect("worker or producer");
    }
    let drain = CancellationToken::new();
    let drainer = tokio::spawn(worker(live.clone(), seen.clone(), drain.clone()));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let open: Vec<(String, String, String)> = sqlx::query_as(
            "select task_id, window_key, status from task_instance \
             where status <> 'SUCCESS' and (task_id <> 'up-tick' or scheduled_at <= $1)",
        )
        .bind(paused_at)
        .fetch_all(&pool)
        .await
        .expect("unfinished instances");
        if open.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "never finished: {open:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drain.cancel();
    drainer.await.expect("drain worker");
    logs.push(("new-1", new1.stop().await));
    logs.push(("new-2", new2.stop().await));

    let seen = Arc::try_unwrap(seen)
        .ok()
        .expect("tasks ended")
        .into_inner()
        .expect("seen");
    assert!(seen.errors.is_empty(), "error answers: {:#?}", seen.errors);
    let problems: Vec<String> = logs.iter().flat_map(|(n, l)| problems(n, l)).collect();
    assert!(problems.is_empty(), "replicas logged errors: {problems:#?}");

    // Windows: one per second from the first to the last, none twice, none skipped.
    let (windows, span, skipped): (i64, i64, i64) = sqlx::query_as(
        "select count(*), \
             extract(epoch from max(scheduled_at) - min(scheduled_at))::bigint + 1, \
             count(*) filter (where status <> 'SUCCESS') \
         from task_instance where task_id = 'up-tick' and scheduled_at <= $1",
    )
    .bind(paused_at)
    .fetch_one(&pool)
    .await
    .expect("windows");
    assert!(windows >= 10, "only {windows} windows in the run");
    assert_eq!(windows, span, "windows lost between the first and the last");
    assert_eq!(skipped, 0, "windows not run");

    // Manual runs: each triggered key is one instance, finished once.
    let manual: Vec<(String, String)> =
        sqlx::query_as("select window_key, status from task_instance where task_id = 'up-manual'")
            .fetch_all(&pool)
            .await
            .expect("manual runs");
    assert_eq!(
        manual.len(),
        seen.triggered.len(),
        "one instance per trigger"
    );
    assert!(manual.iter().all(|(_, s)| s == "SUCCESS"), "{manual:?}");
    let ids: Vec<String> =
        sqlx::query_scalar("select id::text from task_instance where status = 'SUCCESS'")
            .fetch_all(&pool)
            .await
            .expect("finished ids");
    assert_eq!(
        ids.len(),
        seen.effects.len(),
        "every finished run was the worker's"
    );
    assert!(
        seen.effects.values().all(|&n| n == 1),
        "a run completed twice"
    );
    eprintln!(
        "rolling upgrade: {windows} windows, {} manual runs, {} effects, no errors",
        manual.len(),
        seen.effects.len()
    );
}
