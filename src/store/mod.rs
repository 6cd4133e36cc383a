//! The only place with SQL. One file per table, plus `claim` (the claim path over
//! `task_instance` and `tasks`), `circuit` (circuit breakers, opened where failures are
//! recorded) and `connect` (the pools and LISTEN connections over one or several hosts,
//! following a failover); functions are `verb_object(conn, params)` and return domain types.
//! Functions that must compose into one transaction take a `&mut PgConnection`; the rest take
//! the pool. The actors that share transactions among callers (group commits, claim rounds)
//! live in the batching layer above this one (`src/batching/`): nothing here uses them.

pub mod circuit;
pub mod claim;
pub mod claim_answers;
pub mod connect;
pub mod console;
pub mod events;
pub mod health;
pub mod instances;
pub mod limits;
pub mod outbox;
pub mod tasks;
pub mod waiting;

use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgConnection, PgPool};

use crate::domain::instance::{Event, InstanceStatus, legal_sources};

pub use connect::connect;

/// Embedded migrations. sqlx takes a PostgreSQL advisory lock while applying them, so several
/// replicas starting at once apply each migration exactly once.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The channel a task change is announced on, waking every replica's trigger loop.
pub const TASKS_CHANNEL: &str = "kairos_tasks";

/// The channel on which "work may be claimable for agent X" is announced (payload: agent id),
/// waking long-polling claims.
pub const WORK_CHANNEL: &str = "kairos_work";

/// Begin a transaction of the hot path (claims, group commits, trigger passes), in which the
/// planner never chooses a sequential scan where an index can answer, and nothing is
/// JIT-compiled.
///
/// Every hot statement finds its rows by key (ids, a task's or an agent's index range). Where
/// the statistics still describe `task_instance` as small (a new database, a table that grew
/// since autovacuum last analysed it), the planner estimates that reading the whole table and
/// hashing it beats a hundred primary-key lookups, and does so while the table holds tens of
/// thousands of rows. Measured with `auto_explain` over a 50,000-instance drain on a fresh
/// database: 5 of 26 sampled claim updates scanned the whole table (20–45 ms each, against
/// about 2 ms by key); over a 10,000-task burst, 14 of 20 claim updates, 17 of 29 completions
/// and every sampled permit step did. `enable_seqscan = off` only weighs against sequential
/// scans: a statement without an index path still runs.
///
/// `jit = off` comes with it: the penalty that setting puts on a sequential scan lifts the
/// statement's estimated cost far above `jit_above_cost`, and a statement left with such a
/// scan would be JIT-compiled on every run. A hand-run EXPLAIN of the completion's shape over
/// a scanned temporary table spent 405 ms compiling, against 4 ms without JIT. The short
/// statements of the hot path never gain from JIT.
///
/// Both are set in the `BEGIN` itself, so they cost no round trip, and they end with the
/// transaction.
pub async fn begin_hot(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    pool.begin_with(begin_sql(pool, BEGIN_HOT))
        .await
        .map_err(crate::store::Error::from)
}

/// Begin a transaction (`pool.begin()` for every pool, [`pgbouncer_begin`]). Writes outside the
/// hot path take one too: a write on the pool itself would, through PgBouncer, commit only when
/// its connection went back to the pool, after the caller had gone on.
pub async fn begin(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    if hands_out_transactions(pool) {
        // The transaction is open already: a statement that changes nothing continues it.
        pool.begin_with(POOLED_CONTINUE).await
    } else {
        pool.begin().await
    }
    .map_err(crate::store::Error::from)
}

/// What [`begin`] sends through PgBouncer: the mark [`pgbouncer_begin`] set, set again.
const POOLED_CONTINUE: &str = "set local kairos.pooled_transaction = 'on'";

/// The `BEGIN` of [`begin_hot`].
const BEGIN_HOT: &str = "begin; set local enable_seqscan = off; set local jit = off";

/// Longest a shared group commit of completions and heartbeats waits for a row lock before it
/// gives up and writes each call alone (milliseconds).
pub const SHARED_LOCK_WAIT_MS: u64 = 200;

/// [`begin_hot`] for a transaction shared by many callers: a lock wait longer than
/// [`SHARED_LOCK_WAIT_MS`] fails it (SQLSTATE 55P03) instead of holding every caller.
pub async fn begin_hot_shared(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    pool.begin_with(begin_sql(pool, BEGIN_HOT_SHARED))
        .await
        .map_err(crate::store::Error::from)
}

