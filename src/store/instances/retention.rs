//! Retention: terminal instances (with their events) and settled outbox rows past the
//! retention period are deleted in bounded batches.

use sqlx::PgPool;

use crate::store::Result;
use crate::store::statements::sql;

/// Delete up to `batch` terminal instances (with their event rows) scheduled and finished more
/// than `retention_days` ago, and up to `batch` settled outbox rows of that age.
pub async fn prune_finished(pool: &PgPool, retention_days: i64, batch: i64) -> Result<(u64, u64)> {
    let mut tx = crate::store::begin(pool).await?;
    let instances: i64 = sqlx::query_scalar(sql!("instances/retention/prune_instances"))
        .bind(i32::try_from(retention_days).unwrap_or(i32::MAX))
        .bind(batch)
        .fetch_one(&mut *tx)
        .await?;
    let outbox = sqlx::query(sql!("instances/retention/prune_outbox"))
        .bind(i32::try_from(retention_days).unwrap_or(i32::MAX))
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok((u64::try_from(instances).unwrap_or(0), outbox))
}
