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
//! recorded through the group commit in lots ([`start_recorder`]), so a task's backlog moves in
//! batches both ways. Most of a small claim's or commit's PostgreSQL time does not depend on
//! its size, so batch sizes decide the cost per push: at `max_per_task` 8, one task's backlog
//! went in claims of about four instances at about 1 ms of PostgreSQL CPU per instance (1,000
//! pushes/s on 2 cores); at 256, about 0.1 ms (over 5,000/s). The push's own future is kept
//! small (its request is boxed, its body serialised from the claim's fields without a JSON
//! tree): at thousands of pushes a second, moving large futures around showed in profiles.
//!
//! Every replica's dispatcher hears every agent's work notifications, and most name agents
//! without webhook tasks. It keeps the set of agents with webhook tasks and claims only for
//! notifications of theirs; a notification of another agent has the set read again (at most
//! every [`AGENTS_REREAD_MIN`]), in case that agent just got its first webhook task.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore, broadcast, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::work_signal::{WAKE_ALL, WorkSignal};
use super::{Heartbeats, error_backoff, error_chain};
use crate::domain::task::Dispatch;
use crate::otel::{Attr, SpanKind, Spans, names};
use crate::outbound;
use crate::batching::group_commit::GroupCommit;
use crate::store::{self, claim, instances, parse_work_payload};

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

