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
//!
//! Waiters of one agent also share their relooks. While its work exists but cannot be taken
//! (a paused task, a task at its concurrency limit), every waiting claim looks again on a
//! timer; a thousand waiters each reading the agent's next `available_at` and claiming on their
//! own timers cost the database a thousand reads and claims a second for no work. So the read
//! is shared: the first waiter to need it reads it, waiters that need it meanwhile or within
//! [`SHARED_LOOK_TTL`] take its answer, and any notification naming the agent makes it stale
//! ([`Waiter::next_available`]). And the relook timers of one agent tick on one grid
//! ([`Waiter::relook_at`]): its waiters claim at the same instants, so their claims share claim
//! rounds. A relook comes no later than it would on a waiter's own timer.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, broadcast};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{error_backoff, error_chain};
use crate::store::{self, WORK_CHANNEL, parse_work_payload};

/// Sent to every waiter when notifications may have been lost (listener reconnected): wake all.
pub const WAKE_ALL: &str = "*";

/// How long the waiters of one agent share one read of its next `available_at` when no
/// notification names the agent meanwhile.
pub const SHARED_LOOK_TTL: Duration = Duration::from_millis(250);

/// What the requests waiting for one agent's work share. An entry lives while it has waiters.
struct AgentWaiters {
    /// Their wake-up.
    notify: Arc<Notify>,
    /// How many there are.
    count: usize,
    look: Arc<SharedLook>,
}

/// The last read of an agent's next `available_at`, shared by its waiters.
struct SharedLook {
    /// Moves on with every notification naming the agent: a read made before it is stale.
    generation: AtomicU64,
    /// Held while a waiter reads, so the others wait for its answer instead of reading too.
    last: tokio::sync::Mutex<Option<Look>>,
    /// Where the agent's relook grid starts ([`Waiter::relook_at`]).
    origin: Instant,
}

/// One read: when it was made, under which generation, and its answer.
struct Look {
    generation: u64,
    at: Instant,
    next: NextWork,
}

/// When an agent's waiting work may next be claimed, as its waiters share it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NextWork {
    /// When its earliest PENDING instance becomes claimable (`None`: it has none; an instant
    /// already past: now).
    pub available: Option<Instant>,
    /// When a hold or a rate that alone keeps back one of its claimable instances ends.
    pub budgets_free: Option<Instant>,
}

type Agents = Arc<Mutex<HashMap<String, AgentWaiters>>>;

#[derive(Clone)]
pub struct WorkSignal {
    tx: broadcast::Sender<String>,
    agents: Agents,
    /// The start of every agent's relook grid, shifted by a phase drawn from the agent id so
    /// that different agents do not all relook at the same instants.
    epoch: Instant,
}

/// One request's registration as a waiter for an agent's work.
pub struct Waiter {
    agents: Agents,
    agent: String,
    notify: Arc<Notify>,
    look: Arc<SharedLook>,
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

    /// When the agent's waiting work may next be claimed ([`NextWork`]). `read` asks the database; its answer is shared with
    /// every waiter of the agent that asks while it runs or within [`SHARED_LOOK_TTL`] after,
    /// unless a notification names the agent meanwhile. Counted in
    /// `kairos_claim_next_available_total{source}` (`database` or `shared`).
    pub async fn next_available<E, F, Fut>(&self, read: F) -> Result<NextWork, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<NextWork, E>>,
    {
        let mut last = self.look.last.lock().await;
        // Read after taking the lock: a notification while another waiter read is seen here.
        let generation = self.look.generation.load(Ordering::Acquire);
        if let Some(l) = last.as_ref()
            && l.generation == generation
            && l.at.elapsed() < SHARED_LOOK_TTL
        {
            metrics::counter!("kairos_claim_next_available_total", "source" => "shared")
                .increment(1);
            return Ok(l.next);
        }
        metrics::counter!("kairos_claim_next_available_total", "source" => "database").increment(1);
        let at = Instant::now();
        let next = read().await?;
        *last = Some(Look {
            generation,
            at,
            next,
        });
        Ok(next)
    }

