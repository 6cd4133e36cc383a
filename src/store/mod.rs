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
pub mod clock;
pub mod connect;
pub mod console;
pub mod events;
pub mod health;
pub mod instances;
pub mod limits;
pub mod migrations;
pub mod outbox;
pub mod pool;
pub mod sessions;
pub mod statements;
pub mod tasks;
pub mod waiting;

use sqlx::{PgConnection, PgPool};

use crate::domain::instance::{Event, InstanceStatus, legal_sources};
use crate::store::statements::sql;

pub use clock::now;
pub use connect::connect;
pub use migrations::{
    MIGRATOR, migrate, migration_lock_key, migrations_applied, missing_migrations,
};
pub use pool::{
    DatabasePooler, DbSettings, LISTEN_CONNECTIONS, hands_out_transactions, listen_pool, listener,
    pgbouncer_begin,
};
pub(crate) use pool::{pgbouncer_options, pgbouncer_pool};

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
const POOLED_CONTINUE: &str = sql!("pooled_continue");

/// The `BEGIN` of [`begin_hot`]: several statements, sent whole as one simple query.
const BEGIN_HOT: &str = sql!("begin_hot");

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

/// The `BEGIN` of [`begin_hot_shared`] (its lock timeout is [`SHARED_LOCK_WAIT_MS`]): several
/// statements, sent whole as one simple query.
const BEGIN_HOT_SHARED: &str = sql!("begin_hot_shared");

/// Share-lock the trigger cursor of `task_id` in the caller's transaction, for a write that
/// adds an unfinished instance outside the trigger loop (a manual trigger, an operator retry,
/// a backfill). A trigger pass holding the cursor, in particular one staging the task's next
/// window up to `trigger_lead_ms` ahead, decided that window's overlap policy with the
/// instances it saw; the write waits for its commit and so comes after the window, as it
/// would if the window had been written at its instant.
pub async fn hold_task_cursor(conn: &mut PgConnection, task_id: &str) -> Result<()> {
    sqlx::query(sql!("hold_task_cursor"))
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
    sqlx::query(sql!("notify_work"))
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
// Dynamic: parts of the lists' statements, whose filters the caller chooses.
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

/// The `BEGIN` statement `sql` (`begin; …` after its comment lines) for `pool`: as it is, or
/// through PgBouncer without its `begin` (the connection is in a transaction already,
/// [`pgbouncer_begin`]). A second `BEGIN` would only cost a warning in the server's log, every
/// transaction.
fn begin_sql(pool: &PgPool, sql: &'static str) -> &'static str {
    match without_begin(sql) {
        Some(rest) if hands_out_transactions(pool) => rest,
        _ => sql,
    }
}

/// What follows the `begin;` that `sql` starts with after its `--` comment lines, if it does.
fn without_begin(sql: &str) -> Option<&str> {
    let mut rest = sql.trim_start();
    while rest.starts_with("--") {
        rest = rest
            .split_once('\n')
            .map_or("", |(_, after)| after)
            .trim_start();
    }
    rest.strip_prefix("begin;").map(str::trim_start)
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
        assert!(POOLED_CONTINUE.contains(pool::POOLED_MARK));
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
            let rest = without_begin(sql).unwrap_or_else(|| panic!("no begin: {sql}"));
            assert!(
                rest.starts_with("set local enable_seqscan = off;"),
                "{rest}"
            );
            assert!(!rest.contains("--") && !rest.contains("begin"), "{rest}");
        }
        assert_eq!(without_begin(POOLED_CONTINUE), None);
    }

    #[test]
    fn a_shared_group_commit_waits_for_a_lock_as_long_as_documented() {
        let shared = BEGIN_HOT_SHARED.trim_end();
        assert!(shared.ends_with(&format!("lock_timeout = {SHARED_LOCK_WAIT_MS}")));
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
