//! Failed attempts: the timeout reaper's lock of expired leases, recording failures (RUNNING →
//! FAILED or DEAD, with the tasks' failure counts and circuit breakers), and the retry scan
//! (FAILED → PENDING once the backoff has passed). What a failure becomes is decided by
//! `crate::domain::retry::plan_failure`.

use serde_json::Value;
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::{
    CLOSE_ATTEMPT_EVENTS, Created, INSTANCE_COLUMNS, InstanceRow, TASKS_OF_UPD_IN_ID_ORDER,
};
use crate::domain::instance::{Event, Instance, InstanceStatus};
use crate::domain::retry::{FailingAttempt, Failure, plan_failure};
use crate::domain::task::RetryBackoff;
use crate::store::{RUNNING_BY_ID, Result, SourceIs, circuit, notify_work_of, outbox};

/// `i.status = 'RUNNING'`: the rows the reaper locks are the sources of a failure.
const RUNNING: SourceIs = SourceIs::new("i.status", Event::Fail { give_up: false });

/// `status = 'FAILED'`: the rows the retry scan locks are the sources of a due retry.
const FAILED: SourceIs = SourceIs::new("status", Event::RetryDue);

/// [`FAILED`] in the compare-and-swap on the locked rows.
const FAILED_I: SourceIs = SourceIs::new("i.status", Event::RetryDue);

/// A RUNNING instance about to fail, with what deciding FAILED vs DEAD needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunningAttempt {
    pub id: Uuid,
    pub task_id: String,
    pub window_key: String,
    pub agent_id: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub lease_token: Uuid,
    /// The worker holding the lease.
    pub worker_id: Option<String>,
    /// The task's `execution.retry_backoff` as stored; null when the task was deleted.
    pub retry_backoff: Option<Json<Value>>,
    /// False when the task was deleted: nobody is left to retry for.
    pub task_exists: bool,
    /// `lease_expired` or `timeout` for reaped rows; null otherwise.
    pub expiry: Option<String>,
    /// For an expired lease: the database was unreachable (restarted, or a replica recorded an
    /// outage) since the lease was last renewed, so its holder may have been unable to renew
    /// or report it. Such a lease is renewed once instead of failed.
    pub lost_to_outage: bool,
}

impl RunningAttempt {
    /// What this attempt's failure becomes ([`crate::domain::retry::plan_failure`]); the task's
    /// backoff policy is read only when the attempt will be retried.
    pub fn plan_failure(
        &self,
        retryable: bool,
        error: &str,
        error_kind: &'static str,
        unit: f64,
    ) -> Failure {
        let failing = FailingAttempt {
            id: self.id,
            lease_token: self.lease_token,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            task_exists: self.task_exists,
        };
        plan_failure(&failing, retryable, error, error_kind, unit, || {
            self.retry_policy()
        })
    }

    /// The backoff policy of a failing attempt's task. A stored `retry_backoff` that cannot be
    /// read (written by another version, or edited by hand) must not cost the instance its
    /// remaining attempts: it is logged and the default policy applies, so the instance stays
    /// FAILED with a sensible retry time.
    fn retry_policy(&self) -> RetryBackoff {
        let read = match &self.retry_backoff {
            Some(j) => {
                serde_json::from_value::<RetryBackoff>(j.0.clone()).map_err(|e| e.to_string())
            }
            None => Err("execution.retry_backoff is missing".to_owned()),
        };
        read.unwrap_or_else(|reason| {
            let fallback = RetryBackoff::default();
            tracing::warn!(
                task_id = %self.task_id,
                window_key = %self.window_key,
                instance_id = %self.id,
                attempt = self.attempt,
                reason = %reason,
                base_seconds = fallback.base_seconds,
                max_seconds = fallback.max_seconds,
                "stored retry_backoff unreadable; retrying with the default backoff"
            );
            fallback
        })
    }
}

/// The [`RunningAttempt`] columns but `expiry`, for `task_instance i left join tasks t`.
pub(in crate::store) const RUNNING_ATTEMPT_COLUMNS: &str = "i.id, i.task_id, i.window_key, i.agent_id, i.attempt, \
     i.max_attempts, i.lease_token, i.worker_id, \
     t.spec->'execution'->'retry_backoff' as retry_backoff, t.id is not null as task_exists";

