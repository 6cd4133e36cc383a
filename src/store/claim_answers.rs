//! The `claim_answers` table: what a claim carrying a client-chosen `claim_id` took, so that the
//! same `claim_id` from the same worker, sent again because the first answer never arrived (a
//! client timeout, a cut connection, an ambiguous COMMIT), is answered with the same instances
//! and lease tokens instead of taking more. An answer is written in the claim's own
//! transaction, and kept until the longest lease in it has passed.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::Result;
use super::claim::{Claimed, ClaimedRow};
use super::instances::INSTANCE_COLUMNS;

/// Longest `claim_id`, in characters.
pub const MAX_CLAIM_ID_CHARS: usize = 128;

/// Record in the claim's transaction that (agent, worker, claim_id) took these leases, for
/// `lease_seconds`. A claim_id used again after its answer ran out takes its place.
pub async fn record(
    conn: &mut PgConnection,
    agent_id: &str,
    worker_id: &str,
    claim_id: &str,
    leases: &[(Uuid, Uuid)],
    lease_seconds: f64,
) -> Result<()> {
    let ids: Vec<Uuid> = leases.iter().map(|l| l.0).collect();
    let tokens: Vec<Uuid> = leases.iter().map(|l| l.1).collect();
    sqlx::query(
        "insert into claim_answers \
             (agent_id, worker_id, claim_id, instance_ids, lease_tokens, expires_at) \
         values ($1, $2, $3, $4, $5, clock_timestamp() + make_interval(secs => $6)) \
         on conflict (agent_id, worker_id, claim_id) do update \
             set instance_ids = excluded.instance_ids, lease_tokens = excluded.lease_tokens, \
                 created_at = excluded.created_at, expires_at = excluded.expires_at",
    )
    .bind(agent_id)
    .bind(worker_id)
    .bind(claim_id)
    .bind(&ids)
    .bind(&tokens)
    .bind(lease_seconds)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The instances a recorded claim took that it still holds (RUNNING under the same lease
/// tokens), as the first answer gave them; `None` when there is no such answer, or when none of
/// its instances is still held (completed, given back, reaped): then a new claim is due.
pub async fn replay(
    pool: &PgPool,
    agent_id: &str,
    worker_id: &str,
    claim_id: &str,
) -> Result<Option<Vec<Claimed>>> {
    let rows: Vec<ClaimedRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {INSTANCE_COLUMNS}, lease_token, context, dispatch, timeout_seconds from ( \
             select i.*, t.context || coalesce(i.context_override, '{{}}'::jsonb) as context, \
                 t.dispatch, \
                 extract(epoch from i.deadline_at - i.started_at)::bigint as timeout_seconds, \
                 f.n \
             from claim_answers a \
             cross join lateral unnest(a.instance_ids, a.lease_tokens) \
                 with ordinality as f(id, token, n) \
             join task_instance i on i.id = f.id and i.lease_token = f.token \
                 and (i.status || '') = 'RUNNING' \
             cross join lateral ( \
                 select coalesce(t.spec->'context', '{{}}'::jsonb) as context, \
                     t.spec->'dispatch' as dispatch \
                 from tasks t where t.id = i.task_id \
             ) t \
             where a.agent_id = $1 and a.worker_id = $2 and a.claim_id = $3 \
                 and a.expires_at > now() \
         ) x order by n"
    )))
    .bind(agent_id)
    .bind(worker_id)
    .bind(claim_id)
    .fetch_all(pool)
    .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let claimed = rows
        .into_iter()
        .map(|r| {
            Claimed::try_from(r).map(|c| Claimed {
                replayed: true,
                ..c
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(claimed))
}

/// Delete up to `limit` answers whose leases have all passed; returns how many.
pub async fn prune_expired(pool: &PgPool, limit: i64) -> Result<u64> {
    let mut tx = super::begin(pool).await?;
    let done = sqlx::query(
        "delete from claim_answers where ctid in ( \
             select ctid from claim_answers where expires_at < now() \
             order by expires_at limit $1)",
    )
    .bind(limit)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
