//! The webhook dispatcher: pushes PENDING instances of `dispatch.mode = webhook` tasks to their
//! URL. It claims them through the same claim path as polling agents (leases, fences,
//! concurrency limits, pauses all hold), so a pushed instance is RUNNING under a lease token
//! before the request leaves.
//!
//! The receiver's answer decides the attempt: a 2xx with `{"status": "success", "result": …}`
//! completes it; `202` means the agent will call back with the lease token (the callback URLs
//! are in the body); anything else — another status, a connection error, no answer within the
//! task's `timeout_seconds` — fails the attempt with `error_kind = dispatch`. At most
//! `max_in_flight` pushes run per replica and at most `max_per_task` per task, each with its own
//! timeout, so a slow or dead endpoint holds only its own task's slots.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::work_signal::WorkSignal;
use super::{Heartbeats, error_backoff, error_chain};
use crate::domain::text;
use crate::outbound::{self, AllowList};
use crate::store::group_commit::GroupCommit;
use crate::store::{self, claim, instances};

pub const LOOP_NAME: &str = "webhook_dispatcher";

#[derive(Debug, Clone)]
pub struct WebhookDispatcherConfig {
    pub node_id: String,
    /// Longest wait between passes without a work notification.
    pub interval: Duration,
    pub max_in_flight: usize,
    pub max_per_task: i64,
    /// Base of the callback URLs put in each push (e.g. `http://127.0.0.1:8080`).
    pub public_url: String,
    pub allow_list: AllowList,
}

