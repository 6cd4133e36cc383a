//! RUNNING → PENDING under the lease token, the attempt not spent and nothing counted toward the
//! circuit breaker:
//! - giving back leases nobody can use: claims whose answer never reached their caller (the
//!   request went away while its claim committed). Without it those rows would sit RUNNING until
//!   their leases expired and then cost an attempt each;
//! - throttled attempts: the holder reports that a quota refused the attempt and when to try
//!   again (`fail` with `retry_after_seconds`); the instance waits until then.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::InstanceRow;
use crate::domain::instance::Instance;
use crate::store::statements::sql;
use crate::store::{Result, notify_work_of};

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
    let rows: Vec<GivenBack> = sqlx::query_as(sql!("instances/give_back/give_back"))
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

/// One throttled attempt reported by its lease holder.
#[derive(Debug, Clone)]
pub struct Throttled {
    pub id: Uuid,
    pub lease_token: Uuid,
    /// When to try again, from now.
    pub retry_after_seconds: i64,
    /// When to try again, as an instant (the end of the hold the throttle made); wins over
    /// `retry_after_seconds`.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
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
    let until: Vec<Option<chrono::DateTime<chrono::Utc>>> = items.iter().map(|t| t.until).collect();
    let rows: Vec<InstanceRow> = sqlx::query_as(sql!("instances/give_back/throttle"))
        .bind(&ids)
        .bind(&tokens)
        .bind(&secs)
        .bind(&errors)
        .bind(actor)
        .bind(&until)
        .fetch_all(&mut *conn)
        .await?;
    rows.into_iter().map(Instance::try_from).collect()
}
