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

/// The upsert: insert the key's instance, or move the waiting one. The new instance is
/// available (and scheduled) `seconds` after the statement's clock; a waiting one moves to the
/// clock at its update + `seconds`, capped at its creation (the first trigger) +
/// `max_wait_seconds`, and never earlier than it was. Its limit draws are rendered from the
/// task's context merged with the new one, as every insert renders them. A new instance takes
/// the trigger's trace context (none without one: a trace of its own); a moved one keeps the
/// trace it was created under, whose window span is already recorded.
const UPSERT: &str = "\
    insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, \
        attempt, max_attempts, available_at, context_override, created_by, created_status, \
        created_reason, created_at, updated_at, limit_draws, priority, debounce_key, \
        trace_parent, trace_state) \
    select $1, t.id, $2, c.now + make_interval(secs => $3), 'PENDING', 'manual', t.agent_id, \
        1, $4, c.now + make_interval(secs => $3), $5, $6, 'PENDING', 'manual', c.now, c.now, \
        kairos_render_limit_draws(t.spec->'execution'->'limits', t.id, t.agent_id, \
            coalesce(t.spec->'context', '{}'::jsonb) || coalesce($5, '{}'::jsonb)), \
        $7, $8, $11, $12 \
    from tasks t cross join (select clock_timestamp() as now) c \
    where t.id = $9 \
    on conflict (task_id, debounce_key) where debounce_key is not null do update set \
        (available_at, scheduled_at) = ( \
            select at, at from (select greatest(task_instance.available_at, \
                case when $10::float8 is null then m.moved \
                     else least(m.moved, task_instance.created_at + make_interval(secs => $10)) \
                end) as at \
            from (select clock_timestamp() + make_interval(secs => $3) as moved) m) a), \
        context_override = excluded.context_override, \
        limit_draws = kairos_render_limit_draws( \
            (select s.spec->'execution'->'limits' from tasks s where s.id = task_instance.task_id), \
            task_instance.task_id, task_instance.agent_id, \
            coalesce((select s.spec->'context' from tasks s where s.id = task_instance.task_id), \
                     '{}'::jsonb) || coalesce(excluded.context_override, '{}'::jsonb)), \
        updated_at = now() \
    where task_instance.status = 'PENDING' and task_instance.started_at is null \
      and task_instance.available_at > clock_timestamp() \
    returning id, id = $1 as inserted";

/// Take the key off its instance once that instance no longer waits, so the next insert makes a
/// new one. A row that waits again by now (another trigger made it meanwhile) keeps it.
const RELEASE: &str = "\
    update task_instance set debounce_key = null \
    where task_id = $1 and debounce_key = $2 \
      and not (status = 'PENDING' and started_at is null and available_at > clock_timestamp())";

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
        let row: Option<(Uuid, bool)> = sqlx::query_as(UPSERT)
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
        let released = sqlx::query(RELEASE)
            .bind(task_id)
            .bind(key)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if released == 0 {
            let task_exists: bool =
                sqlx::query_scalar("select exists(select 1 from tasks where id = $1)")
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
