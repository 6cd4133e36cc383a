//! `trigger`: when a task's windows occur (cron, interval, once, after, manual), the schedule
//! each type fires on, and the reading of the `trigger` object with its `jitter_seconds`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::fields::{Errors, FieldError};
use super::spec::TaskId;
use crate::domain::schedule::{CronSchedule, Schedule, ScheduleError};

/// Largest `interval.every_seconds`: one year.
pub const MAX_INTERVAL_SECONDS: i64 = 366 * 86_400;

/// When a task's windows occur (openapi.yaml trigger types).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TriggerSpec {
    Cron {
        expr: String,
        timezone: String,
    },
    /// Windows at `start_at + k·every_seconds`; without `start_at` the grid starts at the Unix
    /// epoch, so every replica and every re-registration computes the same windows.
    Interval {
        every_seconds: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_at: Option<DateTime<Utc>>,
    },
    Once {
        at: DateTime<Utc>,
    },
    After {
        task: TaskId,
        on: AfterOn,
    },
    Manual,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterOn {
    Success,
}

impl TriggerSpec {
    /// The schedule this trigger fires on. Infallible for a validated spec; the error case covers
    /// rows written by an older version with rules that have since become stricter.
    pub fn schedule(&self) -> Result<Schedule, FieldError> {
        Ok(match self {
            TriggerSpec::Cron { expr, timezone } => Schedule::Cron(Box::new(
                CronSchedule::parse(expr, timezone)
                    .map_err(|e| FieldError::new(format!("trigger.{}", e.field), e.message))?,
            )),
            TriggerSpec::Interval {
                every_seconds,
                start_at,
            } => Schedule::Interval {
                every_seconds: *every_seconds,
                start_at: start_at.unwrap_or(DateTime::<Utc>::UNIX_EPOCH),
            },
            TriggerSpec::Once { at } => Schedule::Once { at: *at },
            TriggerSpec::After { .. } | TriggerSpec::Manual => Schedule::None,
        })
    }