/// The `BEGIN` of [`begin_hot_shared`] (its lock timeout is [`SHARED_LOCK_WAIT_MS`]).
const BEGIN_HOT_SHARED: &str = "begin; set local enable_seqscan = off; set local jit = off; \
     set local lock_timeout = 200";

/// Share-lock the trigger cursor of `task_id` in the caller's transaction, for a write that
/// adds an unfinished instance outside the trigger loop (a manual trigger, an operator retry,
/// a backfill). A trigger pass holding the cursor, in particular one staging the task's next
/// window up to `trigger_lead_ms` ahead, decided that window's overlap policy with the
/// instances it saw; the write waits for its commit and so comes after the window, as it
/// would if the window had been written at its instant.
pub async fn hold_task_cursor(conn: &mut PgConnection, task_id: &str) -> Result<()> {
    sqlx::query("select 1 from task_cursor where task_id = $1 for key share")
        .bind(task_id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Announce that `agent_id` may have claimable work, inside the caller's transaction.
pub async fn notify_work(conn: &mut PgConnection, agent_id: &str) -> Result<()> {
    notify_work_for(conn, agent_id, 1).await
}

/// Announce that `agent_id` has `count` instances newly claimable, inside the caller's
/// transaction: the payloads are [`work_payloads`], so each replica wakes up to `count` of the
/// agent's waiting claims at once instead of one after another.
pub async fn notify_work_for(conn: &mut PgConnection, agent_id: &str, count: usize) -> Result<()> {
    send_work_payloads(conn, work_payloads(agent_id, count)).await
}

/// Announce newly claimable instances, one agent id per instance: each agent's announcement
/// carries its count ([`work_payloads`]), all in one statement however many agents there are.
pub async fn notify_work_of(conn: &mut PgConnection, mut agents: Vec<&str>) -> Result<()> {
    agents.sort_unstable();
    let payloads: Vec<String> = agents
        .chunk_by(|a, b| a == b)
        .flat_map(|group| work_payloads(group[0], group.len()))
        .collect();
    if payloads.is_empty() {
        return Ok(());
    }
    send_work_payloads(conn, payloads).await
}

async fn send_work_payloads(conn: &mut PgConnection, payloads: Vec<String>) -> Result<()> {
    sqlx::query("select pg_notify($1, p) from unnest($2::text[]) as p")
        .bind(WORK_CHANNEL)
        .bind(payloads)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The `kairos_work` payloads announcing `count` newly claimable instances of `agent_id`: the
/// agent id, which wakes one waiting claim, and when there are more, `"{agent_id} +{n}"` for
/// the other `n`. Agent ids hold no spaces (they are names: letters, digits, `_`, `.`, `-`,
/// `:`). A replica that predates the count hears the first payload as before and finds no
/// waiter for the second, so replicas of both versions can share a database.
pub fn work_payloads(agent_id: &str, count: usize) -> Vec<String> {
    let mut out = vec![agent_id.to_owned()];
    if count > 1 {
        out.push(format!("{agent_id} +{}", count - 1));
    }
    out
}

/// The agent of a `kairos_work` payload ([`work_payloads`]) and how many of its waiting claims
/// the payload wakes.
pub fn parse_work_payload(payload: &str) -> (&str, usize) {
    let more = payload
        .rsplit_once(' ')
        .and_then(|(agent, n)| Some((agent, n.strip_prefix('+')?.parse::<usize>().ok()?)))
        .filter(|(agent, n)| !agent.is_empty() && *n > 0);
    more.unwrap_or((payload, 1))
}

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

/// SQL that is true when `column` holds one of `statuses`: `column = 'X'` for one status,
/// `column in ('X', 'Y')` for several, `false` for none.
pub fn status_in_sql(column: &str, statuses: &[InstanceStatus]) -> String {
    match statuses {
        [] => "false".to_owned(),
        [one] => format!("{column} = '{}'", one.as_str()),
        many => {
            let names: Vec<String> = many.iter().map(|s| format!("'{}'", s.as_str())).collect();
            format!("{column} in ({})", names.join(", "))
        }
    }
}

/// The source states a compare-and-swap on `column` expects for `event`, rendered from the one
/// transition table ([`legal_sources`]) by [`status_in_sql`]: statements name the event, not
/// the states.
#[derive(Debug, Clone, Copy)]
pub struct SourceIs {
    column: &'static str,
    event: Event,
}

impl SourceIs {
    pub const fn new(column: &'static str, event: Event) -> Self {
        Self { column, event }
    }
}

impl std::fmt::Display for SourceIs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&status_in_sql(self.column, &legal_sources(self.event)))
    }
}

