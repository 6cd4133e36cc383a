//! Cancelling windows: the one cancellation every path uses (overlap `replace`, a deleted or
//! moved task, operator cancels), a statement of one form per scope
//! (`sql/instances/cancel/`): a few rows at a time, or in batches over a whole backlog.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{InstanceRow, status_names};
use crate::domain::instance::{Event, InstanceStatus, legal_sources};
use crate::store::statements::sql;
use crate::store::{Result, notify_work};

/// Which instances a cancellation is for: a few, cancelled in one statement ([`cancel_where`]).
pub(super) enum CancelScope<'a> {
    One(Uuid),
    Windows(&'a str, &'a [String]),
}

impl CancelScope<'_> {
    /// The statement cancelling the scope's rows (`$1` the states, `$2` the actor, `$3` the
    /// reason, the scope's values from `$4`).
    fn statement(&self) -> &'static str {
        match self {
            CancelScope::One(_) => sql!("instances/cancel/one"),
            CancelScope::Windows(..) => sql!("instances/cancel/windows"),
        }
    }

    /// Bind the scope's values (`$4`…).
    fn bind<'q, O>(&self, q: QueryAs<'q, O>) -> QueryAs<'q, O> {
        match *self {
            CancelScope::One(id) => q.bind(id),
            CancelScope::Windows(task_id, keys) => q.bind(task_id.to_owned()).bind(keys.to_vec()),
        }
    }
}

/// A statement under construction, reading rows as `O`.
type QueryAs<'q, O> = sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>;

/// Which instances a cancellation in batches is for ([`cancel_in_batches`]): a scope that may
/// hold a task's whole backlog.
pub(super) enum Backlog<'a> {
    /// A task's instances that have not started (PENDING) or wait for a retry (FAILED).
    Unstarted(&'a str),
    /// A task's unfinished instances whose windows fall strictly between two of its windows
    /// (by `(scheduled_at, window_key)`, the order of
    /// [`unfinished_windows`](super::unfinished_windows)).
    Between(&'a str, &'a str, &'a str),
}

impl Backlog<'_> {
    /// The statement cancelling one batch of the scope's rows (`$1` the states, `$2` the actor,
    /// `$3` the reason, the scope's values from `$4`, then the last id of the batch before and
    /// the batch size), and the states the rows are cancelled from.
    fn statement(&self) -> (&'static str, Vec<InstanceStatus>) {
        match self {
            Backlog::Unstarted(_) => (
                sql!("instances/cancel/unstarted_batch"),
                unstarted_sources(),
            ),
            Backlog::Between(..) => (
                sql!("instances/cancel/between_batch"),
                legal_sources(Event::Cancel),
            ),
        }
    }

    /// Bind the scope's values (`$4`…).
    fn bind<'q, O>(&self, q: QueryAs<'q, O>) -> QueryAs<'q, O> {
        match *self {
            Backlog::Unstarted(task_id) => q.bind(task_id.to_owned()),
            Backlog::Between(task_id, after, before) => q
                .bind(task_id.to_owned())
                .bind(after.to_owned())
                .bind(before.to_owned()),
        }
    }
}

/// Move the instances in `scope` to CANCELLED where the state machine allows it (a
/// compare-and-swap on their current status), clear any lease so a running worker is fenced
/// out, and write one event each (after the claim, when it lived only on the row). The
/// cancellation every path uses; scopes that can hold a whole backlog go through
/// [`cancel_in_batches`].
pub(super) async fn cancel_where(
    conn: &mut PgConnection,
    scope: CancelScope<'_>,
    actor: &str,
    reason: &str,
) -> Result<Vec<InstanceRow>> {
    let q = sqlx::query_as(scope.statement())
        .bind(status_names(&legal_sources(Event::Cancel)))
        .bind(actor)
        .bind(reason);
    scope
        .bind(q)
        .fetch_all(&mut *conn)
        .await
        .map_err(crate::store::Error::from)
}

/// Most instances one statement of `cancel_in_batches` cancels.
pub const CANCEL_BATCH: i64 = 1000;