/// Lock up to `limit` RUNNING instances whose lease expired or whose run passed its deadline,
/// skipping rows another replica's reaper holds. (`lease_expires_at is not null` holds for
/// every RUNNING row; it is spelled out because the expiry index of
/// `migrations/20261201000004_one_index_per_lookup.sql` requires it.)
pub async fn lock_expired(conn: &mut PgConnection, limit: i64) -> Result<Vec<RunningAttempt>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {RUNNING_ATTEMPT_COLUMNS}, \
             case when i.deadline_at < now() then 'timeout' else 'lease_expired' end as expiry, \
             i.deadline_at >= now() and ( \
                 pg_postmaster_start_time() > i.updated_at \
                 or exists (select 1 from db_unreachable u \
                            where u.ended_at >= i.updated_at \
                                and u.started_at <= i.lease_expires_at)) as lost_to_outage \
         from task_instance i left join tasks t on t.id = i.task_id \
         where {RUNNING} and i.lease_expires_at is not null \
             and least(i.lease_expires_at, i.deadline_at) < now() \
         order by least(i.lease_expires_at, i.deadline_at) \
         limit $1 \
         for update of i skip locked"
    )))
    .bind(limit)
    .fetch_all(&mut *conn)
    .await
    .map_err(crate::store::Error::from)
}

/// Renew, once, expired leases that were lost to an outage ([`RunningAttempt::lost_to_outage`]):
/// each gets the length it had (from its last renewal to its expiry) again from now, under the
/// same token, so its holder can still report what it did. Not an attempt, not a failure; the
/// run's deadline (`timeout_seconds`) still applies. Returns how many were renewed.
pub async fn renew_after_outage(conn: &mut PgConnection, lost: &[RunningAttempt]) -> Result<u64> {
    if lost.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = lost.iter().map(|a| a.id).collect();
    let tokens: Vec<Uuid> = lost.iter().map(|a| a.lease_token).collect();
    let done = sqlx::query(sqlx::AssertSqlSafe(format!(
        "update task_instance i \
         set lease_expires_at = clock_timestamp() + (i.lease_expires_at - i.updated_at), \
             updated_at = now() \
         from unnest($1::uuid[], $2::uuid[]) as f(id, token) \
         where i.id = f.id and {RUNNING_BY_ID} and i.lease_token = f.token"
    )))
    .bind(&ids)
    .bind(&tokens)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// Who ends the attempts [`record_failures`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportedBy {
    /// The lease holder reported the failure: a repeat of the report under the same token is
    /// answered as the first was (`reported_lease_token`).
    Holder,
    /// kairos ended the lease (the reaper, the push dispatcher): the holder stays fenced out.
    Kairos,
}

