//! Wake-ups for long-polling claims. One `LISTEN kairos_work` connection per process fans
//! notifications (payload: the agent id with claimable work) out to every waiting request over
//! a broadcast channel, so waiting agents hold no database connection of their own: the number
//! of connections stays bounded however many agents wait.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::{error_backoff, error_chain};
use crate::store::WORK_CHANNEL;

/// Sent to every waiter when notifications may have been lost (listener reconnected): wake all.
pub const WAKE_ALL: &str = "*";

#[derive(Clone)]
pub struct WorkSignal {
    tx: broadcast::Sender<String>,
}

impl Default for WorkSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkSignal {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(1024);
        Self { tx }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.tx.subscribe()
    }

    /// Wake every waiter of this process (shutdown, tests).
    pub fn wake_all(&self) {
        let _ = self.tx.send(WAKE_ALL.to_owned());
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
                    n = listener.recv() => match n {
                        Ok(n) => {
                            let _ = self.tx.send(n.payload().to_owned());
                        }
                        Err(e) => {
                            tracing::warn!(error = %error_chain(&e), "work signal lost its connection; reconnecting");
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Sleep, or return true at once when `shutdown` fires.
async fn sleep_or_stop(shutdown: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}
