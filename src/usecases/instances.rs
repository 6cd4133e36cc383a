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

/// What an operator does to one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorMove {
    /// Back to PENDING with one more attempt allowed.
    Retry,
    /// CANCELLED.
    Cancel,
}

impl OperatorMove {
    /// The move named `retry` or `cancel`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "retry" => Some(OperatorMove::Retry),
            "cancel" => Some(OperatorMove::Cancel),
            _ => None,
        }
    }

    /// Its name, as in the API's paths and the console's forms.
    pub fn name(self) -> &'static str {
        match self {
            OperatorMove::Retry => "retry",
            OperatorMove::Cancel => "cancel",
        }
    }

    /// The reason recorded when the operator gives none.
    pub fn default_reason(self) -> &'static str {
        match self {
            OperatorMove::Retry => "retried by operator",
            OperatorMove::Cancel => "cancelled by operator",
        }
    }
}

/// An operator's `what` on instance `id`, logged; a retry may set the instance's `priority`.
pub async fn operator_move(
    pool: &PgPool,
    id: Uuid,
    what: OperatorMove,
    reason: &str,
    priority: Option<i16>,
) -> Result<Instance, ApiError> {
    let done = match what {
        OperatorMove::Retry => {
            store_instances::operator_retry(pool, id, "operator", reason, priority).await
        }
        OperatorMove::Cancel => {
            store_instances::operator_cancel(pool, id, "operator", reason).await
        }
    };
    let inst = done.map_err(|e| not_found_instance(e, &id))?;
    let what = match what {
        OperatorMove::Retry => "instance retried by operator",
        OperatorMove::Cancel => "instance cancelled by operator",
    };
    tracing::info!(task_id = %inst.task_id, window_key = %inst.window_key, instance_id = %inst.id, attempt = inst.attempt, reason = %reason, "{what}");
    Ok(inst)
}
