//! The timeout reaper: RUNNING instances whose lease expired (no heartbeat) fail with
//! `lease_expired`; those running past the task's `timeout_seconds` fail with `timeout`. Both
//! then become FAILED (attempts remain) or DEAD by the same rule as an agent's `fail`. Clearing
//! the lease token fences the late worker out: its `complete` gets 409.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Heartbeats, run_periodic};
use crate::domain::retry::Failure;
use crate::otel::{SpanKind, Spans, names};
use crate::store::health::DbHealth;
use crate::store::{self, instances};

pub const LOOP_NAME: &str = "timeout_reaper";

#[derive(Debug, Clone)]
pub struct TimeoutReaperConfig {
    pub node_id: String,
    /// Pause between passes (`reaper_interval_ms`).
    pub interval: Duration,
    /// Most instances reaped per pass (`reaper_batch_size`).
    pub batch_size: i64,
}

impl TimeoutReaperConfig {
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
            interval: Duration::from_millis(cfg.reaper_interval_ms),
            batch_size: cfg.reaper_batch_size,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    pub num_reaped: usize,
    pub num_dead: usize,
    /// Expired leases renewed because the database was unreachable during them.
    pub num_renewed: usize,
}

pub struct TimeoutReaper {
    pool: PgPool,
    config: TimeoutReaperConfig,
    heartbeats: Heartbeats,
    /// While this replica finds the database unreachable the reaper waits: leases its agents
    /// could not renew meanwhile are judged once the outage is recorded.
    health: DbHealth,
    spans: Spans,
}

impl TimeoutReaper {
    pub fn new(pool: PgPool, config: TimeoutReaperConfig, heartbeats: Heartbeats) -> Self {
        Self {
            pool,
            config,
            heartbeats,
            health: DbHealth::default(),
            spans: Spans::off(),
        }
    }

    /// Record a reap span for every attempt reaped.
    pub fn with_spans(mut self, spans: Spans) -> Self {
        self.spans = spans;
        self
    }

    /// Wait out outages this replica sees (see the `health` field).
    pub fn with_health(mut self, health: DbHealth) -> Self {
        self.health = health;
        self
    }

    /// One bounded batch.
    pub async fn run_once(&self) -> store::Result<ReapReport> {
        if self.health.unreachable().is_some() {
            return Ok(ReapReport::default());
        }
        let actor = format!("reaper:{}", self.config.node_id);
        let mut tx = crate::store::begin(&self.pool).await?;
        let locked = instances::lock_expired(&mut tx, self.config.batch_size).await?;
        if locked.is_empty() {
            tx.commit().await?;
            return Ok(ReapReport::default());
        }
        let (lost, expired): (Vec<_>, Vec<_>) = locked.into_iter().partition(|a| a.lost_to_outage);
        let renewed = instances::renew_after_outage(&mut tx, &lost).await?;
        let failures: Vec<Failure> = expired
            .iter()
            .map(|a| {
                let (kind, error) = match a.expiry.as_deref() {
                    Some("timeout") => ("timeout", "run exceeded the task's timeout_seconds"),
                    _ => ("lease_expired", "lease expired without a heartbeat"),
                };
                a.plan_failure(true, error, kind, rand::random::<f64>())
            })
            .collect();
        let written = if failures.is_empty() {
            Vec::new()
        } else {
            instances::record_failures(&mut tx, &failures, &actor, instances::ReportedBy::Kairos)
                .await?
        };
        tx.commit().await?;
        let mut report = ReapReport {
            num_renewed: usize::try_from(renewed).unwrap_or(usize::MAX),
            ..ReapReport::default()
        };
        for a in &lost {
            metrics::counter!("kairos_leases_renewed_after_outage_total").increment(1);
            tracing::warn!(
                task_id = %a.task_id,
                window_key = %a.window_key,
                instance_id = %a.id,
                attempt = a.attempt,
                reason = "the lease expired while the database was unreachable",
                "lease renewed instead of reaped; the attempt is not charged"
            );
        }
        let now = chrono::Utc::now();
        for (a, f) in expired.iter().zip(&failures) {
            let Some(after) = written.iter().find(|w| w.id == a.id) else {
                continue;
            };
            self.spans.attempt(
                names::REAP,
                SpanKind::Internal,
                after,
                a.lease_token,
                None,
                now,
                now,
                Some(format!("{}: {}", f.error_kind, f.error)),
            );
            report.num_reaped += 1;
            if f.to == crate::domain::instance::InstanceStatus::Dead {
                report.num_dead += 1;
            }
            metrics::counter!("kairos_reaped_total", "kind" => f.error_kind).increment(1);
            tracing::warn!(
                task_id = %a.task_id,
                window_key = %a.window_key,
                instance_id = %a.id,
                attempt = a.attempt,
                reason = f.error_kind,
                to = f.to.as_str(),
                retry_in_ms = f.delay.as_millis() as u64,
                "instance reaped"
            );
        }
        Ok(report)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let batch = usize::try_from(self.config.batch_size).unwrap_or(usize::MAX);
        run_periodic(
            LOOP_NAME,
            self.config.interval,
            self.heartbeats.clone(),
            shutdown,
            || async {
                self.run_once()
                    .await
                    .map(|r| r.num_reaped + r.num_renewed >= batch)
            },
        )
        .await;
    }
}
