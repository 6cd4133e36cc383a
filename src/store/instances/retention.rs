//! Retention: terminal instances (with their events) and settled outbox rows past the
//! retention period are deleted in bounded batches.

use sqlx::PgPool;

use crate::domain::instance::InstanceStatus;
use crate::store::{Result, status_in_sql};

/// `status in ('SUCCESS', 'DEAD', 'SKIPPED', 'CANCELLED')`: the terminal states, the only ones
/// pruned (no automatic path moves an instance out of them).
fn terminal_sql() -> String {
    let terminal: Vec<InstanceStatus> = InstanceStatus::ALL
        .into_iter()
        .filter(|s| s.is_terminal())
        .collect();
    status_in_sql("status", &terminal)
}

/// Delete up to `batch` terminal instances (with their event rows) scheduled and finished more
/// than `retention_days` ago, and up to `batch` settled outbox rows of that age.
pub async fn prune_finished(pool: &PgPool, retention_days: i64, batch: i64) -> Result<(u64, u64)> {
    let mut tx = crate::store::begin(pool).await?;
    let instances: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "with gone as ( \
             delete from task_instance where id in ( \
                 select id from task_instance \
                 where scheduled_at < now() - make_interval(days => $1) \
                   and finished_at < now() - make_interval(days => $1) \
                   and {terminal} \
                 order by scheduled_at limit $2 for update skip locked) \
             returning id \
         ), ev as ( \
             delete from instance_events where instance_id in (select id from gone) \
         ) \
         select count(*) from gone",
        terminal = terminal_sql()
    )))
    .bind(i32::try_from(retention_days).unwrap_or(i32::MAX))
    .bind(batch)
    .fetch_one(&mut *tx)
    .await?;
    let outbox = sqlx::query(
        "delete from outbox where id in ( \
             select id from outbox \
             where coalesce(delivered_at, undeliverable_at) < now() - make_interval(days => $1) \
             limit $2 for update skip locked)",
    )
    .bind(i32::try_from(retention_days).unwrap_or(i32::MAX))
    .bind(batch)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok((u64::try_from(instances).unwrap_or(0), outbox))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_takes_the_terminal_states() {
        assert_eq!(
            terminal_sql(),
            "status in ('SUCCESS', 'DEAD', 'SKIPPED', 'CANCELLED')"
        );
    }
}
