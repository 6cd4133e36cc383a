//! "Why is it waiting?": the reasons a PENDING or FAILED instance is not running now, each with
//! a detail an operator can act on. Read on demand for one instance (its detail in the API and
//! the console), never on the claim path.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use sqlx::types::Json;

use super::Result;
use super::statements::sql;
use crate::domain::instance::{Instance, InstanceStatus};
use crate::domain::limit::{Refusal, RenderedDraw, instant};
use crate::domain::schedule::format_instant;

/// One reason an instance waits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waiting {
    pub reason: &'static str,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl Waiting {
    fn new(reason: &'static str, detail: String, until: Option<DateTime<Utc>>) -> Self {
        Waiting {
            reason,
            detail,
            until: until.map(format_instant),
            limit: None,
            key: None,
        }
    }
}

#[derive(sqlx::FromRow)]
struct Facts {
    draws: Option<Json<Vec<RenderedDraw>>>,
    paused: Option<bool>,
    paused_reason: Option<String>,
    resume_at: Option<DateTime<Utc>>,
    dispatch_mode: Option<String>,
    task_limit: Option<i32>,
    running: i64,
    running_ids: Vec<uuid::Uuid>,
    last_claim_at: Option<DateTime<Utc>>,
    /// Due PENDING instances of the same agent at a more urgent priority (at most 1,000
    /// counted).
    more_urgent: i64,
    now: DateTime<Utc>,
}

/// The reasons `inst` is not running now (empty when nothing holds it back, or when it is not
/// PENDING or FAILED). `agent_absent` is how long without a claim makes an agent absent.
pub async fn waiting_on(
    pool: &PgPool,
    inst: &Instance,
    agent_absent: Duration,
) -> Result<Vec<Waiting>> {
    if !matches!(
        inst.status,
        InstanceStatus::Pending | InstanceStatus::Failed
    ) {
        return Ok(Vec::new());
    }
    let f: Facts = sqlx::query_as(sql!("waiting/facts"))
        .bind(inst.id)
        .fetch_one(pool)
        .await?;
    let now = f.now;
    let mut out = Vec::new();
    if inst.available_at > now {
        let throttled = inst.error_kind.as_deref() == Some("throttled");
        if inst.status == InstanceStatus::Failed || throttled {
            let detail = if throttled {
                format!(
                    "attempt {} was throttled by its agent (a quota refused it); it is retried \
                     at {} without spending an attempt",
                    inst.attempt,
                    format_instant(inst.available_at)
                )
            } else {
                format!(
                    "attempt {} failed; the next attempt waits for the retry backoff until {}",
                    inst.attempt,
                    format_instant(inst.available_at)
                )
            };
            out.push(Waiting::new(
                "retry_backoff",
                detail,
                Some(inst.available_at),
            ));
        } else {
            out.push(Waiting::new(
                "available_at",
                format!("not due before {}", format_instant(inst.available_at)),
                Some(inst.available_at),
            ));
        }
    }
    if f.paused == Some(true) {
        let reason = f.paused_reason.clone().unwrap_or_default();
        if reason.starts_with("circuit open") {
            out.push(Waiting::new(
                "circuit_open",
                match f.resume_at {
                    Some(at) => format!(
                        "task {}: {reason}; it resumes on its own at {}",
                        inst.task_id,
                        format_instant(at)
                    ),
                    None => format!("task {}: {reason}; resume it to run its work", inst.task_id),
                },
                f.resume_at.filter(|at| *at > now),
            ));
        } else {
            out.push(Waiting::new(
                "task_paused",
                format!("task {} is paused: {reason}", inst.task_id),
                None,
            ));
        }
    }
    if let Some(lim) = f.task_limit
        && f.running >= i64::from(lim)
    {
        let ids: Vec<String> = f.running_ids.iter().map(ToString::to_string).collect();
        out.push(Waiting::new(
            "concurrency_limit",
            format!(
                "task {}: {} of {lim} running (concurrency_limit): instances {}",
                inst.task_id,
                f.running,
                ids.join(", ")
            ),
            None,
        ));
    }
    if let Some(draws) = f.draws.as_ref().map(|d| &d.0) {
        out.extend(limit_reasons(pool, draws).await?);
    }
    if f.more_urgent > 0 {
        out.push(Waiting::new(
            "priority",
            format!(
                "{}{} due instances of agent {} are more urgent (priority below {}) and go first",
                f.more_urgent,
                if f.more_urgent >= 1000 { "+" } else { "" },
                inst.agent_id,
                inst.priority
            ),
            None,
        ));
    }
    if f.dispatch_mode.as_deref() == Some("poll") {
        let absent = chrono::Duration::from_std(agent_absent).unwrap_or(chrono::Duration::MAX);
        match f.last_claim_at {
            None => out.push(Waiting::new(
                "no_agent",
                format!("no claim from agent {} has been seen", inst.agent_id),
                None,
            )),
            Some(at) if now - at > absent => out.push(Waiting::new(
                "no_agent",
                format!(
                    "no claim from agent {} for {} (last at {})",
                    inst.agent_id,
                    human(now - at),
                    format_instant(at)
                ),
                None,
            )),
            Some(_) => {}
        }
    }
    Ok(out)
}

