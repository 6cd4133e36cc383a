//! Background loops, one module each. Every loop has a `…Config`, a `run(self, shutdown)` that
//! survives database errors with backoff, and a public `run_once` that tests drive directly.

pub mod db_watch;
pub mod notifier;
pub mod pruner;
pub mod retry_scanner;
pub mod span_exporter;
pub mod stats;
pub mod timeout_reaper;
pub mod trigger_loop;
pub mod webhook_dispatcher;
pub mod work_signal;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When each loop last completed a pass, for `/readyz` and `kairos_loop_last_tick_timestamp`.
#[derive(Clone, Default)]
pub struct Heartbeats {
    inner: Arc<Mutex<HashMap<&'static str, (Instant, Duration)>>>,
}

impl Heartbeats {
    /// Record a tick of `name`, which promises to tick again within `expected`.
    pub fn tick(&self, name: &'static str, expected: Duration) {
        if let Ok(mut m) = self.inner.lock() {
            m.insert(name, (Instant::now(), expected));
        }
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        metrics::gauge!("kairos_loop_last_tick_timestamp", "loop" => name).set(secs);
        tracing::debug!(loop_name = name, "loop heartbeat");
    }

    /// Register a loop before its first tick so a loop that never ticks is reported.
    pub fn expect(&self, name: &'static str, expected: Duration) {
        if let Ok(mut m) = self.inner.lock() {
            m.entry(name).or_insert((Instant::now(), expected));
        }
    }

    /// Loops that have not ticked within three times their promise (and at least 15 s), with
    /// the seconds since their last tick.
    pub fn stale(&self) -> Vec<(&'static str, f64)> {
        self.snapshot()
            .into_iter()
            .filter(|(_, _, ok)| !ok)
            .map(|(name, age, _)| (name, age))
            .collect()
    }

    /// Every loop with the seconds since its last tick and whether that is within its promise
    /// (see [`Heartbeats::stale`]), by name.
    pub fn snapshot(&self) -> Vec<(&'static str, f64, bool)> {
        let Ok(m) = self.inner.lock() else {
            return Vec::new();
        };
        let mut out: Vec<(&'static str, f64, bool)> = m
            .iter()
            .map(|(name, (at, expected))| {
                let allowed = (*expected * 3).max(Duration::from_secs(15));
                let age = at.elapsed();
                (*name, age.as_secs_f64(), age <= allowed)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(b.0));
        out
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.inner
            .lock()
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default()
    }
}

/// Exponential backoff for a loop whose pass failed: 100 ms doubling to 2 s, so every loop is
/// back within seconds of the database.
pub fn error_backoff(consecutive_errors: u32) -> Duration {
    let ms = 100u64.saturating_mul(1 << consecutive_errors.min(7));
    Duration::from_millis(ms.min(2_000))
}

/// Run one loop pass under the process's wall-clock bound ([`crate::store::health::bounded`]):
/// a pass stuck on a silent connection fails with a timeout instead of hanging the loop until
/// the kernel gives the socket up.
pub async fn bounded_pass<T>(
    name: &'static str,
    pass: impl std::future::Future<Output = crate::store::Result<T>>,
) -> crate::store::Result<T> {
    crate::store::health::bounded(name, pass).await
}

pub use crate::telemetry::error_chain;

/// The body every periodic scanner shares: run a pass, tick the heartbeat, sleep `interval`
/// (or go again at once when the pass says its batch was full), back off on errors, stop on
/// `shutdown`.
pub async fn run_periodic<F, Fut>(
    name: &'static str,
    interval: Duration,
    heartbeats: Heartbeats,
    shutdown: tokio_util::sync::CancellationToken,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::store::Result<bool>>,
{
    heartbeats.expect(name, interval);
    tracing::info!(
        loop_name = name,
        interval_ms = interval.as_millis() as u64,
        "loop started"
    );
    let mut errors: u32 = 0;
    loop {
        let result = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            r = bounded_pass(name, pass()) => r,
        };
        let wait = match result {
            Ok(full) => {
                errors = 0;
                heartbeats.tick(name, interval);
                if full { Duration::ZERO } else { interval }
            }
            Err(e) => {
                errors = errors.saturating_add(1);
                let wait = error_backoff(errors).max(interval);
                tracing::error!(loop_name = name, error = %error_chain(&e), retry_in_ms = wait.as_millis() as u64, "loop pass failed");
                wait
            }
        };
        if wait.is_zero() {
            continue;
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    tracing::info!(loop_name = name, "loop stopped");
}
