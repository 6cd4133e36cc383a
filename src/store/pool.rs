//! The pools' settings and their PgBouncer mode: the session bounds every connection carries
//! ([`DbSettings`]), the startup packet and the `BEGIN` a pool behind PgBouncer hands its
//! connections out in, and the pool the LISTEN connections come from. Opening the pools over
//! one or several hosts is `connect`'s.

use std::str::FromStr;

use serde::Deserialize;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgConnection, PgPool};

use super::connect::{self, connect};
use super::health;
use super::statements::sql;

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
    /// the pool runs every statement in a transaction of its own making ([`connect()`]).
    pub pooler: DatabasePooler,
}

/// What stands between kairos and PostgreSQL on `database_url` (`database_pooler`, docs/pgbouncer.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatabasePooler {
    /// `database_url` is PostgreSQL itself (or a pooler in session mode).
    None,
    /// PgBouncer in transaction pooling mode with its stock settings: no session state, no
    /// prepared statement outlives a transaction, every statement runs inside one.
    Pgbouncer,
}

impl FromStr for DatabasePooler {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(DatabasePooler::None),
            "pgbouncer" => Ok(DatabasePooler::Pgbouncer),
            _ => Err("must be none or pgbouncer".to_owned()),
        }
    }
}

/// Connections held by LISTEN: the claims' work signal and the trigger loop's task changes.
pub const LISTEN_CONNECTIONS: u32 = 2;

impl DbSettings {
    /// The same bounds on a connection straight to PostgreSQL (LISTEN, migrations).
    pub fn direct(&self) -> Self {
        Self {
            pooler: DatabasePooler::None,
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
/// transaction, and [`begin`](super::begin), [`begin_hot`](super::begin_hot) and
/// [`begin_hot_shared`](super::begin_hot_shared) continue it instead of sending a `BEGIN` of
/// their own; its `commit` ends it.
///
/// Even with no statement cache, sqlx names each statement `sqlx_s_<n>`, counting per client
/// connection, and never closes it: `deallocate all` first clears what an earlier client left
/// on the server connection, so the names cannot collide.
pub fn pgbouncer_begin(settings: &DbSettings) -> String {
    // Dynamic: the bounds are the configured settings, and a simple query (this runs as one,
    // before any statement of the transaction) takes no parameters.
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
pub(super) const POOLED_MARK: &str = "kairos.pooled_transaction";

/// Whether `pool` was connected for PgBouncer by [`connect()`], and so hands its connections out
/// inside a transaction ([`pgbouncer_begin`]). Such a pool, and only such a pool, does not ping
/// a connection before handing it out: the `BEGIN` answers for it.
pub fn hands_out_transactions(pool: &PgPool) -> bool {
    !pool.options().get_test_before_acquire()
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
    let ask = sqlx::raw_sql(sql!("pool/pooled_transaction_open"));
    let open = match bounded(bound, conn.fetch_optional(ask)).await {
        Ok(row) => {
            row.and_then(|r| r.try_get::<Option<String>, _>(0).ok().flatten())
                .as_deref()
                == Some("on")
        }
        Err(sqlx::Error::Database(_)) => {
            bounded(bound, conn.execute(sqlx::raw_sql(sql!("pool/rollback")))).await?;
            return Ok(true);
        }
        Err(e) => return Err(e),
    };
    if open {
        bounded(bound, conn.execute(sqlx::raw_sql(sql!("pool/commit")))).await?;
    }
    Ok(true)
}

/// Send [`pgbouncer_begin`]'s statement `begin` within `bound`.
async fn pgbouncer_start(
    conn: &mut PgConnection,
    begin: &str,
    bound: std::time::Duration,
) -> Result<(), sqlx::Error> {
    // Dynamic: the `BEGIN` of the pool's settings, [`pgbouncer_begin`].
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
/// this one's new connections go ([`connect::listen`]), [`LISTEN_CONNECTIONS`]
/// in all.
pub async fn listen_pool(
    url: &str,
    settings: &DbSettings,
    health: health::DbHealth,
) -> Result<PgPool, sqlx::Error> {
    connect(url, LISTEN_CONNECTIONS, &settings.direct(), health).await
}

/// A connection listening on `channel`, opened where `pool` (a [`listen_pool`]) connects: the
/// one place kairos opens a LISTEN ([`connect::listen`]).
pub async fn listener(
    pool: &PgPool,
    channel: &str,
) -> Result<sqlx::postgres::PgListener, sqlx::Error> {
    connect::listen(pool, channel).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_carry_the_timeouts_and_keepalives_that_are_set() {
        let s = DbSettings {
            acquire_timeout: std::time::Duration::from_secs(2),
            statement_timeout_ms: 15_000,
            lock_timeout_ms: 0,
            idle_in_transaction_timeout_ms: 30_000,
            keepalive_seconds: 5,
            ping_timeout: std::time::Duration::from_secs(2),
            pooler: DatabasePooler::None,
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
    fn the_end_of_a_pooled_transaction_asks_for_the_mark_its_begin_set() {
        let ask = sql!("pool/pooled_transaction_open");
        assert!(
            ask.contains(&format!("current_setting('{POOLED_MARK}', true)")),
            "{ask}"
        );
        assert!(
            pgbouncer_begin(&DbSettings::default())
                .contains(&format!("set local {POOLED_MARK} = 'on'"))
        );
    }
}
