//! What a lease holder does, each a compare-and-swap on (id, RUNNING, lease token) in the
//! caller's transaction (the group commit's): extend the lease, complete (RUNNING → SUCCESS,
//! with dependents and notifications), report a failure (planned by the domain, written by
//! `failures`); and the wake-up rule for work a finishing attempt may unblock.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::failures::{ReportedBy, RunningAttempt, record_failures};
use super::windows::trigger_dependents;
use super::{InstanceRow, fence_error_of};
use crate::domain::instance::{Instance, InstanceStatus};
use crate::domain::retry::Failure;
use crate::store::statements::sql;
use crate::store::{Result, WORK_CHANNEL, outbox};

/// One lease extension asked for by a lease holder.
#[derive(Debug, Clone)]
pub struct LeaseExtension {
    pub id: Uuid,
    pub lease_token: Uuid,
    pub lease_seconds: i64,
}

/// Extend many leases in the caller's transaction, each a compare-and-swap on (id, RUNNING,
/// lease token). Returns the instances written.
pub(crate) async fn heartbeat_in(
    conn: &mut PgConnection,
    items: &[LeaseExtension],
) -> Result<Vec<Written>> {
    let ids: Vec<Uuid> = items.iter().map(|h| h.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|h| h.lease_token).collect();
    let secs: Vec<f64> = items.iter().map(|h| h.lease_seconds as f64).collect();
    let rows: Vec<WrittenRow> = sqlx::query_as(sql!("instances/lease/heartbeat"))
        .bind(&ids)
        .bind(&tokens)
        .bind(&secs)
        .fetch_all(&mut *conn)
        .await?;
    rows.into_iter().map(Written::try_from).collect()
}

/// An instance a lease holder's call wrote, with the lease token it was written under: calls
/// are answered by (id, token), so a stale holder's call for the same instance in the same
/// batch never receives the live holder's answer.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub(in crate::store) token: Uuid,
    pub(in crate::store) instance: Instance,
}

#[derive(sqlx::FromRow)]
struct WrittenRow {
    #[sqlx(flatten)]
    instance: InstanceRow,
    matched_token: Uuid,
}

impl TryFrom<WrittenRow> for Written {
    type Error = crate::store::Error;
    fn try_from(r: WrittenRow) -> Result<Written> {
        Ok(Written {
            token: r.matched_token,
            instance: Instance::try_from(r.instance)?,
        })
    }
}

/// What a lease holder's call asked for, to explain a compare-and-swap that missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Report {
    Heartbeat,
    Complete,
    Fail,
}

/// One completion reported by a lease holder.
#[derive(Debug, Clone)]
pub struct Completion {
    pub id: Uuid,
    pub lease_token: Uuid,
    pub result: Option<Value>,
    /// Who reports it (the event actor); `agent:<worker_id>` of the instance when `None`.
    pub actor: Option<String>,
}

/// One answer per call (instance id, lease token), in order: the instance written under that
/// token, or why the compare-and-swap missed ([`explain_miss`]). Never by id alone: a stale
/// holder's call and the live holder's for one instance can share a batch, and each must get
/// its own answer (the stale one 409, the live one its write).
pub(crate) async fn answer_each(
    pool: &PgPool,
    calls: impl Iterator<Item = (Uuid, Uuid)>,
    report: Report,
    written: Vec<Written>,
) -> Result<Vec<Result<Instance>>> {
    let by_call: HashMap<(Uuid, Uuid), Instance> = written
        .into_iter()
        .map(|w| ((w.instance.id, w.token), w.instance))
        .collect();
    let mut out = Vec::new();
    for (id, token) in calls {
        match by_call.get(&(id, token)) {
            Some(inst) => out.push(Ok(inst.clone())),
            None => out.push(explain_miss(pool, id, token, report).await),
        }
    }
    Ok(out)
}

