//! The trigger loop: turns every schedule into exactly one `task_instance` row per window.
//!
//! One loop runs per replica. A pass locks due tasks' cursors (`task_cursor`, a narrow row per
//! task) with `FOR UPDATE SKIP LOCKED` (so replicas split the work instead of queueing on each
//! other), asks `domain::policy` what to write,
//! inserts the windows with `ON CONFLICT DO NOTHING` and advances `next_fire_at`, all in one
//! transaction: a crash anywhere leaves either everything or nothing. Between passes the loop
//! sleeps until the earliest `next_fire_at` (database clock), woken early by NOTIFY on task
//! changes; it never polls every task.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::{Heartbeats, error_backoff, error_chain};
use crate::domain::instance::InstanceStatus;
use crate::domain::jitter;
use crate::domain::policy::{Plan, SkipReason, plan_due_windows};
use crate::domain::schedule::window_key;
use crate::domain::task::FieldError;
use crate::domain::trace::TraceContext;
use crate::otel::Spans;
use crate::store::instances::{
    InsertReport, NewInstance, Unfinished, cancel_unfinished_between, cancel_windows,
    existing_windows, insert_windows_at, unfinished_windows,
};
use crate::store::tasks::{
    CursorMove, DueTask, WAKE_HORIZON, advance_tasks, earliest_fire_at, list_task_traces,
    lock_due_tasks, quarantine_task,
};
use crate::store::{self, TASKS_CHANNEL, notify_work_of, outbox};

pub const LOOP_NAME: &str = "trigger";
/// When a due task is held by another replica, wait this long before looking again.
const CONTENDED_SLEEP: Duration = Duration::from_millis(20);
/// After a task-change notification, wait this long and take every notification that arrived
/// meanwhile, so a burst of changes costs one pass instead of one pass per change.
pub const COALESCE_WAKEUPS: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
pub struct TriggerLoopConfig {
    /// Written as `trigger:<node_id>` into instance events.
    pub node_id: String,
    /// Due tasks locked per transaction.
    pub batch_size: i64,
    /// Longest sleep when nothing is due (caps a lost notification).
    pub max_sleep: Duration,
    /// Batches materialised at once (`trigger_parallelism`).
    pub parallelism: usize,
    /// How long before an instant the loop starts staging its windows (`trigger_lead_ms`);
    /// zero writes them only once due.
    pub lead: Duration,
}

impl TriggerLoopConfig {
    /// The defaults of `Config`, under this node id.
    pub fn new(node_id: impl Into<String>) -> Self {
        Self {
            node_id: node_id.into(),
            ..Self::from_config(&crate::config::Config::default())
        }
    }

    pub fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            node_id: cfg.node_id.clone(),
            batch_size: cfg.trigger_batch_size,
            max_sleep: Duration::from_millis(cfg.trigger_max_sleep_ms),
            parallelism: cfg.trigger_parallelism,
            lead: Duration::from_millis(cfg.trigger_lead_ms),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerReport {
    pub num_tasks: usize,
    pub num_created: usize,
    pub num_skipped: usize,
    pub num_conflicts: usize,
    pub num_cancelled: usize,
    pub num_not_recorded: u64,
}

impl TriggerReport {
    fn add(&mut self, other: &TriggerReport) {
        self.num_tasks += other.num_tasks;
        self.num_created += other.num_created;
        self.num_skipped += other.num_skipped;
        self.num_conflicts += other.num_conflicts;
        self.num_cancelled += other.num_cancelled;
        self.num_not_recorded += other.num_not_recorded;
    }
}

/// What the loop does after a pass.
enum Next {
    Sleep(Duration),
    /// Stage the windows of this coming instant, `ahead` from now.
    Stage {
        at: DateTime<Utc>,
        ahead: Duration,
    },
}

/// One batch of a pass, written and not yet committed.
#[derive(Default)]
struct Batch {
    report: TriggerReport,
    /// As many tasks were due as the batch takes: more may be.
    full: bool,
    /// The rows planned, and which of them the insert wrote.
    rows: Vec<NewInstance>,
    inserted: InsertReport,
    /// Tasks locked and left for the pass at the instant (staged batches only).
    passed_over: Vec<String>,
}

impl Batch {
    /// The batch planned no task, so it wrote nothing and moved no cursor (it may have locked
    /// tasks it left alone, or paused unreadable ones).
    fn is_empty(&self) -> bool {
        self.report.num_tasks == 0
    }

