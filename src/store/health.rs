//! What this replica knows about reaching its database: whether it answers now, since when it
//! has not, and why. One probe loop (`services::db_watch`) keeps it current; the API reads it to
//! answer 503 at once while the database is unreachable instead of after a pool timeout, and
//! `/readyz` reports it. Connections returned to the pool while the database is in doubt are
//! checked with a bounded ping before they are used again ([`DbHealth::in_doubt`]).

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::statements::sql;

/// After an outage or a bounded call that timed out, how long returned connections keep being
/// pinged before reuse.
pub const DOUBT_AFTER_TROUBLE: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct State {
    /// Since when the probe (or a call) found the database unreachable, and why.
    unreachable: Option<(Instant, String)>,
    /// Until when returned connections are pinged before reuse.
    doubt_until: Option<Instant>,
    /// Woken when the database is found unreachable.
    down: Arc<tokio::sync::Notify>,
}

/// Shared by the pools, the probe and the API; cheap to clone.
#[derive(Clone, Default)]
pub struct DbHealth {
    state: Arc<Mutex<State>>,
}

impl DbHealth {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held; a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Some((for how long, why))` while the database is unreachable.
    pub fn unreachable(&self) -> Option<(Duration, String)> {
        self.state()
            .unreachable
            .as_ref()
            .map(|(since, why)| (since.elapsed(), why.clone()))
    }

    /// Record that the database did not answer; returns true when it was reachable before.
    pub fn mark_unreachable(&self, why: &str) -> bool {
        let mut s = self.state();
        s.doubt_until = Some(Instant::now() + DOUBT_AFTER_TROUBLE);
        match &mut s.unreachable {
            Some((_, reason)) => {
                why.clone_into(reason);
                false
            }
            None => {
                s.unreachable = Some((Instant::now(), why.to_owned()));
                s.down.notify_waiters();
                true
            }
        }
    }

    /// Record that the database answered; returns how long it had been unreachable, if it was.
    pub fn mark_reachable(&self) -> Option<Duration> {
        let mut s = self.state();
        let (since, _) = s.unreachable.take()?;
        s.doubt_until = Some(Instant::now() + DOUBT_AFTER_TROUBLE);
        Some(since.elapsed())
    }

    /// A bounded call gave up on the database (its connection may be black-holed): check
    /// returned connections for a while.
    pub fn doubt(&self) {
        self.state().doubt_until = Some(Instant::now() + DOUBT_AFTER_TROUBLE);
    }

    /// Wait for `work` at most `limit`; when it overruns, put the database in doubt before
    /// dropping it, so a connection it abandons mid-statement is checked with a bound when it
    /// returns to the pool (sqlx's own check on return waits without one: on a connection the
    /// network went silent on, forever, and the pool would lose that connection for good).
    pub async fn within<T>(&self, limit: Duration, work: impl Future<Output = T>) -> Option<T> {
        tokio::pin!(work);
        tokio::select! {
            r = &mut work => Some(r),
            _ = tokio::time::sleep(limit) => {
                self.doubt();
                None
            }
        }
    }

    /// Whether returned connections should be pinged (with a bound) before reuse.
    pub fn in_doubt(&self) -> bool {
        let s = self.state();
        s.unreachable.is_some() || s.doubt_until.is_some_and(|t| Instant::now() < t)
    }

    /// What a request needs to know, in one look: `Err(for how long)` while the database is
    /// unreachable, else `Ok` with what is notified when it is next found unreachable.
    pub fn gate(&self) -> Result<Arc<tokio::sync::Notify>, Duration> {
        let s = self.state();
        match &s.unreachable {
            Some((since, _)) => Err(since.elapsed()),
            None => Ok(s.down.clone()),
        }
    }
}

/// The wall-clock bound of every database pass of this process (a loop's pass, a claim round,
/// a group commit) and the health a pass that overran puts in doubt: set once per process at
/// start ([`set_pass_bound`]).
static PASS_BOUND: std::sync::RwLock<Option<(Duration, DbHealth)>> = std::sync::RwLock::new(None);

/// Default bound of a pass when none was set (`loop_pass_timeout_ms`).
pub const DEFAULT_PASS_TIMEOUT: Duration = Duration::from_secs(30);

/// Bound every database pass of this process by `timeout`; a pass that overruns puts `health`
/// in doubt, so the connection it abandoned is checked before reuse.
pub fn set_pass_bound(timeout: Duration, health: DbHealth) {
    if let Ok(mut b) = PASS_BOUND.write() {
        *b = Some((timeout, health));
    }
}

/// Run `pass` under the process's wall-clock bound (`loop_pass_timeout_ms`): a pass stuck on a
/// connection the network went silent on fails with a timeout (a pool timeout: "unavailable,
/// try again") instead of waiting until the kernel gives the socket up, which behind a
/// black-holed route is never. Every actor that serves callers from one task (claim rounds,
/// group commits) runs its database work through this, so one silent connection cannot hold
/// up every later caller.
pub async fn bounded<T>(
    name: &'static str,
    pass: impl std::future::Future<Output = super::Result<T>>,
) -> super::Result<T> {
    let (limit, health) = PASS_BOUND
        .read()
        .ok()
        .and_then(|b| b.clone())
        .map_or((DEFAULT_PASS_TIMEOUT, None), |(t, h)| (t, Some(h)));
    let health = health.unwrap_or_default();
    match health.within(limit, pass).await {
        Some(r) => r,
        None => {
            tracing::error!(
                loop_name = name,
                limit_ms = limit.as_millis() as u64,
                reason = "pass exceeded loop_pass_timeout_ms",
                "database pass abandoned"
            );
            Err(super::Error::Db(sqlx::Error::PoolTimedOut))
        }
    }
}

/// Record that the database was unreachable from replica `node_id` for the `outage` that just
/// ended, by the database clock (`db_unreachable`): the reaper does not charge leases that
/// expired during it to their agents.
pub async fn record_outage(
    pool: &sqlx::PgPool,
    node_id: &str,
    outage: Duration,
) -> super::Result<()> {
    let mut tx = super::begin(pool).await?;
    sqlx::query(sql!("health/record_outage"))
        .bind(node_id)
        .bind(outage.as_secs_f64())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_reported_once_with_its_length_and_leaves_connections_in_doubt() {
        let h = DbHealth::default();
        assert!(h.unreachable().is_none());
        assert!(!h.in_doubt());
        assert!(h.mark_unreachable("connection refused"));
        assert!(!h.mark_unreachable("timed out"));
        let (_, why) = h.unreachable().expect("unreachable");
        assert_eq!(why, "timed out");
        assert!(h.in_doubt());
        assert!(h.mark_reachable().is_some());
        assert!(h.mark_reachable().is_none());
        assert!(h.unreachable().is_none());
        assert!(h.in_doubt(), "connections stay in doubt for a while");
    }
}
