//! `execution`: how each run of a task goes (timeout, retries and their backoff, concurrency,
//! overlap, catch-up, misfire grace, priority, shared limits, debounce), with the defaults and
//! bounds of each and the reading of the `execution` object.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fields::Errors;

/// Largest `catchup_window_seconds`: 30 days.
pub const MAX_CATCHUP_WINDOW_SECONDS: i64 = 30 * 86_400;
/// Largest `misfire_grace_seconds`: one day.
pub const MAX_MISFIRE_GRACE_SECONDS: i64 = 86_400;

/// What happens when a window comes due while earlier instances are unfinished (openapi.yaml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    Skip,
    Queue,
    Replace,
}

impl Overlap {
    /// The policy names of the API, each with its value.
    pub const NAMES: [(&'static str, Overlap); 3] = [
        ("skip", Overlap::Skip),
        ("queue", Overlap::Queue),
        ("replace", Overlap::Replace),
    ];

    /// The policy named `name` in the API.
    pub fn parse(name: &str) -> Option<Overlap> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, o)| *o)
    }
}

/// What happens to windows missed while no replica was running (openapi.yaml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Catchup {
    Skip,
    Latest,
    All,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryBackoff {
    pub base_seconds: i64,
    pub max_seconds: i64,
    pub jitter: f64,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        Self {
            base_seconds: 10,
            max_seconds: 600,
            jitter: 0.2,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    pub timeout_seconds: i64,
    pub max_retries: i32,
    pub retry_backoff: RetryBackoff,
    pub concurrency_limit: i32,
    pub overlap: Overlap,
    pub catchup: Catchup,
    pub catchup_window_seconds: i64,
    pub misfire_grace_seconds: i64,
    /// 0 (most urgent) to 9; claims take the most urgent claimable work first.
    #[serde(default = "default_priority")]
    pub priority: i16,
    /// Shared limits the task draws on (`execution.limits`, [`crate::domain::limit`]).
    #[serde(default)]
    pub limits: Vec<crate::domain::limit::Draw>,
    /// Manual runs without a window key coalesce while they wait (`execution.debounce`).
    #[serde(default)]
    pub debounce: Option<Debounce>,
}

/// `execution.debounce`: a manual trigger without a `window_key` that finds the task's
/// debounced instance (of the same `debounce_key`) still waiting moves it to now + `seconds`,
/// never past its first trigger + `max_wait_seconds`, instead of making another run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Debounce {
    pub seconds: i64,
    #[serde(default)]
    pub max_wait_seconds: Option<i64>,
}

/// Largest `execution.debounce.seconds`: one day.
pub const MAX_DEBOUNCE_SECONDS: i64 = 86_400;
/// Largest `execution.debounce.max_wait_seconds`: seven days.
pub const MAX_DEBOUNCE_WAIT_SECONDS: i64 = 7 * 86_400;

/// `execution.timeout_seconds` when not given.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 600;
/// `execution.priority` when not given (0 is the most urgent, 9 the least).
pub const DEFAULT_PRIORITY: i16 = 5;

fn default_priority() -> i16 {
    DEFAULT_PRIORITY
}

/// `execution.concurrency_limit` when not given.
pub const DEFAULT_CONCURRENCY_LIMIT: i32 = 1;

impl Default for Execution {
    fn default() -> Self {
        Self {
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            max_retries: 3,
            retry_backoff: RetryBackoff::default(),
            concurrency_limit: DEFAULT_CONCURRENCY_LIMIT,
            overlap: Overlap::Skip,
            catchup: Catchup::Skip,
            catchup_window_seconds: 86_400,
            misfire_grace_seconds: 60,
            priority: DEFAULT_PRIORITY,
            limits: Vec::new(),
            debounce: None,
        }
    }
}

impl Execution {
    pub fn max_attempts(&self) -> i32 {
        self.max_retries + 1
    }
}