/// `i.status = 'RUNNING'` for statements that look rows up by id (completions, failures,
/// heartbeats), written so that no partial index's predicate (`where status = …`) matches it.
/// In a burst the statistics still describe the table as it was before (next to no RUNNING
/// rows), and with the plain comparison the planner walks every RUNNING row of a partial index
/// and joins it to the ids in a nested loop: 374 ms for a group commit of 256 completions with
/// 1,000 RUNNING, against one primary-key lookup per id. Rendered from the sources of a
/// completion, which are those of a failure too (a test holds them equal); a heartbeat extends
/// the lease of the same rows.
pub const RUNNING_BY_ID: SourceIs = SourceIs::new("(i.status || '')", Event::Complete);

/// [`RUNNING_BY_ID`] for PENDING rows looked up by id (the claim's permit step): the sources of
/// a claim.
pub const PENDING_BY_ID: SourceIs = SourceIs::new("(i.status || '')", Event::Claim);

/// SQL that is true when task `task` (an SQL expression) has a PENDING row meeting `also` (more
/// conditions on alias `q`, or `true`): a first-row probe in the order of the task's pending
/// index (`task_instance_task_pending_priority_idx`). Not `exists`: PostgreSQL drops an `exists`
/// subquery's ORDER BY and LIMIT, and under the statistics of a fresh backlog (hundreds of
/// PENDING rows per task) it planned `exists` through the (task, window) index or as a
/// sequential scan, reading the task's whole history once the task has no PENDING row left.
pub fn has_pending_sql(task: &str, also: &str) -> String {
    format!(
        "((select true from task_instance q \
           where q.task_id = {task} and q.status = 'PENDING' and ({also}) \
           order by q.priority, q.available_at, q.scheduled_at, q.id limit 1) is not null)"
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
    Db(sqlx::Error),
}

/// `?` on a database error maps it ([`map_db_error`]): a missing row is [`Error::NotFound`], a
/// uniqueness violation [`Error::Conflict`], a value the database refused [`Error::Invalid`],
/// anything else [`Error::Db`]. So a bare `?` is always right.
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        map_db_error(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Map a database error to [`Error`] once: unique violations become conflicts, data exceptions
/// (a value the database cannot store or compute with) become invalid input. A read-only
/// answer (25006) also retires the connections open now ([`connect::note_error`]).
pub fn map_db_error(e: sqlx::Error) -> Error {
    connect::note_error(&e);
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

/// How this process talks to its database: the bounds that turn a database that went away, or a
/// connection that went silent, into an error within seconds instead of the kernel's 15 minutes.
#[derive(Debug, Clone)]
pub struct DbSettings {
    /// Longest wait for a pooled connection (and so for an answer while the database is
    /// unreachable): `database_unavailable_answer_ms` for the API's pool.
    pub acquire_timeout: std::time::Duration,
    /// `statement_timeout`, `lock_timeout` and `idle_in_transaction_session_timeout` of every
    /// session (0 leaves the server's setting).
    pub statement_timeout_ms: u64,
    pub lock_timeout_ms: u64,
    pub idle_in_transaction_timeout_ms: u64,
    /// The server's TCP keepalive idle time and probe interval for the session (three probes),
    /// and `tcp_user_timeout` of four times it: the server drops a silent client (and the locks
    /// its transaction held) within seconds. 0 leaves the server's settings.
    pub keepalive_seconds: u64,
    /// Bound of the ping that checks a returned connection while the database is in doubt.
    pub ping_timeout: std::time::Duration,
    /// What stands between this process and PostgreSQL (`database_pooler`): with PgBouncer
    /// the pool runs every statement in a transaction of its own making ([`connect`]).
    pub pooler: crate::config::DatabasePooler,
}

impl Default for DbSettings {
    fn default() -> Self {
        Self::from_config(&crate::config::Config::default())
    }
}

impl DbSettings {
    pub fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            acquire_timeout: std::time::Duration::from_millis(cfg.database_unavailable_answer_ms),
            statement_timeout_ms: cfg.db_statement_timeout_ms,
            lock_timeout_ms: cfg.db_lock_timeout_ms,
            idle_in_transaction_timeout_ms: cfg.db_idle_in_transaction_timeout_ms,
            keepalive_seconds: cfg.db_keepalive_seconds,
            ping_timeout: std::time::Duration::from_millis(cfg.database_unavailable_answer_ms),
            pooler: cfg.database_pooler,
        }
    }

    /// The same bounds on a connection straight to PostgreSQL (LISTEN, migrations).
    pub fn direct(&self) -> Self {
        Self {
            pooler: crate::config::DatabasePooler::None,
            ..self.clone()
        }
    }

    /// No session bounds (migrations: an index build may take long), the same acquire bound.
    pub fn unbounded(&self) -> Self {
        Self {
            statement_timeout_ms: 0,
            lock_timeout_ms: 0,
            idle_in_transaction_timeout_ms: 0,
            ..self.clone()
        }
    }

    /// The session settings sent at connection start (`options=-c …`), in order.
    pub fn session_options(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (name, ms) in [
            ("statement_timeout", self.statement_timeout_ms),
            ("lock_timeout", self.lock_timeout_ms),
            (
                "idle_in_transaction_session_timeout",
                self.idle_in_transaction_timeout_ms,
            ),
        ] {
            if ms > 0 {
                out.push((name, ms.to_string()));
            }
        }
        if self.keepalive_seconds > 0 {
            let k = self.keepalive_seconds;
            out.push(("tcp_keepalives_idle", k.to_string()));
            out.push(("tcp_keepalives_interval", k.to_string()));
            out.push(("tcp_keepalives_count", "3".to_owned()));
            out.push(("tcp_user_timeout", (k * 4 * 1000).to_string()));
        }
        out
    }
}

/// The startup packet stock PgBouncer accepts: it refuses every parameter it does not track
/// (`unsupported startup parameter`), which rules out `options` (the session bounds go into
/// each transaction instead, [`pgbouncer_begin`]) and sqlx's `extra_float_digits` (PostgreSQL
/// 12 and later send floats exactly without it). sqlx's own `DateStyle`, `client_encoding`,
/// `TimeZone` and `application_name` are tracked and pass. No statement is cached: a named
/// statement lives on one server connection, which the next transaction may not get.
pub(crate) fn pgbouncer_options(
    options: sqlx::postgres::PgConnectOptions,
) -> sqlx::postgres::PgConnectOptions {
    options.extra_float_digits(None).statement_cache_capacity(0)
}

/// The `BEGIN` a PgBouncer pool hands each connection out in, with the session's bounds as
/// `set local`: the transaction's end takes them away with it, and they reach whichever server
/// connection runs it.
///
/// sqlx sends every statement with parameters as Parse/Describe/Sync, then Bind/Execute/Sync.
/// Outside a transaction PgBouncer may give the two halves different server connections, and
/// the Bind would meet another client's statement or none. Inside one, the server connection
/// stays this client's until the transaction ends: a statement on the pool itself runs in this
/// transaction, and [`begin`], [`begin_hot`] and [`begin_hot_shared`] continue it instead of
/// sending a `BEGIN` of their own; its `commit` ends it.
///
/// Even with no statement cache, sqlx names each statement `sqlx_s_<n>`, counting per client
/// connection, and never closes it: `deallocate all` first clears what an earlier client left
/// on the server connection, so the names cannot collide.
pub fn pgbouncer_begin(settings: &DbSettings) -> String {
    let mut out = format!("begin; deallocate all; set local {POOLED_MARK} = 'on'");
    for (name, ms) in [
        ("statement_timeout", settings.statement_timeout_ms),
        ("lock_timeout", settings.lock_timeout_ms),
        (
            "idle_in_transaction_session_timeout",
            settings.idle_in_transaction_timeout_ms,
        ),
    ] {
        if ms > 0 {
            out.push_str(&format!("; set local {name} = {ms}"));
        }
    }
    out
}

/// The setting [`pgbouncer_begin`] marks its transaction with: `on` until it ends.
const POOLED_MARK: &str = "kairos.pooled_transaction";

/// Whether `pool` was connected for PgBouncer by [`connect`], and so hands its connections out
/// inside a transaction ([`pgbouncer_begin`]). Such a pool, and only such a pool, does not ping
/// a connection before handing it out: the `BEGIN` answers for it.
pub fn hands_out_transactions(pool: &PgPool) -> bool {
    !pool.options().get_test_before_acquire()
}

/// The `BEGIN` statement `sql` (`"begin; …"`) for `pool`: as it is, or through PgBouncer
/// without its `begin` (the connection is in a transaction already, [`pgbouncer_begin`]). A
/// second `BEGIN` would only cost a warning in the server's log, every transaction.
fn begin_sql(pool: &PgPool, sql: &'static str) -> &'static str {
    match sql.strip_prefix("begin; ") {
        Some(rest) if hands_out_transactions(pool) => rest,
        _ => sql,
    }
}

/// After a connection is released, end the transaction it was handed out in, if a caller's own
/// transaction did not end it already: a `commit` with none in progress would cost a warning in
/// the server's log. Asked with the simple protocol (one message, one server connection). A
/// transaction a failed statement aborted refuses the question, and is rolled back.
async fn pgbouncer_end(
    conn: &mut PgConnection,
    bound: std::time::Duration,
) -> Result<bool, sqlx::Error> {
    use sqlx::Row;
    let ask = format!("select current_setting('{POOLED_MARK}', true)");
    let open = match bounded(
        bound,
        conn.fetch_optional(sqlx::raw_sql(sqlx::AssertSqlSafe(ask))),
    )
    .await
    {
        Ok(row) => {
            row.and_then(|r| r.try_get::<Option<String>, _>(0).ok().flatten())
                .as_deref()
                == Some("on")
        }
        Err(sqlx::Error::Database(_)) => {
            bounded(bound, conn.execute(sqlx::raw_sql("rollback"))).await?;
            return Ok(true);
        }
        Err(e) => return Err(e),
    };
    if open {
        bounded(bound, conn.execute(sqlx::raw_sql("commit"))).await?;
    }
    Ok(true)
}

/// Send [`pgbouncer_begin`]'s statement `begin` within `bound`.
async fn pgbouncer_start(
    conn: &mut PgConnection,
    begin: &str,
    bound: std::time::Duration,
) -> Result<(), sqlx::Error> {
    let sql = sqlx::raw_sql(sqlx::AssertSqlSafe(begin.to_owned()));
    bounded(bound, conn.execute(sql)).await.map(|_| ())
}

pub(crate) fn pgbouncer_pool(pool: PgPoolOptions, settings: &DbSettings) -> PgPoolOptions {
    let begin: std::sync::Arc<str> = pgbouncer_begin(settings).into();
    let on_connect = begin.clone();
    let bound = settings.ping_timeout;
    pool
        // The mark of such a pool (`hands_out_transactions`); the `begin` answers for the
        // connection, as the ping would.
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            let begin = on_connect.clone();
            Box::pin(async move { pgbouncer_start(conn, &begin, bound).await.map(|_| ()) })
        })
        .before_acquire(move |conn, _meta| {
            let begin = begin.clone();
            Box::pin(async move { pgbouncer_start(conn, &begin, bound).await.map(|_| true) })
        })
        .after_release(move |conn, _meta| Box::pin(pgbouncer_end(conn, bound)))
}

