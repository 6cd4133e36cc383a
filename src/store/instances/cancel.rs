//! Cancelling windows: the one cancellation statement every path uses (overlap `replace`, a
//! deleted or moved task, operator cancels), one scope at a time or in batches over a whole
//! backlog.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{CLOSE_ATTEMPT_EVENTS, INSTANCE_COLUMNS, InstanceRow, status_names};
use crate::domain::instance::{Event, InstanceStatus, legal_sources};
use crate::store::{Result, notify_work};

/// Which instances a cancellation is for.
pub(super) enum CancelScope<'a> {
    One(Uuid),
    Windows(&'a str, &'a [String]),
    /// A task's instances that have not started (PENDING) or wait for a retry (FAILED).
    Unstarted(&'a str),
    /// A task's unfinished instances whose windows fall strictly between two of its windows
    /// (by `(scheduled_at, window_key)`, the order of
    /// [`unfinished_windows`](super::unfinished_windows)).
    Between(&'a str, &'a str, &'a str),
}

impl CancelScope<'_> {
    /// The rows of the scope, its values numbered from `$4`, and the states they are
    /// cancelled from; and the number of the first parameter after its values.
    fn filter(&self) -> (&'static str, Vec<InstanceStatus>, usize) {
        match self {
            CancelScope::One(_) => ("id = $4", legal_sources(Event::Cancel), 5),
            CancelScope::Windows(..) => (
                "task_id = $4 and window_key = any($5)",
                legal_sources(Event::Cancel),
                6,
            ),
            CancelScope::Unstarted(_) => ("task_id = $4", unstarted_sources(), 5),
            CancelScope::Between(..) => (
                "task_id = $4 \
                 and (scheduled_at, window_key) > (select b.scheduled_at, b.window_key \
                     from task_instance b where b.task_id = $4 and b.window_key = $5) \
                 and (scheduled_at, window_key) < (select b.scheduled_at, b.window_key \
                     from task_instance b where b.task_id = $4 and b.window_key = $6)",
                legal_sources(Event::Cancel),
                7,
            ),
        }
    }

    /// Bind the scope's values (`$4`…).
    fn bind<'q, O>(
        &self,
        q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        match *self {
            CancelScope::One(id) => q.bind(id),
            CancelScope::Windows(task_id, keys) => q.bind(task_id.to_owned()).bind(keys.to_vec()),
            CancelScope::Unstarted(task_id) => q.bind(task_id.to_owned()),
            CancelScope::Between(task_id, after, before) => q
                .bind(task_id.to_owned())
                .bind(after.to_owned())
                .bind(before.to_owned()),
        }
    }
}

/// The cancellation statement over `old` (the rows to cancel, locked, with their `status`
/// and `claimed_by`), ending in `select {returning} from upd`.
fn cancel_sql(old: &str, returning: &str) -> String {
    format!(
        "with old as ({old}), upd as ( \
             update task_instance i set status = 'CANCELLED', finished_at = now(), \
                 lease_token = null, lease_expires_at = null, deadline_at = null, \
                 claimed_by = null, error_kind = 'cancelled', error = $3, updated_at = now() \
             from old where i.id = old.id \
             returning i.*, old.status as from_status, old.claimed_by as old_claimed_by \
         ), ev as ( \
             {CLOSE_ATTEMPT_EVENTS} \
             select id, attempt, from_status, 'CANCELLED', $2, $3, now(), 1 from upd \
             ) x order by instance_id, o \
         ) \
         select {returning} from upd"
    )
}

/// Move the instances in `scope` to CANCELLED where the state machine allows it (a
/// compare-and-swap on their current status), clear any lease so a running worker is fenced
/// out, and write one event each. The one statement every cancellation path uses; scopes that
/// can hold a whole backlog go through [`cancel_in_batches`].
pub(super) async fn cancel_where(
    conn: &mut PgConnection,
    scope: CancelScope<'_>,
    actor: &str,
    reason: &str,
) -> Result<Vec<InstanceRow>> {
    let (filter, from, _) = scope.filter();
    let sql = cancel_sql(
        &format!(
            "select id, status, claimed_by from task_instance \
             where {filter} and status = any($1) for update"
        ),
        INSTANCE_COLUMNS,
    );
    let q = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(status_names(&from))
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
    scope: CancelScope<'_>,
    actor: &str,
    reason: &str,
    batch: i64,
) -> Result<u64> {
    let batch = batch.max(1);
    let (filter, from, next) = scope.filter();
    let (after, limit) = (next, next + 1);
    let sql = cancel_sql(
        &format!(
            "select id, status, claimed_by from task_instance \
             where {filter} and status = any($1) and (${after}::uuid is null or id > ${after}) \
             order by id limit ${limit} for update"
        ),
        "count(*), (select u.id from upd u order by u.id desc limit 1)",
    );
    let statuses = status_names(&from);
    let mut last: Option<Uuid> = None;
    let mut cancelled = 0u64;
    loop {
        let q = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
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

/// The states [`CancelScope::Unstarted`] cancels: the sources of a cancel but RUNNING, which
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
        CancelScope::Unstarted(task_id),
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
        CancelScope::Between(task_id, after, before),
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
    let moved = sqlx::query(
        "update task_instance set agent_id = $2, updated_at = now() \
         where task_id = $1 and status = any($3) and agent_id <> $2",
    )
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
