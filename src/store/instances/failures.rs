//! Failed attempts: the timeout reaper's lock of expired leases, recording failures (RUNNING →
//! FAILED or DEAD, with the tasks' failure counts and circuit breakers), and the retry scan
//! (FAILED → PENDING once the backoff has passed). What a failure becomes is decided by
//! `crate::domain::retry::plan_failure`.

use serde_json::Value;
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::InstanceRow;
use crate::domain::instance::{Instance, InstanceStatus};
use crate::domain::retry::{FailingAttempt, Failure, plan_failure};
use crate::domain::task::RetryBackoff;
use crate::store::statements::sql;
use crate::store::{Result, circuit, notify_work_of, outbox};

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

/// Lock up to `limit` RUNNING instances whose lease expired or whose run passed its deadline,
/// skipping rows another replica's reaper holds. (`lease_expires_at is not null` holds for
/// every RUNNING row; it is spelled out because the expiry index of
/// `migrations/20261201000004_one_index_per_lookup.sql` requires it.)
pub async fn lock_expired(conn: &mut PgConnection, limit: i64) -> Result<Vec<RunningAttempt>> {
    sqlx::query_as(sql!("instances/failures/lock_expired"))
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
    let done = sqlx::query(sql!("instances/failures/renew_after_outage"))
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
    let rows: Vec<InstanceRow> = sqlx::query_as(sql!("instances/failures/record"))
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

/// An instance the retry scanner moved back to PENDING, with its new attempt.
#[derive(Debug, Clone)]
pub struct Retried {
    pub id: Uuid,
    pub task_id: String,
    pub window_key: String,
    pub attempt: i32,
}

/// FAILED instances whose backoff has passed → PENDING with `attempt + 1`, at most `limit` per
/// call (the rate limit against retry storms), for the task's current agent (an attempt that
/// was running when its task moved to another agent comes back to the new one). Wakes the
/// agents' waiting claims.
pub async fn retry_due(conn: &mut PgConnection, limit: i64, actor: &str) -> Result<Vec<Retried>> {
    let rows: Vec<(Uuid, String, String, String, i32)> =
        sqlx::query_as(sql!("instances/failures/retry_due"))
            .bind(limit)
            .bind(actor)
            .fetch_all(&mut *conn)
            .await?;
    notify_work_of(conn, rows.iter().map(|r| r.3.as_str()).collect()).await?;
    Ok(rows
        .into_iter()
        .map(|(id, task_id, window_key, _, attempt)| Retried {
            id,
            task_id,
            window_key,
            attempt,
        })
        .collect())
}
