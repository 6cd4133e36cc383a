//! Console sessions (`console_sessions`): one row per logged-in browser, found by the hash of
//! the session id its cookie holds. What a row proves, and why it holds no token, is in
//! `migrations/20261207000001_console_sessions.sql`; `ui` makes and checks the values.

use sqlx::PgPool;

use super::Result;
use super::statements::sql;

/// Start a session lasting `seconds` (and end those whose time is up).
pub async fn start(pool: &PgPool, id_hash: &[u8], proof: &[u8], seconds: f64) -> Result<()> {
    let mut tx = super::begin(pool).await?;
    sqlx::query(sql!("sessions/insert"))
        .bind(id_hash)
        .bind(proof)
        .bind(seconds)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// The proof of the session `id_hash` names, while it lasts.
pub async fn proof(pool: &PgPool, id_hash: &[u8]) -> Result<Option<Vec<u8>>> {
    sqlx::query_scalar(sql!("sessions/proof"))
        .bind(id_hash)
        .fetch_optional(pool)
        .await
        .map_err(crate::store::Error::from)
}

/// End the session `id_hash` names (nothing when there is none).
pub async fn end(pool: &PgPool, id_hash: &[u8]) -> Result<()> {
    let mut tx = super::begin(pool).await?;
    sqlx::query(sql!("sessions/delete"))
        .bind(id_hash)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
