//! Real `kairos serve` processes on one database: a replica killed with SIGKILL while its
//! instances are RUNNING leaves nothing stuck; another replica reaps and the work completes.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{eventually, json};
use serde_json::{Value, json};
use sqlx::PgPool;

/// A `kairos serve` child process, killed when dropped.
struct Replica {
    child: Child,
    base: String,
    client: reqwest::Client,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The URL of the per-test database that `#[sqlx::test]` created for `pool`.
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

async fn start_replica(db: &str, node: &str) -> Replica {
    kairos::outbound::install_crypto_provider();
    let port = free_port();
    // Everything that can panic comes before the spawn, so no child outlives a failed test.
    let client = reqwest::Client::new();
    let child = Command::new(env!("CARGO_BIN_EXE_kairos"))
        .arg("serve")
        .env("DATABASE_URL", db)
        .env("KAIROS_CONFIG", "config/kairos.toml")
        .env("KAIROS_LISTEN", format!("127.0.0.1:{port}"))
        .env("KAIROS_NODE_ID", node)
        .env("KAIROS_REAPER_INTERVAL_MS", "200")
        .env("KAIROS_RETRY_SCAN_INTERVAL_MS", "200")
        .env("KAIROS_DATABASE_MAX_CONNECTIONS", "13")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn kairos");
    let replica = Replica {
        child,
        base: format!("http://127.0.0.1:{port}"),
        client,
    };
    eventually(Duration::from_secs(30), "the replica to be ready", || {
        let r = &replica;
        async move {
            let resp = r
                .client
                .get(format!("{}/readyz", r.base))
                .send()
                .await
                .ok()?;
            (resp.status().as_u16() == 200).then_some(())
        }
    })
    .await;
    replica
}

impl Replica {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        json(
            self.client
                .post(format!("{}{path}", self.base))
                .json(&body)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        json(
            self.client
                .put(format!("{}{path}", self.base))
                .json(&body)
                .send()
                .await
                .expect("request"),
        )
        .await
    }
}

#[sqlx::test]
async fn a_replica_killed_with_sigkill_leaves_nothing_stuck(pool: PgPool) {
    let db = database_url(&pool).await;
    let a = start_replica(&db, "replica-a").await;
    let (status, body) = a
        .put(
            "/v1/tasks/crashy",
            json!({"agent_id": "ag", "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 10, "retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0}},
                   // Five reaped leases are five failed attempts: keep the breaker out of this test.
                   "circuit_breaker": {"failure_threshold": 100}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
             max_attempts, available_at) \
         select gen_random_uuid(), 'crashy', 'w' || g, now(), 'PENDING', 'manual', 'ag', 4, now() \
         from generate_series(1, 5) g",
    )
    .execute(&pool)
    .await
    .expect("insert");
    let (status, claimed) = a
        .post("/v1/claims", json!({"agent_id": "ag", "worker_id": "doomed", "max_instances": 5, "lease_seconds": 2}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(claimed["instances"].as_array().map(Vec::len), Some(5));

    // The replica (and the agent that was using it) dies mid-flight.
    drop(a);
    let b = start_replica(&db, "replica-b").await;

    // B reaps the abandoned leases, retries them, and a new worker finishes the work through B.
    let mut done = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while done < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "work not finished; {done} of 5"
        );
        let (status, got) = b
            .post("/v1/claims", json!({"agent_id": "ag", "worker_id": "survivor", "max_instances": 5, "wait_seconds": 5}))
            .await;
        assert_eq!(status, 200, "{got}");
        for i in got["instances"].as_array().cloned().unwrap_or_default() {
            assert_eq!(i["attempt"], 2);
            let (status, _) = b
                .post(
                    &format!("/v1/instances/{}/complete", i["id"].as_str().unwrap_or("")),
                    json!({"lease_token": i["lease_token"]}),
                )
                .await;
            assert_eq!(status, 200);
            done += 1;
        }
    }
    let stuck: i64 =
        sqlx::query_scalar("select count(*) from task_instance where status <> 'SUCCESS'")
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(stuck, 0);
    let reapers: Vec<String> = sqlx::query_scalar(
        "select distinct actor from instance_history where from_status = 'RUNNING' and to_status = 'FAILED'",
    )
    .fetch_all(&pool)
    .await
    .expect("actors");
    assert_eq!(reapers, vec!["reaper:replica-b".to_owned()]);

    // Let the replica's sessions end before the test database is dropped.
    drop(b);
    eventually(
        Duration::from_secs(10),
        "the replica's sessions to close",
        || {
            let pool = pool.clone();
            async move {
                let others: i64 = sqlx::query_scalar(
                    "select count(*) from pg_stat_activity \
                 where datname = current_database() and pid <> pg_backend_pid()",
                )
                .fetch_one(&pool)
                .await
                .ok()?;
                (others <= pool.size() as i64).then_some(())
            }
        },
    )
    .await;
}
