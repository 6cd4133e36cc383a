//! Operator actions on one instance: retry (one more attempt, claimable now) and cancel (a
//! running lease is fenced out), each a compare-and-swap on the sources the transition table
//! gives the event.

use sqlx::PgPool;
use uuid::Uuid;

use super::cancel::{CancelScope, cancel_where};
use super::{InstanceRow, illegal_error, status_names};
use crate::domain::instance::{Event, Instance, legal_sources};
use crate::store::statements::sql;
use crate::store::{Error, Result, notify_work};

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
    let task_id: Option<String> = sqlx::query_scalar(sql!("instances/operator/task_of"))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    if let Some(task_id) = &task_id {
        crate::store::hold_task_cursor(&mut tx, task_id).await?;
    }
    let row: Option<InstanceRow> = sqlx::query_as(sql!("instances/operator/retry"))
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
