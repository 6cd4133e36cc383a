//! Recording what a push ended in: successes in lots through the group commit, failed
//! dispatches, and pushes given back at shutdown; each outcome counted in
//! `kairos_webhook_pushes_total`.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::{PushOutcome, SHUTDOWN_REASON, WebhookDispatcher};
use crate::batching::group_commit::GroupCommit;
use crate::services::error_chain;
use crate::store::{self, claim, instances};

/// A push answered with success, to be recorded, and where its recording's answer goes.
pub(super) type Success = (
    instances::Completion,
    oneshot::Sender<store::Result<crate::domain::instance::Instance>>,
);

/// Most successes recorded in one go.
const MAX_SUCCESSES_AT_ONCE: usize = 1000;

/// How long the recorder waits for one lot of successes to be recorded before it queues the
/// next: far longer than a commit, so lots are normally one after the other, and short enough
/// that a lot with a slow item (its row held by another transaction, waited for alone) holds
/// up the replica's other successes only briefly.
const LOT_WAIT: Duration = Duration::from_millis(100);

/// Record the pushes' successes through the group commit, those that arrived while the
/// previous lot was being recorded all at once: queued together, a free committer takes them
/// into one transaction. Left to arrive one by one, three committers took them in
/// transactions of about eight at 5,000 pushes a second, and each transaction's fixed cost was
/// a large part of PostgreSQL's time per push. A lone success is recorded at once. Each
/// success is still its own compare-and-swap under its push's lease, answered on its own.
pub(super) fn start_recorder(group: GroupCommit) -> mpsc::UnboundedSender<Success> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Success>();
    tokio::spawn(async move {
        let mut lot = Vec::new();
        while rx.recv_many(&mut lot, MAX_SUCCESSES_AT_ONCE).await > 0 {
            let (items, replies): (Vec<_>, Vec<_>) = lot.drain(..).unzip();
            let group = group.clone();
            let recording = tokio::spawn(async move {
                let answers = group.complete_each(items).await;
                for (answer, reply) in answers.into_iter().zip(replies) {
                    // The push may have gone (shutdown); the write stands.
                    let _ = reply.send(answer);
                }
            });
            // The next lot gathers meanwhile; a slower lot finishes on its own.
            let _ = tokio::time::timeout(LOT_WAIT, recording).await;
        }
    });
    tx
}

impl WebhookDispatcher {
    /// A push whose answer this replica will not wait for (it is shutting down) goes back to
    /// PENDING at once with the same attempt: kairos cut it short, so it spends no attempt and
    /// counts nothing toward the circuit breaker. When the give-back fails, the attempt is
    /// recorded as a failed dispatch whose retry may start at once.
    pub(super) async fn give_back_at_shutdown(&self, c: &claim::Claimed) -> PushOutcome {
        let i = &c.instance;
        match instances::give_back(
            &self.pool,
            &[(i.id, c.lease_token)],
            &self.actor(),
            SHUTDOWN_REASON,
        )
        .await
        {
            Ok(back) => {
                for g in &back {
                    tracing::warn!(task_id = %g.task_id, window_key = %g.window_key, instance_id = %g.id, attempt = g.attempt, reason = SHUTDOWN_REASON, "pushed instance given back");
                }
                PushOutcome::Stale
            }
            Err(e) => {
                tracing::warn!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, error = %error_chain(&e), "could not give the push back; recording it as a failed dispatch");
                self.record_failure(c, SHUTDOWN_REASON.to_owned(), true)
                    .await
            }
        }
    }

    /// RUNNING → SUCCESS under the push's lease, through the recorder ([`start_recorder`]).
    pub(super) async fn record_success(
        &self,
        done: instances::Completion,
    ) -> store::Result<crate::domain::instance::Instance> {
        let (reply, answer) = oneshot::channel();
        let gone = || store::Error::Db(sqlx::Error::PoolClosed);
        self.successes.send((done, reply)).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// Record the attempt as a failed dispatch (retryable), its retry at once when asked.
    pub(super) async fn record_failure(
        &self,
        c: &claim::Claimed,
        reason: String,
        retry_at_once: bool,
    ) -> PushOutcome {
        let i = &c.instance;
        // PostgreSQL text cannot hold U+0000; receiver text may.
        let reason = reason.replace('\0', "");
        let report = instances::FailureReport {
            id: i.id,
            lease_token: c.lease_token,
            error: reason.clone(),
            retryable: true,
            retry_at_once,
            error_kind: "dispatch",
            actor: Some(self.actor()),
            throttle_seconds: None,
            throttle_until: None,
        };
        match self.group.fail(report).await {
            Ok(after) => {
                tracing::warn!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, reason = %reason, status = %after.status, available_at = %after.available_at, "webhook push failed");
                count(PushOutcome::Failed)
            }
            Err(e) => stale(i, &e),
        }
    }
}

pub(super) fn count(o: PushOutcome) -> PushOutcome {
    let label = match o {
        PushOutcome::Succeeded => "succeeded",
        PushOutcome::Accepted => "accepted",
        PushOutcome::Failed => "failed",
        PushOutcome::Stale => "stale",
    };
    metrics::counter!("kairos_webhook_pushes_total", "outcome" => label).increment(1);
    o
}

/// The answer could not be recorded: the lease is gone (reaped, cancelled), or the database
/// refused the write; the lease then expires and the reaper retries the instance.
pub(super) fn stale(i: &crate::domain::instance::Instance, e: &store::Error) -> PushOutcome {
    match e {
        store::Error::Fenced { .. } | store::Error::Stale(_) | store::Error::NotFound => {
            tracing::warn!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, reason = %e, "webhook answer arrived after the lease was lost; ignored");
        }
        _ => {
            tracing::error!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, reason = %e, "webhook answer could not be recorded; the lease will expire");
        }
    }
    count(PushOutcome::Stale)
}
