//! The loop itself: a pass, then the next step (a sleep or a staging pass beside the loop),
//! woken early by the task-change notifications it LISTENs for, a burst of them coalesced into
//! one pass.

use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::next_step::Next;
use super::{LOOP_NAME, TriggerLoop};
use crate::services::{error_backoff, error_chain};
use crate::store::{self, TASKS_CHANNEL};

/// After a task-change notification, wait this long and take every notification that arrived
/// meanwhile, so a burst of changes costs one pass instead of one pass per change.
pub const COALESCE_WAKEUPS: Duration = Duration::from_millis(50);

impl TriggerLoop {
    /// Run until `shutdown` is cancelled. Database errors are logged with their cause and
    /// retried with backoff; the loop never exits on its own.
    pub async fn run(self, shutdown: CancellationToken) {
        self.heartbeats.expect(LOOP_NAME, self.config.max_sleep);
        let mut listener: Option<PgListener> = None;
        let mut errors: u32 = 0;
        // The staging pass in flight, if any: one at a time.
        let mut staging: Option<tokio::task::JoinHandle<()>> = None;
        tracing::info!(node_id = %self.config.node_id, "trigger loop started");
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            if staging.as_ref().is_some_and(|h| h.is_finished()) {
                staging = None;
            }
            if listener.is_none() {
                listener = match store::listener(&self.listen_pool, TASKS_CHANNEL).await {
                    Ok(l) => Some(l),
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "trigger loop cannot LISTEN; will poll");
                        None
                    }
                };
            }
            let pass = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                r = crate::services::bounded_pass(LOOP_NAME, self.run_once()) => r,
            };
            let sleep = match pass {
                Ok(report) => {
                    errors = 0;
                    self.heartbeats.tick(LOOP_NAME, self.config.max_sleep);
                    match self
                        .next_step(report.num_tasks > 0, staging.is_some())
                        .await
                    {
                        Ok(Next::Sleep(d)) => d,
                        Ok(Next::Stage { at, ahead }) => {
                            staging = Some(self.start_staging(at));
                            // Until the instant, woken by task changes as any sleep is; the
                            // pass at the instant takes what was not staged.
                            ahead
                        }
                        Err(e) => {
                            tracing::warn!(error = %error_chain(&e), "trigger loop cannot read next fire time");
                            error_backoff(0)
                        }
                    }
                }
                Err(e) => {
                    errors = errors.saturating_add(1);
                    let wait = error_backoff(errors);
                    tracing::error!(error = %error_chain(&e), retry_in_ms = wait.as_millis() as u64, "trigger pass failed");
                    // The database may have failed over: listen again where the pool now
                    // connects (a listener left on a server that turned read-only hears nothing).
                    listener = None;
                    wait
                }
            };
            if sleep.is_zero() {
                continue;
            }
            let woke = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(sleep) => Ok(false),
                n = recv(&mut listener) => n,
            };
            if let (Ok(true), Some(l)) = (&woke, listener.as_mut()) {
                // One pass for a burst of changes.
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(COALESCE_WAKEUPS) => {}
                }
                let mut coalesced = 0u64;
                while let Ok(Ok(Some(_))) =
                    tokio::time::timeout(Duration::from_millis(1), l.try_recv()).await
                {
                    coalesced += 1;
                }
                tracing::debug!(coalesced, "task changes woke the trigger loop");
            }
            if let Err(e) = woke {
                tracing::warn!(error = %error_chain(&e), "trigger loop lost its LISTEN connection; reconnecting");
                listener = None;
            }
        }
        if let Some(handle) = staging {
            // A staging pass ends at its instant, at most the lead away: let it publish what
            // it wrote rather than leave those windows to another replica or a restart.
            let bound = self.config.lead + Duration::from_secs(5);
            let abort = handle.abort_handle();
            if tokio::time::timeout(bound, handle).await.is_err() {
                abort.abort();
            }
        }
        tracing::info!("trigger loop stopped");
    }
}

/// Wait for a task-change notification; pending forever without a listener. A lost LISTEN
/// connection also answers `true`: changes announced while it was gone were not heard, so a
/// pass runs now (the listener reconnects, and listens again, on its next use).
async fn recv(listener: &mut Option<PgListener>) -> Result<bool, sqlx::Error> {
    match listener {
        Some(l) => match l.try_recv().await? {
            Some(_) => Ok(true),
            None => {
                tracing::warn!(
                    reason = "LISTEN connection lost; task changes meanwhile were not heard",
                    "trigger loop runs a pass now"
                );
                Ok(true)
            }
        },
        None => std::future::pending().await,
    }
}
