//! How this process reaches its database: the pools (`connect`) and the LISTEN connections
//! (`listen`), over a `database_url` that may name several hosts, libpq style
//! (`postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write`). It owns host selection
//! and failover and nothing else: no SQL of the product lives here.
//!
//! With `target_session_attrs=read-write` (the default) kairos only keeps connections to the host
//! that accepts writes. Hosts are tried in the order written, as libpq does; a new connection
//! that finds its server read-only (`transaction_read_only`: a standby, or a primary turned
//! read-only) is refused. Each pool over several hosts has a watch that scans the hosts again
//! when the database it talks to goes away or turns read-only, and points the pool's new
//! connections at the first host that accepts writes; connections opened before such a move,
//! and pooled connections found read-only while the database is in doubt, are closed instead of
//! handed out again; so are all connections open when a statement answers SQLSTATE 25006
//! (read-only transaction). `target_session_attrs=any` takes the first host that answers, read-only or
//! not, and moves only when it stops answering.

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

use super::DbSettings;
use super::health::DbHealth;
use super::statements::sql;

/// Pause between scans of the hosts while none is found that kairos may use, or while the
/// database is unreachable.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(500);

/// Pause after refusing a new connection to a read-only server, before the pool tries again.
const REFUSED_PAUSE: Duration = Duration::from_millis(200);

/// Which server a connection may be kept on (libpq's `target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// Only a server that accepts writes (libpq `read-write`); kairos's default.
    ReadWrite,
    /// Any server that answers (libpq `any`).
    Any,
}

/// One host of a `database_url`, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The host as written (`db1`, `10.0.0.1`, `[::1]`).
    pub host: String,
    /// The port as written, if any (else the driver's default, 5432 or `PGPORT`).
    pub port: Option<u16>,
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(p) => write!(f, "{}:{p}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// A parsed `database_url`: its hosts in order, each with the driver's options, and the session
/// attributes asked for.
#[derive(Debug, Clone)]
pub struct Target {
    pub hosts: Vec<Host>,
    pub attrs: SessionAttrs,
    options: Vec<PgConnectOptions>,
}

/// Why a `database_url` cannot be used; never holds its password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TargetError(pub String);

impl Target {
    /// Parse a `postgres://` URL whose host part may list several `host[:port]` separated by
    /// commas (IPv6 addresses in brackets), with an optional `target_session_attrs` of
    /// `read-write` (the default) or `any`. Every other part of the URL applies to every host.
    pub fn parse(url: &str) -> Result<Target, TargetError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| TargetError("must be a postgres:// or postgresql:// URL".to_owned()))?;
        // The authority ends at the path or the query; the user info at its last `@`.
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, host_list) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (path, query) = match tail.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (tail, None),
        };
        let mut attrs = SessionAttrs::ReadWrite;
        let mut kept = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if key == "target_session_attrs" {
                attrs = match value {
                    "read-write" => SessionAttrs::ReadWrite,
                    "any" => SessionAttrs::Any,
                    other => {
                        return Err(TargetError(format!(
                            "target_session_attrs must be read-write or any (kairos writes to \
                             the database), not {other:?}"
                        )));
                    }
                };
            } else if !pair.is_empty() {
                if key == "host" && value.contains(',') {
                    return Err(TargetError(
                        "several hosts go in the URL's host part \
                         (postgres://user@h1:5432,h2:5432/db), not in a host= parameter"
                            .to_owned(),
                    ));
                }
                kept.push(pair);
            }
        }
        let hosts = if host_list.is_empty() {
            // No host: the driver's defaults (or a host= parameter) decide.
            Vec::new()
        } else {
            host_list
                .split(',')
                .map(parse_host)
                .collect::<Result<Vec<_>, _>>()?
        };
        let rebuild = |host: Option<&Host>| {
            let mut s = format!("{scheme}://");
            if let Some(u) = userinfo {
                s.push_str(u);
                s.push('@');
            }
            if let Some(h) = host {
                s.push_str(&h.to_string());
            }
            s.push_str(path);
            if !kept.is_empty() {
                s.push('?');
                s.push_str(&kept.join("&"));
            }
            s
        };
        let driver =
            |u: String| PgConnectOptions::from_str(&u).map_err(|e| TargetError(driver_message(&e)));
        let options = if hosts.is_empty() {
            vec![driver(rebuild(None))?]
        } else {
            hosts
                .iter()
                .map(|h| driver(rebuild(Some(h))))
                .collect::<Result<Vec<_>, _>>()?
        };
        Ok(Target {
            hosts,
            attrs,
            options,
        })
    }

    /// The driver's options for each host, in order (one when the URL names no host).
    pub fn options(&self) -> &[PgConnectOptions] {
        &self.options
    }

    /// `host:port` of the `i`-th host, for logs.
    fn describe(&self, i: usize) -> String {
        match self.options.get(i) {
            Some(o) => format!("{}:{}", o.get_host(), o.get_port()),
            None => String::new(),
        }
    }
}