/// [`cancel_where`] for a scope that may hold a task's whole backlog (tens of thousands of
/// rows), in the caller's transaction (a deletion still cancels all or nothing): statements of
/// at most `batch` instances each, in id order from where the last one stopped (a keyset, so
/// no row is read twice), each handing back only its count and last id. Returns how many
/// were cancelled.
pub(super) async fn cancel_in_batches(
    conn: &mut PgConnection,
    scope: Backlog<'_>,
    actor: &str,
    reason: &str,
    batch: i64,
) -> Result<u64> {
    let batch = batch.max(1);
    let (statement, from) = scope.statement();
    let statuses = status_names(&from);
    let mut last: Option<Uuid> = None;
    let mut cancelled = 0u64;
    loop {
        let q = sqlx::query_as(statement)
            .bind(&statuses)
            .bind(actor)
            .bind(reason);
        let (n, last_id): (i64, Option<Uuid>) = scope
            .bind(q)
            .bind(last)
            .bind(batch)
            .fetch_one(&mut *conn)
            .await?;
        cancelled += u64::try_from(n).unwrap_or(0);
        match last_id {
            Some(id) if n >= batch => last = Some(id),
            _ => return Ok(cancelled),
        }
    }
}

/// The states [`Backlog::Unstarted`] cancels: the sources of a cancel but RUNNING, which
/// is a started attempt (PENDING and FAILED).
fn unstarted_sources() -> Vec<InstanceStatus> {
    legal_sources(Event::Cancel)
        .into_iter()
        .filter(|s| *s != InstanceStatus::Running)
        .collect()
}

/// Cancel the named windows of a task if they are still cancellable (overlap `replace`).
/// Returns the window keys actually cancelled.
pub async fn cancel_windows(
    conn: &mut PgConnection,
    task_id: &str,
    window_keys: &[String],
    actor: &str,
    reason: &str,
) -> Result<Vec<String>> {
    if window_keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = cancel_where(
        conn,
        CancelScope::Windows(task_id, window_keys),
        actor,
        reason,
    )
    .await?;
    Ok(rows.into_iter().map(|r| r.window_key).collect())
}

/// Cancel a task's instances that have not started (PENDING) or wait for a retry (FAILED).
pub async fn cancel_unstarted_of_task(
    conn: &mut PgConnection,
    task_id: &str,
    actor: &str,
    reason: &str,
) -> Result<u64> {
    cancel_in_batches(
        conn,
        Backlog::Unstarted(task_id),
        actor,
        reason,
        CANCEL_BATCH,
    )
    .await
}

/// Cancel a task's unfinished instances whose windows fall strictly between the windows
/// `after` and `before` (overlap `replace` superseding the windows
/// [`unfinished_windows`](super::unfinished_windows) left unread). Returns how many were cancelled.
pub async fn cancel_unfinished_between(
    conn: &mut PgConnection,
    task_id: &str,
    after: &str,
    before: &str,
    actor: &str,
    reason: &str,
) -> Result<u64> {
    cancel_in_batches(
        conn,
        Backlog::Between(task_id, after, before),
        actor,
        reason,
        CANCEL_BATCH,
    )
    .await
}

/// A task moved to `agent_id` takes its unstarted instances along (PENDING, and FAILED ones
/// waiting for their retry): claims find an agent's work by the instance's `agent_id`, so rows
/// left under the old agent would be claimable by no one who runs the task now. RUNNING
/// instances stay with the worker holding them. The new agent's waiting claims are woken.
/// Returns how many instances moved.
pub async fn move_unstarted_to_agent(
    conn: &mut PgConnection,
    task_id: &str,
    agent_id: &str,
) -> Result<u64> {
    let moved = sqlx::query(sql!("instances/cancel/move_unstarted"))
        .bind(task_id)
        .bind(agent_id)
        .bind(status_names(&unstarted_sources()))
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if moved > 0 {
        notify_work(conn, agent_id).await?;
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unstarted_instances_are_the_pending_and_failed_ones() {
        assert_eq!(
            unstarted_sources(),
            vec![InstanceStatus::Pending, InstanceStatus::Failed]
        );
    }
}
