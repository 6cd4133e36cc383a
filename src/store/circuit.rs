//! Circuit breakers: a task whose consecutive failed attempts reach its threshold is paused
//! (the circuit opens) in the transaction that records the failure. Resuming after the cooldown
//! is the task table's (`tasks::resume_cooled_down`). Its own module so that recording failures
//! (`instances`) does not depend on `tasks`.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::statements::sql;
use super::{Result, outbox};

/// Open the circuit of every task in `task_ids` whose consecutive failed attempts reached its
/// `circuit_breaker.failure_threshold`: pause it with the reason, and schedule the automatic
/// resume when `cooldown_seconds` is set. Returns the ids of tasks whose circuit opened.
pub async fn open_circuits(conn: &mut PgConnection, task_ids: &[&str]) -> Result<Vec<String>> {
    if task_ids.is_empty() {
        return Ok(Vec::new());
    }
    let opened: Vec<(String, i32, Option<DateTime<Utc>>)> = sqlx::query_as(sql!("circuit/open"))
        .bind(task_ids)
        .fetch_all(&mut *conn)
        .await?;
    let events: Vec<outbox::Event> = opened
        .iter()
        .map(|(id, failures, resume_at)| outbox::Event {
            kind: "circuit.opened",
            task_id: id.clone(),
            instance_id: None,
            list: outbox::NotifyList::OnFailure,
            data: serde_json::json!({
                "consecutive_failures": failures,
                "resume_at": resume_at.map(crate::domain::schedule::format_instant),
                "reason": format!("circuit open: {failures} consecutive failed attempts"),
            }),
        })
        .collect();
    outbox::enqueue(conn, &events).await?;
    for (id, failures, resume_at) in &opened {
        metrics::counter!("kairos_circuit_opened_total").increment(1);
        tracing::warn!(
            task_id = %id,
            consecutive_failures = failures,
            resume_at = ?resume_at,
            reason = "circuit open",
            "task paused by its circuit breaker; its pending work is held"
        );
    }
    Ok(opened.into_iter().map(|o| o.0).collect())
}
