//! Instance states and the one transition table every path obeys (openapi.yaml, "Instance lifecycle").
//!
//! ```text
//!                 trigger loop / API                       claim (poll or push)
//!   (none) ───────────────────────────▶ PENDING ──────────────────────────────▶ RUNNING
//!     │                                  ▲   ▲                                   │ │ │
//!     │ overlap skip, missed window,     │   │ retry scanner                     │ │ │ complete
//!     │ circuit open                     │   │ (available_at <= now,             │ │ ▼
//!     ▼                                  │   │  attempt += 1)                    │ │ SUCCESS
//!   SKIPPED                              │   └──────────── FAILED ◀──────────────┘ │
//!                                        │                   fail / reaper,        │ fail / reaper,
//!     operator retry from DEAD, FAILED,  │                   attempts remain       │ none remain or
//!     CANCELLED, SKIPPED ────────────────┘                                         ▼ not retryable
//!                                                                                 DEAD
//!   PENDING, RUNNING, FAILED ── operator cancel, overlap replace ──▶ CANCELLED
//!   RUNNING ── given back (the claim's answer never reached its caller), or throttled by its
//!              holder (`fail` with `retry_after_seconds`: a quota refused it) ──▶ PENDING
//! ```
//!
//! Who moves instances: the trigger loop and the API create them (PENDING or SKIPPED); claims move
//! PENDING → RUNNING, and give back (RUNNING → PENDING, attempt unchanged) what they could not
//! deliver; agents (complete/fail) and the timeout reaper move RUNNING on; the retry
//! scanner moves FAILED → PENDING; operators cancel and retry. SUCCESS, DEAD, SKIPPED and
//! CANCELLED are terminal for every automatic path.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InstanceStatus {
    Pending,
    Running,
    Success,
    Failed,
    Dead,
    Skipped,
    Cancelled,
}

impl InstanceStatus {
    pub const ALL: [InstanceStatus; 7] = [
        InstanceStatus::Pending,
        InstanceStatus::Running,
        InstanceStatus::Success,
        InstanceStatus::Failed,
        InstanceStatus::Dead,
        InstanceStatus::Skipped,
        InstanceStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InstanceStatus::Pending => "PENDING",
            InstanceStatus::Running => "RUNNING",
            InstanceStatus::Success => "SUCCESS",
            InstanceStatus::Failed => "FAILED",
            InstanceStatus::Dead => "DEAD",
            InstanceStatus::Skipped => "SKIPPED",
            InstanceStatus::Cancelled => "CANCELLED",
        }
    }

    /// Terminal for the scanners: only an operator can move an instance out of these.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            InstanceStatus::Success
                | InstanceStatus::Dead
                | InstanceStatus::Skipped
                | InstanceStatus::Cancelled
        )
    }
}

impl fmt::Display for InstanceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<String> for InstanceStatus {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl FromStr for InstanceStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        InstanceStatus::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                "must be one of PENDING, RUNNING, SUCCESS, FAILED, DEAD, SKIPPED, CANCELLED"
                    .to_owned()
            })
    }
}

/// Where an instance came from (the instance's `source` in openapi.yaml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Schedule,
    Catchup,
    Backfill,
    Manual,
    Dependency,
    Retry,
}

impl FromStr for Source {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Source::Schedule,
            Source::Catchup,
            Source::Backfill,
            Source::Manual,
            Source::Dependency,
            Source::Retry,
        ]
        .into_iter()
        .find(|src| src.as_str() == s)
        .ok_or_else(|| format!("unknown source {s:?}"))
    }
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Schedule => "schedule",
            Source::Catchup => "catchup",
            Source::Backfill => "backfill",
            Source::Manual => "manual",
            Source::Dependency => "dependency",
            Source::Retry => "retry",
        }
    }
}

