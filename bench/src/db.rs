//! The scenarios' databases: one fresh (or kept) migrated database each, and the seeding of
//! tasks, shared limits and PENDING instances straight into its tables.

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

/// `url` with its database part replaced by `name` (its query kept).
pub fn with_database(url: &str, name: &str) -> Result<String> {
    let (prefix, rest) = url.rsplit_once('/').with_context(|| {
        format!(
            "{} has no database path",
            kairos::config::redact_database_url(url)
        )
    })?;
    let query = rest
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    Ok(format!("{prefix}/{name}{query}"))
}

/// A fresh database for one scenario, dropped when done.
pub struct BenchDb {
    pub admin: PgPool,
    pub name: String,
    pub url: String,
    pub pool: PgPool,
}

impl BenchDb {
    pub async fn create(base: &str, tag: &str) -> Result<BenchDb> {
        let name = format!("kairos_bench_{tag}_{}", std::process::id());
        Self::open(base, &name, true).await
    }

    /// A database kept between runs under `name`: created and migrated when missing.
    pub async fn open_or_create(base: &str, name: &str) -> Result<BenchDb> {
        Self::open(base, name, false).await
    }

    /// Database `name` on the server of `base`, migrated; `fresh` drops an existing one first.
    async fn open(base: &str, name: &str, fresh: bool) -> Result<BenchDb> {
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(base)
            .await
            .context("connect")?;
        if fresh {
            admin
                .execute(sqlx::AssertSqlSafe(format!(
                    "drop database if exists {name}"
                )))
                .await?;
        }
        let exists: bool =
            sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
                .bind(name)
                .fetch_one(&admin)
                .await?;
        if !exists {
            admin
                .execute(sqlx::AssertSqlSafe(format!("create database {name}")))
                .await?;
        }
        let url = with_database(base, name)?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect(&url)
            .await?;
        kairos::store::migrate(&pool).await?;
        Ok(BenchDb {
            admin,
            name: name.to_owned(),
            url,
            pool,
        })
    }

    pub async fn drop_db(self) -> Result<()> {
        self.pool.close().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.admin
            .execute(sqlx::AssertSqlSafe(format!(
                "drop database if exists {} with (force)",
                self.name
            )))
            .await?;
        Ok(())
    }
}

/// Where the trigger cursor lives: its own table since migration 5, the task row before. The
/// older layout is kept so one bench source can measure a version from before it.
pub struct CursorLayout {
    pub table: &'static str,
    key: &'static str,
}

pub async fn cursor_layout(pool: &PgPool) -> Result<CursorLayout> {
    let own: bool = sqlx::query_scalar("select to_regclass('task_cursor') is not null")
        .fetch_one(pool)
        .await?;
    Ok(if own {
        CursorLayout {
            table: "task_cursor",
            key: "task_id",
        }
    } else {
        CursorLayout {
            table: "tasks",
            key: "id",
        }
    })
}

/// The earliest `next_fire_at` of all tasks.
pub async fn earliest_due(pool: &PgPool) -> Result<chrono::DateTime<chrono::Utc>> {
    let c = cursor_layout(pool).await?;
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "select min(next_fire_at) from {}",
        c.table
    )))
    .fetch_one(pool)
    .await?)
}

/// Insert `n` tasks of `trigger` for `agent`, ids `<prefix><k>`, with `next_fire_at`.
pub async fn insert_tasks(
    pool: &PgPool,
    n: i64,
    prefix: &str,
    trigger: Value,
    execution: Value,
    next_fire_sql: &str,
) -> Result<()> {
    let spec = json!({
        "id": "x", "agent_id": "bench_agent", "trigger": trigger,
        "execution": execution, "dispatch": {"mode": "poll"}, "context": {},
        "notify": {"on_success": [], "on_failure": []},
        "circuit_breaker": {"failure_threshold": 5, "cooldown_seconds": null}
    });
    let sub = kairos::domain::task::parse_submission("x", &spec)
        .map_err(|e| anyhow::anyhow!("bench task spec invalid: {e:?}"))?;
    let spec = serde_json::to_value(&sub.spec)?;
    let ttype = sub.spec.trigger.type_name();
    let chunk = 50_000;
    let mut start = 0;
    while start < n {
        let end = (start + chunk).min(n);
        sqlx::query(
            "insert into tasks (id, agent_id, spec, trigger_type) \
             select $1 || g, 'bench_agent', jsonb_set($2::jsonb, '{id}', to_jsonb($1 || g)), $3 \
             from generate_series($4::bigint, $5::bigint - 1) g",
        )
        .bind(prefix)
        .bind(&spec)
        .bind(ttype)
        .bind(start)
        .bind(end)
        .execute(pool)
        .await?;
        start = end;
    }
    // The due instant is set once every task exists, so that seeding never eats into the lead
    // the replicas get to start before it.
    let c = cursor_layout(pool).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "update {} set next_fire_at = {next_fire_sql} where starts_with({}, $1)",
        c.table, c.key
    )))
    .bind(prefix)
    .execute(pool)
    .await?;
    Ok(())
}

/// The one number a `select count(*) …` returns.
pub async fn count(pool: &PgPool, sql: &'static str) -> Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(pool).await?)
}

/// The shared limits of `--claim-limits shared`: one budget of 1000 at once that every
/// instance draws on, and 50 at once per tenant over 100 tenants.
async fn seed_limits(pool: &PgPool, shared: i64) -> Result<Value> {
    sqlx::query(
        "insert into limits (name, spec) values ('shared', $1), \
             ('tenant', '{\"concurrency\": 50, \"per_key\": true}')",
    )
    .bind(json!({"concurrency": shared, "per_key": false}))
    .execute(pool)
    .await?;
    Ok(json!([{"name": "shared"}, {"name": "tenant", "key": "{{params.tenant}}"}]))
}

/// Insert `n` PENDING instances over `tasks` tasks of one agent.
pub async fn seed_pending(pool: &PgPool, n: i64, tasks: i64, limits: Option<i64>) -> Result<()> {
    let draws = match limits {
        Some(shared) => seed_limits(pool, shared).await?,
        None => json!([]),
    };
    insert_tasks(
        pool,
        tasks,
        "c",
        json!({"type": "manual"}),
        json!({"concurrency_limit": 1000, "max_retries": 0, "limits": draws}),
        "null",
    )
    .await?;
    // Each instance a tenant's (g % 100), its draws rendered as the API renders them.
    sqlx::query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
             max_attempts, available_at, context_override, limit_draws) \
         select gen_random_uuid(), 'c' || (g % $2), 'w' || g, now(), 'PENDING', 'manual', 'bench_agent', 1, now(), \
             c.ctx, kairos_render_limit_draws($3::jsonb, 'c' || (g % $2), 'bench_agent', c.ctx) \
         from generate_series(1, $1) g \
         cross join lateral (select jsonb_build_object('params', jsonb_build_object('tenant', 't' || (g % 100))) as ctx) c",
    )
    .bind(n)
    .bind(tasks)
    .bind(&draws)
    .execute(pool)
    .await?;
    // Statistics as autovacuum would have them in any database that has run for a minute:
    // without them the planner takes the table just filled for a near-empty one.
    sqlx::query("analyze task_instance").execute(pool).await?;
    Ok(())
}
