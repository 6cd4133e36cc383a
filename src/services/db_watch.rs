//! The database watch: probes the database every [`PROBE_INTERVAL`] (more often while it is
//! unreachable) with a bounded check that it answers and accepts writes, and keeps [`DbHealth`] current, so the API answers
//! 503 at once during an outage and `/readyz` says why. When the database comes back it records
//! the outage in `db_unreachable` (the reaper does not charge leases that expired during it to
//! their agents) and wakes every waiting claim, since notifications sent meanwhile may be lost.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::Heartbeats;
use super::work_signal::WorkSignal;
use crate::store::health::DbHealth;
use crate::store::{self};

pub const LOOP_NAME: &str = "db_watch";
/// Pause between probes while the database answers.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(1000);
/// Pause between probes while it does not.
pub const PROBE_INTERVAL_DOWN: Duration = Duration::from_millis(250);

pub struct DbWatch {
    pool: PgPool,
    health: DbHealth,
    node_id: String,
    /// Bound of one probe (`database_unavailable_answer_ms`).
    probe_timeout: Duration,
    heartbeats: Heartbeats,
    work_signal: WorkSignal,
}

impl DbWatch {
    pub fn new(
        pool: PgPool,
        health: DbHealth,
        node_id: String,
        probe_timeout: Duration,
        heartbeats: Heartbeats,
        work_signal: WorkSignal,
    ) -> Self {
        Self {
            pool,
            health,
            node_id,
            probe_timeout,
            heartbeats,
            work_signal,
        }
    }

    /// One probe; returns whether the database answered.
    pub async fn run_once(&self) -> bool {
        let probe = async {
            let mut conn = self.pool.acquire().await?;
            store::connect::read_only(&mut conn).await
        };
        let failure = match self.health.within(self.probe_timeout, probe).await {
            Some(Ok(false)) => None,
            // A standby, or a primary turned read-only: every write would fail (SQLSTATE
            // 25006). Reported as an outage, so writes answer 503 at once, pooled connections
            // are checked (and those to this server closed), and the pools look for the host
            // that accepts writes.
            Some(Ok(true)) => {
                Some("the database accepts no writes (transaction_read_only is on)".to_owned())
            }
            Some(Err(e)) => Some(super::error_chain(&e)),
            None => Some(format!(
                "no answer within {} ms",
                self.probe_timeout.as_millis()
            )),
        };
        match failure {
            Some(why) => {
                if self.health.mark_unreachable(&why) {
                    metrics::gauge!("kairos_database_reachable").set(0.0);
                    tracing::error!(reason = %why, "database unreachable; claims and writes answer 503 until it is back");
                }
                false
            }
            None => {
                if let Some((outage, _)) = self.health.unreachable() {
                    // Recorded before the replica counts the database as back: the reaper, which
                    // waits for that, then finds the outage when it looks at expired leases.
                    if let Err(e) =
                        store::health::record_outage(&self.pool, &self.node_id, outage).await
                    {
                        tracing::error!(error = %super::error_chain(&e), "could not record the outage; probing again");
                        return false;
                    }
                    self.health.mark_reachable();
                    metrics::gauge!("kairos_database_reachable").set(1.0);
                    tracing::warn!(
                        outage_ms = outage.as_millis() as u64,
                        "database reachable again; waking every waiting claim"
                    );
                    self.work_signal.wake_all();
                }
                true
            }
        }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        self.heartbeats.expect(LOOP_NAME, PROBE_INTERVAL);
        metrics::gauge!("kairos_database_reachable").set(1.0);
        loop {
            let up = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                up = self.run_once() => up,
            };
            // The watch ticks whatever it found: it is alive; /readyz reports the database.
            self.heartbeats.tick(LOOP_NAME, PROBE_INTERVAL);
            let wait = if up {
                PROBE_INTERVAL
            } else {
                PROBE_INTERVAL_DOWN
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}
