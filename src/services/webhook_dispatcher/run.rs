//! The dispatch loop: claim as many instances as there are free slots, push each in its own
//! task, and wait until a claim may find webhook work (a finished push, a webhook agent's work
//! notification, or the interval).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore, broadcast};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{LOOP_NAME, WebhookDispatcher};
use crate::services::work_signal::{WAKE_ALL, WorkSignal};
use crate::services::{error_backoff, error_chain};
use crate::store::{self, claim, parse_work_payload};

/// A pass for work kept back by a hold or a rate comes this long after the instant it ends.
const FREE_MARGIN: Duration = Duration::from_millis(2);

impl WebhookDispatcher {
    /// Run until `shutdown`: claim as many instances as there are free slots, push each in its
    /// own task, and wait until a claim may find webhook work (`Self::wait_for_work`). On
    /// shutdown, pushes still waiting for their answer are given back at once.
    pub async fn run(self, signal: WorkSignal, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.config.max_in_flight));
        let finished = Arc::new(Notify::new());
        let mut pushes: JoinSet<()> = JoinSet::new();
        let mut errors = 0u32;
        self.heartbeats.expect(LOOP_NAME, self.config.interval);
        tracing::info!(
            max_in_flight = self.config.max_in_flight,
            "webhook dispatcher started"
        );
        // One subscription for the whole run: what is announced during a claim or a read waits
        // here for the next look.
        let mut wake = signal.subscribe();
        let mut agents = WebhookAgents::default();
        // A failed read leaves the set unread: the first notification then reads it again.
        let _ = agents.reread(&self.pool).await;
        loop {
            while pushes.try_join_next().is_some() {}
            let free = slots.available_permits();
            let mut wait = self.config.interval;
            if free > 0 && !shutdown.is_cancelled() {
                // This claim answers every notification heard so far.
                drain(&mut wake);
                match crate::services::bounded_pass(LOOP_NAME, self.claim(free)).await {
                    Ok(claimed) => {
                        errors = 0;
                        self.heartbeats.tick(LOOP_NAME, self.config.interval);
                        let full = claimed.len() >= free;
                        let none = claimed.is_empty();
                        for c in claimed {
                            let Ok(permit) = slots.clone().try_acquire_owned() else {
                                break;
                            };
                            let me = self.clone();
                            let finished = finished.clone();
                            let shutdown = shutdown.clone();
                            pushes.spawn(async move {
                                me.push(c, &shutdown).await;
                                drop(permit);
                                finished.notify_one();
                            });
                        }
                        if full {
                            continue;
                        }
                        // Nothing to push: perhaps work that a hold or a rate alone keeps
                        // back; if so, pass again when that ends.
                        if none && let Some(free_in) = self.until_budgets_free().await {
                            wait = wait.min(free_in);
                        }
                    }
                    Err(e) => {
                        errors = errors.saturating_add(1);
                        wait = error_backoff(errors).max(self.config.interval);
                        tracing::error!(error = %error_chain(&e), retry_in_ms = wait.as_millis() as u64, "webhook claim failed");
                    }
                }
            } else {
                self.heartbeats.tick(LOOP_NAME, self.config.interval);
            }
            if !self
                .wait_for_work(&mut wake, &mut agents, &finished, &shutdown, wait)
                .await
            {
                break;
            }
        }
        // Pushes in flight see the same cancellation and record their attempts as failed.
        let drain = async { while pushes.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(5), drain)
            .await
            .is_err()
        {
            tracing::warn!(
                "webhook pushes could not be recorded at shutdown; their leases will expire and the reaper retries them"
            );
        }
        tracing::info!("webhook dispatcher stopped");
    }

    /// How long until a hold or a rate that alone keeps webhook work back ends (and a moment
    /// more, to look after it), so the next pass comes then if that is sooner than the interval.
    /// `None` when no such end is known or the read failed (the interval covers it).
    async fn until_budgets_free(&self) -> Option<Duration> {
        match crate::services::bounded_pass(LOOP_NAME, claim::webhook_budgets_free_at(&self.pool))
            .await
        {
            Ok(Some((at, now))) => {
                Some((at - now).to_std().unwrap_or(Duration::ZERO) + FREE_MARGIN)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "could not read when webhook work kept back by a hold or a rate may start; next pass at the interval");
                None
            }
        }
    }

    /// Wait until a claim may find webhook work, and say so (`false`: shutdown). A claim is due
    /// when a push finished (its slot is free); when a notification names an agent with webhook
    /// tasks, or notifications were lost; when the webhook agents, read again because a
    /// notification named an agent not among them, hold one that was not there before; and
    /// after `wait`, the pass that finds delayed work (retries, `delay_seconds`), unless no
    /// agent has webhook tasks. Notifications of other agents (poll-mode work, the bulk of
    /// them) cost at most one read of the webhook agents per [`AGENTS_REREAD_MIN`], never a
    /// claim.
    async fn wait_for_work(
        &self,
        wake: &mut broadcast::Receiver<String>,
        agents: &mut WebhookAgents,
        finished: &Notify,
        shutdown: &CancellationToken,
        wait: Duration,
    ) -> bool {
        let mut pass_at = Instant::now() + wait;
        let mut reread_at: Option<Instant> = None;
        loop {
            let reread = async {
                match reread_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return false,
                _ = finished.notified() => return true,
                heard = wake.recv() => match heard {
                    Ok(payload) => {
                        let (agent, _) = parse_work_payload(&payload);
                        if payload == WAKE_ALL || agents.known.contains(agent) {
                            return true;
                        }
                        // Perhaps an agent whose first webhook task is newer than the last read.
                        reread_at.get_or_insert_with(|| agents.next_read());
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Some names were lost: a known agent's among them, or a new one.
                        if !agents.known.is_empty() {
                            return true;
                        }
                        reread_at.get_or_insert_with(|| agents.next_read());
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        // No more notifications (the signal is gone): only the interval is left.
                        tokio::select! {
                            _ = shutdown.cancelled() => return false,
                            _ = tokio::time::sleep_until(pass_at) => return true,
                        }
                    }
                },
                _ = reread => {
                    reread_at = None;
                    // A failed read cannot rule the notifications out: claim.
                    if agents.reread(&self.pool).await.unwrap_or(true) {
                        return true;
                    }
                }
                _ = tokio::time::sleep_until(pass_at) => {
                    let read = agents.reread(&self.pool).await;
                    if read.is_err() || !agents.known.is_empty() {
                        return true;
                    }
                    // No webhook task anywhere: nothing to claim.
                    self.heartbeats.tick(LOOP_NAME, self.config.interval);
                    pass_at = Instant::now() + self.config.interval;
                }
            }
        }
    }
}