/// `op` within `bound`, a timeout being the pool's timeout error.
async fn bounded<T>(
    bound: std::time::Duration,
    op: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    tokio::time::timeout(bound, op)
        .await
        .unwrap_or(Err(sqlx::Error::PoolTimedOut))
}

/// A pool on `listen_database_url` for the LISTEN connections, which need a session of their
/// own whatever `database_url` goes through: straight to PostgreSQL, with the session's bounds.
/// Built like every pool ([`connect()`]), so a URL naming several hosts keeps it on the primary
/// and moves it on failover; each listener opens its connection in a pool of its own, where
/// this one's new connections go ([`connect::listen`]), [`crate::config::LISTEN_CONNECTIONS`]
/// in all.
pub async fn listen_pool(
    url: &str,
    settings: &DbSettings,
    health: health::DbHealth,
) -> Result<PgPool, sqlx::Error> {
    connect(
        url,
        crate::config::LISTEN_CONNECTIONS,
        &settings.direct(),
        health,
    )
    .await
}

/// A connection listening on `channel`, opened where `pool` (a [`listen_pool`]) connects: the
/// one place kairos opens a LISTEN ([`connect::listen`]).
pub async fn listener(
    pool: &PgPool,
    channel: &str,
) -> Result<sqlx::postgres::PgListener, sqlx::Error> {
    connect::listen(pool, channel).await
}
/// Whether a database error is the database being unavailable or this transaction losing a
/// race, rather than anything wrong with the request: the one place that decides "retry later"
/// (503 with `Retry-After` over HTTP, the next pass in a loop) or "give up". Connection loss
/// and pool timeouts; SQLSTATE class 08 (connection exception), 53 (insufficient resources),
/// 57P01–57P03 (admin shutdown, crash shutdown, cannot connect now: a restart or failover),
/// 25006 (read-only transaction: a standby that was a primary), 40001 and 40P01
/// (serialization failure, deadlock), 55P03 (lock timeout) and 57014 (statement timeout).
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| transient_sqlstate(&c)),
        _ => false,
    }
}

