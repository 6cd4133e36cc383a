//! The stats sampler: sets the `kairos_instances{status}` gauge from the database every
//! interval, so the number of PENDING, RUNNING, FAILED, … instances is visible to Prometheus
//! whichever replica did the work.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Heartbeats, run_periodic};
use crate::domain::instance::InstanceStatus;
use crate::store::{self, instances};

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

    pub async fn run_once(&self) -> store::Result<Vec<(String, i64)>> {
        let counts = instances::count_by_status(&self.pool).await?;
        for status in InstanceStatus::ALL {
            let n = counts
                .iter()
                .find(|(s, _)| s == status.as_str())
                .map(|(_, n)| *n)
                .unwrap_or(0);
            metrics::gauge!("kairos_instances", "status" => status.as_str()).set(n as f64);
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
