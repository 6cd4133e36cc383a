//! The retry scanner: FAILED instances whose backoff has passed go back to PENDING with
//! `attempt + 1`. Each pass moves a bounded batch (the rate limit that keeps a recovering
//! downstream from being hit by every failed instance at once); several replicas may scan at
//! once, each transition being a compare-and-swap on rows locked with `SKIP LOCKED`. The same
//! pass resumes tasks whose circuit-breaker cooldown has ended.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Heartbeats, run_periodic};
use crate::store::{self, instances, tasks};

pub const LOOP_NAME: &str = "retry_scanner";

#[derive(Debug, Clone)]
pub struct RetryScannerConfig {
    pub node_id: String,
    /// Pause between passes (`retry_scan_interval_ms`).
    pub interval: Duration,
    /// Most instances moved per pass (`retry_batch_size`).
    pub batch_size: i64,
}

impl RetryScannerConfig {
    /// The defaults of `Config`, under this node id.
    pub fn new(node_id: impl Into<String>) -> Self {
        Self {
            node_id: node_id.into(),
            ..Self::from_config(&crate::config::Config::default())
        }
    }

    pub fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            node_id: cfg.node_id.clone(),
            interval: Duration::from_millis(cfg.retry_scan_interval_ms),
            batch_size: cfg.retry_batch_size,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryReport {
    pub num_retried: usize,
    /// Tasks whose circuit-breaker cooldown ended and that were resumed (half-open).
    pub num_resumed: usize,
}

pub struct RetryScanner {
    pool: PgPool,
    config: RetryScannerConfig,
    heartbeats: Heartbeats,
}

impl RetryScanner {
    pub fn new(pool: PgPool, config: RetryScannerConfig, heartbeats: Heartbeats) -> Self {
        Self {
            pool,
            config,
            heartbeats,
        }
    }

    /// One bounded batch.
    pub async fn run_once(&self) -> store::Result<RetryReport> {
        let actor = format!("retry_scanner:{}", self.config.node_id);
        let mut tx = crate::store::begin(&self.pool).await?;
        let moved = instances::retry_due(&mut tx, self.config.batch_size, &actor).await?;
        let resumed = tasks::resume_cooled_down(&mut tx, self.config.batch_size).await?;
        tx.commit().await?;
        for m in &moved {
            tracing::info!(task_id = %m.task_id, window_key = %m.window_key, instance_id = %m.id, attempt = m.attempt, reason = "backoff elapsed", "instance retried");
        }
        metrics::counter!("kairos_retries_total").increment(moved.len() as u64);
        Ok(RetryReport {
            num_retried: moved.len(),
            num_resumed: resumed.len(),
        })
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let batch = usize::try_from(self.config.batch_size).unwrap_or(usize::MAX);
        run_periodic(
            LOOP_NAME,
            self.config.interval,
            self.heartbeats.clone(),
            shutdown,
            || async { self.run_once().await.map(|r| r.num_retried >= batch) },
        )
        .await;
    }
}
