//! The stats sampler: every interval one replica (an advisory lock decides which) counts
//! instances per status and rolls up the recent minutes of windows into `console_gauges` and
//! `console_minutes`, which the operators' console reads; every replica sets the
//! `kairos_instances{status}` gauge from that sample, so it is visible to Prometheus whichever
//! replica did the work. Large tables are counted exactly only for the live statuses (through
//! their partial indexes); terminal statuses are then estimated from the planner's statistics.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Heartbeats, run_periodic};
use crate::domain::instance::InstanceStatus;
use crate::store::{self, console};

pub const LOOP_NAME: &str = "stats";

pub struct StatsSampler {
    pool: PgPool,
    interval: Duration,
    heartbeats: Heartbeats,
}

impl StatsSampler {
    pub fn new(pool: PgPool, interval: Duration, heartbeats: Heartbeats) -> Self {
        Self {
            pool,
            interval,
            heartbeats,
        }
    }

    /// One pass: when no other replica is sampling, count instances per status (see
    /// [`console::sample`]) and roll up the recent minutes for the console; otherwise read the
    /// other replica's sample. Either way the `kairos_instances{status}` gauge is set.
    pub async fn run_once(&self) -> store::Result<Vec<(String, i64)>> {
        let counts: Vec<(String, i64)> = match console::sample(&self.pool).await? {
            Some(sampled) => sampled.into_iter().map(|(s, n, _)| (s, n)).collect(),
            None => console::gauges(&self.pool)
                .await?
                .into_iter()
                .filter_map(|g| Some((g.name.strip_prefix("instances.")?.to_owned(), g.value)))
                .collect(),
        };
        for status in InstanceStatus::ALL {
            let n = counts
                .iter()
                .find(|(s, _)| s == status.as_str())
                .map(|(_, n)| *n)
                .unwrap_or(0);
            metrics::gauge!("kairos_instances", "status" => status.as_str()).set(n as f64);
        }
        for l in store::limits::gauges(&self.pool).await? {
            metrics::gauge!("kairos_limit_in_use", "limit" => l.name.clone()).set(l.in_use as f64);
            metrics::gauge!("kairos_limit_waiting", "limit" => l.name).set(l.waiting as f64);
        }
        for (agent, seconds) in store::waiting::agents_last_claim(&self.pool).await? {
            metrics::gauge!("kairos_agent_last_claim_seconds", "agent_id" => agent).set(seconds);
        }
        Ok(counts)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        run_periodic(
            LOOP_NAME,
            self.interval,
            self.heartbeats.clone(),
            shutdown,
            || async { self.run_once().await.map(|_| false) },
        )
        .await;
    }
}