/// The driver's complaint about a URL, without the URL (it may hold a password).
fn driver_message(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Configuration(inner) => inner.to_string(),
        other => other.to_string(),
    }
}

fn parse_host(item: &str) -> Result<Host, TargetError> {
    let bad = |why: &str| TargetError(format!("host {item:?}: {why}"));
    let (host, port) = if let Some(v6) = item.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| bad("an IPv6 address needs its closing ]"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?),
        };
        (format!("[{addr}]"), port)
    } else {
        match item.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (item.to_owned(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("empty host"));
    }
    let port = match port {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("invalid port number"))?,
        ),
    };
    Ok(Host { host, port })
}

/// When a statement of this process last answered SQLSTATE 25006 (read-only transaction): the
/// server it ran on turned read-only, and so did every connection to it, whichever pool holds
/// it. Connections opened before are closed when next handed out or given back, instead of
/// answering 25006 again.
static READ_ONLY_SEEN: Mutex<Option<Instant>> = Mutex::new(None);

/// Note a database error: one that says the server refuses writes (SQLSTATE 25006) marks every
/// connection open now as one not to reuse. Called where database errors are mapped
/// ([`super::map_db_error`]).
pub fn note_error(e: &sqlx::Error) {
    if let sqlx::Error::Database(db) = e
        && db.code().as_deref() == Some("25006")
    {
        *READ_ONLY_SEEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }
}

/// Whether a connection of this age was open when a statement last answered 25006.
fn predates_read_only(age: Duration) -> bool {
    READ_ONLY_SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_some_and(|at| age > at.elapsed())
}

/// What the pools of one URL share: the hosts, which one new connections go to, and since when.
struct Router {
    target: Target,
    current: Mutex<usize>,
    /// When new connections last moved to another host: connections opened before are closed
    /// instead of reused.
    moved_at: Mutex<Option<Instant>>,
    /// Woken when a connection found its server unusable: scan the hosts now.
    rescan: tokio::sync::Notify,
    health: DbHealth,
    /// Bound of one connection attempt of a scan, and of a check of a pooled connection.
    check_timeout: Duration,
}

impl Router {
    fn current(&self) -> usize {
        *self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a connection of this age was opened before new connections last moved, or
    /// before a statement answered that its server refuses writes.
    fn predates_move(&self, age: Duration) -> bool {
        predates_read_only(age)
            || self
                .moved_at
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|at| age > at.elapsed())
    }

    /// The first host, in order, kairos may keep connections on; `None` when none is.
    async fn scan(&self) -> Option<usize> {
        for (i, options) in self.target.options.iter().enumerate() {
            let attempt = async {
                let mut conn = PgConnection::connect_with(options).await?;
                let ok = usable(&mut conn, self.target.attrs).await;
                let _ = conn.close().await;
                ok
            };
            match tokio::time::timeout(self.check_timeout, attempt).await {
                Ok(Ok(true)) => return Some(i),
                Ok(Ok(false)) => {
                    tracing::debug!(host = %self.target.describe(i), "database host accepts no writes")
                }
                Ok(Err(e)) => {
                    tracing::debug!(host = %self.target.describe(i), error = %e, "database host did not answer")
                }
                Err(_) => {
                    tracing::debug!(host = %self.target.describe(i), "database host did not answer in time")
                }
            }
        }
        None
    }