impl WebhookDispatcherConfig {
    pub fn new(node_id: impl Into<String>, public_url: impl Into<String>) -> Self {
        Self {
            node_id: node_id.into(),
            interval: Duration::from_millis(1000),
            max_in_flight: 64,
            max_per_task: 8,
            public_url: public_url.into(),
            allow_list: AllowList::default(),
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
    client: reqwest::Client,
    group: GroupCommit,
}

impl WebhookDispatcher {
    pub fn new(
        pool: PgPool,
        config: WebhookDispatcherConfig,
        heartbeats: Heartbeats,
        group: GroupCommit,
    ) -> Self {
        Self {
            pool,
            config: Arc::new(config),
            heartbeats,
            client: outbound::client(),
            group,
        }
    }

    fn actor(&self) -> String {
        format!("webhook:{}", self.config.node_id)
    }

    async fn claim(&self, max: usize) -> store::Result<Vec<claim::Claimed>> {
        let scope = claim::ClaimScope::Webhook {
            max_per_task: self.config.max_per_task,
        };
        let max = i64::try_from(max).unwrap_or(i64::MAX).clamp(1, 1000);
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
        for c in claimed {
            let me = self.clone();
            set.spawn(async move { me.push(c).await });
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

    /// Push one claimed instance and record what its receiver answered.
    pub async fn push(&self, c: claim::Claimed) -> PushOutcome {
        let i = &c.instance;
        let (url, secret) = match c.dispatch.as_ref() {
            Some(d) => (
                d.get("url")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                d.get("secret").and_then(Value::as_str).map(str::to_owned),
            ),
            None => (String::new(), None),
        };
        let base = self.config.public_url.trim_end_matches('/');
        let body = json!({
            "instance": c.to_json(),
            "callbacks": {
                "heartbeat": format!("{base}/v1/instances/{}/heartbeat", i.id),
                "complete": format!("{base}/v1/instances/{}/complete", i.id),
                "fail": format!("{base}/v1/instances/{}/fail", i.id),
            },
        });
        let answer = if url.is_empty() {
            Err("the task has no webhook URL".to_owned())
        } else if !self.config.allow_list.allows(&url) {
            Err("host not in outbound_allowed_hosts".to_owned())
        } else {
            match serde_json::to_vec(&body) {
                Ok(bytes) => {
                    let timeout = Duration::from_secs(c.timeout_seconds.max(1).unsigned_abs());
                    let headers = [("Idempotency-Key", i.idempotency_key.clone())];
                    outbound::post(
                        &self.client,
                        &url,
                        &bytes,
                        secret.as_deref(),
                        &headers,
                        timeout,
                    )
                    .await
                }
                Err(e) => Err(format!("cannot encode the push: {}", error_chain(&e))),
            }
        };
        let actor = self.actor();
        let outcome: Result<(), String> = match answer {
            Ok(a) if a.status == 202 => {
                tracing::info!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, "webhook accepted; awaiting the agent's callback");
                return count(PushOutcome::Accepted);
            }
            Ok(a) if a.body.is_none() => Err(format!(
                "HTTP {}: response body larger than {} bytes",
                a.status,
                outbound::MAX_RESPONSE_BYTES
            )),
            Ok(a) if (200..300).contains(&a.status) => {
                let parsed: Option<Value> = a
                    .body
                    .as_deref()
                    .and_then(|b| serde_json::from_slice(b).ok());
                match parsed {
                    Some(v) if v.get("status").and_then(Value::as_str) == Some("success") => {
                        let result = v.get("result").filter(|r| !r.is_null());
                        let too_big = result
                            .and_then(|r| serde_json::to_vec(r).ok())
                            .is_some_and(|b| b.len() > 64 * 1024);
                        let nul_at = result.and_then(|r| text::nul_in_json(r, "result"));
                        if too_big {
                            Err("receiver returned a result over 64 KiB".to_owned())
                        } else if let Some(field) = nul_at {
                            Err(format!(
                                "receiver returned a {field} holding U+0000, which cannot be stored"
                            ))
                        } else {
                            let done = instances::Completion {
                                id: i.id,
                                lease_token: c.lease_token,
                                result: result.cloned(),
                                actor: Some(actor.clone()),
                            };
                            match self.group.complete(done).await {
                                Ok(_) => {
                                    tracing::info!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, "webhook push succeeded");
                                    return count(PushOutcome::Succeeded);
                                }
                                Err(e) => return stale(i, &e),
                            }
                        }
                    }
                    _ => Err(format!(
                        "HTTP {} without {{\"status\": \"success\"}} in the body",
                        a.status
                    )),
                }
            }
            Ok(a) => Err(match a.body.as_deref() {
                Some(b) if !b.is_empty() => {
                    let text = String::from_utf8_lossy(b);
                    let snippet: String = text::without_nul(&text).chars().take(200).collect();
                    format!("HTTP {}: {snippet}", a.status)
                }
                _ => format!("HTTP {}", a.status),
            }),
            Err(reason) => Err(reason),
        };
        let Err(reason) = outcome else {
            return PushOutcome::Stale;
        };
        let report = instances::FailureReport {
            id: i.id,
            lease_token: c.lease_token,
            error: reason.clone(),
            retryable: true,
            error_kind: "dispatch",
            actor: Some(actor),
        };
        match self.group.fail(report).await {
            Ok(after) => {
                tracing::warn!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, reason = %reason, status = %after.status, "webhook push failed");
                count(PushOutcome::Failed)
            }
            Err(e) => stale(i, &e),
        }
    }

    /// Run until `shutdown`: claim as many instances as there are free slots, push each in its
    /// own task, and wait for a work notification, a finished push or the interval.
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
        loop {
            while pushes.try_join_next().is_some() {}
            let mut wake = signal.subscribe();
            let free = slots.available_permits();
            let mut wait = self.config.interval;
            if free > 0 {
                match self.claim(free).await {
                    Ok(claimed) => {
                        errors = 0;
                        self.heartbeats.tick(LOOP_NAME, self.config.interval);
                        let full = claimed.len() >= free;
                        for c in claimed {
                            let Ok(permit) = slots.clone().try_acquire_owned() else {
                                break;
                            };
                            let me = self.clone();
                            let finished = finished.clone();
                            pushes.spawn(async move {
                                me.push(c).await;
                                drop(permit);
                                finished.notify_one();
                            });
                        }
                        if full {
                            continue;
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
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = finished.notified() => {}
                _ = wake.recv() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        // Let pushes in flight record their answers; the leases cover anything cut short.
        let drain = async { while pushes.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(5), drain)
            .await
            .is_err()
        {
            tracing::warn!(
                "webhook pushes still in flight at shutdown; their leases will expire and the reaper retries them"
            );
        }
        tracing::info!("webhook dispatcher stopped");
    }
}

fn count(o: PushOutcome) -> PushOutcome {
    let label = match o {
        PushOutcome::Succeeded => "succeeded",
        PushOutcome::Accepted => "accepted",
        PushOutcome::Failed => "failed",
        PushOutcome::Stale => "stale",
    };
    metrics::counter!("kairos_webhook_pushes_total", "outcome" => label).increment(1);
    o
}

fn stale(i: &crate::domain::instance::Instance, e: &store::Error) -> PushOutcome {
    tracing::warn!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, reason = %e, "webhook answer arrived after the lease was lost; ignored");
    count(PushOutcome::Stale)
}