/// Write failed attempts: RUNNING → FAILED (with `available_at = now() + delay`) or DEAD, each
/// a compare-and-swap on (id, RUNNING, lease token) with its event, and add the failures to the
/// tasks' `consecutive_failures`. Returns the instances as written.
pub async fn record_failures(
    conn: &mut PgConnection,
    failures: &[Failure],
    actor: &str,
    by: ReportedBy,
) -> Result<Vec<Instance>> {
    if failures.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = failures.iter().map(|f| f.id).collect();
    let tokens: Vec<Uuid> = failures.iter().map(|f| f.lease_token).collect();
    let tos: Vec<&str> = failures.iter().map(|f| f.to.as_str()).collect();
    let delays: Vec<i64> = failures
        .iter()
        .map(|f| i64::try_from(f.delay.as_millis()).unwrap_or(i64::MAX / 2))
        .collect();
    let errors: Vec<&str> = failures.iter().map(|f| f.error.as_str()).collect();
    let kinds: Vec<&str> = failures.iter().map(|f| f.error_kind).collect();
    let rows: Vec<InstanceRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with f as ( \
             select * from unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[], $5::text[], \
                                  $6::text[]) as f(id, token, to_status, delay_ms, error, kind) \
         ), old as ( \
             select id, claimed_by from task_instance where id = any($1) \
         ), upd as ( \
             update task_instance i set status = f.to_status, error = f.error, \
                 error_kind = f.kind, \
                 available_at = case when f.to_status = 'FAILED' \
                     then now() + f.delay_ms * interval '1 millisecond' else i.available_at end, \
                 finished_at = case when f.to_status = 'DEAD' then now() end, \
                 lease_token = null, lease_expires_at = null, deadline_at = null, \
                 claimed_by = null, updated_at = now(), \
                 reported_lease_token = case when $8 then f.token \
                     else i.reported_lease_token end \
             from f, old where i.id = f.id and old.id = i.id and {RUNNING_BY_ID} \
                 and i.lease_token = f.token \
             returning i.*, old.claimed_by as old_claimed_by \
         ), ev as ( \
             {CLOSE_ATTEMPT_EVENTS} \
             select id, attempt, 'RUNNING', status, $7, error_kind || ': ' || left(error, 512), \
                 now(), 1 \
             from upd \
             ) x order by instance_id, o \
         ), tk as ( \
             update tasks t set consecutive_failures = t.consecutive_failures + c.n \
             from (select task_id, count(*)::int as n from upd group by task_id) c \
             where t.id = c.task_id and t.id in ({TASKS_OF_UPD_IN_ID_ORDER}) \
         ) \
         select {INSTANCE_COLUMNS} from upd"
    )))
    .bind(&ids)
    .bind(&tokens)
    .bind(&tos)
    .bind(&delays)
    .bind(&errors)
    .bind(&kinds)
    .bind(actor)
    .bind(by == ReportedBy::Holder)
    .fetch_all(&mut *conn)
    .await?;
    let written: Vec<Instance> = rows
        .into_iter()
        .map(Instance::try_from)
        .collect::<Result<_>>()?;
    let events: Vec<outbox::Event> = written
        .iter()
        .map(|i| outbox::Event {
            kind: if i.status == InstanceStatus::Dead {
                "instance.dead"
            } else {
                "instance.failed"
            },
            task_id: i.task_id.clone(),
            instance_id: Some(i.id),
            list: outbox::NotifyList::OnFailure,
            data: serde_json::json!({ "instance": i }),
        })
        .collect();
    outbox::enqueue(conn, &events).await?;
    let mut tasks: Vec<&str> = written.iter().map(|i| i.task_id.as_str()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    circuit::open_circuits(conn, &tasks).await?;
    Ok(written)
}

/// FAILED instances whose backoff has passed → PENDING with `attempt + 1`, at most `limit` per
/// call (the rate limit against retry storms), for the task's current agent (an attempt that
/// was running when its task moved to another agent comes back to the new one). Wakes the
/// agents' waiting claims.
pub async fn retry_due(conn: &mut PgConnection, limit: i64, actor: &str) -> Result<Vec<Created>> {
    let rows: Vec<(Uuid, String, String, String, i32)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with due as ( \
             select id from task_instance where {FAILED} and available_at <= now() \
             order by available_at limit $1 for update skip locked \
         ), upd as ( \
             update task_instance i set status = 'PENDING', attempt = i.attempt + 1, \
                 updated_at = now(), \
                 agent_id = coalesce((select t.agent_id from tasks t where t.id = i.task_id), i.agent_id) \
             from due where i.id = due.id and {FAILED_I} \
             returning i.id, i.task_id, i.window_key, i.agent_id, i.attempt \
         ), ev as ( \
             insert into instance_events (instance_id, attempt, from_status, to_status, actor, reason) \
             select id, attempt, 'FAILED', 'PENDING', $2, 'retry: attempt ' || attempt from upd \
         ) \
         select id, task_id, window_key, agent_id, attempt from upd"
    )))
    .bind(limit)
    .bind(actor)
    .fetch_all(&mut *conn)
    .await?;
    notify_work_of(conn, rows.iter().map(|r| r.3.as_str()).collect()).await?;
    Ok(rows
        .into_iter()
        .map(|(id, task_id, window_key, _, attempt)| Created {
            id,
            task_id,
            window_key,
            status: format!("PENDING attempt {attempt}"),
            trace_parent: None,
            trace_state: None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reaper_and_the_retry_scan_lock_the_sources_of_their_events() {
        assert_eq!(RUNNING.to_string(), "i.status = 'RUNNING'");
        assert_eq!(FAILED.to_string(), "status = 'FAILED'");
        assert_eq!(FAILED_I.to_string(), "i.status = 'FAILED'");
    }
}