fn transient_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "25006" | "40001" | "40P01" | "55P03" | "57014"
        )
}

/// Apply pending migrations. A database migrated by a newer release (migrations this binary
/// does not know) is accepted: migrations only expand the schema, so an older replica keeps
/// working beside the newer one.
///
/// Replicas starting at once apply each migration exactly once: they take the migrator's
/// session advisory lock (the key sqlx's migrator uses, so releases that lock the sqlx way
/// exclude this one too), but by polling `pg_try_advisory_lock` rather than waiting in
/// `pg_advisory_lock`. A waiting statement holds a snapshot, and `CREATE INDEX CONCURRENTLY`
/// (20261203000013_debounce_index.sql) waits for every older snapshot to end: a replica
/// waiting for the lock while another builds an index concurrently would deadlock with it.
/// The lock lives on a connection of its own, closed at the end, which releases the lock
/// whatever happened.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    use sqlx::Connection;
    let mut migrator = sqlx::migrate::Migrator::with_migrations(MIGRATOR.iter().cloned().collect());
    migrator.set_ignore_missing(true);
    migrator.set_locking(false);
    let mut conn = pool.acquire().await?.detach();
    let database: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&mut conn)
        .await?;
    let key = migration_lock_key(&database);
    let mut said = false;
    loop {
        let got: bool = sqlx::query_scalar("select pg_try_advisory_lock($1)")
            .bind(key)
            .fetch_one(&mut conn)
            .await?;
        if got {
            break;
        }
        if !said {
            tracing::info!(
                database,
                "another process is applying migrations; waiting for it to finish"
            );
            said = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let applied = migrator.run(&mut conn).await;
    let closed = conn.close().await;
    applied?;
    closed?;
    Ok(())
}

/// The key of the migrator's advisory lock for `database`: sqlx's (a CRC-32 of the name times
/// a constant), so every release of kairos, whichever way it locks, takes the same lock.
pub fn migration_lock_key(database: &str) -> i64 {
    const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
    0x3d32_ad9e * i64::from(CRC.checksum(database.as_bytes()))
}

/// The embedded migrations this database has not applied, as `version_description`, oldest
/// first (all of them when it has none).
pub async fn missing_migrations(pool: &PgPool) -> Result<Vec<String>> {
    let exists: bool = sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
        .fetch_one(pool)
        .await?;
    let applied: Vec<i64> = if exists {
        sqlx::query_scalar("select version from _sqlx_migrations where success")
            .fetch_all(pool)
            .await?
    } else {
        Vec::new()
    };
    Ok(MIGRATOR
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| format!("{}_{}", m.version, m.description.replace(' ', "_")))
        .collect())
}

