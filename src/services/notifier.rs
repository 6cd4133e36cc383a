//! The notifier: delivers outbox rows at least once. Each pass takes a bounded batch of due
//! deliveries (SKIP LOCKED, held for the delivery timeout), POSTs them concurrently, signed
//! like webhook pushes and carrying `Kairos-Event-Id`, and records the outcome: delivered, to
//! be retried with exponential backoff and jitter, or — past `notify_max_age_seconds` —
//! undeliverable. A receiver that is down delays only its own deliveries. Destinations follow
//! the outbound policy: a refused address is a failed delivery, logged with the reason.

use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{Heartbeats, error_chain, run_periodic};
use crate::domain::retry::backoff;
use crate::domain::task::RetryBackoff;
use crate::outbound;
use crate::store::{self, outbox};

pub const LOOP_NAME: &str = "notifier";

#[derive(Debug, Clone)]
pub struct NotifierConfig {
    pub interval: Duration,
    /// Deliveries taken per pass (also how many are in flight at once).
    pub batch_size: i64,
    /// Timeout of one delivery.
    pub timeout: Duration,
    /// Past this age an undelivered notification is recorded as undeliverable.
    pub max_age_seconds: i64,
    /// Backoff between tries of one delivery.
    pub backoff: RetryBackoff,
}

impl Default for NotifierConfig {
    fn default() -> Self {
        Self::from_config(&crate::config::Config::default())
    }
}

impl NotifierConfig {
    pub fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            interval: Duration::from_millis(cfg.notifier_interval_ms),
            batch_size: 32,
            timeout: Duration::from_secs(cfg.notify_timeout_seconds),
            max_age_seconds: cfg.notify_max_age_seconds,
            backoff: RetryBackoff {
                base_seconds: 1,
                max_seconds: 300,
                jitter: 0.2,
            },
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifyReport {
    pub num_delivered: usize,
    pub num_retrying: usize,
    pub num_undeliverable: usize,
}

pub struct Notifier {
    pool: PgPool,
    config: NotifierConfig,
    heartbeats: Heartbeats,
    client: outbound::Client,
}

enum Outcome {
    Delivered,
    Failed(String),
}

impl Notifier {
    pub fn new(
        pool: PgPool,
        config: NotifierConfig,
        heartbeats: Heartbeats,
        client: outbound::Client,
    ) -> Self {
        Self {
            pool,
            config,
            heartbeats,
            client,
        }
    }

    /// One batch: take, deliver concurrently, record.
    pub async fn run_once(&self) -> store::Result<NotifyReport> {
        let hold = self.config.timeout.as_secs_f64() + 30.0;
        let due = outbox::take_due(&self.pool, self.config.batch_size, hold).await?;
        let mut report = NotifyReport::default();
        if due.is_empty() {
            return Ok(report);
        }
        let mut inflight = JoinSet::new();
        for d in due {
            let client = self.client.clone();
            let timeout = self.config.timeout;
            inflight.spawn(async move {
                let outcome = deliver(&client, &d, timeout).await;
                (d, outcome)
            });
        }
        while let Some(joined) = inflight.join_next().await {
            let Ok((d, outcome)) = joined else { continue };
            match outcome {
                Outcome::Delivered => {
                    outbox::mark_delivered(&self.pool, d.id).await?;
                    report.num_delivered += 1;
                    metrics::counter!("kairos_notifications_total", "outcome" => "delivered")
                        .increment(1);
                    tracing::debug!(event_id = %d.event_id, kind = %d.kind, task_id = %d.task_id, attempt = d.attempts, "notification delivered");
                }
                Outcome::Failed(reason) => {
                    let retry_in = backoff(&self.config.backoff, d.attempts, rand::random::<f64>());
                    let gave_up = outbox::mark_failed(
                        &self.pool,
                        d.id,
                        &reason,
                        retry_in,
                        self.config.max_age_seconds,
                    )
                    .await?;
                    if gave_up {
                        report.num_undeliverable += 1;
                        metrics::counter!("kairos_notifications_total", "outcome" => "undeliverable").increment(1);
                        tracing::error!(event_id = %d.event_id, kind = %d.kind, task_id = %d.task_id, attempt = d.attempts, reason = %reason, "notification undeliverable; giving up");
                    } else {
                        report.num_retrying += 1;
                        metrics::counter!("kairos_notifications_total", "outcome" => "retry")
                            .increment(1);
                        tracing::warn!(event_id = %d.event_id, kind = %d.kind, task_id = %d.task_id, attempt = d.attempts, reason = %reason, retry_in_ms = retry_in.as_millis() as u64, "notification failed; will retry");
                    }
                }
            }
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
                    .map(|r| r.num_delivered + r.num_retrying + r.num_undeliverable >= batch)
            },
        )
        .await;
    }
}

async fn deliver(client: &outbound::Client, d: &outbox::Delivery, timeout: Duration) -> Outcome {
    let body = match serde_json::to_vec(&d.payload.0) {
        Ok(b) => b,
        Err(e) => return Outcome::Failed(format!("payload not serialisable: {}", error_chain(&e))),
    };
    let headers = [
        ("Kairos-Event-Id", d.event_id.to_string()),
        ("Kairos-Event-Type", d.kind.clone()),
        ("Idempotency-Key", d.event_id.to_string()),
    ];
    match client
        .post(&d.url, &body, d.secret.as_deref(), &headers, timeout)
        .await
    {
        Ok(a) if (200..300).contains(&a.status) => Outcome::Delivered,
        Ok(a) => Outcome::Failed(format!("receiver answered HTTP {}", a.status)),
        // PostgreSQL text cannot hold U+0000.
        Err(reason) => Outcome::Failed(reason.replace('\0', "")),
    }
}
