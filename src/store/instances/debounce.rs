//! Debounced manual runs (`execution.debounce`): a manual trigger without a window key either
//! makes the task's instance of its debounce key or, while that instance still waits (PENDING,
//! never claimed, not yet available), moves it to now + `seconds` (never past its first trigger
//! + `max_wait_seconds`) with the trigger's context.
//!
//! The coalescing is the database's: `debounce_key` is unique per task among the rows that hold
//! it (migration `20261203000011_debounce.sql`), and a trigger is one `insert … on conflict …
//! do update … where <still waiting>`. Concurrent triggers of any replica meet on that index;
//! the first inserts, the others wait for its row and update it. A row the conflict finds but
//! the `where` refuses (no longer waiting) is locked, not updated, and not returned: the trigger
//! then takes the key off it and inserts again, until one of the two statements answers with an
//! instance.

use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use crate::domain::task::{Debounce, TaskSpec};
use crate::domain::trace::TraceContext;
use crate::store::statements::sql;
use crate::store::{Error, Result};

/// How often a trigger may find its key's instance no longer waiting and clear it before it
/// gives up. Each round is lost only to another trigger of the same key that made a fresh
/// instance meanwhile, which the next round then joins, so two rounds settle in practice.
const MAX_ROUNDS: usize = 8;

/// What a debounced trigger did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// A new instance: no instance of the key was waiting.
    Created,
    /// The key's waiting instance was moved later and took the trigger's context.
    Debounced,
}

/// Make or move the waiting instance of `key` for a manual trigger of the task `spec` with
/// `context`, in the caller's transaction. Returns the instance's id and what was done.
pub(super) async fn debounce_trigger(
    conn: &mut PgConnection,
    spec: &TaskSpec,
    debounce: &Debounce,
    key: &str,
    window_key: &str,
    trigger: &super::ManualTrigger,
    actor: &str,
) -> Result<(Uuid, Outcome)> {
    let (context, priority) = (trigger.context.as_ref(), trigger.priority);
    let task_id = spec.id.as_str();
    let id = Uuid::now_v7();
    let max_wait = debounce.max_wait_seconds.map(|s| s as f64);
    for _ in 0..MAX_ROUNDS {
        let row: Option<(Uuid, bool)> = sqlx::query_as(sql!("instances/debounce/upsert"))
            .bind(id)
            .bind(window_key)
            .bind(debounce.seconds as f64)
            .bind(spec.execution.max_attempts())
            .bind(context.map(Json))
            .bind(actor)
            .bind(priority.unwrap_or(spec.execution.priority))
            .bind(key)
            .bind(task_id)
            .bind(max_wait)
            .bind(trigger.trace.as_ref().map(TraceContext::traceparent))
            .bind(trigger.trace.as_ref().and_then(|t| t.state.as_deref()))
            .fetch_optional(&mut *conn)
            .await?;
        match row {
            Some((id, true)) => return Ok((id, Outcome::Created)),
            Some((id, false)) => return Ok((id, Outcome::Debounced)),
            None => {}
        }
        // The key's instance no longer waits (or the task is gone: then nothing holds the
        // key and the next round inserts nothing either).
        let released = sqlx::query(sql!("instances/debounce/release"))
            .bind(task_id)
            .bind(key)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if released == 0 {
            let task_exists: bool = sqlx::query_scalar(sql!("instances/debounce/task_exists"))
                .bind(task_id)
                .fetch_one(&mut *conn)
                .await?;
            if !task_exists {
                return Err(Error::NotFound);
            }
        }
    }
    Err(Error::Conflict(format!(
        "the debounced instance of task {task_id} (debounce_key {key:?}) kept changing under \
         concurrent triggers; retry the request"
    )))
}