/// True when every embedded migration has been applied to this database.
pub async fn migrations_applied(pool: &PgPool) -> Result<bool> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> =
        sqlx::query_scalar("select max(version) from _sqlx_migrations where success")
            .fetch_one(pool)
            .await?;
    Ok(applied.unwrap_or(0) >= latest)
}

/// The database clock: the one clock for windows, leases and deadlines (openapi.yaml).
pub async fn now(pool: &PgPool) -> Result<chrono::DateTime<chrono::Utc>> {
    sqlx::query_scalar("select now()")
        .fetch_one(pool)
        .await
        .map_err(crate::store::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_payloads_name_the_agent_and_how_many_more_instances() {
        assert_eq!(work_payloads("a", 1), vec!["a"]);
        assert_eq!(work_payloads("a", 0), vec!["a"]);
        assert_eq!(
            work_payloads("agent:1.x", 250),
            vec!["agent:1.x", "agent:1.x +249"]
        );
        assert_eq!(parse_work_payload("agent:1.x +249"), ("agent:1.x", 249));
        assert_eq!(parse_work_payload("a"), ("a", 1));
        // Not a count: the whole payload is the agent, as before counts existed.
        assert_eq!(parse_work_payload("a +0"), ("a +0", 1));
        assert_eq!(parse_work_payload("a 5"), ("a 5", 1));
        assert_eq!(parse_work_payload("a b"), ("a b", 1));
        assert_eq!(parse_work_payload(" +5"), (" +5", 1));
        assert_eq!(parse_work_payload("*"), ("*", 1));
    }

    #[test]
    fn through_pgbouncer_transactions_carry_the_mark_and_the_bounds() {
        assert!(POOLED_CONTINUE.contains(POOLED_MARK));
        let s = DbSettings {
            statement_timeout_ms: 15_000,
            lock_timeout_ms: 0,
            idle_in_transaction_timeout_ms: 30_000,
            ..DbSettings::default()
        };
        assert_eq!(
            pgbouncer_begin(&s),
            "begin; deallocate all; set local kairos.pooled_transaction = 'on'; \
             set local statement_timeout = 15000; \
             set local idle_in_transaction_session_timeout = 30000"
        );
        for sql in [BEGIN_HOT, BEGIN_HOT_SHARED] {
            assert!(sql.starts_with("begin; "), "{sql}");
        }
    }

    #[test]
    fn a_shared_group_commit_waits_for_a_lock_as_long_as_documented() {
        assert!(BEGIN_HOT_SHARED.ends_with(&format!("lock_timeout = {SHARED_LOCK_WAIT_MS}")));
    }

    #[test]
    fn failover_and_outage_errors_are_transient_and_input_errors_are_not() {
        for code in [
            "57P01", "57P02", "57P03", "25006", "40001", "40P01", "55P03", "57014", "08006",
            "08001", "53300",
        ] {
            assert!(transient_sqlstate(code), "{code}");
        }
        for code in ["23505", "22021", "42P01", "23514"] {
            assert!(!transient_sqlstate(code), "{code}");
        }
        assert!(is_transient(&sqlx::Error::PoolTimedOut));
        assert!(!is_transient(&sqlx::Error::RowNotFound));
    }

    #[test]
    fn sessions_carry_the_timeouts_and_keepalives_that_are_set() {
        let s = DbSettings {
            acquire_timeout: std::time::Duration::from_secs(2),
            statement_timeout_ms: 15_000,
            lock_timeout_ms: 0,
            idle_in_transaction_timeout_ms: 30_000,
            keepalive_seconds: 5,
            ping_timeout: std::time::Duration::from_secs(2),
            pooler: crate::config::DatabasePooler::None,
        };
        let names: Vec<String> = s
            .session_options()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(
            names,
            [
                "statement_timeout=15000",
                "idle_in_transaction_session_timeout=30000",
                "tcp_keepalives_idle=5",
                "tcp_keepalives_interval=5",
                "tcp_keepalives_count=3",
                "tcp_user_timeout=20000"
            ]
        );
        assert!(
            s.unbounded()
                .session_options()
                .iter()
                .all(|(k, _)| k.starts_with("tcp"))
        );
    }

    #[test]
    fn compare_and_swap_sources_render_as_the_statements_spelled_them() {
        assert_eq!(RUNNING_BY_ID.to_string(), "(i.status || '') = 'RUNNING'");
        assert_eq!(PENDING_BY_ID.to_string(), "(i.status || '') = 'PENDING'");
        for give_up in [false, true] {
            assert_eq!(
                SourceIs::new("(i.status || '')", Event::Fail { give_up }).to_string(),
                RUNNING_BY_ID.to_string()
            );
        }
        assert_eq!(
            SourceIs::new("i.status", Event::RetryDue).to_string(),
            "i.status = 'FAILED'"
        );
        assert_eq!(
            SourceIs::new("i.status", Event::Cancel).to_string(),
            "i.status in ('PENDING', 'RUNNING', 'FAILED')"
        );
        assert_eq!(status_in_sql("status", &[]), "false");
    }
}
