//! The first step of a group commit: the lease holders' rows and their tasks' rows locked in
//! the order of `store::instances` (instance rows in id order, then task rows in id order), so
//! the statements that follow only take locks the transaction already holds.

use std::collections::HashSet;

use sqlx::PgConnection;
use uuid::Uuid;

use crate::store::Result;
use crate::store::statements::sql;

/// Lock the RUNNING rows of `calls` (instance id, lease token) in id order, then the task rows
/// the writes will update (those of `failing` instances, whose failure counts grow, and those
/// with failures to reset on a success), in id order. With `skip_busy`, rows another
/// transaction holds are left out instead of waited for: the caller writes them in a
/// transaction of their own, so one blocked call never holds up a batch of unrelated ones.
/// Returns the ids of the instances skipped: RUNNING under the call's token, but held by
/// another transaction. (A call whose row is not RUNNING under its token stays in the batch:
/// its compare-and-swap misses and it is answered as before.)
pub(crate) async fn lock_lease_rows(
    conn: &mut PgConnection,
    calls: &[(Uuid, Uuid)],
    failing: &[Uuid],
    skip_busy: bool,
) -> Result<HashSet<Uuid>> {
    let ids: Vec<Uuid> = calls.iter().map(|c| c.0).collect();
    let tokens: Vec<Uuid> = calls.iter().map(|c| c.1).collect();
    let rows: Vec<(Uuid, String)> = sqlx::query_as(if skip_busy {
        sql!("instances/locks/lease_rows_skip_busy")
    } else {
        sql!("instances/locks/lease_rows")
    })
    .bind(&ids)
    .bind(&tokens)
    .fetch_all(&mut *conn)
    .await?;
    let mut tasks: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    let failing_tasks: Vec<&str> = rows
        .iter()
        .filter(|r| failing.contains(&r.0))
        .map(|r| r.1.as_str())
        .collect();
    if !tasks.is_empty() {
        sqlx::query(sql!("instances/locks/task_rows"))
            .bind(&tasks)
            .bind(&failing_tasks)
            .execute(&mut *conn)
            .await?;
    }
    let locked: HashSet<Uuid> = rows.into_iter().map(|r| r.0).collect();
    if !skip_busy || locked.len() == calls.len() {
        return Ok(HashSet::new());
    }
    let busy: Vec<Uuid> = sqlx::query_scalar(sql!("instances/locks/busy"))
        .bind(&ids)
        .bind(&tokens)
        .fetch_all(&mut *conn)
        .await?;
    Ok(busy.into_iter().filter(|id| !locked.contains(id)).collect())
}
