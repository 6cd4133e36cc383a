//! An operator's retry or cancel of one instance, as the API and the console both run it.

use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::instance::Instance;
use crate::problem::ApiError;
use crate::store::{self, instances as store_instances};

/// A store error about instance `id`, with "not found" naming the instance.
pub fn not_found_instance(e: store::Error, id: &Uuid) -> ApiError {
    match e {
        store::Error::NotFound => ApiError::NotFound(format!("no instance with id {id}")),
        other => other.into(),
    }
}

/// An operator retry (`retry`) or cancel of instance `id`, logged; a retry may set the
/// instance's `priority`.
pub async fn operator_move(
    pool: &PgPool,
    id: Uuid,
    retry: bool,
    reason: &str,
    priority: Option<i16>,
) -> Result<Instance, ApiError> {
    let done = if retry {
        store_instances::operator_retry(pool, id, "operator", reason, priority).await
    } else {
        store_instances::operator_cancel(pool, id, "operator", reason).await
    };
    let inst = done.map_err(|e| not_found_instance(e, &id))?;
    let what = if retry {
        "instance retried by operator"
    } else {
        "instance cancelled by operator"
    };
    tracing::info!(task_id = %inst.task_id, window_key = %inst.window_key, instance_id = %inst.id, attempt = inst.attempt, reason = %reason, "{what}");
    Ok(inst)
}
