//! Wake-ups for long-polling claims. One `LISTEN kairos_work` connection per process turns
//! notifications (payload: the agent id with claimable work) into wake-ups, so waiting agents
//! hold no database connection of their own: the number of connections stays bounded however
//! many agents wait.
//!
//! Waiters of one agent do not wake as a herd. A notification names the agent and how many
//! of its waiting requests to wake (one, or `+n` more: [`crate::store::work_payloads`]), and
//! wakes that many of the agent's longest waiting requests at most. A waiter whose claim came
//! back full passes the wake-up on to the next ([`Waiter::pass_on`]), so as many wake up as
//! there is work for. Waking them together rather than one after another matters at the top of
//! the minute: concurrent claims of one agent share claim rounds, so eight waiters woken at
//! once pay for two rounds, where a chain of wake-ups paid for eight, one after the other. A
//! wake-up given to a request that goes away before using it moves on to the next waiter. The
//! webhook dispatcher, one per process, subscribes to every notification over a broadcast
//! channel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use super::{error_backoff, error_chain};
use crate::store::{WORK_CHANNEL, parse_work_payload};

/// Sent to every waiter when notifications may have been lost (listener reconnected): wake all.
pub const WAKE_ALL: &str = "*";

/// Per agent id, the wake-up of the requests waiting for its work and how many there are. An
/// entry lives while it has waiters.
type Agents = Arc<Mutex<HashMap<String, (Arc<Notify>, usize)>>>;

#[derive(Clone)]
pub struct WorkSignal {
    tx: broadcast::Sender<String>,
    agents: Agents,
}

/// One request's registration as a waiter for an agent's work.
pub struct Waiter {
    agents: Agents,
    agent: String,
    notify: Arc<Notify>,
}

impl Waiter {
    /// A wake-up for this agent. Call `enable` on it before looking for work, so a
    /// notification between the look and the wait is kept.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// There is likely more work than this waiter took: wake the next one.
    pub fn pass_on(&self) {
        self.notify.notify_one();
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, count)) = agents.get_mut(&self.agent) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                agents.remove(&self.agent);
            }
        }
    }
}

impl Default for WorkSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkSignal {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(1024);
        Self {
            tx,
            agents: Arc::default(),
        }
    }

    /// Register a request waiting for `agent`'s work.
    pub fn waiter(&self, agent: &str) -> Waiter {
        let mut agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        let (notify, count) = agents
            .entry(agent.to_owned())
            .or_insert_with(|| (Arc::new(Notify::new()), 0));
        *count += 1;
        Waiter {
            agents: self.agents.clone(),
            agent: agent.to_owned(),
            notify: notify.clone(),
        }
    }

    /// A notification for `payload`: the dispatcher hears every one; of the agent's waiting
    /// requests, as many as the payload announces instances wake, the longest waiting first
    /// ([`WAKE_ALL`] wakes everyone).
    fn notify(&self, payload: &str) {
        let _ = self.tx.send(payload.to_owned());
        let agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        if payload == WAKE_ALL {
            for (notify, _) in agents.values() {
                notify.notify_waiters();
            }
            return;
        }
        let (agent, count) = parse_work_payload(payload);
        if let Some((notify, waiters)) = agents.get(agent) {
            // Each call wakes one queued waiter (or leaves one wake-up for the next to wait).
            for _ in 0..count.min(*waiters) {
                notify.notify_one();
            }
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.tx.subscribe()
    }

    /// Wake every waiter of this process (shutdown, tests).
    pub fn wake_all(&self) {
        self.notify(WAKE_ALL);
    }

    /// Forward notifications until `shutdown`; reconnect with backoff on errors.
    pub async fn run(self, pool: PgPool, shutdown: CancellationToken) {
        let mut errors = 0u32;
        loop {
            let mut listener = match PgListener::connect_with(&pool).await {
                Ok(l) => l,
                Err(e) => {
                    errors = errors.saturating_add(1);
                    tracing::warn!(error = %error_chain(&e), "work signal cannot connect; claims fall back to polling");
                    if sleep_or_stop(&shutdown, error_backoff(errors)).await {
                        return;
                    }
                    continue;
                }
            };
            if let Err(e) = listener.listen(WORK_CHANNEL).await {
                errors = errors.saturating_add(1);
                tracing::warn!(error = %error_chain(&e), "work signal cannot LISTEN");
                if sleep_or_stop(&shutdown, error_backoff(errors)).await {
                    return;
                }
                continue;
            }
            errors = 0;
            // Anything sent while we were not listening is lost: let every waiter look again.
            self.wake_all();
            loop {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    n = listener.try_recv() => match n {
                        Ok(Some(n)) => self.notify(n.payload()),
                        // The connection was lost (sqlx reconnects and listens again on the next
                        // call): whatever was announced meanwhile is lost, so every waiter looks.
                        Ok(None) => {
                            metrics::counter!("kairos_listen_reconnects_total", "channel" => WORK_CHANNEL).increment(1);
                            tracing::warn!(channel = WORK_CHANNEL, reason = "LISTEN connection lost", "work signal reconnecting; waking every waiting claim");
                            self.wake_all();
                        }
                        Err(e) => {
                            tracing::warn!(error = %error_chain(&e), "work signal lost its connection; reconnecting");
                            self.wake_all();
                            break;
                        }
                    },
                    // A connection the network went silent on delivers nothing and reports
                    // nothing: after a quiet spell, ask it to answer within a bound.
                    _ = tokio::time::sleep(LISTEN_CHECK) => {
                        let ping = sqlx::query("select 1").execute(&mut listener);
                        if !matches!(tokio::time::timeout(LISTEN_CHECK_TIMEOUT, ping).await, Ok(Ok(_))) {
                            metrics::counter!("kairos_listen_reconnects_total", "channel" => WORK_CHANNEL).increment(1);
                            tracing::warn!(channel = WORK_CHANNEL, reason = "LISTEN connection did not answer a check", "work signal reconnecting; waking every waiting claim");
                            self.wake_all();
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// After this long without a notification, the LISTEN connection is checked.
const LISTEN_CHECK: Duration = Duration::from_secs(5);
/// How long that check may take before the connection is given up.
const LISTEN_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Sleep, or return true at once when `shutdown` fires.
async fn sleep_or_stop(shutdown: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::WorkSignal;
    use crate::store::work_payloads;

    /// How many of `n` waiting claims of `agent` the `payloads` wake.
    fn woken(n: usize, agent: &str, payloads: &[String]) -> usize {
        let signal = WorkSignal::new();
        let waiters: Vec<_> = (0..n).map(|_| signal.waiter(agent)).collect();
        let mut futures: Vec<_> = waiters.iter().map(|w| Box::pin(w.notified())).collect();
        for f in &mut futures {
            f.as_mut().enable();
        }
        for p in payloads {
            signal.notify(p);
        }
        let mut cx = Context::from_waker(Waker::noop());
        futures
            .iter_mut()
            .map(|f| f.as_mut().poll(&mut cx))
            .filter(Poll::is_ready)
            .count()
    }

    #[test]
    fn a_notification_wakes_as_many_waiters_as_it_announces_instances() {
        assert_eq!(woken(8, "a", &work_payloads("a", 1)), 1);
        assert_eq!(woken(8, "a", &work_payloads("a", 3)), 3);
        assert_eq!(woken(8, "a", &work_payloads("a", 80)), 8);
        // Another agent's work wakes nobody here.
        assert_eq!(woken(8, "a", &work_payloads("b", 80)), 0);
    }
}
