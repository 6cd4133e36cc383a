//! `POST /v1/claims`: agents take PENDING instances under fresh leases, long-polling up to
//! `wait_seconds`. A waiting request holds no database connection: it sleeps on the process's
//! work signal (LISTEN/NOTIFY), the next `available_at` of its agent's work, or a fallback poll.
//! The waiters of one agent share that read of `available_at` and relook at the same instants
//! ([`crate::services::work_signal`]), so waiting costs the database per agent, not per waiter.

use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, State};
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::auth::check_agent;
use super::extract::{JsonBody, body_object, int_field, string_field};
use crate::domain::access::Principal;
use crate::domain::task::valid_name;
use crate::domain::text::plain_text;
use crate::problem::ApiError;
use crate::route_table::RouteTable;
use crate::services::work_signal::NextWork;
use crate::state::AppState;
use crate::store::claim::{self as store_claim, ClaimRequest, Claimed};
use crate::store::claim_answers::MAX_CLAIM_ID_CHARS;

/// The answer to a claim: the instances taken, each as its lease holder sees it.
#[derive(serde::Serialize)]
struct ClaimsBody {
    #[serde(serialize_with = "lease_views")]
    instances: Vec<Claimed>,
}

fn lease_views<S: serde::Serializer>(claimed: &[Claimed], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(claimed.iter().map(Claimed::view))
}

impl ClaimsBody {
    fn of(instances: Vec<Claimed>) -> Json<ClaimsBody> {
        Json(ClaimsBody { instances })
    }
}

/// `Retry-After` of a claim refused because `claim_max_waiters` requests already wait.
const WAITERS_RETRY_AFTER_S: u64 = 1;
/// Most instances one claim may take.
pub const MAX_INSTANCES_PER_CLAIM: i64 = 100;
/// While work exists that cannot be claimed yet (paused task, concurrency limit), look again at
/// least this often even without a notification.
const FALLBACK_POLL: Duration = Duration::from_secs(1);
/// A long poll kept back by a hold or a rate looks again this long after the instant it ends
/// (as the database's clock was read against this process's), so that it looks after it.
const BUDGET_FREE_MARGIN: Duration = Duration::from_millis(2);
/// When a claim came back empty although work is available now (other claimers held it, or
/// won the last permits), look again within this, doubling up to [`FALLBACK_POLL`]: in a burst
/// the rows others hold are mostly taken within milliseconds, and what they leave is due now.
/// [`FALLBACK_POLL`] over a power of two, so every step's relook grid holds the ticks of the
/// next ([`crate::services::work_signal::Waiter::relook_at`]): the waiters of one agent relook
/// at the same instants whichever step each has reached, and their claims share rounds.
const FIRST_RELOOK: Duration = Duration::from_nanos(FALLBACK_POLL.as_nanos() as u64 / 128);

pub fn routes(t: RouteTable) -> RouteTable {
    t.post("/v1/claims", claim)
}

fn name_field(m: &serde_json::Map<String, Value>, key: &str) -> Result<String, ApiError> {
    let v = string_field(m, key, true, 128)?.unwrap_or_default();
    if valid_name(&v) {
        Ok(v)
    } else {
        Err(ApiError::invalid(
            key,
            "must be 1-128 characters of letters, digits, '_', '.', '-', ':'",
        ))
    }
}

/// `claim_id`: optional, 1–128 characters of any text but control characters.
fn claim_id_field(m: &serde_json::Map<String, Value>) -> Result<Option<String>, ApiError> {
    let Some(v) = string_field(m, "claim_id", false, MAX_CLAIM_ID_CHARS)? else {
        return Ok(None);
    };
    if v.is_empty() || !plain_text(&v, MAX_CLAIM_ID_CHARS) {
        return Err(ApiError::invalid(
            "claim_id",
            "must be 1-128 characters without control characters",
        ));
    }
    Ok(Some(v))
}

