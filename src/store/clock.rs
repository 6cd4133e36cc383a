//! The database clock: the one clock for windows, leases and deadlines (openapi.yaml).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::Result;
use super::statements::sql;

/// The time now by the database clock.
pub async fn now(pool: &PgPool) -> Result<DateTime<Utc>> {
    sqlx::query_scalar(sql!("clock/now"))
        .fetch_one(pool)
        .await
        .map_err(crate::store::Error::from)
}

/// The time the caller's transaction started by the database clock (`now()` in it).
pub async fn now_in(conn: &mut PgConnection) -> Result<DateTime<Utc>> {
    sqlx::query_scalar(sql!("clock/now"))
        .fetch_one(&mut *conn)
        .await
        .map_err(crate::store::Error::from)
}

/// How long until `at` by the database clock as it runs (not the transaction's start), zero
/// once it has come.
pub async fn until(conn: &mut PgConnection, at: DateTime<Utc>) -> Result<Duration> {
    let secs: f64 = sqlx::query_scalar(sql!("clock/until"))
        .bind(at)
        .fetch_one(&mut *conn)
        .await?;
    Ok(Duration::try_from_secs_f64(secs).unwrap_or(Duration::ZERO))
}
