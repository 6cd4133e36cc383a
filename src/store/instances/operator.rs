//! Operator actions on one instance: retry (one more attempt, claimable now) and cancel (a
//! running lease is fenced out), each a compare-and-swap on the sources the transition table
//! gives the event.

use sqlx::PgPool;
use uuid::Uuid;

use super::cancel::{CancelScope, cancel_where};
use super::{INSTANCE_COLUMNS, InstanceRow, illegal_error, status_names};
use crate::domain::instance::{Event, Instance, legal_sources};
use crate::store::{Error, Result, notify_work};

/// The operator-retry write after a CTE `old (id, status)` of locked rows: PENDING with one
/// more attempt allowed, claimable now, for the task's current agent (it may have moved), its
/// event by actor `$3` with reason `$4`. Follow it
/// with `select … from upd`.
/// The retry's `upd` CTE (from `old`, with `$3` the actor and `$4` the reason); `priority` is
/// the parameter that may give the retried instance a priority of its own (null: keep its).
pub(super) fn operator_retry_sql(priority: &str) -> String {
    OPERATOR_RETRY_SQL.replace("{priority}", priority)
}

const OPERATOR_RETRY_SQL: &str = "upd as ( \
         update task_instance i set status = 'PENDING', attempt = i.attempt + 1, \
             max_attempts = i.max_attempts + 1, available_at = now(), finished_at = null, \
             started_at = null, worker_id = null, lease_token = null, \
             lease_expires_at = null, deadline_at = null, result = null, error = null, \
             error_kind = null, skip_reason = null, updated_at = now(), \
             priority = coalesce({priority}::smallint, i.priority), \
             agent_id = coalesce((select t.agent_id from tasks t where t.id = i.task_id), i.agent_id), \
             limit_draws = (select kairos_render_limit_draws(t.spec->'execution'->'limits', \
                     i.task_id, t.agent_id, \
                     coalesce(t.spec->'context', '{}'::jsonb) || coalesce(i.context_override, '{}'::jsonb)) \
                 from tasks t where t.id = i.task_id) \
         from old where i.id = old.id \
         returning i.*, old.status as from_status \
     ), ev as ( \
         insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason) \
         select id, attempt, from_status, 'PENDING', $3, $4 from upd \
     ) ";

/// Operator retry: DEAD, FAILED, CANCELLED or SKIPPED → PENDING, one more attempt allowed,
/// claimable now. An instance whose task was deleted is refused (409): nothing could claim it,
/// and a task registered later under the same id would run it under another definition.
///
/// The task row is share-locked first, then the instance: the order of every path that writes
/// a task's instances after locking the task (a `PUT` moving its waiting instances, `DELETE`,
/// a backfill's reprocess). Locking the instance first deadlocked against them. A concurrent
/// DELETE thus waits for the retry (and then cancels the retried instance) or wins before it.
/// Between the two, the task's trigger cursor is share-locked
/// ([`hold_task_cursor`](crate::store::hold_task_cursor)): a retry waits for a staged window of
/// its task to be published.
pub async fn operator_retry(
    pool: &PgPool,
    id: Uuid,
    actor: &str,
    reason: &str,
    priority: Option<i16>,
) -> Result<Instance> {
    let from = status_names(&legal_sources(Event::OperatorRetry));
    let mut tx = crate::store::begin(pool).await?;
    let task_id: Option<String> = sqlx::query_scalar(
        "select t.id from tasks t \
         where t.id = (select i.task_id from task_instance i where i.id = $1) \
         for key share",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(task_id) = &task_id {
        crate::store::hold_task_cursor(&mut tx, task_id).await?;
    }
    let row: Option<InstanceRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with old as ( \
             select i.id, i.status from task_instance i join tasks t on t.id = i.task_id \
             where i.id = $1 and i.status = any($2) \
             for update of i \
         ), {retry} \
         select {INSTANCE_COLUMNS} from upd",
        retry = operator_retry_sql("$5")
    )))
    .bind(id)
    .bind(&from)
    .bind(actor)
    .bind(reason)
    .bind(priority)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        drop(tx);
        // Not retried: its task is gone, or its status is not a source of a retry.
        return Err(match super::get_instance(pool, id).await {
            Ok(i) if from.iter().any(|s| *s == i.status.as_str()) => Error::Conflict(format!(
                "instance {id} cannot be retried: its task {} was deleted (register the task again to run its windows)",
                i.task_id
            )),
            Ok(i) => Error::Illegal {
                instance_id: i.id,
                status: i.status.as_str().to_owned(),
            },
            Err(e) => e,
        });
    };
    let inst: Instance = row.try_into()?;
    notify_work(&mut tx, &inst.agent_id).await?;
    tx.commit().await?;
    Ok(inst)
}

/// Operator cancel: PENDING, RUNNING or FAILED → CANCELLED; a running lease is fenced out.
pub async fn operator_cancel(
    pool: &PgPool,
    id: Uuid,
    actor: &str,
    reason: &str,
) -> Result<Instance> {
    let mut conn = pool.acquire().await?;
    let row = cancel_where(&mut conn, CancelScope::One(id), actor, reason)
        .await?
        .pop();
    drop(conn);
    match row {
        Some(r) => r.try_into(),
        None => Err(illegal_error(pool, id).await),
    }
}