/// What happened to an instance; each maps to at most one legal target per source state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A window became due, or an API trigger, backfill or dependency created it.
    Materialize,
    /// A window was recorded without running (overlap skip, missed window, circuit open).
    MaterializeSkipped,
    /// An agent or the push dispatcher took the lease.
    Claim,
    /// The lease holder reported success.
    Complete,
    /// kairos took back a lease nobody could have used: the claim's answer never reached its
    /// caller (the caller went away, the connection was cut). The attempt is not spent.
    GiveBack,
    /// The lease holder reported that a quota refused the attempt and when to try again
    /// (`fail` with `retry_after_seconds`): not the task's failure, so the attempt is not spent.
    Throttle,
    /// The lease holder failed, or the reaper found the lease expired or the run timed out.
    /// `give_up` is true when no attempts remain or the failure is not retryable.
    Fail { give_up: bool },
    /// The retry scanner found a FAILED instance whose backoff has passed.
    RetryDue,
    /// An operator or the overlap `replace` policy cancelled it.
    Cancel,
    /// An operator asked for another attempt.
    OperatorRetry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal transition from {} on {event:?}", from.map(InstanceStatus::as_str).unwrap_or("nothing"))]
pub struct IllegalTransition {
    pub from: Option<InstanceStatus>,
    pub event: Event,
}

/// The transition table, the only place it is written down (drawn in this module's doc).
pub fn transition(
    from: Option<InstanceStatus>,
    event: Event,
) -> Result<InstanceStatus, IllegalTransition> {
    use InstanceStatus::*;
    let to = match (from, event) {
        (None, Event::Materialize) => Some(Pending),
        (None, Event::MaterializeSkipped) => Some(Skipped),
        (Some(Pending), Event::Claim) => Some(Running),
        (Some(Running), Event::Complete) => Some(Success),
        (Some(Running), Event::GiveBack | Event::Throttle) => Some(Pending),
        (Some(Running), Event::Fail { give_up: false }) => Some(Failed),
        (Some(Running), Event::Fail { give_up: true }) => Some(Dead),
        (Some(Failed), Event::RetryDue) => Some(Pending),
        (Some(Pending | Running | Failed), Event::Cancel) => Some(Cancelled),
        (Some(Dead | Failed | Cancelled | Skipped), Event::OperatorRetry) => Some(Pending),
        _ => None,
    };
    to.ok_or(IllegalTransition { from, event })
}

/// The states from which `event` is legal: what a compare-and-swap `WHERE status = any(…)`
/// must expect.
pub fn legal_sources(event: Event) -> Vec<InstanceStatus> {
    InstanceStatus::ALL
        .into_iter()
        .filter(|s| transition(Some(*s), event).is_ok())
        .collect()
}

/// An instance as operators and agents see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Instance {
    pub id: Uuid,
    pub task_id: String,
    /// The agent the instance is for (the task's agent when the window was created).
    pub agent_id: String,
    pub window_key: String,
    pub scheduled_at: DateTime<Utc>,
    pub status: InstanceStatus,
    pub source: Source,
    pub attempt: i32,
    pub max_attempts: i32,
    pub available_at: DateTime<Utc>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub worker_id: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub error_kind: Option<String>,
    pub skip_reason: Option<String>,
    pub upstream_instance_id: Option<Uuid>,
    pub upstream_result_digest: Option<String>,
    /// `task_id:window_key`, stable across attempts: agents pass it downstream to de-duplicate
    /// side effects.
    pub idempotency_key: String,
    /// 0 (most urgent) to 9: claims take the most urgent claimable work first.
    pub priority: i16,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The trace context the window was created under (docs/tracing.md); a claim hands out
    /// its `traceparent`, not this.
    #[serde(skip)]
    pub trace: Option<crate::domain::trace::TraceContext>,
}

/// One transition in an instance's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceEvent {
    pub from: Option<InstanceStatus>,
    pub to: InstanceStatus,
    pub attempt: i32,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub reason: Option<String>,
}

pub fn idempotency_key(task_id: &str, window_key: &str) -> String {
    format!("{task_id}:{window_key}")
}