    /// The tasks of the PENDING windows the batch wrote.
    fn pending_tasks(&self) -> impl Iterator<Item = &str> {
        self.inserted
            .created
            .iter()
            .filter(|c| c.status == InstanceStatus::Pending.as_str())
            .map(|c| c.task_id.as_str())
    }

    /// Count, log and measure the batch once its transaction has committed, from the rows
    /// that really were written. Each window span links to the context its task was defined
    /// under, from `task_traces`.
    fn published(&mut self, spans: &Spans, task_traces: &HashMap<String, TraceContext>) {
        if spans.is_on() {
            let now = chrono::Utc::now();
            for c in &self.inserted.created {
                if c.status == InstanceStatus::Pending.as_str() {
                    spans.window(
                        c.id,
                        &c.task_id,
                        &c.window_key,
                        c.trace().as_ref(),
                        task_traces.get(&c.task_id),
                        now,
                    );
                }
            }
        }
        let report = &mut self.report;
        for r in self.inserted.written(&self.rows) {
            if r.status != InstanceStatus::Skipped {
                report.num_created += 1;
                tracing::debug!(task_id = %r.task_id, window_key = %r.window_key, "window materialised");
                continue;
            }
            report.num_skipped += 1;
            let reason = r.skip_reason.as_deref().unwrap_or("");
            let label = if reason == "missed" {
                "missed"
            } else {
                "overlap"
            };
            metrics::counter!("kairos_skipped_total", "reason" => label).increment(1);
            tracing::info!(task_id = %r.task_id, window_key = %r.window_key, source = r.source.as_str(), reason = %reason, "window skipped");
        }
        for (task_id, key) in &self.inserted.conflicts {
            tracing::info!(task_id = %task_id, window_key = %key, reason = "window already exists", "window insert conflict");
        }
        report.num_conflicts += self.inserted.conflicts.len();
        metrics::counter!("kairos_windows_created_total").increment(report.num_created as u64);
        metrics::counter!("kairos_window_conflicts_total").increment(report.num_conflicts as u64);
        if report.num_created + report.num_skipped > 0 {
            tracing::info!(
                tasks = report.num_tasks,
                created = report.num_created,
                skipped = report.num_skipped,
                conflicts = report.num_conflicts,
                "trigger pass"
            );
        }
    }
}

/// How long until `at` by the database clock (zero once it has come).
async fn until(conn: &mut sqlx::PgConnection, at: DateTime<Utc>) -> store::Result<Duration> {
    let secs: f64 = sqlx::query_scalar(
        "select greatest(0, extract(epoch from ($1 - clock_timestamp())))::float8",
    )
    .bind(at)
    .fetch_one(&mut *conn)
    .await?;
    Ok(Duration::try_from_secs_f64(secs).unwrap_or(Duration::ZERO))
}

#[derive(Clone)]
pub struct TriggerLoop {
    pool: PgPool,
    /// Where the loop's LISTEN connection comes from ([`store::listen_pool`]).
    listen_pool: PgPool,
    config: TriggerLoopConfig,
    heartbeats: Heartbeats,
    spans: Spans,
}

impl TriggerLoop {
    pub fn new(pool: PgPool, config: TriggerLoopConfig, heartbeats: Heartbeats) -> Self {
        Self {
            listen_pool: pool.clone(),
            pool,
            config,
            heartbeats,
            spans: Spans::off(),
        }
    }

    /// Record a window span for every window materialised.
    pub fn with_spans(mut self, spans: Spans) -> Self {
        self.spans = spans;
        self
    }

    /// LISTEN on a connection from `pool` instead of the loop's own pool.
    pub fn listening_on(mut self, pool: PgPool) -> Self {
        self.listen_pool = pool;
        self
    }

