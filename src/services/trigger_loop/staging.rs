//! Staging: the windows of a coming instant written ahead of it (up to `trigger_lead_ms`), in
//! transactions that commit at the instant by the database clock, so they appear, and their
//! agents wake, at the instant itself.

use chrono::{DateTime, Utc};

use super::pass::Batch;
use super::{TriggerLoop, TriggerReport};
use crate::domain::schedule::window_key;
use crate::services::error_chain;
use crate::store;

impl TriggerLoop {
    /// Stage the windows due at `at`, a coming instant: lock the due cursors of the tasks
    /// whose next window falls before or at `at`, write their windows, and commit at `at` by
    /// the database clock, so the windows become visible (and their agents are woken) at the
    /// instant itself instead of after the pass that writes them. `parallelism` stagers run
    /// at once, each in one transaction of batch after batch; a stager that reaches `at`
    /// before it has staged everything commits at once and leaves the rest to the next pass.
    ///
    /// Nothing is visible before the commit, so no window appears before its instant. Only
    /// tasks with no unfinished instance are locked
    /// ([`lock_due_tasks`](crate::store::tasks::lock_due_tasks)), and a plan that would
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
            if !full || store::clock::until(&mut tx, at).await?.is_zero() {
                break;
            }
        }
        let wait = store::clock::until(&mut tx, at).await?;
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

    /// Start [`run_staged`](Self::run_staged) for `at` beside the loop, which keeps taking due
    /// work and notifications meanwhile; its failures are logged (the pass at the instant then
    /// writes what it did not publish).
    pub(super) fn start_staging(&self, at: DateTime<Utc>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = me.run_staged(at).await {
                tracing::error!(error = %error_chain(&e), at = %window_key(at), "staging trigger pass failed; the pass at the instant writes its windows");
            }
        })
    }
}