/// A lease holder's call whose compare-and-swap on (id, RUNNING, token) matched nothing. When
/// the holder already reported this outcome under this token (`reported_lease_token`: a
/// complete that left it SUCCESS, a fail that left it anything else), the call is a repeat
/// of one that committed, whose answer the holder never heard (a cut connection, an ambiguous
/// COMMIT, a batch whose items landed in different transactions): it is answered as the first
/// was, with the instance as it stands. Otherwise the lease is gone: 409 (or 404).
pub(in crate::store) async fn explain_miss(
    pool: &PgPool,
    id: Uuid,
    token: Uuid,
    report: Report,
) -> Result<Instance> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        instance: InstanceRow,
        reported_lease_token: Option<Uuid>,
    }
    let row: Option<Row> = sqlx::query_as(sql!("instances/lease/explain_miss"))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    let Some(row) = row else {
        return Err(crate::store::Error::NotFound);
    };
    let reported = row.reported_lease_token == Some(token);
    let inst = Instance::try_from(row.instance)?;
    let repeat = reported
        && match report {
            Report::Complete => inst.status == InstanceStatus::Success,
            Report::Fail => inst.status != InstanceStatus::Success,
            Report::Heartbeat => false,
        };
    if repeat {
        tracing::info!(task_id = %inst.task_id, window_key = %inst.window_key, instance_id = %inst.id, attempt = inst.attempt, status = %inst.status, reason = "repeated report under the lease that already reported it", "report answered as before");
        return Ok(inst);
    }
    Err(fence_error_of(inst))
}

#[derive(sqlx::FromRow)]
struct CompletedRow {
    #[sqlx(flatten)]
    instance: InstanceRow,
    matched_token: Uuid,
    /// Some task of the batch has dependents (`after` tasks) to trigger.
    has_dependents: bool,
    /// Some task of the batch has `notify.on_success` receivers.
    notifies: bool,
}

/// The completions in the caller's transaction: each a compare-and-swap on (id, RUNNING,
/// lease token). In the same statement: the success (on the row, `finished_by`), the tasks'
/// failure counts reset, and the wake-ups of [`queued_work_sql`] (its snapshot is from
/// before the update). Only when the batch needs them: the dependents' windows and the
/// `instance.succeeded` notifications. Returns the instances written.
pub(crate) async fn complete_in(
    conn: &mut PgConnection,
    items: &[Completion],
) -> Result<Vec<Written>> {
    let ids: Vec<Uuid> = items.iter().map(|c| c.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|c| c.lease_token).collect();
    let results: Vec<Option<Json<&Value>>> =
        items.iter().map(|c| c.result.as_ref().map(Json)).collect();
    let actors: Vec<Option<&str>> = items.iter().map(|c| c.actor.as_deref()).collect();
    let rows: Vec<CompletedRow> = sqlx::query_as(sql!("instances/lease/complete"))
        .bind(&ids)
        .bind(&tokens)
        .bind(&results)
        .bind(&actors)
        .bind(WORK_CHANNEL)
        .fetch_all(&mut *conn)
        .await?;
    let has_dependents = rows.iter().any(|r| r.has_dependents);
    let notifies = rows.iter().any(|r| r.notifies);
    let done: Vec<Written> = rows
        .into_iter()
        .map(|r| {
            Ok(Written {
                token: r.matched_token,
                instance: Instance::try_from(r.instance)?,
            })
        })
        .collect::<Result<_>>()?;
    if has_dependents {
        for inst in done.iter().map(|w| &w.instance) {
            let result = items
                .iter()
                .find(|c| c.id == inst.id)
                .and_then(|c| c.result.as_ref());
            trigger_dependents(conn, inst, result).await?;
        }
    }
    if notifies {
        let events: Vec<outbox::Event> = done
            .iter()
            .map(|w| &w.instance)
            .map(|inst| outbox::Event {
                kind: "instance.succeeded",
                task_id: inst.task_id.clone(),
                instance_id: Some(inst.id),
                list: outbox::NotifyList::OnSuccess,
                data: serde_json::json!({ "instance": inst }),
            })
            .collect();
        outbox::enqueue(conn, &events).await?;
    }
    Ok(done)
}

/// The one wake-up rule, for a task `t` some of whose RUNNING instances are finishing in this
/// transaction, read *before* they change: a finished slot may unblock the task's queued work,
/// so the agent is woken where the task has PENDING work. Where the task was below its limit
/// that work was claimable already and the NOTIFY wakes nobody (it is one per agent and
/// transaction: PostgreSQL folds repeats). The limit is not tested first: that counts the
/// task's RUNNING rows, which during a drain costs more than the NOTIFY it saves.
pub fn queued_work_sql() -> String {
    crate::store::has_pending_sql("t.id", "true")
}