/// A push answered with success, to be recorded, and where its recording's answer goes.
type Success = (
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
fn start_recorder(group: GroupCommit) -> mpsc::UnboundedSender<Success> {
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

/// The body of a push: the instance as its lease holder receives it, and the callback URLs.
#[derive(serde::Serialize)]
struct PushBody<'a> {
    instance: claim::LeaseView<'a>,
    callbacks: Callbacks,
}

#[derive(serde::Serialize)]
struct Callbacks {
    heartbeat: String,
    complete: String,
    fail: String,
}

/// What a push is to do, read from the claimed task's `dispatch`.
struct Target {
    url: String,
    secret: String,
    /// The wait for the answer and the setting that bounds it.
    wait: Duration,
    bound_by: &'static str,
}

impl Target {
    fn of(c: &claim::Claimed) -> Option<Target> {
        let d = Dispatch::deserialize(c.dispatch.as_ref()?).ok()?;
        let Dispatch::Webhook {
            url,
            secret,
            timeout_seconds,
        } = d
        else {
            return None;
        };
        let execution = c.timeout_seconds.max(1);
        let (secs, bound_by) = if timeout_seconds.max(1) <= execution {
            (timeout_seconds.max(1), "dispatch.timeout_seconds")
        } else {
            (execution, "execution.timeout_seconds")
        };
        Some(Target {
            url,
            secret,
            wait: Duration::from_secs(secs.unsigned_abs()),
            bound_by,
        })
    }
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

    /// A push whose answer this replica will not wait for (it is shutting down) goes back to
    /// PENDING at once with the same attempt: kairos cut it short, so it spends no attempt and
    /// counts nothing toward the circuit breaker. When the give-back fails, the attempt is
    /// recorded as a failed dispatch whose retry may start at once.
    async fn give_back_at_shutdown(&self, c: &claim::Claimed) -> PushOutcome {
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

    /// Push one claimed instance and record what its receiver answered. When `shutdown` is
    /// cancelled before the answer arrives, the instance is given back
    /// ([`Self::give_back_at_shutdown`]).
    pub async fn push(&self, c: claim::Claimed, shutdown: &CancellationToken) -> PushOutcome {
        if !self.spans.is_on() {
            return self.deliver(c, shutdown).await;
        }
        let start = chrono::Utc::now();
        self.spans
            .claim(&c.instance, c.lease_token, &self.config.node_id, start);
        let (instance, token) = (c.instance.clone(), c.lease_token);
        let outcome = Box::pin(self.deliver(c, shutdown)).await;
        let (label, error) = match outcome {
            PushOutcome::Succeeded => ("succeeded", None),
            PushOutcome::Accepted => ("accepted", None),
            PushOutcome::Failed => ("failed", Some("the push failed".to_owned())),
            PushOutcome::Stale => ("stale", None),
        };
        self.spans.attempt_with(
            names::PUSH,
            SpanKind::Client,
            &instance,
            token,
            None,
            (start, chrono::Utc::now()),
            error,
            vec![("kairos.push_outcome", Attr::Str(label.to_owned()))],
        );
        outcome
    }

    /// [`Self::push`] without spans.
    async fn deliver(&self, c: claim::Claimed, shutdown: &CancellationToken) -> PushOutcome {
        let i = &c.instance;
        let base = self.config.public_url.trim_end_matches('/');
        // Serialised straight from the claim's fields: no JSON tree per push.
        let body = PushBody {
            instance: c.view(),
            callbacks: Callbacks {
                heartbeat: format!("{base}/v1/instances/{}/heartbeat", i.id),
                complete: format!("{base}/v1/instances/{}/complete", i.id),
                fail: format!("{base}/v1/instances/{}/fail", i.id),
            },
        };
        let answer = match (Target::of(&c), serde_json::to_vec(&body)) {
            (None, _) => Err("the task has no webhook URL".to_owned()),
            (Some(_), Err(e)) => Err(format!("cannot encode the push: {}", error_chain(&e))),
            (Some(t), Ok(bytes)) => {
                let mut headers = Vec::with_capacity(3);
                headers.push(("Idempotency-Key", i.idempotency_key.clone()));
                headers.push(("traceparent", body.instance.traceparent.clone()));
                if let Some(state) = body.instance.tracestate {
                    headers.push(("tracestate", state.to_owned()));
                }
                // Boxed, as are the rare paths below: the push's own future stays small, and
                // spawning or polling it moves little memory (it showed in profiles at 5,000
                // pushes a second).
                let send =
                    Box::pin(
                        self.client
                            .post(&t.url, &bytes, Some(&t.secret), &headers, t.wait),
                    );
                tokio::select! {
                    // An answer that has arrived wins over a shutdown at the same moment: a
                    // finished push is recorded as what it was, never as failed.
                    biased;
                    a = send => a.map_err(|reason| {
                        if reason == outbound::NO_ANSWER {
                            format!("no answer within {}s ({})", t.wait.as_secs(), t.bound_by)
                        } else {
                            reason
                        }
                    }),
                    _ = shutdown.cancelled() => {
                        return Box::pin(self.give_back_at_shutdown(&c)).await;
                    }
                }
            }
        };
        let actor = self.actor();
        let outcome: Result<(), String> = match answer {
            Ok(a) if a.status == 202 => {
                // The agent calls back later: hold the instance for its execution timeout.
                let hold = instances::LeaseExtension {
                    id: i.id,
                    lease_token: c.lease_token,
                    lease_seconds: c.timeout_seconds.max(1),
                };
                return match self.group.heartbeat(hold).await {
                    Ok(_) => {
                        tracing::info!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, lease_s = c.timeout_seconds, "webhook accepted; awaiting the agent's callback");
                        count(PushOutcome::Accepted)
                    }
                    Err(e) => stale(i, &e),
                };
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
                            .is_some_and(|b| b.len() > crate::domain::task::MAX_RESULT_BYTES);
                        if too_big {
                            Err("receiver returned a result over 64 KiB".to_owned())
                        } else if result.is_some_and(holds_nul) {
                            Err(format!(
                                "HTTP {}: receiver returned a result holding U+0000, which cannot be stored",
                                a.status
                            ))
                        } else {
                            let done = instances::Completion {
                                id: i.id,
                                lease_token: c.lease_token,
                                result: result.cloned(),
                                actor: Some(actor.clone()),
                            };
                            match self.record_success(done).await {
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
                    let snippet: String = text.chars().filter(|c| *c != '\0').take(200).collect();
                    format!("HTTP {}: {snippet}", a.status)
                }
                _ => format!("HTTP {}", a.status),
            }),
            Err(reason) => Err(reason),
        };
        match outcome {
            Ok(()) => PushOutcome::Stale,
            Err(reason) => Box::pin(self.record_failure(&c, reason, false)).await,
        }
    }

    /// RUNNING → SUCCESS under the push's lease, through the recorder ([`start_recorder`]).
    async fn record_success(
        &self,
        done: instances::Completion,
    ) -> store::Result<crate::domain::instance::Instance> {
        let (reply, answer) = oneshot::channel();
        let gone = || store::Error::Db(sqlx::Error::PoolClosed);
        self.successes.send((done, reply)).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// Record the attempt as a failed dispatch (retryable), its retry at once when asked.
    async fn record_failure(
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
        };
        match self.group.fail(report).await {
            Ok(after) => {
                tracing::warn!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, reason = %reason, status = %after.status, available_at = %after.available_at, "webhook push failed");
                count(PushOutcome::Failed)
            }
            Err(e) => stale(i, &e),
        }
    }

    /// Run until `shutdown`: claim as many instances as there are free slots, push each in its
    /// own task, and wait until a claim may find webhook work ([`Self::wait_for_work`]). On
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
                match super::bounded_pass(LOOP_NAME, self.claim(free)).await {
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

/// Whether a JSON value holds U+0000 in a string or a key (jsonb cannot store it).
fn holds_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(holds_nul),
        Value::Object(m) => m.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
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

/// The answer could not be recorded: the lease is gone (reaped, cancelled), or the database
/// refused the write; the lease then expires and the reaper retries the instance.
fn stale(i: &crate::domain::instance::Instance, e: &store::Error) -> PushOutcome {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nul_is_found_anywhere_in_a_result() {
        assert!(!holds_nul(&json!({"a": ["b", 1, null, {"c": "d"}]})));
        assert!(holds_nul(&json!({"a": ["b", {"c": "d\u{0}"}]})));
        assert!(holds_nul(&json!({"a\u{0}": 1})));
        assert!(holds_nul(&json!("\u{0}")));
    }
}
