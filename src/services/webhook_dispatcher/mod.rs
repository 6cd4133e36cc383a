//! The webhook dispatcher: pushes PENDING instances of `dispatch.mode = webhook` tasks to their
//! URL. It claims them through the same claim path as polling agents (leases, fences,
//! concurrency limits, pauses all hold), so a pushed instance is RUNNING under a lease token
//! before the request leaves. That lease covers the wait for the answer (the task's
//! `dispatch.timeout_seconds`, at most its `execution.timeout_seconds`) plus a margin, so a
//! replica that dies mid-push frees the instance soon.
//!
//! The receiver's answer decides the attempt: a 2xx with `{"status": "success", "result": …}`
//! completes it; `202` means the agent will call back with the lease token (the callback URLs
//! are in the body), and the lease is extended to the task's `execution.timeout_seconds`;
//! anything else — another status, a refused destination, a connection error, no answer
//! within the wait — fails the attempt with `error_kind = dispatch`. A result that cannot be
//! stored (it holds U+0000) fails the attempt too; receiver text quoted in `error` has U+0000
//! removed. At shutdown, pushes still waiting are recorded at once as failed dispatch attempts
//! whose retry may start immediately, so another replica takes them over. At most
//! `max_in_flight` pushes run per replica and at most `max_per_task` per task, each with its
//! own timeout, so a slow or dead endpoint holds only its own task's slots.
//!
//! Throughput: a claim takes as many instances as there are free slots, and successes are
//! recorded through the group commit in lots (`start_recorder`), so a task's backlog moves in
//! batches both ways: most of a small claim's or commit's PostgreSQL time does not depend on
//! its size, so batch sizes decide the cost per push. The push's own future is kept small (its
//! request is boxed, its body serialised from the claim's fields without a JSON tree), as it
//! is moved thousands of times a second.
//!
//! Every replica's dispatcher hears every agent's work notifications, and most name agents
//! without webhook tasks. It keeps the set of agents with webhook tasks and claims only for
//! notifications of theirs; a notification of another agent has the set read again (at most
//! every [`AGENTS_REREAD_MIN`]), in case that agent just got its first webhook task.
//!
//! By part: `push` (one push: its body, its signed request, what the answer decides), `record`
//! (recording outcomes: successes in lots through the group commit, failures, give-backs at
//! shutdown), `run` (the loop: claims as slots free up, woken by the webhook agents' work
//! notifications).

mod push;
mod record;
mod run;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Heartbeats;
use crate::batching::group_commit::GroupCommit;
use crate::otel::Spans;
use crate::outbound;
use crate::store::{self, claim};
use record::{Success, start_recorder};

pub use run::AGENTS_REREAD_MIN;

pub const LOOP_NAME: &str = "webhook_dispatcher";

/// The reason recorded for a push cut short by this replica's shutdown.
pub const SHUTDOWN_REASON: &str = "the replica shut down before the receiver answered";

#[derive(Debug, Clone)]
pub struct WebhookDispatcherConfig {
    pub node_id: String,
    /// Longest wait between passes without a work notification.
    pub interval: Duration,
    pub max_in_flight: usize,
    pub max_per_task: i64,
    /// Base of the callback URLs put in each push (e.g. `http://127.0.0.1:8080`).
    pub public_url: String,
}

impl WebhookDispatcherConfig {
    /// The defaults of `Config`, under this node id and public URL.
    pub fn new(node_id: impl Into<String>, public_url: impl Into<String>) -> Self {
        Self {
            node_id: node_id.into(),
            public_url: public_url.into(),
            ..Self::from_config(&crate::config::Config::default())
        }
    }

    pub fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            node_id: cfg.node_id.clone(),
            interval: Duration::from_millis(cfg.webhook_interval_ms),
            max_in_flight: cfg.webhook_max_in_flight,
            max_per_task: cfg.webhook_max_per_task,
            public_url: cfg.public_url.clone(),
        }
    }
}

/// How one push ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    Succeeded,
    Accepted,
    Failed,
    /// The instance changed meanwhile (reaped, cancelled): the answer no longer counts.
    Stale,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchReport {
    pub num_pushed: usize,
    pub num_succeeded: usize,
    pub num_accepted: usize,
    pub num_failed: usize,
}

#[derive(Clone)]
pub struct WebhookDispatcher {
    pool: PgPool,
    config: Arc<WebhookDispatcherConfig>,
    heartbeats: Heartbeats,
    client: outbound::Client,
    group: GroupCommit,
    successes: mpsc::UnboundedSender<Success>,
    spans: Spans,
}

impl WebhookDispatcher {
    pub fn new(
        pool: PgPool,
        config: WebhookDispatcherConfig,
        heartbeats: Heartbeats,
        group: GroupCommit,
        client: outbound::Client,
    ) -> Self {
        Self {
            pool,
            config: Arc::new(config),
            heartbeats,
            client,
            successes: start_recorder(group.clone()),
            group,
            spans: Spans::off(),
        }
    }

    /// Record a claim span and a push span for every push.
    pub fn with_spans(mut self, spans: Spans) -> Self {
        self.spans = spans;
        self
    }

    fn actor(&self) -> String {
        format!("webhook:{}", self.config.node_id)
    }

    async fn claim(&self, max: usize) -> store::Result<Vec<claim::Claimed>> {
        let scope = claim::ClaimScope::Webhook {
            max_per_task: self.config.max_per_task,
        };
        let max = i64::try_from(max).unwrap_or(i64::MAX).clamp(1, 1000);
        metrics::counter!("kairos_webhook_claims_total").increment(1);
        claim::claim_scoped(&self.pool, scope, &self.config.node_id, max, &self.actor()).await
    }

    /// Claim what is due and push it, waiting for every answer (tests and one-off passes).
    pub async fn run_once(&self) -> store::Result<DispatchReport> {
        let claimed = self.claim(self.config.max_in_flight).await?;
        let mut report = DispatchReport {
            num_pushed: claimed.len(),
            ..DispatchReport::default()
        };
        let mut set = JoinSet::new();
        let never = CancellationToken::new();
        for c in claimed {
            let me = self.clone();
            let never = never.clone();
            set.spawn(async move { me.push(c, &never).await });
        }
        while let Some(r) = set.join_next().await {
            match r {
                Ok(PushOutcome::Succeeded) => report.num_succeeded += 1,
                Ok(PushOutcome::Accepted) => report.num_accepted += 1,
                Ok(PushOutcome::Failed) => report.num_failed += 1,
                Ok(PushOutcome::Stale) | Err(_) => {}
            }
        }
        Ok(report)
    }
}