/// Wake the agents of the tasks among `task_ids` that [`queued_work_sql`] holds for.
/// Call it before the finishing rows leave RUNNING (the NOTIFY is sent at commit).
async fn notify_queued(conn: &mut PgConnection, task_ids: &[&str]) -> Result<()> {
    sqlx::query(sql!("instances/lease/notify_queued"))
        .bind(WORK_CHANNEL)
        .bind(task_ids)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Add `item` to `actor`'s group (writes are grouped by event actor, in first-seen order).
fn push_for<T>(groups: &mut Vec<(String, Vec<T>)>, actor: String, item: T) {
    match groups.iter_mut().find(|(known, _)| *known == actor) {
        Some((_, list)) => list.push(item),
        None => groups.push((actor, vec![item])),
    }
}

/// One failed attempt reported by its lease holder.
#[derive(Debug, Clone)]
pub struct FailureReport {
    pub id: Uuid,
    pub lease_token: Uuid,
    pub error: String,
    pub retryable: bool,
    /// A retry may start at once instead of after the task's backoff (the attempt was cut
    /// short by kairos itself, not failed by the agent).
    pub retry_at_once: bool,
    pub error_kind: &'static str,
    /// Who reports it (the event actor); `agent:<worker_id>` of the lease holder when `None`.
    pub actor: Option<String>,
    /// `retry_after_seconds`: a quota refused the attempt; it waits this long as PENDING with
    /// its attempt unspent, and is no failure of the task (`super::record_throttled`).
    pub throttle_seconds: Option<i64>,
    /// With `throttle_seconds`: the instant the hold this report made ends (`hold_limit`); the
    /// retry is available then, the very instant the limit starts again.
    pub throttle_until: Option<chrono::DateTime<chrono::Utc>>,
}

/// Record many reported failures in the caller's transaction: each locks its RUNNING row
/// under its lease token (missing ones are left out), is planned by the state machine and the
/// task's backoff, and is written as a compare-and-swap. Returns the instances written.
pub(crate) async fn fail_in(
    conn: &mut PgConnection,
    items: &[FailureReport],
) -> Result<Vec<Written>> {
    let ids: Vec<Uuid> = items.iter().map(|f| f.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|f| f.lease_token).collect();
    let running: Vec<RunningAttempt> = sqlx::query_as(sql!("instances/lease/lock_reported"))
        .bind(&ids)
        .bind(&tokens)
        .fetch_all(&mut *conn)
        .await?;
    let mut tasks: Vec<&str> = running.iter().map(|a| a.task_id.as_str()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    if !tasks.is_empty() {
        notify_queued(conn, &tasks).await?;
    }
    // Each locked attempt fails once, as its holder's first report says; actors group the
    // writes.
    let mut by_actor: Vec<(String, Vec<Failure>)> = Vec::new();
    // Taken out when planned: a batch of up to 1,000 reports finds each attempt by its id AND
    // lease token (a stale holder's report of the same instance in the same batch finds
    // nothing, and never decides the live attempt's outcome), and a second report of the same
    // attempt finds nothing.
    let mut unplanned: HashMap<(Uuid, Uuid), &RunningAttempt> =
        running.iter().map(|a| ((a.id, a.lease_token), a)).collect();
    let mut throttled_by_actor: Vec<(String, Vec<super::Throttled>)> = Vec::new();
    for item in items {
        let Some(a) = unplanned.remove(&(item.id, item.lease_token)) else {
            continue;
        };
        let actor = item
            .actor
            .clone()
            .unwrap_or_else(|| format!("agent:{}", a.worker_id.as_deref().unwrap_or("unknown")));
        if let Some(secs) = item.throttle_seconds {
            let one = super::Throttled {
                id: a.id,
                lease_token: a.lease_token,
                retry_after_seconds: secs,
                until: item.throttle_until,
                error: item.error.clone(),
            };
            push_for(&mut throttled_by_actor, actor, one);
            continue;
        }
        let mut failure = a.plan_failure(
            item.retryable,
            &item.error,
            item.error_kind,
            rand::random::<f64>(),
        );
        if item.retry_at_once {
            failure.delay = std::time::Duration::ZERO;
        }
        push_for(&mut by_actor, actor, failure);
    }
    let mut written = Vec::new();
    for (actor, throttled) in throttled_by_actor {
        let tokens: HashMap<Uuid, Uuid> = throttled.iter().map(|t| (t.id, t.lease_token)).collect();
        for inst in super::record_throttled(conn, &throttled, &actor).await? {
            if let Some(&token) = tokens.get(&inst.id) {
                written.push(Written {
                    token,
                    instance: inst,
                });
            }
        }
    }
    for (actor, failures) in by_actor {
        let tokens: HashMap<Uuid, Uuid> = failures.iter().map(|f| (f.id, f.lease_token)).collect();
        for inst in record_failures(conn, &failures, &actor, ReportedBy::Holder).await? {
            if let Some(&token) = tokens.get(&inst.id) {
                written.push(Written {
                    token,
                    instance: inst,
                });
            }
        }
    }
    Ok(written)
}