    /// Point `pool`'s new connections at host `i`.
    fn move_to(&self, pool: &PgPool, i: usize) {
        let was = {
            let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *cur, i)
        };
        *self.moved_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        pool.set_connect_options(self.target.options[i].clone());
        self.health.doubt();
        metrics::counter!("kairos_database_failovers_total").increment(1);
        tracing::warn!(
            host = %self.target.describe(i),
            previous_host = %self.target.describe(was),
            "database failover: new connections go to the host that accepts writes; \
             connections to the previous host are closed"
        );
    }

    /// Keep `pool` on a usable host until the pool is closed: scan when a connection found its
    /// server unusable, when the database is found unreachable, and every [`SCAN_INTERVAL`]
    /// while either lasts.
    async fn watch(self: Arc<Self>, pool: PgPool, mut settled: bool) {
        let closed = pool.close_event();
        tokio::pin!(closed);
        loop {
            let reason = async {
                if settled && let Ok(down) = self.health.gate() {
                    // Registered before looking again, so an outage found in between wakes it.
                    let went_down = down.notified();
                    tokio::pin!(went_down);
                    went_down.as_mut().enable();
                    if self.health.unreachable().is_none() {
                        went_down.await;
                        return;
                    }
                }
                tokio::time::sleep(SCAN_INTERVAL).await;
            };
            tokio::select! {
                biased;
                _ = &mut closed => return,
                _ = self.rescan.notified() => {}
                _ = reason => {}
            }
            match self.scan().await {
                Some(i) => {
                    if i != self.current() {
                        self.move_to(&pool, i);
                    }
                    settled = true;
                }
                None => {
                    if settled {
                        tracing::warn!(
                            hosts = self.target.hosts.len(),
                            "no database host accepts writes; looking again every {} ms",
                            SCAN_INTERVAL.as_millis()
                        );
                    }
                    settled = false;
                }
            }
        }
    }
}

/// Whether the server behind `conn` is one kairos may keep a connection on under `attrs`.
async fn usable(conn: &mut PgConnection, attrs: SessionAttrs) -> Result<bool, sqlx::Error> {
    match attrs {
        SessionAttrs::Any => {
            conn.ping().await?;
            Ok(true)
        }
        SessionAttrs::ReadWrite => Ok(!read_only(conn).await?),
    }
}

/// Asks whether the session's server refuses writes. Sent as a simple query (no prepared
/// statement: no parameters are bound), so it also works through a pooler that keeps none.
const READ_ONLY_SQL: &str = sql!("connect/read_only");

/// Whether the server behind `conn` refuses writes now (`transaction_read_only`: on a standby,
/// or with `default_transaction_read_only` set): a statement that writes would answer SQLSTATE
/// 25006. One round trip, so it doubles as a ping.
pub async fn read_only(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let row = sqlx::Executor::fetch_one(&mut *conn, READ_ONLY_SQL).await?;
    Ok(sqlx::Row::try_get::<String, _>(&row, 0)? == "on")
}

