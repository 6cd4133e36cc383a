//! The trigger loop: turns every schedule into exactly one `task_instance` row per window.
//!
//! One loop runs per replica. A pass locks due tasks' cursors (`task_cursor`, a narrow row per
//! task) with `FOR UPDATE SKIP LOCKED` (so replicas split the work instead of queueing on each
//! other), asks `domain::policy` what to write,
//! inserts the windows with `ON CONFLICT DO NOTHING` and advances `next_fire_at`, all in one
//! transaction: a crash anywhere leaves either everything or nothing. Between passes the loop
//! sleeps until the earliest `next_fire_at` (database clock), woken early by NOTIFY on task
//! changes; it never polls every task.
//!
//! By part: `pass` (one batch: lock due cursors, plan, write windows and cursor moves),
//! `staging` (writing a coming instant's windows ahead and committing at the instant),
//! `next_step` (after a pass: sleep how long, or stage), `run` (the loop itself and its LISTEN
//! wake-ups).

mod next_step;
mod pass;
mod run;
mod staging;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use sqlx::PgPool;

use super::{Heartbeats, error_chain};
use crate::domain::trace::TraceContext;
use crate::otel::Spans;
use crate::store;
use crate::store::tasks::list_task_traces;

pub use run::COALESCE_WAKEUPS;

pub const LOOP_NAME: &str = "trigger";

#[derive(Debug, Clone)]
pub struct TriggerLoopConfig {
    /// Written as `trigger:<node_id>` into instance events.
    pub node_id: String,
    /// Due tasks locked per transaction.
    pub batch_size: i64,
    /// Longest sleep when nothing is due (caps a lost notification).
    pub max_sleep: Duration,
    /// Batches materialised at once (`trigger_parallelism`).
    pub parallelism: usize,
    /// How long before an instant the loop starts staging its windows (`trigger_lead_ms`);
    /// zero writes them only once due.
    pub lead: Duration,
}

impl TriggerLoopConfig {
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
            batch_size: cfg.trigger_batch_size,
            max_sleep: Duration::from_millis(cfg.trigger_max_sleep_ms),
            parallelism: cfg.trigger_parallelism,
            lead: Duration::from_millis(cfg.trigger_lead_ms),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerReport {
    pub num_tasks: usize,
    pub num_created: usize,
    pub num_skipped: usize,
    pub num_conflicts: usize,
    pub num_cancelled: usize,
    pub num_not_recorded: u64,
}

impl TriggerReport {
    fn add(&mut self, other: &TriggerReport) {
        self.num_tasks += other.num_tasks;
        self.num_created += other.num_created;
        self.num_skipped += other.num_skipped;
        self.num_conflicts += other.num_conflicts;
        self.num_cancelled += other.num_cancelled;
        self.num_not_recorded += other.num_not_recorded;
    }
}

#[derive(Clone)]
pub struct TriggerLoop {
    pool: PgPool,
    /// Where the loop's LISTEN connection comes from ([`store::listen_pool`]).
    listen_pool: PgPool,
    config: TriggerLoopConfig,
    heartbeats: Heartbeats,
    spans: Spans,
}

impl TriggerLoop {
    pub fn new(pool: PgPool, config: TriggerLoopConfig, heartbeats: Heartbeats) -> Self {
        Self {
            listen_pool: pool.clone(),
            pool,
            config,
            heartbeats,
            spans: Spans::off(),
        }
    }

    /// Record a window span for every window materialised.
    pub fn with_spans(mut self, spans: Spans) -> Self {
        self.spans = spans;
        self
    }

    /// LISTEN on a connection from `pool` instead of the loop's own pool.
    pub fn listening_on(mut self, pool: PgPool) -> Self {
        self.listen_pool = pool;
        self
    }

    /// Materialise every due window, batch after batch, until a short batch.
    ///
    /// `parallelism` batches run at once, each in its own transaction; `SKIP LOCKED` hands
    /// them disjoint tasks, so a burst of due tasks is spread over the database's cores.
    pub async fn run_once(&self) -> store::Result<TriggerReport> {
        let mut total = TriggerReport::default();
        loop {
            let mut batches = tokio::task::JoinSet::new();
            for _ in 0..self.config.parallelism.max(1) {
                let me = self.clone();
                batches.spawn(async move { me.run_batch().await });
            }
            let mut any_full = false;
            while let Some(joined) = batches.join_next().await {
                let (report, full) = joined.map_err(|e| {
                    store::Error::Corrupt(format!("trigger batch task failed: {e}"))
                })??;
                any_full |= full;
                total.add(&report);
            }
            if !any_full {
                return Ok(total);
            }
        }
    }

    async fn run_batch(&self) -> store::Result<(TriggerReport, bool)> {
        let mut tx = crate::store::begin_hot(&self.pool).await?;
        let mut batch = self.materialise(&mut tx, None, &[]).await?;
        tx.commit().await?;
        let traces = self.task_traces(batch.pending_tasks()).await;
        batch.published(&self.spans, &traces);
        Ok((batch.report, batch.full))
    }

    /// The contexts the tasks `ids` were defined under, for their window spans' links: read
    /// only when spans are exported, after the commit. A failed read loses the links, never
    /// the pass.
    async fn task_traces<'a>(
        &self,
        ids: impl Iterator<Item = &'a str>,
    ) -> HashMap<String, TraceContext> {
        if !self.spans.is_on() {
            return HashMap::new();
        }
        let ids: Vec<&str> = ids.collect::<HashSet<_>>().into_iter().collect();
        list_task_traces(&self.pool, &ids)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %error_chain(&e), "reading task trace contexts for window span links failed");
                HashMap::new()
            })
    }
}
