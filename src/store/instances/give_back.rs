//! RUNNING → PENDING under the lease token, the attempt not spent and nothing counted toward the
//! circuit breaker:
//! - giving back leases nobody can use: claims whose answer never reached their caller (the
//!   request went away while its claim committed). Without it those rows would sit RUNNING until
//!   their leases expired and then cost an attempt each;
//! - throttled attempts: the holder reports that a quota refused the attempt and when to try
//!   again (`fail` with `retry_after_seconds`); the instance waits until then.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{CLOSE_ATTEMPT_EVENTS, INSTANCE_COLUMNS, InstanceRow};
use crate::domain::instance::{Event, Instance};
use crate::store::{Result, SourceIs, notify_work_of};

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
    .await?;
    notify_work_of(&mut tx, rows.iter().map(|r| r.agent_id.as_str()).collect()).await?;
    tx.commit().await?;
    Ok(rows)
}

/// `(i.status || '') = 'RUNNING'`: the rows a throttle moves, looked up by id.
const THROTTLE_BY_ID: SourceIs = SourceIs::new("(i.status || '')", Event::Throttle);

/// One throttled attempt reported by its lease holder.
#[derive(Debug, Clone)]
pub struct Throttled {
    pub id: Uuid,
    pub lease_token: Uuid,
    /// When to try again, from now.
    pub retry_after_seconds: i64,
    pub error: String,
}

/// Record throttled attempts in the caller's transaction: each a compare-and-swap on (id,
/// RUNNING, token) to PENDING, available `retry_after_seconds` from now, with the same attempt,
/// `error_kind: throttled` and the holder's error text, and an event. The task's failure count
/// is left alone. Returns the instances written.
pub(in crate::store) async fn record_throttled(
    conn: &mut PgConnection,
    items: &[Throttled],
    actor: &str,
) -> Result<Vec<Instance>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = items.iter().map(|t| t.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|t| t.lease_token).collect();
    let secs: Vec<f64> = items.iter().map(|t| t.retry_after_seconds as f64).collect();
    let errors: Vec<&str> = items.iter().map(|t| t.error.as_str()).collect();
    let rows: Vec<InstanceRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with f as ( \
             select * from unnest($1::uuid[], $2::uuid[], $3::float8[], $4::text[]) \
                 as f(id, token, secs, error) \
         ), old as ( \
             select id, claimed_by from task_instance where id = any($1) \
         ), upd as ( \
             update task_instance i set status = 'PENDING', lease_token = null, \
                 lease_expires_at = null, deadline_at = null, claimed_by = null, \
                 available_at = now() + make_interval(secs => f.secs), \
                 error = f.error, error_kind = 'throttled', reported_lease_token = f.token, \
                 updated_at = now() \
             from f, old where i.id = f.id and old.id = i.id and {THROTTLE_BY_ID} \
                 and i.lease_token = f.token \
             returning i.*, old.claimed_by as old_claimed_by \
         ), ev as ( \
             {CLOSE_ATTEMPT_EVENTS} \
             select id, attempt, 'RUNNING', 'PENDING', $5, \
                 'throttled: ' || left(error, 512), \
                 now(), 1 \
             from upd \
             ) x order by instance_id, o \
         ) \
         select {INSTANCE_COLUMNS} from upd"
    )))
    .bind(&ids)
    .bind(&tokens)
    .bind(&secs)
    .bind(&errors)
    .bind(actor)
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter().map(Instance::try_from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_give_back_moves_only_running_rows() {
        assert_eq!(GIVE_BACK_BY_ID.to_string(), "(i.status || '') = 'RUNNING'");
        assert_eq!(THROTTLE_BY_ID.to_string(), GIVE_BACK_BY_ID.to_string());
    }
}