/// The check of a pooled connection before it is handed out or kept: `Ok(false)` closes it. A
/// connection opened before new connections moved to another host, or before a statement
/// answered 25006 (read-only), is closed. While the database is in doubt, so is one that does
/// not answer within `check_timeout`, or (with `read-write`) whose server refuses writes; the
/// scan is then asked to look for the host that takes them.
async fn keep(
    router: &Router,
    conn: &mut PgConnection,
    age: Duration,
) -> Result<bool, sqlx::Error> {
    if router.predates_move(age) {
        return Ok(false);
    }
    if !router.health.in_doubt() {
        return Ok(true);
    }
    match tokio::time::timeout(router.check_timeout, usable(conn, router.target.attrs)).await {
        Ok(Ok(true)) => Ok(true),
        Ok(Ok(false)) => {
            router.rescan.notify_one();
            Ok(false)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

/// Connect a pool of at most `max_connections` with `settings` over `url` (one host or several).
/// New connections go to the first host, in order, that `target_session_attrs` accepts; with
/// several hosts, a watch moves them when that host goes away or turns read-only (see the
/// module). While `health` is in doubt (an outage, a call that timed out), every pooled
/// connection is checked within `ping_timeout` before it is reused or kept, and closed when it
/// does not answer or its server refuses writes, so a connection the network black-holed, or
/// one to a server that turned read-only, is never handed out again (sqlx's own check on return
/// waits without a bound). Does not wait for the database when no host answers.
pub async fn connect(
    url: &str,
    max_connections: u32,
    settings: &DbSettings,
    health: DbHealth,
) -> Result<PgPool, sqlx::Error> {
    if settings.pooler == super::DatabasePooler::Pgbouncer {
        // PgBouncer stands for one database (it follows the primary itself): one host, every
        // connection handed out inside a transaction (`super::pgbouncer_begin`).
        let options: PgConnectOptions = url.parse()?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(settings.acquire_timeout);
        return Ok(super::pgbouncer_pool(pool, settings)
            .connect_lazy_with(super::pgbouncer_options(options)));
    }
    let mut target = Target::parse(url).map_err(|e| sqlx::Error::Configuration(e.0.into()))?;
    for o in &mut target.options {
        *o = o.clone().options(settings.session_options());
    }
    let several = target.options.len() > 1;
    let router = Arc::new(Router {
        target,
        current: Mutex::new(0),
        moved_at: Mutex::new(None),
        rescan: tokio::sync::Notify::new(),
        health,
        check_timeout: settings.ping_timeout,
    });
    // As libpq does: the first host, in order, that answers as asked. When none does yet, start
    // on the first and let the watch keep looking.
    let first = if several {
        router.scan().await
    } else {
        Some(0)
    };
    if let Some(i) = first {
        *router.current.lock().unwrap_or_else(|e| e.into_inner()) = i;
    }
    let options = router.target.options[router.current()].clone();
    let attrs = router.target.attrs;
    let on_connect = router.clone();
    let on_acquire = router.clone();
    let on_release = router.clone();
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(settings.acquire_timeout)
        // sqlx pings each connection before handing it out (`test_before_acquire`, left on: a
        // pool without it is a PgBouncer pool, `super::hands_out_transactions`);
        // `before_acquire` checks more while the database is in doubt.
        .after_connect(move |conn, _meta| {
            let router = on_connect.clone();
            Box::pin(async move {
                if attrs == SessionAttrs::ReadWrite && read_only(conn).await? {
                    router.rescan.notify_one();
                    // sqlx retries at once (and logs each refusal): give the scan a moment.
                    tokio::time::sleep(REFUSED_PAUSE).await;
                    return Err(sqlx::Error::Io(std::io::Error::other(format!(
                        "database host {} accepts no writes (transaction_read_only is on); \
                         target_session_attrs=read-write looks for the one that does",
                        router.target.describe(router.current())
                    ))));
                }
                Ok(())
            })
        })
        .before_acquire(move |conn, meta| {
            let router = on_acquire.clone();
            Box::pin(async move {
                if router.predates_move(meta.age) {
                    return Ok(false);
                }
                if router.health.in_doubt() {
                    return keep(&router, conn, meta.age).await;
                }
                Ok(true)
            })
        })
        .after_release(move |conn, meta| {
            let router = on_release.clone();
            Box::pin(async move { keep(&router, conn, meta.age).await })
        })
        .connect_lazy_with(options);
    if several {
        tokio::spawn(router.watch(pool.clone(), first.is_some()));
    }
    Ok(pool)
}

/// Open a LISTEN connection on `channel` where `pool`'s new connections go (after a failover,
/// to the new primary), in a pool of its own: the listener reconnects through that pool when
/// its connection is lost, and a caller that finds its connection useless ([`check_listener`])
/// drops it and opens another.
///
/// Why not a connection of `pool` itself: a dropped listener sends `UNLISTEN *` and then checks
/// its connection before giving it back, both without a bound. On a connection the network went
/// silent on, that waits until the kernel gives the socket up (behind a black-holed route,
/// never), and a shared pool would lose the slot for as long: after two such losses no listener
/// could open again. A pool per listener loses only its own socket.
pub async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let own = PgPoolOptions::new()
        .max_connections(LISTENER_CONNECTIONS)
        .acquire_timeout(pool.options().get_acquire_timeout())
        .connect_lazy_with((*pool.connect_options()).clone());
    let mut listener = PgListener::connect_with(&own).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// A listener's own pool: its connection, and room for the next while the lost one is closed.
const LISTENER_CONNECTIONS: u32 = 2;

/// Check a LISTEN connection that has been quiet: an error when it does not answer or when its
/// server refuses writes (no notification is ever sent from a read-only server, so a listener
/// left on a primary that turned read-only would hear nothing after a failover). The caller
/// bounds the wait.
pub async fn check_listener(listener: &mut PgListener) -> Result<(), sqlx::Error> {
    let row = sqlx::Executor::fetch_one(&mut *listener, READ_ONLY_SQL).await?;
    if sqlx::Row::try_get::<String, _>(&row, 0)? == "on" {
        return Err(sqlx::Error::Io(std::io::Error::other(
            "the LISTEN connection's server accepts no writes (transaction_read_only is on)",
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(url: &str) -> Vec<String> {
        Target::parse(url)
            .expect("valid")
            .hosts
            .iter()
            .map(Host::to_string)
            .collect()
    }

    #[test]
    fn several_hosts_are_read_in_order_with_their_ports() {
        assert_eq!(
            hosts("postgres://u:p@h1:5432,h2:5433/db"),
            ["h1:5432", "h2:5433"]
        );
        assert_eq!(
            hosts("postgresql://u@[::1]:5433,h2,10.0.0.3:6000/db?sslmode=disable"),
            ["[::1]:5433", "h2", "10.0.0.3:6000"]
        );
        assert_eq!(hosts("postgres://h1/db"), ["h1"]);
        let t = Target::parse("postgres://u:p%40ss@h1:5432,h2:5433/kairos?application_name=k")
            .expect("valid");
        let o: Vec<_> = t
            .options()
            .iter()
            .map(|o| {
                (
                    o.get_host().to_owned(),
                    o.get_port(),
                    o.get_database().map(str::to_owned),
                    o.get_username().to_owned(),
                    o.get_application_name().map(str::to_owned),
                )
            })
            .collect();
        let one = |h: &str, p| {
            (
                h.to_owned(),
                p,
                Some("kairos".to_owned()),
                "u".to_owned(),
                Some("k".to_owned()),
            )
        };
        assert_eq!(o, [one("h1", 5432), one("h2", 5433)]);
        assert_eq!(t.attrs, SessionAttrs::ReadWrite);
    }

    #[test]
    fn target_session_attrs_takes_read_write_or_any_and_refuses_the_rest() {
        let attrs = |url: &str| Target::parse(url).map(|t| t.attrs);
        assert_eq!(
            attrs("postgres://h1,h2/db?target_session_attrs=read-write"),
            Ok(SessionAttrs::ReadWrite)
        );
        assert_eq!(
            attrs("postgres://h1,h2/db?sslmode=disable&target_session_attrs=any"),
            Ok(SessionAttrs::Any)
        );
        for bad in ["read-only", "primary", "standby", "prefer-standby", ""] {
            let e =
                attrs(&format!("postgres://h1,h2/db?target_session_attrs={bad}")).expect_err(bad);
            assert!(e.0.contains("target_session_attrs"), "{e}");
        }
    }

    #[test]
    fn bad_hosts_are_named_without_the_password() {
        for (url, says) in [
            (
                "postgres://u:s3cret@h1:5432,h2:99999/db",
                "invalid port number",
            ),
            ("postgres://u:s3cret@h1:5432,,h2/db", "empty host"),
            ("postgres://u:s3cret@h1:x/db", "invalid port number"),
            ("postgres://u:s3cret@[::1/db", "closing ]"),
            ("postgres://u:s3cret@db/x?host=a,b", "host= parameter"),
        ] {
            let e = Target::parse(url).expect_err(url);
            assert!(e.0.contains(says), "{url}: {e}");
            assert!(!e.0.contains("s3cret"), "{url}: {e}");
        }
    }
}
