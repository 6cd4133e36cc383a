//! The `outbox` table: notifications written in the same transaction as the transition that
//! causes them, then delivered at least once by the notifier loop. A delivery is claimed by
//! pushing its `next_attempt_at` forward (a lease), so a notifier that dies mid-delivery leaves
//! the row to be tried again, never lost.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::Result;
use super::statements::sql;

/// Which `notify` list of the task an event goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyList {
    OnSuccess,
    OnFailure,
}

impl NotifyList {
    fn key(self) -> &'static str {
        match self {
            NotifyList::OnSuccess => "on_success",
            NotifyList::OnFailure => "on_failure",
        }
    }
}

/// One event to announce to a task's receivers.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: &'static str,
    pub task_id: String,
    pub instance_id: Option<Uuid>,
    pub list: NotifyList,
    /// Event-specific data (the instance, counts, reasons).
    pub data: Value,
}

/// `occurred_at` of a notification: the transaction's time by the database clock (the clock of
/// `finished_at` and every other time the transition wrote), spelled as the API spells instants
/// (`format_instant`: RFC 3339 UTC, sub-second digits only when present, 3 or 6 of them).
/// `outbox/enqueue.sql` writes it out as its `occurred at` fragment.
pub const OCCURRED_AT_SQL: &str = "to_char(now() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') \
    || case \
           when extract(microseconds from now())::bigint % 1000000 = 0 then '' \
           when extract(microseconds from now())::bigint % 1000 = 0 \
               then to_char(now() at time zone 'UTC', '.MS') \
           else to_char(now() at time zone 'UTC', '.US') \
       end || 'Z'";

/// Write one outbox row per (event, URL of the task's list), in the caller's transaction.
/// Tasks without URLs in that list get nothing. Returns the rows written.
pub async fn enqueue(conn: &mut PgConnection, events: &[Event]) -> Result<u64> {
    if events.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = events.iter().map(|_| Uuid::now_v7()).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind).collect();
    let tasks: Vec<&str> = events.iter().map(|e| e.task_id.as_str()).collect();
    let instances: Vec<Option<Uuid>> = events.iter().map(|e| e.instance_id).collect();
    let lists: Vec<&str> = events.iter().map(|e| e.list.key()).collect();
    let payloads: Vec<Json<Value>> = events
        .iter()
        .zip(&ids)
        .map(|(e, id)| {
            Json(json!({
                "event_id": id,
                "type": e.kind,
                "task_id": e.task_id,
                "data": e.data,
            }))
        })
        .collect();
    let written = sqlx::query(sql!("outbox/enqueue"))
        .bind(&ids)
        .bind(&kinds)
        .bind(&tasks)
        .bind(&instances)
        .bind(&lists)
        .bind(&payloads)
        .execute(&mut *conn)
        .await?;
    Ok(written.rows_affected())
}

/// A delivery the notifier holds.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Delivery {
    pub id: Uuid,
    pub event_id: Uuid,
    pub kind: String,
    pub task_id: String,
    pub url: String,
    pub secret: Option<String>,
    pub payload: Json<Value>,
    pub attempts: i32,
    pub created_at: DateTime<Utc>,
}

/// Take up to `limit` due deliveries for `hold_seconds` (their `next_attempt_at` moves past the
/// delivery's timeout, so no other notifier takes them meanwhile).
pub async fn take_due(pool: &PgPool, limit: i64, hold_seconds: f64) -> Result<Vec<Delivery>> {
    let mut tx = super::begin(pool).await?;
    let taken = sqlx::query_as(sql!("outbox/take_due"))
        .bind(limit)
        .bind(hold_seconds)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(taken)
}

pub async fn mark_delivered(pool: &PgPool, id: Uuid) -> Result<()> {
    let mut tx = super::begin(pool).await?;
    sqlx::query(sql!("outbox/mark_delivered"))
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Record a failed try: retry after `retry_in`, or give up when the delivery is older than
/// `max_age_seconds`. Returns true when it was given up.
pub async fn mark_failed(
    pool: &PgPool,
    id: Uuid,
    error: &str,
    retry_in: std::time::Duration,
    max_age_seconds: i64,
) -> Result<bool> {
    let mut tx = super::begin(pool).await?;
    let gave_up: bool = sqlx::query_scalar(sql!("outbox/mark_failed"))
        .bind(id)
        .bind(error)
        .bind(retry_in.as_secs_f64())
        .bind(max_age_seconds as f64)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(gave_up)
}