    /// The first window of this trigger when it is registered at `now`: strictly after `now`,
    /// except that a `once` task keeps its instant even when it has passed (the trigger loop then
    /// applies the misfire grace). A cron expression with no fire time within the search horizon
    /// after `now` in its zone is refused on `trigger.expr`: it would silently never run.
    pub fn first_window(&self, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, FieldError> {
        let field = |e: ScheduleError| FieldError::new(format!("trigger.{}", e.field), e.message);
        match self {
            TriggerSpec::Once { at } => Ok(Some(*at)),
            TriggerSpec::Cron { expr, timezone } => CronSchedule::parse(expr, timezone)
                .and_then(|c| c.first_fire_after(now))
                .map(Some)
                .map_err(field),
            other => Ok(other.schedule()?.next_after(now)),
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            TriggerSpec::Cron { .. } => "cron",
            TriggerSpec::Interval { .. } => "interval",
            TriggerSpec::Once { .. } => "once",
            TriggerSpec::After { .. } => "after",
            TriggerSpec::Manual => "manual",
        }
    }

    /// Cron and interval triggers take `jitter_seconds`; the others have no schedule to spread.
    pub fn takes_jitter(&self) -> bool {
        matches!(
            self,
            TriggerSpec::Cron { .. } | TriggerSpec::Interval { .. }
        )
    }

    pub fn upstream(&self) -> Option<&TaskId> {
        match self {
            TriggerSpec::After { task, .. } => Some(task),
            _ => None,
        }
    }
}

/// `trigger.jitter_seconds`: 0 to [`MAX_JITTER_SECONDS`](crate::domain::jitter::MAX_JITTER_SECONDS),
/// for cron and interval triggers only, and below an interval's `every_seconds` (a cron
/// expression's shortest gap needs the registration's clock: [`crate::domain::jitter::check_cron_jitter`]).
pub(super) fn parse_jitter(
    t: &Map<String, Value>,
    trigger: Option<&TriggerSpec>,
    errs: &mut Errors,
) -> i64 {
    use crate::domain::jitter::MAX_JITTER_SECONDS;
    let kind = t.get("type").and_then(Value::as_str).unwrap_or("");
    if t.get("jitter_seconds").is_none_or(Value::is_null) {
        return 0;
    }
    if !matches!(kind, "cron" | "interval") {
        if matches!(kind, "once" | "after" | "manual") {
            errs.push(
                "trigger.jitter_seconds",
                "only cron and interval triggers take a jitter",
            );
        }
        return 0;
    }
    let before = errs.0.len();
    let jitter = errs.int(t, "trigger", "jitter_seconds", 0, 0, MAX_JITTER_SECONDS);
    if errs.0.len() == before
        && let Some(TriggerSpec::Interval { every_seconds, .. }) = trigger
        && jitter >= *every_seconds
    {
        errs.push(
            "trigger.jitter_seconds",
            format!(
                "must be less than every_seconds ({every_seconds}), the gap between two \
                 windows: a window must be claimable before the next one comes"
            ),
        );
    }
    jitter
}

pub(super) fn parse_trigger(t: &Map<String, Value>, errs: &mut Errors) -> Option<TriggerSpec> {
    let kind = match t.get("type") {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => {
            errs.push("trigger.type", "is required");
            return None;
        }
        Some(_) => {
            errs.push("trigger.type", "must be a string");
            return None;
        }
    };
    match kind {
        "cron" => {
            errs.unknown_fields(
                "trigger",
                t,
                &["type", "expr", "timezone", "jitter_seconds"],
            );
            let expr = match t.get("expr") {
                Some(Value::String(s)) => s.trim().to_owned(),
                None | Some(Value::Null) => {
                    errs.push("trigger.expr", "is required for a cron trigger");
                    return None;
                }
                Some(_) => {
                    errs.push("trigger.expr", "must be a string");
                    return None;
                }
            };
            let timezone = match t.get("timezone") {
                Some(Value::String(s)) => s.trim().to_owned(),
                None | Some(Value::Null) => "UTC".to_owned(),
                Some(_) => {
                    errs.push("trigger.timezone", "must be an IANA zone name string");
                    return None;
                }
            };
            match CronSchedule::parse(&expr, &timezone) {
                Ok(_) => Some(TriggerSpec::Cron { expr, timezone }),
                Err(e) => {
                    errs.push(format!("trigger.{}", e.field), e.message);
                    None
                }
            }
        }
        "interval" => {
            errs.unknown_fields(
                "trigger",
                t,
                &["type", "every_seconds", "start_at", "jitter_seconds"],
            );
            if t.get("every_seconds").is_none_or(Value::is_null) {
                errs.push(
                    "trigger.every_seconds",
                    "is required for an interval trigger",
                );
                return None;
            }
            let before = errs.0.len();
            let every_seconds = errs.int(t, "trigger", "every_seconds", 0, 1, MAX_INTERVAL_SECONDS);
            let start_at = errs.timestamp(t.get("start_at"), "trigger.start_at");
            (errs.0.len() == before).then_some(TriggerSpec::Interval {
                every_seconds,
                start_at,
            })
        }
        "once" => {
            errs.unknown_fields("trigger", t, &["type", "at", "jitter_seconds"]);
            if t.get("at").is_none_or(Value::is_null) {
                errs.push("trigger.at", "is required for a once trigger");
                return None;
            }
            errs.timestamp(t.get("at"), "trigger.at")
                .map(|at| TriggerSpec::Once { at })
        }
        "after" => {
            errs.unknown_fields("trigger", t, &["type", "task", "on", "jitter_seconds"]);
            let task = match t.get("task") {
                Some(Value::String(s)) => match TaskId::parse(s) {
                    Ok(id) => Some(id),
                    Err(m) => {
                        errs.push("trigger.task", m);
                        None
                    }
                },
                None | Some(Value::Null) => {
                    errs.push("trigger.task", "is required for an after trigger");
                    None
                }
                Some(_) => {
                    errs.push("trigger.task", "must be a task id string");
                    None
                }
            };
            let on = errs.enum_value(
                t,
                "trigger",
                "on",
                AfterOn::Success,
                &[("success", AfterOn::Success)],
            );
            task.map(|task| TriggerSpec::After { task, on })
        }
        "manual" => {
            errs.unknown_fields("trigger", t, &["type", "jitter_seconds"]);
            Some(TriggerSpec::Manual)
        }
        _ => {
            errs.push(
                "trigger.type",
                "must be one of cron, interval, once, after, manual",
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::task::{TaskSpec, error_fields as fields, parse_submission};
    use serde_json::json;

    #[test]
    fn jitter_belongs_to_cron_and_interval_triggers_and_is_stored_inside_the_trigger() {
        let s = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 60, "jitter_seconds": 59}}),
        )
        .expect("valid");
        assert_eq!(s.spec.jitter_seconds, 59);
        let stored = serde_json::to_value(&s.spec).expect("serialize");
        assert_eq!(stored["trigger"]["jitter_seconds"], 59);
        assert!(stored.get("jitter_seconds").is_none(), "{stored}");
        let back: TaskSpec = serde_json::from_value(stored).expect("deserialize");
        assert_eq!(back, s.spec);
        // Cron triggers show 0 when not given; the others never show it.
        let cron = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "0 * * * *"}}),
        )
        .expect("valid");
        assert_eq!(cron.spec.to_public_json()["trigger"]["jitter_seconds"], 0);
        let manual = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "manual"}}),
        )
        .expect("valid");
        assert!(
            manual.spec.to_public_json()["trigger"]
                .get("jitter_seconds")
                .is_none()
        );
        // A spec stored before jitter existed reads as none.
        let mut old = serde_json::to_value(&cron.spec).expect("serialize");
        old["trigger"]
            .as_object_mut()
            .expect("trigger")
            .remove("jitter_seconds");
        let old: TaskSpec = serde_json::from_value(old).expect("old spec");
        assert_eq!(old, cron.spec);

        for (trigger, field) in [
            (
                json!({"type": "interval", "every_seconds": 60, "jitter_seconds": 60}),
                "trigger.jitter_seconds",
            ),
            (
                json!({"type": "cron", "expr": "0 * * * *", "jitter_seconds": 3601}),
                "trigger.jitter_seconds",
            ),
            (
                json!({"type": "cron", "expr": "0 * * * *", "jitter_seconds": -1}),
                "trigger.jitter_seconds",
            ),
            (
                json!({"type": "cron", "expr": "0 * * * *", "jitter_seconds": "5"}),
                "trigger.jitter_seconds",
            ),
            (
                json!({"type": "once", "at": "2026-11-29T00:00:00Z", "jitter_seconds": 0}),
                "trigger.jitter_seconds",
            ),
            (
                json!({"type": "manual", "jitter_seconds": 5}),
                "trigger.jitter_seconds",
            ),
        ] {
            assert_eq!(
                fields(json!({"agent_id": "a", "trigger": trigger})),
                vec![field],
                "{trigger}"
            );
        }
    }
}