/// `sha256:<hex>` of a result's JSON text (`null` when there is none): what a downstream
/// instance records of its upstream's output, so a chained task can check what it built on.
pub fn result_digest(result: Option<&Value>) -> String {
    use sha2::{Digest, Sha256};
    let text = result
        .map(Value::to_string)
        .unwrap_or_else(|| "null".to_owned());
    let hash = Sha256::digest(text.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use InstanceStatus::*;

    const EVENTS: [Event; 11] = [
        Event::Materialize,
        Event::MaterializeSkipped,
        Event::Claim,
        Event::Complete,
        Event::GiveBack,
        Event::Throttle,
        Event::Fail { give_up: false },
        Event::Fail { give_up: true },
        Event::RetryDue,
        Event::Cancel,
        Event::OperatorRetry,
    ];

    #[test]
    fn every_legal_pair_reaches_the_contract_target_and_nothing_else_is_allowed() {
        let legal: &[(Option<InstanceStatus>, Event, InstanceStatus)] = &[
            (None, Event::Materialize, Pending),
            (None, Event::MaterializeSkipped, Skipped),
            (Some(Pending), Event::Claim, Running),
            (Some(Running), Event::Complete, Success),
            (Some(Running), Event::GiveBack, Pending),
            (Some(Running), Event::Throttle, Pending),
            (Some(Running), Event::Fail { give_up: false }, Failed),
            (Some(Running), Event::Fail { give_up: true }, Dead),
            (Some(Failed), Event::RetryDue, Pending),
            (Some(Pending), Event::Cancel, Cancelled),
            (Some(Running), Event::Cancel, Cancelled),
            (Some(Failed), Event::Cancel, Cancelled),
            (Some(Dead), Event::OperatorRetry, Pending),
            (Some(Failed), Event::OperatorRetry, Pending),
            (Some(Cancelled), Event::OperatorRetry, Pending),
            (Some(Skipped), Event::OperatorRetry, Pending),
        ];
        let froms = std::iter::once(None).chain(InstanceStatus::ALL.into_iter().map(Some));
        let mut allowed = 0;
        for from in froms {
            for event in EVENTS {
                let expected = legal
                    .iter()
                    .find(|(f, e, _)| *f == from && *e == event)
                    .map(|(_, _, to)| *to);
                match (transition(from, event), expected) {
                    (Ok(to), Some(want)) => {
                        assert_eq!(to, want, "{from:?} on {event:?}");
                        allowed += 1;
                    }
                    (Err(_), None) => {}
                    (got, want) => panic!("{from:?} on {event:?}: got {got:?}, want {want:?}"),
                }
            }
        }
        assert_eq!(allowed, legal.len());
    }

    #[test]
    fn terminal_states_accept_only_an_operator_retry() {
        for st in [Success, Dead, Skipped, Cancelled] {
            assert!(st.is_terminal());
            for event in EVENTS {
                if let Ok(to) = transition(Some(st), event) {
                    assert_eq!(event, Event::OperatorRetry);
                    assert_eq!(to, Pending);
                }
            }
        }
        assert!(transition(Some(Success), Event::OperatorRetry).is_err());
    }

    #[test]
    fn statuses_round_trip_through_their_names() {
        for st in InstanceStatus::ALL {
            assert_eq!(st.as_str().parse::<InstanceStatus>(), Ok(st));
        }
        assert_eq!("running".parse::<InstanceStatus>(), Ok(Running));
        assert!("LOST".parse::<InstanceStatus>().is_err());
    }

    #[test]
    fn result_digests_hash_the_compact_json_text() {
        assert_eq!(
            result_digest(None),
            "sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
        );
        assert_eq!(result_digest(Some(&Value::Null)), result_digest(None));
        assert_eq!(
            result_digest(Some(&serde_json::json!({"rows": 42}))),
            "sha256:90f11e42fd7a76398d45de75d868c8fbeb8301cb3df9257be64418ecbe5f354d"
        );
    }
}