async fn claim(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    JsonBody(body): JsonBody,
) -> Result<Json<ClaimsBody>, ApiError> {
    let m = body_object(
        body,
        &[
            "agent_id",
            "worker_id",
            "max_instances",
            "lease_seconds",
            "wait_seconds",
            "claim_id",
        ],
    )?;
    let settings = &state.claims;
    let req = ClaimRequest {
        agent_id: name_field(&m, "agent_id")?,
        worker_id: name_field(&m, "worker_id")?,
        max_instances: int_field(&m, "max_instances", 1, 1, MAX_INSTANCES_PER_CLAIM)?,
        lease_seconds: int_field(
            &m,
            "lease_seconds",
            settings.default_lease_seconds,
            1,
            settings.max_lease_seconds,
        )?,
        claim_id: claim_id_field(&m)?,
    };
    let wait = int_field(&m, "wait_seconds", 0, 0, settings.max_wait_seconds)?;
    check_agent(&principal, &req.agent_id)?;
    if state.shutdown.is_cancelled() {
        return Err(shutting_down());
    }
    let deadline = Instant::now() + Duration::from_secs(wait.unsigned_abs());
    let actor = format!("agent:{}", req.worker_id);
    let mut relook = FIRST_RELOOK;
    // Registered before the first look, so a notification during it is kept; counts against
    // `claim_max_waiters` only once the request actually waits.
    let waiter = state.work_signal.waiter(&req.agent_id);
    let mut waiting: Option<WaitSlot> = None;

    loop {
        let notified = waiter.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let claimed = state.claim_rounds.claim(req.clone(), actor.clone()).await?;
        if !claimed.is_empty() {
            metrics::counter!("kairos_claims_total", "outcome" => "claimed").increment(1);
            if claimed.len() as i64 >= req.max_instances {
                // A full batch: there is likely more, so the next waiter looks too.
                waiter.pass_on();
            }
            if state.spans.is_on() {
                let now = chrono::Utc::now();
                // A repeated answer's claim span was recorded when it was claimed.
                for c in claimed.iter().filter(|c| !c.replayed) {
                    state
                        .spans
                        .claim(&c.instance, c.lease_token, &req.worker_id, now);
                }
            }
            for c in &claimed {
                let i = &c.instance;
                tracing::debug!(task_id = %i.task_id, window_key = %i.window_key, instance_id = %i.id, attempt = i.attempt, worker_id = %req.worker_id, "instance claimed");
            }
            return Ok(ClaimsBody::of(claimed));
        }
        metrics::counter!("kairos_claims_total", "outcome" => "empty").increment(1);
        let now = Instant::now();
        if now >= deadline || state.shutdown.is_cancelled() {
            return Ok(ClaimsBody::of(Vec::new()));
        }
        if waiting.is_none() {
            match state.claim_waiters.clone().try_acquire_owned() {
                Ok(permit) => waiting = Some(WaitSlot::new(permit)),
                Err(_) => {
                    metrics::counter!("kairos_claim_waiters_refused_total").increment(1);
                    tracing::warn!(agent_id = %req.agent_id, worker_id = %req.worker_id, max_waiters = state.claims.max_waiters, reason = "claim_max_waiters reached", "long poll refused");
                    return Err(ApiError::TooManyRequests {
                        detail: format!(
                            "this replica already holds {} waiting claims (claim_max_waiters); retry later or claim without wait_seconds",
                            state.claims.max_waiters
                        ),
                        retry_after_s: WAITERS_RETRY_AFTER_S,
                    });
                }
            }
        }
        // Sleep until the earliest of: the deadline, the next delayed window of this agent,
        // the next relook on the agent's grid, the end of a hold or a rate's next start that
        // alone keeps its work back; or a wake-up for this agent; or shutdown.
        let next = waiter
            .next_available(|| async {
                let asked = Instant::now();
                let local = |at: DateTime<Utc>, db_now: DateTime<Utc>| {
                    asked + (at - db_now).to_std().unwrap_or(Duration::ZERO)
                };
                let (next, db_now) =
                    store_claim::next_available_at(&state.pool, &req.agent_id).await?;
                // Only work claimable now can be kept back by its budgets.
                // A failed read leaves the relook timer to find it.
                let budgets_free = match next {
                    Some(n) if n <= db_now => {
                        match store_claim::budgets_free_at(&state.pool, &req.agent_id).await {
                            Ok(free) => free
                                .map(|(at, db_now)| local(at, db_now) + BUDGET_FREE_MARGIN),
                            Err(e) => {
                                tracing::warn!(agent_id = %req.agent_id, error = %crate::telemetry::error_chain(&e), "could not read when a hold or a rate keeping the agent's work back ends; looking again on the relook timer");
                                None
                            }
                        }
                    }
                    _ => None,
                };
                Ok::<_, ApiError>(NextWork {
                    available: next.map(|n| local(n, db_now)),
                    budgets_free,
                })
            })
            .await?;
        let now = Instant::now();
        let mut until = deadline;
        if let Some(available) = next.available {
            let at = if available <= now {
                let grid = waiter.relook_at(now, relook);
                relook = (relook * 2).min(FALLBACK_POLL);
                match next.budgets_free.filter(|free| *free > now && *free < grid) {
                    Some(free) => {
                        // Look again at once after it, and quickly while it has not yet shown.
                        relook = FIRST_RELOOK;
                        free
                    }
                    None => grid,
                }
            } else {
                available
            };
            until = until.min(at);
        }
        tokio::select! {
            _ = state.shutdown.cancelled() => {}
            _ = tokio::time::sleep_until(until) => {}
            _ = &mut notified => {}
        }
        if state.shutdown.is_cancelled() {
            // A replica that is stopping takes no new work, not even for a waiting claim.
            return Ok(ClaimsBody::of(Vec::new()));
        }
    }
}

/// A long poll's place among `claim_max_waiters`, counted in `kairos_claim_waiters`.
struct WaitSlot {
    _permit: OwnedSemaphorePermit,
}

impl WaitSlot {
    fn new(permit: OwnedSemaphorePermit) -> Self {
        metrics::gauge!("kairos_claim_waiters").increment(1.0);
        Self { _permit: permit }
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        metrics::gauge!("kairos_claim_waiters").decrement(1.0);
    }
}

/// A claim that arrives after shutdown began: another replica can serve it at once.
fn shutting_down() -> ApiError {
    ApiError::ShuttingDown(
        "this replica is shutting down and takes no new claims; retry (another replica will answer)"
            .to_owned(),
    )
}
