//! An instance's history: the `instance_history` view over the `instance_events` rows and the
//! happy-path transitions recorded on the instance row itself (creation, the current claim, the
//! success; see `migrations/20261201000001_hot_path.sql`). Rows are written by the statements
//! that make the transitions; this file only reads them.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::statements::sql;
use super::{Error, Result};
use crate::domain::instance::InstanceEvent;

#[derive(sqlx::FromRow)]
struct EventRow {
    from_status: Option<String>,
    to_status: String,
    attempt: i32,
    at: DateTime<Utc>,
    actor: String,
    reason: Option<String>,
}

/// An instance's history, oldest first.
pub async fn list_events(pool: &PgPool, instance_id: Uuid) -> Result<Vec<InstanceEvent>> {
    let rows: Vec<EventRow> = sqlx::query_as(sql!("events/list"))
        .bind(instance_id)
        .fetch_all(pool)
        .await?;
    rows.into_iter()
        .map(|r| {
            Ok(InstanceEvent {
                from: r
                    .from_status
                    .map(|s| s.parse())
                    .transpose()
                    .map_err(Error::Corrupt)?,
                to: r.to_status.parse().map_err(Error::Corrupt)?,
                attempt: r.attempt,
                at: r.at,
                actor: r.actor,
                reason: r.reason,
            })
        })
        .collect()
}
