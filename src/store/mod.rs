//! The only place with SQL. One file per table, plus `claim` (the claim path over
//! `task_instance` and `tasks`) and `group_commit` (single calls sharing transactions);
//! functions are `verb_object(conn, params)` and return domain types. Functions that must compose into one transaction take a
//! `&mut PgConnection`; the rest take the pool.

pub mod claim;
pub mod claim_rounds;
pub mod console;
pub mod events;
pub mod group_commit;
pub mod instances;
pub mod outbox;
pub mod tasks;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// Embedded migrations. sqlx takes a PostgreSQL advisory lock while applying them, so several
/// replicas starting at once apply each migration exactly once.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The channel a task change is announced on, waking every replica's trigger loop.
pub const TASKS_CHANNEL: &str = "kairos_tasks";

/// The channel on which "work may be claimable for agent X" is announced (payload: agent id),
/// waking long-polling claims.
pub const WORK_CHANNEL: &str = "kairos_work";

/// ` and agent_id = $a` and ` and agent_id = any($b)`: a list's agent filter and a token's agent
/// scope, shared by the task and instance lists.
pub(crate) fn push_agent_filters(
    q: &mut sqlx::QueryBuilder<sqlx::Postgres>,
    agent_id: &Option<String>,
    agents_in: &Option<Vec<String>>,
) {
    if let Some(a) = agent_id {
        q.push(" and agent_id = ").push_bind(a.clone());
    }
    if let Some(agents) = agents_in {
        q.push(" and agent_id = any(")
            .push_bind(agents.clone())
            .push(")");
    }
}

/// SQL reading an integer of a task's stored spec (`t` is the `tasks` row), with the domain's
/// default for specs stored without it: the default has one home, in `domain::task`.
pub struct SpecInt {
    path: &'static str,
    cast: &'static str,
    default: i64,
}

impl std::fmt::Display for SpecInt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "coalesce(({})::{}, {})",
            self.path, self.cast, self.default
        )
    }
}

/// `i.status = 'RUNNING'` for statements that look rows up by id (completions, failures,
/// heartbeats), written so that no partial index's predicate (`where status = …`) matches it.
/// In a burst the statistics still describe the table as it was before (next to no RUNNING
/// rows), and with the plain comparison the planner walks every RUNNING row of a partial index
/// and joins it to the ids in a nested loop: 374 ms for a group commit of 256 completions with
/// 1,000 RUNNING, against one primary-key lookup per id.
pub const RUNNING_BY_ID: &str = "(i.status || '') = 'RUNNING'";

/// [`RUNNING_BY_ID`] for PENDING rows looked up by id (the claim's permit step).
pub const PENDING_BY_ID: &str = "(i.status || '') = 'PENDING'";

/// SQL that is true when task `task` (an SQL expression) has a PENDING row meeting `also` (more
/// conditions on alias `q`, or `true`): a first-row probe in the order of the task's pending
/// index (`task_instance_task_pending_idx`). Not `exists`: PostgreSQL drops an `exists`
/// subquery's ORDER BY and LIMIT, and under the statistics of a fresh backlog (hundreds of
/// PENDING rows per task) it planned `exists` through the (task, window) index or as a
/// sequential scan, reading the task's whole history once the task has no PENDING row left.
pub fn has_pending_sql(task: &str, also: &str) -> String {
    format!(
        "((select true from task_instance q \
           where q.task_id = {task} and q.status = 'PENDING' and ({also}) \
           order by q.available_at, q.scheduled_at, q.id limit 1) is not null)"
    )
}

/// The task's `execution.concurrency_limit`.
pub const TASK_LIMIT_SQL: SpecInt = SpecInt {
    path: "t.spec->'execution'->>'concurrency_limit'",
    cast: "int",
    default: crate::domain::task::DEFAULT_CONCURRENCY_LIMIT as i64,
};

/// The task's `execution.timeout_seconds`.
pub const TASK_TIMEOUT_SQL: SpecInt = SpecInt {
    path: "t.spec->'execution'->>'timeout_seconds'",
    cast: "bigint",
    default: crate::domain::task::DEFAULT_TIMEOUT_SECONDS,
};

/// The task's `circuit_breaker.failure_threshold`.
pub const TASK_FAILURE_THRESHOLD_SQL: SpecInt = SpecInt {
    path: "t.spec->'circuit_breaker'->>'failure_threshold'",
    cast: "int",
    default: crate::domain::task::DEFAULT_FAILURE_THRESHOLD as i64,
};

/// What went wrong in the database, in the product's terms.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not found")]
    NotFound,
    /// A uniqueness or state conflict the caller can report as 409.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A compare-and-swap found the row in another state than expected.
    #[error("stale: {0}")]
    Stale(String),
    /// A lease token did not match a RUNNING instance: the caller's lease is gone.
    #[error(
        "stale lease: instance {instance_id} of task {task_id} window {window_key} is {status} at attempt {attempt}"
    )]
    Fenced {
        instance_id: uuid::Uuid,
        task_id: String,
        window_key: String,
        attempt: i32,
        status: String,
    },
    /// The transition is not allowed from the instance's current state.
    #[error("illegal transition: instance {instance_id} is {status}")]
    Illegal {
        instance_id: uuid::Uuid,
        status: String,
    },
    /// `If-Match` named another version.
    #[error("version mismatch: current version is {current}")]
    VersionMismatch { current: i64 },
    /// The request is well-formed but the database state makes a value invalid (422).
    #[error("{0}")]
    Invalid(crate::domain::task::FieldError),
    /// A stored value no longer passes today's rules.
    #[error("invalid stored data: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Map a database error to [`Error`] once: unique violations become conflicts, data exceptions
/// (a value the database cannot store or compute with) become invalid input.
pub fn map_db_error(e: sqlx::Error) -> Error {
    match &e {
        sqlx::Error::RowNotFound => Error::NotFound,
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            Error::Conflict(db.message().to_owned())
        }
        _ => match data_exception(&e) {
            Some(fe) => Error::Invalid(fe),
            None => Error::Db(e),
        },
    }
}

/// SQLSTATE class 22 (data exception: `22021` a NUL byte in text, `22P05` `\u0000` in jsonb,
/// `22003` a number out of range, `22008` a timestamp out of range, …) is caused by the values
/// a statement was given, so it is the caller's input that is invalid. Input is checked before
/// it reaches SQL; this is the last line of defence, and it cannot name the field.
pub fn data_exception(e: &sqlx::Error) -> Option<crate::domain::task::FieldError> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    let code = db.code()?;
    if !code.starts_with("22") {
        return None;
    }
    tracing::warn!(sqlstate = %code, reason = %db.message(), "a value was refused by the database");
    Some(crate::domain::task::FieldError::new(
        "",
        format!("a value cannot be stored: {}", db.message()),
    ))
}

/// Connect a pool of at most `max_connections`.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect(url)
        .await
}

/// Apply pending migrations.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// True when every embedded migration has been applied to this database.
pub async fn migrations_applied(pool: &PgPool) -> Result<bool> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> =
        sqlx::query_scalar("select max(version) from _sqlx_migrations where success")
            .fetch_one(pool)
            .await
            .map_err(map_db_error)?;
    Ok(applied.unwrap_or(0) >= latest)
}

/// The database clock: the one clock for windows, leases and deadlines (CONTRACT §1).
pub async fn now(pool: &PgPool) -> Result<chrono::DateTime<chrono::Utc>> {
    sqlx::query_scalar("select now()")
        .fetch_one(pool)
        .await
        .map_err(map_db_error)
}