/// After a notification names an agent not known to have webhook tasks, the webhook agents are
/// read again, but at most this often: a storm of poll-mode notifications costs a few small
/// reads a second. The first window of an agent whose first webhook task was registered since
/// the last read waits at most this long for its push; an agent already known never waits.
pub const AGENTS_REREAD_MIN: Duration = Duration::from_millis(100);

/// The agents with unpaused webhook tasks, as last read: their notifications make the
/// dispatcher claim.
#[derive(Default)]
struct WebhookAgents {
    known: HashSet<String>,
    /// When they were last read; `None` before the first read.
    read_at: Option<Instant>,
}

impl WebhookAgents {
    /// When the next read may run.
    fn next_read(&self) -> Instant {
        let now = Instant::now();
        self.read_at
            .map_or(now, |at| (at + AGENTS_REREAD_MIN).max(now))
    }

    /// Read them again; whether an agent was added. Counted in
    /// `kairos_webhook_agent_reads_total`.
    async fn reread(&mut self, pool: &PgPool) -> store::Result<bool> {
        metrics::counter!("kairos_webhook_agent_reads_total").increment(1);
        self.read_at = Some(Instant::now());
        match claim::webhook_agents(pool).await {
            Ok(now) => {
                let added = now.iter().any(|a| !self.known.contains(a));
                self.known = now;
                Ok(added)
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "cannot read the agents with webhook tasks; claiming instead");
                Err(e)
            }
        }
    }
}

/// Forget every notification heard so far (a claim about to run answers them).
fn drain(wake: &mut broadcast::Receiver<String>) {
    loop {
        match wake.try_recv() {
            Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => return,
        }
    }
}