    /// The first instant after `now` on this agent's relook grid of spacing `every`. The
    /// grid's ticks are the agent's origin plus multiples of `every`, so every waiter of the
    /// agent that relooks with the same spacing claims at the same instants, and a grid of
    /// spacing `every / 2^k` holds every tick of the grid of `every`. At most `every` away.
    pub fn relook_at(&self, now: Instant, every: Duration) -> Instant {
        let every_ns = every.as_nanos().max(1);
        let origin = self.look.origin;
        // The grid runs both ways from the origin, which may lie ahead of `now`.
        let wait_ns = if now >= origin {
            every_ns - (now - origin).as_nanos() % every_ns
        } else {
            match (origin - now).as_nanos() % every_ns {
                0 => every_ns,
                ahead => ahead,
            }
        };
        now + Duration::from_nanos(u64::try_from(wait_ns).unwrap_or(u64::MAX))
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = agents.get_mut(&self.agent) {
            w.count = w.count.saturating_sub(1);
            if w.count == 0 {
                agents.remove(&self.agent);
            }
        }
    }
}

/// The phase of `agent`'s relook grid: a stable draw from its id, below one second.
fn relook_phase(agent: &str) -> Duration {
    let mut h = std::hash::DefaultHasher::new();
    agent.hash(&mut h);
    Duration::from_nanos(h.finish() % 1_000_000_000)
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
            epoch: Instant::now(),
        }
    }

    /// Register a request waiting for `agent`'s work.
    pub fn waiter(&self, agent: &str) -> Waiter {
        let mut agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        let w = agents
            .entry(agent.to_owned())
            .or_insert_with(|| AgentWaiters {
                notify: Arc::new(Notify::new()),
                count: 0,
                look: Arc::new(SharedLook {
                    generation: AtomicU64::new(0),
                    last: tokio::sync::Mutex::new(None),
                    origin: self.epoch + relook_phase(agent),
                }),
            });
        w.count += 1;
        Waiter {
            agents: self.agents.clone(),
            agent: agent.to_owned(),
            notify: w.notify.clone(),
            look: w.look.clone(),
        }
    }

    /// A notification for `payload`: the dispatcher hears every one; of the agent's waiting
    /// requests, as many as the payload announces instances wake, the longest waiting first
    /// ([`WAKE_ALL`] wakes everyone).
    fn notify(&self, payload: &str) {
        let _ = self.tx.send(payload.to_owned());
        let agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        if payload == WAKE_ALL {
            for w in agents.values() {
                w.look.generation.fetch_add(1, Ordering::AcqRel);
                w.notify.notify_waiters();
            }
            return;
        }
        let (agent, count) = parse_work_payload(payload);
        if let Some(w) = agents.get(agent) {
            w.look.generation.fetch_add(1, Ordering::AcqRel);
            // Each call wakes one queued waiter (or leaves one wake-up for the next to wait).
            for _ in 0..count.min(w.count) {
                w.notify.notify_one();
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

    /// Forward notifications until `shutdown`, listening on a connection from `pool`
    /// ([`store::listen_pool`]); reconnect with backoff on errors.
    pub async fn run(self, pool: PgPool, shutdown: CancellationToken) {
        let mut errors = 0u32;
        loop {
            let mut listener = match store::listener(&pool, WORK_CHANNEL).await {
                Ok(l) => l,
                Err(e) => {
                    errors = errors.saturating_add(1);
                    tracing::warn!(error = %error_chain(&e), "work signal cannot LISTEN; claims fall back to polling");
                    if sleep_or_stop(&shutdown, error_backoff(errors)).await {
                        return;
                    }
                    continue;
                }
            };
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
                    // A connection the network went silent on, or one left on a server that
                    // turned read-only, delivers nothing and reports nothing: after a quiet
                    // spell, ask it to answer within a bound, from a server that takes writes.
                    _ = tokio::time::sleep(LISTEN_CHECK) => {
                        let ping = crate::store::connect::check_listener(&mut listener);
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
    use std::time::Duration;

    use tokio::time::Instant;

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
    fn waiters_of_one_agent_relook_on_one_grid_whose_halves_hold_its_ticks() {
        let signal = WorkSignal::new();
        let (a, b) = (signal.waiter("a"), signal.waiter("a"));
        let second = Duration::from_secs(1);
        let now = Instant::now();
        let tick = a.relook_at(now, second);
        assert!(tick > now && tick <= now + second);
        // Another waiter, looking later within the same second, relooks at the same instant.
        let later = now + (tick - now) / 2;
        assert_eq!(b.relook_at(later, second), tick);
        // On the half-second grid the next tick comes no later, and the one-second tick is on it.
        let half = b.relook_at(later, second / 2);
        assert!(half <= tick);
        let mut t = half;
        while t < tick {
            t = b.relook_at(t, second / 2);
        }
        assert_eq!(t, tick);
        // A tick exactly now is not a relook: the next one is a whole step away.
        assert_eq!(a.relook_at(tick, second), tick + second);
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
