//! The `claim_answers` table: what a claim carrying a client-chosen `claim_id` took, so that the
//! same `claim_id` from the same worker, sent again because the first answer never arrived (a
//! client timeout, a cut connection, an ambiguous COMMIT), is answered with the same instances
//! and lease tokens instead of taking more. An answer is written in the claim's own
//! transaction, and kept until the longest lease in it has passed.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::Result;
use super::claim::{Claimed, ClaimedRow};
use super::statements::sql;

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
    sqlx::query(sql!("claim_answers/record"))
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
    let rows: Vec<ClaimedRow> = sqlx::query_as(sql!("claim_answers/replay"))
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
    let done = sqlx::query(sql!("claim_answers/prune_expired"))
        .bind(limit)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