/// Why each budget the instance draws on cannot take it now.
async fn limit_reasons(pool: &PgPool, draws: &[RenderedDraw]) -> Result<Vec<Waiting>> {
    let pairs: Vec<(String, String)> = draws
        .iter()
        .map(|d| (d.name.clone(), d.key.clone()))
        .collect();
    let mut conn = pool.acquire().await?;
    let budgets = super::limits::read_budgets(&mut conn, &pairs, false).await?;
    let mut out = Vec::new();
    for d in draws {
        let Some(&b) = budgets.of_draw.get(&(d.name.clone(), d.key.clone())) else {
            continue;
        };
        let (Some(budget), Some((name, key))) = (budgets.list.get(b), budgets.ids.get(b)) else {
            continue;
        };
        let label = if budget.spec.per_key {
            format!("{name} (key {key:?})")
        } else {
            name.clone()
        };
        let w = match budget.refusal(d.cost) {
            None => continue,
            Some(Refusal::Held { until }) => Waiting::new(
                "limit_held",
                format!("{label}: held until {}", format_instant(instant(until))),
                Some(instant(until)),
            ),
            Some(Refusal::Concurrency) => {
                let holders: Vec<uuid::Uuid> = sqlx::query_scalar(sql!("waiting/limit_holders"))
                    .bind(name)
                    .bind(key)
                    .fetch_all(&mut *conn)
                    .await?;
                let ids: Vec<String> = holders.iter().map(ToString::to_string).collect();
                Waiting::new(
                    "limit_concurrency",
                    format!(
                        "{label}: {} of {} units running, {} needed: instances {}",
                        budget.running,
                        budget.spec.concurrency.unwrap_or(0),
                        d.cost,
                        ids.join(", ")
                    ),
                    None,
                )
            }
            Some(Refusal::Rate { until }) => {
                let r = budget.spec.rate;
                Waiting::new(
                    "limit_rate",
                    format!(
                        "{label}: rate {} per {} s (burst {}) used up; next start at {}",
                        r.map(|r| r.count).unwrap_or(0),
                        r.map(|r| r.per_seconds).unwrap_or(0),
                        r.map(|r| r.burst).unwrap_or(0),
                        format_instant(instant(until))
                    ),
                    Some(instant(until)),
                )
            }
        };
        out.push(Waiting {
            limit: Some(name.clone()),
            key: budget.spec.per_key.then(|| key.clone()),
            ..w
        });
    }
    Ok(out)
}

fn human(d: chrono::Duration) -> String {
    let s = d.num_seconds();
    match s {
        ..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

/// Record that `agent_id` claimed, at most every few seconds per agent and replica, off the
/// claim's path (a spawned statement; a failure only delays `no_agent`'s accuracy).
pub fn seen_claiming(pool: &PgPool, agent_id: &str) {
    const EVERY: Duration = Duration::from_secs(5);
    static SEEN: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();
    let due = {
        let mut seen = match SEEN.get_or_init(Default::default).lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now = Instant::now();
        match seen.get(agent_id) {
            Some(at) if now.duration_since(*at) < EVERY => false,
            _ => {
                seen.insert(agent_id.to_owned(), now);
                true
            }
        }
    };
    if !due {
        return;
    }
    let pool = pool.clone();
    let agent = agent_id.to_owned();
    tokio::spawn(async move {
        let done: Result<()> = async {
            let mut tx = super::begin(&pool).await?;
            sqlx::query(sql!("waiting/seen_claiming"))
                .bind(&agent)
                .execute(&mut *tx)
                .await?;
            tx.commit().await.map_err(crate::store::Error::from)
        }
        .await;
        if let Err(e) = done {
            tracing::debug!(agent_id = %agent, error = %e, "could not record the agent's claim");
        }
    });
}

/// Seconds since each agent's last claim, for `kairos_agent_last_claim_seconds`.
pub async fn agents_last_claim(pool: &PgPool) -> Result<Vec<(String, f64)>> {
    sqlx::query_as(sql!("waiting/agents_last_claim"))
        .fetch_all(pool)
        .await
        .map_err(crate::store::Error::from)
}