    /// Materialise every due window, batch after batch, until a short batch.
    ///
    /// `parallelism` batches run at once, each in its own transaction; `SKIP LOCKED` hands
    /// them disjoint tasks, so a burst of due tasks is spread over the database's cores.
    pub async fn run_once(&self) -> store::Result<TriggerReport> {
        let mut total = TriggerReport::default();
        loop {
            let mut batches = tokio::task::JoinSet::new();
            for _ in 0..self.config.parallelism.max(1) {
                let me = self.clone();
                batches.spawn(async move { me.run_batch().await });
            }
            let mut any_full = false;
            while let Some(joined) = batches.join_next().await {
                let (report, full) = joined.map_err(|e| {
                    store::Error::Corrupt(format!("trigger batch task failed: {e}"))
                })??;
                any_full |= full;
                total.add(&report);
            }
            if !any_full {
                return Ok(total);
            }
        }
    }

    async fn run_batch(&self) -> store::Result<(TriggerReport, bool)> {
        let mut tx = crate::store::begin_hot(&self.pool).await?;
        let mut batch = self.materialise(&mut tx, None, &[]).await?;
        tx.commit().await?;
        let traces = self.task_traces(batch.pending_tasks()).await;
        batch.published(&self.spans, &traces);
        Ok((batch.report, batch.full))
    }

