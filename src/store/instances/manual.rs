//! Manual triggers: a run asked for over the API, inserted as a window of its own or taken by
//! the task's waiting debounced instance.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use sqlx::types::Json;
use uuid::Uuid;

use super::{NewInstance, get_instance_by_window, insert_windows_at};
use crate::domain::instance::{Instance, InstanceStatus, Source};
use crate::domain::schedule::canonical_window_key;
use crate::domain::task::FieldError;
use crate::domain::trace::TraceContext;
use crate::store::statements::sql;
use crate::store::{Error, Result, notify_work};

/// A run asked for over the API.
#[derive(Debug, Clone, Default)]
pub struct ManualTrigger {
    /// Caller-chosen key; `manual:<uuid>` when absent.
    pub window_key: Option<String>,
    /// When it may be claimed; now when absent.
    pub run_at: Option<DateTime<Utc>>,
    pub delay_seconds: Option<i64>,
    /// Merged over the task's context (top-level keys) at claim time.
    pub context: Option<Value>,
    /// The run's priority; the task's `execution.priority` when absent.
    pub priority: Option<i16>,
    /// The trigger's trace context (`traceparent`), if it came with a valid one.
    pub trace: Option<TraceContext>,
}

/// What a manual trigger did ([`trigger_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Triggered {
    /// A new instance.
    Created,
    /// The task already had an instance with the trigger's window key (returned unchanged).
    Existing,
    /// The task's waiting debounced instance took the trigger (`execution.debounce`): moved
    /// later, with the trigger's context.
    Debounced,
}

/// Create a manual (or delayed) instance of `task_id`, or find the one with the same key.
/// Returns whether it was created ([`trigger_run`] without a debounce key: a trigger that a
/// debounced task's waiting instance takes is not a creation).
pub async fn trigger_instance(
    pool: &PgPool,
    task_id: &str,
    t: &ManualTrigger,
    actor: &str,
) -> Result<(bool, Instance)> {
    let (what, inst) = trigger_run(pool, task_id, t, None, actor).await?;
    Ok((what == Triggered::Created, inst))
}

/// Create a manual (or delayed) instance of `task_id`, or find the one with the same key, or,
/// for a task with `execution.debounce` and a trigger without a window key, make or move the
/// task's waiting instance of `debounce_key` (default: the task's id). Manual runs are not
/// subject to overlap skips (someone asked for this run); the concurrency limit still holds at
/// claim time. A manual run of a task whose next window is being staged waits for it
/// ([`hold_task_cursor`](crate::store::hold_task_cursor)).
///
/// Refused (`Invalid`): a `debounce_key` for a task without `execution.debounce`, and `run_at`
/// or `delay_seconds` on a debounced trigger (its debounce decides when it runs).
pub async fn trigger_run(
    pool: &PgPool,
    task_id: &str,
    t: &ManualTrigger,
    debounce_key: Option<&str>,
    actor: &str,
) -> Result<(Triggered, Instance)> {
    let mut tx = crate::store::begin(pool).await?;
    crate::store::hold_task_cursor(&mut tx, task_id).await?;
    // The run's time is read after that wait: a run that waited for a staged window comes
    // after it.
    let row: Option<(Json<Value>, DateTime<Utc>)> =
        sqlx::query_as(sql!("instances/manual/task_spec"))
            .bind(task_id)
            .fetch_optional(&mut *tx)
            .await?;
    let (spec, now) = row.ok_or(Error::NotFound)?;
    let spec: crate::domain::task::TaskSpec =
        serde_json::from_value(spec.0).map_err(|e| Error::Corrupt(format!("tasks.spec: {e}")))?;
    match (&spec.execution.debounce, &t.window_key) {
        (Some(debounce), None) => {
            let key = debounce_key.unwrap_or(task_id);
            for (field, given) in [
                ("run_at", t.run_at.is_some()),
                ("delay_seconds", t.delay_seconds.is_some()),
            ] {
                if given {
                    return Err(Error::Invalid(FieldError::new(
                        field,
                        "is not taken by a debounced trigger: the task's execution.debounce \
                         decides when the run starts (give a window_key for a run of its own)",
                    )));
                }
            }
            let window_key = format!("manual:{}", Uuid::new_v4());
            let (id, outcome) = super::debounce::debounce_trigger(
                &mut tx,
                &spec,
                debounce,
                key,
                &window_key,
                t,
                actor,
            )
            .await?;
            let what = match outcome {
                super::debounce::Outcome::Created => {
                    // Its waiting claims learn when it comes (they wake, find it not yet
                    // available, and wait for its available_at).
                    notify_work(&mut tx, &spec.agent_id).await?;
                    Triggered::Created
                }
                super::debounce::Outcome::Debounced => Triggered::Debounced,
            };
            tx.commit().await?;
            match what {
                Triggered::Created => {
                    metrics::counter!("kairos_windows_created_total").increment(1)
                }
                _ => metrics::counter!("kairos_debounced_triggers_total").increment(1),
            }
            let inst = super::get_instance(pool, id).await?;
            return Ok((what, inst));
        }
        (None, _) if debounce_key.is_some() => {
            return Err(Error::Invalid(FieldError::new(
                "debounce_key",
                "the task has no execution.debounce: its manual runs are not debounced",
            )));
        }
        _ => {}
    }
    let at = match (t.run_at, t.delay_seconds) {
        (Some(at), _) => at,
        (None, Some(d)) => now + chrono::Duration::seconds(d),
        (None, None) => now,
    };
    // A key that is an instant names that window however it is spelled. A window triggered
    // under another spelling before keys were made canonical still answers to that spelling.
    let key = match &t.window_key {
        None => format!("manual:{}", Uuid::new_v4()),
        Some(k) => match canonical_window_key(k) {
            Some(c) if c != *k => match get_instance_by_window(&mut *tx, task_id, k).await {
                Ok(old) => return Ok((Triggered::Existing, old)),
                Err(Error::NotFound) => c,
                Err(e) => return Err(e),
            },
            _ => k.clone(),
        },
    };
    let report = insert_windows_at(
        &mut tx,
        &[NewInstance {
            task_id: task_id.to_owned(),
            window_key: key.clone(),
            scheduled_at: at,
            status: InstanceStatus::Pending,
            source: Source::Manual,
            agent_id: spec.agent_id.clone(),
            max_attempts: spec.execution.max_attempts(),
            available_at: at,
            skip_reason: None,
            context_override: t.context.clone(),
            priority: t.priority,
            trace: t.trace.clone(),
        }],
        actor,
        Some(now),
    )
    .await?;
    let created = !report.created.is_empty();
    if created && at <= now {
        notify_work(&mut tx, &spec.agent_id).await?;
    }
    tx.commit().await?;
    if created {
        metrics::counter!("kairos_windows_created_total").increment(1);
    }
    let inst = get_instance_by_window(pool, task_id, &key).await?;
    let what = if created {
        Triggered::Created
    } else {
        Triggered::Existing
    };
    Ok((what, inst))
}
