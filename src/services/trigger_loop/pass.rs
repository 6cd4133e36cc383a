//! One batch of a trigger pass: lock due cursors (`FOR UPDATE SKIP LOCKED`), plan each task's
//! windows (`domain::policy`), and write the windows, the overlap cancellations, the cursor
//! moves, the missed-window notifications and the agents' wake-ups in the caller's
//! transaction. What was written is counted and logged once the transaction has committed.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::{TriggerLoop, TriggerReport};
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
use crate::store::tasks::{CursorMove, DueTask, advance_tasks, lock_due_tasks, quarantine_task};
use crate::store::{self, notify_work_of, outbox};

/// One batch of a pass, written and not yet committed.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) report: TriggerReport,
    /// As many tasks were due as the batch takes: more may be.
    pub(super) full: bool,
    /// The rows planned, and which of them the insert wrote.
    pub(super) rows: Vec<NewInstance>,
    pub(super) inserted: InsertReport,
    /// Tasks locked and left for the pass at the instant (staged batches only).
    pub(super) passed_over: Vec<String>,
}

impl Batch {
    /// The batch planned no task, so it wrote nothing and moved no cursor (it may have locked
    /// tasks it left alone, or paused unreadable ones).
    pub(super) fn is_empty(&self) -> bool {
        self.report.num_tasks == 0
    }

    /// The tasks of the PENDING windows the batch wrote.
    pub(super) fn pending_tasks(&self) -> impl Iterator<Item = &str> {
        self.inserted
            .created
            .iter()
            .filter(|c| c.status == InstanceStatus::Pending)
            .map(|c| c.task_id.as_str())
    }

    /// Count, log and measure the batch once its transaction has committed, from the rows
    /// that really were written. Each window span links to the context its task was defined
    /// under, from `task_traces`.
    pub(super) fn published(&mut self, spans: &Spans, task_traces: &HashMap<String, TraceContext>) {
        if spans.is_on() {
            let now = chrono::Utc::now();
            for c in &self.inserted.created {
                if c.status == InstanceStatus::Pending {
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

impl TriggerLoop {
    /// Lock a batch of due tasks and write their windows and cursor moves in `tx`: the tasks
    /// due now, or with `staged_at` those due at that coming instant (planned as of it).
    pub(super) async fn materialise(
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
            None => store::clock::now_in(&mut *tx).await?,
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