    /// The contexts the tasks `ids` were defined under, for their window spans' links: read
    /// only when spans are exported, after the commit. A failed read loses the links, never
    /// the pass.
    async fn task_traces<'a>(
        &self,
        ids: impl Iterator<Item = &'a str>,
    ) -> HashMap<String, TraceContext> {
        if !self.spans.is_on() {
            return HashMap::new();
        }
        let ids: Vec<&str> = ids.collect::<HashSet<_>>().into_iter().collect();
        list_task_traces(&self.pool, &ids)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %error_chain(&e), "reading task trace contexts for window span links failed");
                HashMap::new()
            })
    }

    /// Stage the windows due at `at`, a coming instant: lock the due cursors of the tasks
    /// whose next window falls before or at `at`, write their windows, and commit at `at` by
    /// the database clock, so the windows become visible (and their agents are woken) at the
    /// instant itself instead of after the pass that writes them. `parallelism` stagers run
    /// at once, each in one transaction of batch after batch; a stager that reaches `at`
    /// before it has staged everything commits at once and leaves the rest to the next pass.
    ///
    /// Nothing is visible before the commit, so no window appears before its instant. Only
    /// tasks with no unfinished instance are locked ([`lock_due_tasks`]), and a plan that would
    /// still skip or cancel is passed over: the pass after the commit decides those at the
    /// instant. Writes of a staged task (PUT, pause, delete, a manual run, an operator retry, a
    /// backfill) wait for the commit through its cursor row, and so come after its window. The
    /// pass returns at `at` whether or not it staged anything.
    pub async fn run_staged(&self, at: DateTime<Utc>) -> store::Result<TriggerReport> {
        let mut stagers = tokio::task::JoinSet::new();
        for _ in 0..self.config.parallelism.max(1) {
            let me = self.clone();
            stagers.spawn(async move { me.stage(at).await });
        }
        // Every stager publishes what it wrote, whatever the others' fate; the first failure is
        // reported after.
        let mut total = TriggerReport::default();
        let mut failed = None;
        while let Some(joined) = stagers.join_next().await {
            match joined {
                Ok(Ok(report)) => total.add(&report),
                Ok(Err(e)) => {
                    failed.get_or_insert(e);
                }
                Err(e) => {
                    failed.get_or_insert(store::Error::Corrupt(format!(
                        "trigger stager task failed: {e}"
                    )));
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }

    /// One stager of [`run_staged`](Self::run_staged).
    async fn stage(&self, at: DateTime<Utc>) -> store::Result<TriggerReport> {
        let mut tx = crate::store::begin_hot(&self.pool).await?;
        let mut staged: Vec<Batch> = Vec::new();
        // Tasks locked and left to the pass at the instant: the next batch must not read them
        // again (this transaction's own locks do not make SKIP LOCKED pass them over).
        let mut passed_over: Vec<String> = Vec::new();
        loop {
            let mut batch = self.materialise(&mut tx, Some(at), &passed_over).await?;
            let full = batch.full;
            passed_over.append(&mut batch.passed_over);
            staged.push(batch);
            if !full || until(&mut tx, at).await?.is_zero() {
                break;
            }
        }
        let wait = until(&mut tx, at).await?;
        if staged.iter().all(Batch::is_empty) {
            // Nothing to publish: hold no transaction (and no connection) while waiting.
            tx.commit().await?;
            tokio::time::sleep(wait).await;
        } else {
            tokio::time::sleep(wait).await;
            tx.commit().await?;
        }
        let traces = self
            .task_traces(staged.iter().flat_map(Batch::pending_tasks))
            .await;
        let mut report = TriggerReport::default();
        for mut batch in staged {
            batch.published(&self.spans, &traces);
            report.add(&batch.report);
        }
        metrics::counter!("kairos_windows_staged_total").increment(report.num_created as u64);
        if report.num_created > 0 {
            tracing::debug!(at = %window_key(at), created = report.num_created, "staged windows published");
        }
        Ok(report)
    }

    /// Lock a batch of due tasks and write their windows and cursor moves in `tx`: the tasks
    /// due now, or with `staged_at` those due at that coming instant (planned as of it).
    async fn materialise(
        &self,
        tx: &mut sqlx::PgConnection,
        staged_at: Option<DateTime<Utc>>,
        passed_over: &[String],
    ) -> store::Result<Batch> {
        let actor = format!("trigger:{}", self.config.node_id);
        let (due, bad) =
            lock_due_tasks(&mut *tx, self.config.batch_size, staged_at, passed_over).await?;
        let full = (due.len() + bad.len()) as i64 >= self.config.batch_size;
        for (id, why) in &bad {
            tracing::error!(task_id = %id, reason = %why, "stored task definition unreadable; pausing it");
            quarantine_task(
                &mut *tx,
                id,
                &format!("stored definition unreadable: {why}"),
            )
            .await?;
        }
        if due.is_empty() {
            return Ok(Batch {
                full,
                ..Batch::default()
            });
        }
        let now: DateTime<Utc> = match staged_at {
            Some(at) => at,
            None => {
                sqlx::query_scalar("select now()")
                    .fetch_one(&mut *tx)
                    .await?
            }
        };
        let limits: Vec<(&str, i64)> = due
            .iter()
            .map(|t| (t.id.as_str(), i64::from(t.execution.concurrency_limit)))
            .collect();
        let mut unfinished = unfinished_windows(&mut *tx, &limits).await?;
        // What a `replace` may have to cancel beyond the windows read: `(task, oldest, next)`.
        let gaps: HashMap<String, (String, String)> = unfinished
            .iter()
            .filter_map(|(id, u)| match (u.gap, u.keys.first(), u.keys.get(1)) {
                (true, Some(a), Some(b)) => Some((id.clone(), (a.clone(), b.clone()))),
                _ => None,
            })
            .collect();
        let unfinished: HashMap<String, Vec<String>> = unfinished
            .drain()
            .map(|(id, u): (String, Unfinished)| (id, u.keys))
            .collect();
        let from: Vec<(&str, String)> = due
            .iter()
            .map(|t| (t.id.as_str(), window_key(t.next_fire_at)))
            .collect();
        let existing = existing_windows(&mut *tx, &from, now).await?;
        let (due, plans) = plan_batch(due, unfinished, existing, now).await?;
        // Staged tasks have no unfinished instance (`lock_due_tasks`), so their plans run every
        // window. One that still skips or cancels (a window already past its grace at the
        // instant, when the cursor moved after the instant was chosen) is left, its cursor
        // locked until the commit, to the pass at the instant, which decides it then.
        let mut left = Vec::new();
        let (due, plans): (Vec<DueTask>, Vec<_>) = due
            .into_iter()
            .zip(plans)
            .filter(|(task, plan)| {
                let stage = staged_at.is_none() || plan.as_ref().is_ok_and(Plan::runs_all);
                if !stage {
                    left.push(task.id.clone());
                }
                stage
            })
            .unzip();
        let mut report = TriggerReport::default();

        let mut rows: Vec<NewInstance> = Vec::new();
        let mut moves = Vec::with_capacity(due.len());
        let mut not_recorded: Vec<(String, u64)> = Vec::new();
        for (task, plan) in due.iter().zip(plans) {
            let id = task.id.as_str();
            let plan = match plan {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(task_id = %id, reason = %e, "stored trigger no longer valid; pausing task");
                    quarantine_task(&mut *tx, id, &format!("trigger no longer valid: {e}")).await?;
                    continue;
                }
            };
            for key in &plan.existing {
                report.num_conflicts += 1;
                tracing::info!(task_id = %id, window_key = %key, reason = "window already exists", "window insert conflict");
            }
            report.num_tasks += 1;
            if plan.not_recorded > 0 {
                not_recorded.push((id.to_owned(), plan.not_recorded));
                report.num_not_recorded += plan.not_recorded;
                metrics::counter!("kairos_catchup_not_recorded_total").increment(plan.not_recorded);
                tracing::warn!(
                    task_id = %id,
                    from = %window_key(task.next_fire_at),
                    not_recorded = plan.not_recorded,
                    at_least = plan.truncated,
                    "missed windows beyond the catch-up bound were neither run nor recorded"
                );
            }
            if !plan.cancel.is_empty() {
                let newest = plan
                    .windows
                    .iter()
                    .rev()
                    .find(|w| w.skip.is_none())
                    .map(|w| window_key(w.scheduled_at))
                    .unwrap_or_default();
                let reason = format!("overlap replace: superseded by window {newest}");
                let done = cancel_windows(&mut *tx, id, &plan.cancel, &actor, &reason).await?;
                for key in &done {
                    tracing::info!(task_id = %id, window_key = %key, reason = %reason, "instance cancelled");
                }
                report.num_cancelled += done.len();
                // Cancelling past the oldest window supersedes every window before the one
                // cancelled, read or not.
                if let Some((oldest, next)) = gaps.get(id).filter(|_| plan.cancel.len() > 1) {
                    let more =
                        cancel_unfinished_between(&mut *tx, id, oldest, next, &actor, &reason)
                            .await?;
                    if more > 0 {
                        tracing::info!(task_id = %id, after = %oldest, before = %next, instances = more, reason = %reason, "instances cancelled");
                    }
                    report.num_cancelled += usize::try_from(more).unwrap_or(usize::MAX);
                }
            }
            let last = plan.windows.last().map(|w| w.scheduled_at);
            for w in plan.windows {
                let key = window_key(w.scheduled_at);
                let (status, skip_reason) = match &w.skip {
                    None => (InstanceStatus::Pending, None),
                    Some(r) => (InstanceStatus::Skipped, Some(r.clone())),
                };
                // The window keeps its instant; it becomes claimable at its jittered one
                // (the same on every replica and in every preview).
                let available_at =
                    jitter::available_at(id, &key, w.scheduled_at, task.jitter_seconds);
                rows.push(NewInstance {
                    task_id: id.to_owned(),
                    window_key: key,
                    scheduled_at: w.scheduled_at,
                    status,
                    source: w.source,
                    agent_id: task.agent_id.clone(),
                    max_attempts: task.execution.max_attempts(),
                    available_at,
                    skip_reason: skip_reason.as_ref().map(SkipReason::as_text),
                    context_override: None,
                    priority: None,
                    trace: None,
                });
            }
            moves.push(CursorMove {
                task_id: id.to_owned(),
                next_fire_at: plan.next_fire_at,
                last_window_at: last,
            });
        }

        let inserted = insert_windows_at(&mut *tx, &rows, &actor, staged_at).await?;
        let written = inserted.written(&rows);
        advance_tasks(&mut *tx, &moves).await?;
        outbox::enqueue(&mut *tx, &missed_events(&written, &not_recorded)).await?;
        // Wake the long-polling claims of every agent that got claimable work, as many as it
        // got instances (sent at the commit).
        let agents: Vec<&str> = written
            .iter()
            .filter(|r| r.status == InstanceStatus::Pending)
            .map(|r| r.agent_id.as_str())
            .collect();
        notify_work_of(&mut *tx, agents).await?;
        Ok(Batch {
            report,
            full,
            rows,
            inserted,
            passed_over: left,
        })
    }

    /// What to do after a pass: stage the earliest coming instant when it is within the lead
    /// (unless a staging pass is in flight), else sleep until it is, or until it comes when it
    /// is being staged (by the database clock), at most `max_sleep`.
    async fn next_step(&self, did_work: bool, staging: bool) -> store::Result<Next> {
        let (earliest, now) = earliest_fire_at(&self.pool).await?;
        let sleep = match earliest {
            None => self.config.max_sleep,
            Some(at) if at <= now => {
                // Due but not taken by us: another replica, or our staging pass about to
                // publish, holds it. Do not spin.
                if did_work {
                    Duration::ZERO
                } else {
                    CONTENDED_SLEEP
                }
            }
            Some(at) => {
                let ahead = (at - now).to_std().unwrap_or(Duration::ZERO);
                let within = !self.config.lead.is_zero() && ahead <= self.config.lead;
                if within && !staging {
                    return Ok(Next::Stage { at, ahead });
                }
                if within {
                    ahead
                } else {
                    ahead
                        .saturating_sub(self.config.lead)
                        .min(self.config.max_sleep)
                }
            }
        };
        // Changes due later than the wake horizon send no notification: look again by then.
        Ok(Next::Sleep(sleep.min(WAKE_HORIZON)))
    }

    /// Start [`run_staged`](Self::run_staged) for `at` beside the loop, which keeps taking due
    /// work and notifications meanwhile; its failures are logged (the pass at the instant then
    /// writes what it did not publish).
    fn start_staging(&self, at: DateTime<Utc>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = me.run_staged(at).await {
                tracing::error!(error = %error_chain(&e), at = %window_key(at), "staging trigger pass failed; the pass at the instant writes its windows");
            }
        })
    }

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
                r = super::bounded_pass(LOOP_NAME, self.run_once()) => r,
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

