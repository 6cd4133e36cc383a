//! `kairos migrate` and `kairos serve --no-migrate` as real processes: migrate applies what is
//! missing and is a no-op the second time; serve without migrating never changes the schema,
//! refuses a database that lacks a migration (naming it) and serves one that has them all, and
//! a database migrated by a newer release (a migration this binary does not know) is accepted.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sqlx::PgPool;

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

fn kairos(db: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kairos"));
    cmd.args(args)
        .env("DATABASE_URL", db)
        .env("KAIROS_CONFIG", "config/kairos.toml")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn run(db: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    kairos(db, args, env).output().expect("run kairos")
}

async fn applied(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from _sqlx_migrations where success")
        .fetch_one(pool)
        .await
        .unwrap_or(0)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Start `kairos serve` with `args` and wait for /readyz; the child is killed at the end.
async fn serves(db: &str, args: &[&str], env: &[(&str, &str)]) -> bool {
    kairos::outbound::install_crypto_provider();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut all_env = env.to_vec();
    all_env.push(("KAIROS_LISTEN", &listen));
    // Everything that can panic comes before the spawn, so no child outlives a failed test.
    let client = reqwest::Client::new();
    let mut child = kairos(db, args, &all_env)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kairos");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut ready = false;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if let Ok(r) = client.get(format!("http://{listen}/readyz")).send().await
            && r.status().as_u16() == 200
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    ready
}

/// Close the sessions a killed child left open, so the test database can be dropped.
async fn close_sessions(pool: &PgPool) {
    sqlx::query(
        "select pg_terminate_backend(pid) from pg_stat_activity \
         where datname = current_database() and pid <> pg_backend_pid()",
    )
    .execute(pool)
    .await
    .expect("terminate the children's sessions");
}

#[sqlx::test(migrations = false)]
async fn serve_without_migrating_refuses_an_old_database_and_migrate_brings_it_up(pool: PgPool) {
    let db = database_url(&pool).await;
    let out = run(&db, &["serve", "--no-migrate"], &[]);
    assert!(
        !out.status.success(),
        "serve --no-migrate started on an empty database"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lacks migration 20261129000001_init"), "{err}");
    assert!(err.contains("kairos migrate"), "{err}");
    // Nothing was changed: not even the migrations table exists.
    let table: bool = sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
        .fetch_one(&pool)
        .await
        .expect("query");
    assert!(!table);
    // The same through the environment.
    let out = run(&db, &["serve"], &[("KAIROS_MIGRATE", "false")]);
    assert!(!out.status.success());

    let out = run(&db, &["migrate"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = applied(&pool).await;
    assert!(n >= 10, "{n} migrations applied");
    let out = run(&db, &["migrate"], &[]);
    assert!(out.status.success(), "a second migrate is a no-op");
    assert_eq!(applied(&pool).await, n);

    assert!(serves(&db, &["serve", "--no-migrate"], &[]).await);
    close_sessions(&pool).await;
}

#[sqlx::test]
async fn a_database_migrated_by_a_newer_release_is_served(pool: PgPool) {
    let db = database_url(&pool).await;
    // A migration of a release after this one: an expand step this binary does not know.
    sqlx::query(
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time) \
         values (29991231000001, 'from a newer release', true, '\\x00'::bytea, 0)",
    )
    .execute(&pool)
    .await
    .expect("record a newer migration");
    let out = run(&db, &["migrate"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(serves(&db, &["serve"], &[]).await);
    assert!(serves(&db, &["serve", "--no-migrate"], &[]).await);
    close_sessions(&pool).await;
}

#[sqlx::test(migrations = false)]
async fn replicas_migrating_at_once_apply_each_migration_once_and_build_indexes_concurrently(
    pool: PgPool,
) {
    let db = database_url(&pool).await;
    // Four processes at once: one applies, the others poll the lock meanwhile. A waiter that
    // held a snapshot (a blocking lock call) would deadlock with CREATE INDEX CONCURRENTLY.
    let children: Vec<_> = (0..4)
        .map(|_| {
            kairos(&db, &["migrate"], &[])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn kairos migrate")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("kairos migrate");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        applied(&pool).await,
        kairos::store::MIGRATOR.iter().count() as i64,
        "each migration applied once"
    );
    let valid: bool = sqlx::query_scalar(
        "select indisvalid from pg_index where indexrelid = 'task_instance_debounce_idx'::regclass",
    )
    .fetch_one(&pool)
    .await
    .expect("the debounce index exists");
    assert!(valid, "the concurrently built index is valid");
}

#[sqlx::test(migrations = false)]
async fn the_migration_lock_is_the_one_every_release_takes(pool: PgPool) {
    let database: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&pool)
        .await
        .expect("database name");
    let key = kairos::store::migration_lock_key(&database);
    let mut holder = pool.acquire().await.expect("connection");
    sqlx::query("select pg_advisory_lock($1)")
        .bind(key)
        .execute(&mut *holder)
        .await
        .expect("lock");
    // sqlx's own migrator (how the previous release locked) waits for that lock, on a
    // connection of its own that is ended afterwards (its lock call would otherwise go on
    // waiting in the server, and take the lock later)...
    let db = database_url(&pool).await;
    let mut other = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&db).await.expect("connect")
    };
    let other_pid: i32 = sqlx::query_scalar("select pg_backend_pid()")
        .fetch_one(&mut other)
        .await
        .expect("pid");
    let blocked = tokio::time::timeout(
        Duration::from_secs(2),
        kairos::store::MIGRATOR.run(&mut other),
    )
    .await;
    assert!(
        blocked.is_err(),
        "sqlx's migrator did not wait for kairos's lock"
    );
    drop(other);
    sqlx::query("select pg_terminate_backend($1)")
        .bind(other_pid)
        .execute(&pool)
        .await
        .expect("end the waiting session");
    // ...and so does `kairos migrate`, until the lock is given back.
    let mut child = kairos(&db, &["migrate"], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kairos migrate");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        child.try_wait().expect("child status").is_none(),
        "kairos migrate ran while another process held the migration lock"
    );
    sqlx::query("select pg_advisory_unlock($1)")
        .bind(key)
        .execute(&mut *holder)
        .await
        .expect("unlock");
    let status = child.wait().expect("kairos migrate");
    assert!(status.success());
    assert_eq!(
        applied(&pool).await,
        kairos::store::MIGRATOR.iter().count() as i64
    );
}
