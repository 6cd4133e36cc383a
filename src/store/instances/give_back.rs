//! Giving back leases nobody can use: RUNNING → PENDING under the lease token, the attempt not
//! spent and nothing counted toward the circuit breaker, for claims whose answer never reached
//! their caller (the request went away while its claim committed). Without it those rows would
//! sit RUNNING until their leases expired and then cost an attempt each.

use sqlx::PgPool;
use uuid::Uuid;

use super::CLOSE_ATTEMPT_EVENTS;
use crate::domain::instance::Event;
use crate::store::{Result, SourceIs, map_db_error, notify_work_of};

/// `(i.status || '') = 'RUNNING'`: the rows a give-back moves are the sources of its event,
/// looked up by id.
const GIVE_BACK_BY_ID: SourceIs = SourceIs::new("(i.status || '')", Event::GiveBack);

/// One instance given back, as the log and the caller see it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct GivenBack {
    pub id: Uuid,
    pub task_id: String,
    pub window_key: String,
    pub agent_id: String,
    pub attempt: i32,
}

/// Give back the leases `(instance id, lease token)`: each a compare-and-swap on (id, RUNNING,
/// token), so a lease that moved on meanwhile (completed, reaped) is left alone. The rows
/// become PENDING and available at once with the same attempt; their agents are woken.
pub async fn give_back(
    pool: &PgPool,
    leases: &[(Uuid, Uuid)],
    actor: &str,
    reason: &str,
) -> Result<Vec<GivenBack>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = leases.iter().map(|l| l.0).collect();
    let tokens: Vec<Uuid> = leases.iter().map(|l| l.1).collect();
    let mut tx = crate::store::begin_hot(pool).await?;
    let rows: Vec<GivenBack> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with f as ( \
             select * from unnest($1::uuid[], $2::uuid[]) as f(id, token) \
         ), old as ( \
             select id, claimed_by from task_instance where id = any($1) \
         ), upd as ( \
             update task_instance i set status = 'PENDING', lease_token = null, \
                 lease_expires_at = null, deadline_at = null, claimed_by = null, \
                 available_at = least(i.available_at, now()), updated_at = now() \
             from f, old where i.id = f.id and old.id = i.id and {GIVE_BACK_BY_ID} \
                 and i.lease_token = f.token \
             returning i.*, old.claimed_by as old_claimed_by \
         ), ev as ( \
             {CLOSE_ATTEMPT_EVENTS} \
             select id, attempt, 'RUNNING', 'PENDING', $3, 'given back: ' || $4, now(), 1 \
             from upd \
             ) x order by instance_id, o \
         ) \
         select id, task_id, window_key, agent_id, attempt from upd"
    )))
    .bind(&ids)
    .bind(&tokens)
    .bind(actor)
    .bind(reason)
    .fetch_all(&mut *tx)
    .await
    .map_err(map_db_error)?;
    notify_work_of(&mut tx, rows.iter().map(|r| r.agent_id.as_str()).collect()).await?;
    tx.commit().await.map_err(map_db_error)?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_give_back_moves_only_running_rows() {
        assert_eq!(GIVE_BACK_BY_ID.to_string(), "(i.status || '') = 'RUNNING'");
    }
}
