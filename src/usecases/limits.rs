//! What the API and the console both do with shared limits: read a limit's live usage, hold
//! and release it.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::limit::{MAX_HOLD_SECONDS, MAX_KEY_LEN};
use crate::domain::schedule::format_instant;
use crate::domain::task::MAX_REASON_LEN;
use crate::domain::text::plain_text;
use crate::problem::ApiError;
use crate::store::limits::Limit;
use crate::store::{self, limits as store_limits};

/// Most keys a per_key limit's view lists (the busiest).
pub const MAX_KEYS_SHOWN: i64 = 20;

/// The usage of limit `name`: units in use, and its busiest keys (at most [`MAX_KEYS_SHOWN`]).
pub async fn usage(pool: &PgPool, name: &str) -> Result<store_limits::Usage, store::Error> {
    store_limits::usage(pool, name, MAX_KEYS_SHOWN).await
}

/// A hold asked for by an operator (`POST /v1/limits/{name}/hold` or the console's form).
pub struct HoldRequest {
    pub seconds: i64,
    /// The rendered key: required for a `per_key` limit, ignored otherwise.
    pub key: Option<String>,
    pub reason: Option<String>,
}

/// A limit that does not exist answers 404 naming it.
pub fn not_found_limit(e: store::Error, name: &str) -> ApiError {
    match e {
        store::Error::NotFound => ApiError::NotFound(format!("no limit named {name:?}")),
        e => e.into(),
    }
}

/// A key or reason: at most `max` characters, no control characters.
fn check_text(field: &str, value: Option<&str>, max: usize) -> Result<(), ApiError> {
    match value {
        Some(v) if !plain_text(v, max) => Err(ApiError::invalid(
            field,
            format!("at most {max} characters without control characters"),
        )),
        _ => Ok(()),
    }
}

/// Hold limit `name` (on `req.key` for a `per_key` limit) for `req.seconds`: nothing that draws
/// on it starts until then. `by` names who asked, for the log. Returns the limit and the
/// instant held until.
pub async fn hold(
    pool: &PgPool,
    name: &str,
    req: HoldRequest,
    by: &str,
) -> Result<(Limit, DateTime<Utc>), ApiError> {
    if !(1..=MAX_HOLD_SECONDS).contains(&req.seconds) {
        return Err(ApiError::invalid(
            "seconds",
            format!("must be an integer from 1 to {MAX_HOLD_SECONDS}"),
        ));
    }
    check_text("key", req.key.as_deref(), MAX_KEY_LEN)?;
    check_text("reason", req.reason.as_deref(), MAX_REASON_LEN)?;
    let limit = store_limits::get_limit(pool, name)
        .await
        .map_err(|e| not_found_limit(e, name))?;
    if limit.spec.per_key && req.key.is_none() {
        return Err(ApiError::invalid(
            "key",
            "is required: the limit keeps a budget per key",
        ));
    }
    let key = req.key.unwrap_or_default();
    let reason = req.reason.unwrap_or_else(|| "held by operator".to_owned());
    let mut tx = store::begin(pool).await?;
    let until = store_limits::hold(&mut tx, name, &key, req.seconds, &reason)
        .await
        .map_err(|e| not_found_limit(e, name))?
        .until;
    tx.commit().await.map_err(store::Error::from)?;
    tracing::info!(limit = %name, key = %key, held_until = %format_instant(until), reason = %reason, by = %by, "limit held");
    Ok((limit, until))
}

/// A throttled attempt's `hold_limit`: hold limit `name` on the instance's rendered `key` for
/// `seconds`, only while `lease_token` holds the instance (RUNNING, its row share-locked until
/// the hold commits): a stale worker's late 429, or a fail sent again after it landed, holds
/// nothing (`None`). Returns the instant this hold asked to end, when the retry comes back.
pub async fn hold_for_attempt(
    pool: &PgPool,
    attempt: (uuid::Uuid, uuid::Uuid),
    name: &str,
    key: &str,
    seconds: i64,
    error: &str,
) -> Result<Option<DateTime<Utc>>, store::Error> {
    let (id, lease_token) = attempt;
    let said: String = error.chars().take(256).collect();
    let reason = format!("held by a throttled attempt of instance {id}: {said}");
    let mut tx = store::begin(pool).await?;
    if !store_limits::attempt_holds_lease(&mut tx, id, lease_token).await? {
        tracing::info!(limit = %name, key = %key, instance_id = %id, reason = "the fail's lease token does not hold the instance", "limit not held");
        return Ok(None);
    }
    let held = store_limits::hold(&mut tx, name, key, seconds, &reason).await?;
    tx.commit().await?;
    metrics::counter!("kairos_limit_throttled_total", "limit" => name.to_owned()).increment(1);
    tracing::info!(limit = %name, key = %key, instance_id = %id, held_until = %format_instant(held.until), reason = %reason, "limit held");
    Ok(Some(held.asked))
}

/// Lift the hold of limit `name` on `key` (every hold of the limit when `None`). Returns the
/// limit and how many budgets were released.
pub async fn release(
    pool: &PgPool,
    name: &str,
    key: Option<&str>,
    by: &str,
) -> Result<(Limit, u64), ApiError> {
    check_text("key", key, MAX_KEY_LEN)?;
    let limit = store_limits::get_limit(pool, name)
        .await
        .map_err(|e| not_found_limit(e, name))?;
    let n = store_limits::release(pool, name, key).await?;
    tracing::info!(limit = %name, key = ?key, released = n, by = %by, "limit hold lifted");
    Ok((limit, n))
}
