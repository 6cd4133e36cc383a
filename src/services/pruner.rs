//! The pruner: deletes terminal instances (SUCCESS, DEAD, SKIPPED, CANCELLED) finished more
//! than `retention_days` ago, with their events, and settled outbox rows of the same age. It
//! works in bounded batches (`SKIP LOCKED`, short transactions) so it never holds long locks,
//! and it deletes rather than archives: the history an operator needs is the recent one, and
//! an archive table would only move the growth elsewhere.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Heartbeats, run_periodic};
use crate::store::{self, instances};

pub const LOOP_NAME: &str = "pruner";

#[derive(Debug, Clone)]
pub struct PrunerConfig {
    pub interval: Duration,
    pub retention_days: i64,
    pub batch_size: i64,
}

impl Default for PrunerConfig {
    fn default() -> Self {
        Self::from_config(&crate::config::Config::default())
    }
}

impl PrunerConfig {
    pub fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            interval: Duration::from_millis(cfg.pruner_interval_ms),
            retention_days: cfg.retention_days,
            batch_size: cfg.pruner_batch_size,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub num_instances: u64,
    pub num_outbox: u64,
    /// Recorded claim answers whose leases have all passed.
    pub num_claim_answers: u64,
}

pub struct Pruner {
    pool: PgPool,
    config: PrunerConfig,
    heartbeats: Heartbeats,
}

impl Pruner {
    pub fn new(pool: PgPool, config: PrunerConfig, heartbeats: Heartbeats) -> Self {
        Self {
            pool,
            config,
            heartbeats,
        }
    }

    /// One batch of each kind.
    pub async fn run_once(&self) -> store::Result<PruneReport> {
        let (num_instances, num_outbox) = instances::prune_finished(
            &self.pool,
            self.config.retention_days,
            self.config.batch_size,
        )
        .await?;
        if num_instances + num_outbox > 0 {
            metrics::counter!("kairos_pruned_total", "table" => "task_instance")
                .increment(num_instances);
            metrics::counter!("kairos_pruned_total", "table" => "outbox").increment(num_outbox);
            tracing::info!(
                instances = num_instances,
                outbox = num_outbox,
                retention_days = self.config.retention_days,
                "pruned finished history"
            );
        }
        let num_claim_answers =
            store::claim_answers::prune_expired(&self.pool, self.config.batch_size).await?;
        if num_claim_answers > 0 {
            metrics::counter!("kairos_pruned_total", "table" => "claim_answers")
                .increment(num_claim_answers);
        }
        Ok(PruneReport {
            num_instances,
            num_outbox,
            num_claim_answers,
        })
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let batch = u64::try_from(self.config.batch_size).unwrap_or(u64::MAX);
        run_periodic(
            LOOP_NAME,
            self.config.interval,
            self.heartbeats.clone(),
            shutdown,
            || async {
                self.run_once().await.map(|r| {
                    r.num_instances >= batch
                        || r.num_outbox >= batch
                        || r.num_claim_answers >= batch
                })
            },
        )
        .await;
    }
}