pub(super) fn parse_execution(value: Option<&Value>, errs: &mut Errors) -> Execution {
    let d = Execution::default();
    let Some(e) = errs.object(
        value,
        "execution",
        &[
            "timeout_seconds",
            "max_retries",
            "retry_backoff",
            "concurrency_limit",
            "overlap",
            "catchup",
            "catchup_window_seconds",
            "misfire_grace_seconds",
            "limits",
            "priority",
            "debounce",
        ],
    ) else {
        return d;
    };
    let p = "execution";
    let timeout_seconds = errs.int(e, p, "timeout_seconds", d.timeout_seconds, 1, 604_800);
    let max_retries = errs.int(e, p, "max_retries", d.max_retries.into(), 0, 100) as i32;
    let concurrency_limit = errs.int(
        e,
        p,
        "concurrency_limit",
        d.concurrency_limit.into(),
        1,
        1000,
    ) as i32;
    let overlap = errs.enum_value(e, p, "overlap", d.overlap, &Overlap::NAMES);
    let catchup = errs.enum_value(
        e,
        p,
        "catchup",
        d.catchup,
        &[
            ("skip", Catchup::Skip),
            ("latest", Catchup::Latest),
            ("all", Catchup::All),
        ],
    );
    let catchup_window_seconds = errs.int(
        e,
        p,
        "catchup_window_seconds",
        d.catchup_window_seconds,
        0,
        MAX_CATCHUP_WINDOW_SECONDS,
    );
    let misfire_grace_seconds = errs.int(
        e,
        p,
        "misfire_grace_seconds",
        d.misfire_grace_seconds,
        0,
        MAX_MISFIRE_GRACE_SECONDS,
    );
    let retry_backoff = match errs.object(
        e.get("retry_backoff"),
        "execution.retry_backoff",
        &["base_seconds", "max_seconds", "jitter"],
    ) {
        None => d.retry_backoff,
        Some(b) => {
            let p = "execution.retry_backoff";
            let db = RetryBackoff::default();
            let base_seconds = errs.int(b, p, "base_seconds", db.base_seconds, 1, 86_400);
            let max_seconds = errs.int(
                b,
                p,
                "max_seconds",
                db.max_seconds.max(base_seconds),
                1,
                604_800,
            );
            if max_seconds < base_seconds {
                errs.push(
                    "execution.retry_backoff.max_seconds",
                    "must be at least base_seconds",
                );
            }
            let jitter = match b.get("jitter") {
                None | Some(Value::Null) => db.jitter,
                Some(Value::Number(n)) => match n.as_f64() {
                    Some(j) if (0.0..=1.0).contains(&j) => j,
                    _ => {
                        errs.push(
                            "execution.retry_backoff.jitter",
                            "must be a number from 0 to 1",
                        );
                        db.jitter
                    }
                },
                Some(_) => {
                    errs.push(
                        "execution.retry_backoff.jitter",
                        "must be a number from 0 to 1",
                    );
                    db.jitter
                }
            };
            RetryBackoff {
                base_seconds,
                max_seconds,
                jitter,
            }
        }
    };
    let limits = crate::domain::limit::parse_draws(e.get("limits"), &mut errs.0);
    let priority = errs.int(e, p, "priority", DEFAULT_PRIORITY.into(), 0, 9) as i16;
    let debounce = parse_debounce(e.get("debounce"), errs);
    Execution {
        timeout_seconds,
        max_retries,
        retry_backoff,
        concurrency_limit,
        overlap,
        catchup,
        catchup_window_seconds,
        misfire_grace_seconds,
        priority,
        limits,
        debounce,
    }
}

fn parse_debounce(value: Option<&Value>, errs: &mut Errors) -> Option<Debounce> {
    let p = "execution.debounce";
    let d = errs.object(value, p, &["seconds", "max_wait_seconds"])?;
    if d.get("seconds").is_none_or(Value::is_null) {
        errs.push("execution.debounce.seconds", "is required");
        return None;
    }
    let before = errs.0.len();
    let seconds = errs.int(d, p, "seconds", 1, 1, MAX_DEBOUNCE_SECONDS);
    let max_wait_seconds = match d.get("max_wait_seconds") {
        None | Some(Value::Null) => None,
        Some(_) => Some(errs.int(
            d,
            p,
            "max_wait_seconds",
            seconds,
            1,
            MAX_DEBOUNCE_WAIT_SECONDS,
        )),
    };
    if errs.0.len() != before {
        return None;
    }
    if let Some(m) = max_wait_seconds
        && m < seconds
    {
        errs.push(
            "execution.debounce.max_wait_seconds",
            format!("must be at least seconds ({seconds})"),
        );
        return None;
    }
    Some(Debounce {
        seconds,
        max_wait_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::{error_fields as fields, parse_submission};
    use serde_json::json;

    #[test]
    fn debounce_needs_seconds_and_a_max_wait_not_below_them() {
        let s = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "manual"},
                    "execution": {"debounce": {"seconds": 30, "max_wait_seconds": 300}}}),
        )
        .expect("valid");
        assert_eq!(
            s.spec.execution.debounce,
            Some(Debounce {
                seconds: 30,
                max_wait_seconds: Some(300)
            })
        );
        assert_eq!(
            s.spec.to_public_json()["execution"]["debounce"],
            json!({"seconds": 30, "max_wait_seconds": 300})
        );
        let none = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "manual"}}),
        )
        .expect("valid");
        assert_eq!(
            none.spec.to_public_json()["execution"]["debounce"],
            Value::Null
        );
        for (debounce, field) in [
            (json!({}), "execution.debounce.seconds"),
            (json!({"seconds": 0}), "execution.debounce.seconds"),
            (json!({"seconds": 86_401}), "execution.debounce.seconds"),
            (
                json!({"seconds": 60, "max_wait_seconds": 59}),
                "execution.debounce.max_wait_seconds",
            ),
            (
                json!({"seconds": 60, "max_wait_seconds": 604_801}),
                "execution.debounce.max_wait_seconds",
            ),
            (json!({"seconds": 60, "wait": 1}), "execution.debounce.wait"),
            (json!(30), "execution.debounce"),
        ] {
            assert_eq!(
                fields(
                    json!({"agent_id": "a", "trigger": {"type": "manual"}, "execution": {"debounce": debounce}})
                ),
                vec![field],
                "{debounce}"
            );
        }
    }
}