/// The plan of each due task, in order (or why its stored trigger is unusable).
///
/// Enumerating windows is CPU work: up to `MAX_ENUMERATED_WINDOWS` cron evaluations for one
/// task after a long outage, for every task of the batch. It runs on the blocking pool so it
/// never holds an async worker (where it would stall HTTP requests and the other loops); one
/// hand-off per batch of up to `trigger_batch_size` tasks costs microseconds beside the batch's
/// database round trips.
async fn plan_batch(
    due: Vec<DueTask>,
    unfinished: HashMap<String, Vec<String>>,
    existing: HashMap<String, HashSet<String>>,
    now: DateTime<Utc>,
) -> store::Result<(Vec<DueTask>, Vec<Result<Plan, FieldError>>)> {
    tokio::task::spawn_blocking(move || {
        let no_rows = HashSet::new();
        let plans = due
            .iter()
            .map(|task| {
                let id = task.id.as_str();
                let schedule = task.trigger.schedule()?;
                Ok(plan_due_windows(
                    &schedule,
                    &task.execution,
                    task.next_fire_at,
                    now,
                    unfinished.get(id).map(Vec::as_slice).unwrap_or_default(),
                    existing.get(id).unwrap_or(&no_rows),
                ))
            })
            .collect();
        (due, plans)
    })
    .await
    .map_err(|e| store::Error::Corrupt(format!("trigger planning task failed: {e}")))
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

/// One `windows.missed` notification per task whose missed windows this pass recorded (or could
/// not record, beyond the catch-up bound).
fn missed_events(written: &[&NewInstance], not_recorded: &[(String, u64)]) -> Vec<outbox::Event> {
    use std::collections::BTreeMap;
    let mut per_task: BTreeMap<&str, (usize, &str, &str, u64)> = BTreeMap::new();
    for r in written
        .iter()
        .filter(|r| r.skip_reason.as_deref() == Some("missed"))
    {
        let e = per_task.entry(r.task_id.as_str()).or_insert((
            0,
            r.window_key.as_str(),
            r.window_key.as_str(),
            0,
        ));
        e.0 += 1;
        e.2 = r.window_key.as_str();
    }
    for (task, n) in not_recorded {
        per_task.entry(task.as_str()).or_insert((0, "", "", 0)).3 = *n;
    }
    per_task
        .into_iter()
        .map(|(task, (count, first, last, beyond))| outbox::Event {
            kind: "windows.missed",
            task_id: task.to_owned(),
            instance_id: None,
            list: outbox::NotifyList::OnFailure,
            data: serde_json::json!({
                "recorded": count,
                "first_window": (!first.is_empty()).then_some(first),
                "last_window": (!last.is_empty()).then_some(last),
                "not_recorded": beyond,
                "reason": "missed",
            }),
        })
        .collect()
}
