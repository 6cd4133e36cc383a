//! The task as a whole: [`TaskId`], the validated [`TaskSpec`] and how it is stored (the trigger
//! carries `jitter_seconds`), the registered [`Task`], the PUT body [`TaskSubmission`] and
//! [`parse_submission`], which walks the body section by section; and the `circuit_breaker`
//! section, two numbers, beside them.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::dispatch::{Dispatch, parse_dispatch};
use super::execution::{Execution, parse_execution};
use super::fields::{Errors, FieldError, valid_name};
use super::notify::{Notify, parse_notify};
use super::trigger::{TriggerSpec, parse_jitter, parse_trigger};

/// Largest serialized JSON document kept in one field (openapi.yaml): a task's `context`, an
/// instance's `result`.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// Largest serialized `context` accepted.
pub const MAX_CONTEXT_BYTES: usize = MAX_DOCUMENT_BYTES;
/// Largest serialized `result` an agent or a webhook receiver may report.
pub const MAX_RESULT_BYTES: usize = MAX_DOCUMENT_BYTES;
/// Longest operator or agent reason kept (pause, cancel, retry).
pub const MAX_REASON_LEN: usize = 1024;

/// A task id as the contract defines it: `^[a-z0-9][a-z0-9_.-]{0,127}$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    pub fn parse(s: &str) -> Result<TaskId, String> {
        let mut chars = s.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok = chars.all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.' || c == '-'
        });
        if !first_ok || !rest_ok || s.len() > 128 {
            return Err(
                "must match ^[a-z0-9][a-z0-9_.-]{0,127}$ (lowercase letters, digits, '_', '.', '-'; at most 128)"
                    .to_owned(),
            );
        }
        Ok(TaskId(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A validated task definition with every default filled in. Stored as JSON in `tasks.spec`;
/// two PUTs are "the same" exactly when their `TaskSpec`s are equal.
///
/// `jitter_seconds` is written inside the `trigger` object (`trigger.jitter_seconds`, present
/// for cron and interval triggers only), as the API spells it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub id: TaskId,
    pub agent_id: String,
    pub trigger: TriggerSpec,
    /// `trigger.jitter_seconds`: each window of a cron or interval trigger becomes claimable
    /// up to this long after its instant ([`crate::domain::jitter`]); 0 for the other triggers.
    pub jitter_seconds: i64,
    pub execution: Execution,
    pub dispatch: Dispatch,
    pub context: Map<String, Value>,
    pub notify: Notify,
    pub circuit_breaker: CircuitBreaker,
}

/// A trigger as it is stored and served: its own fields and, for cron and interval triggers,
/// `jitter_seconds` beside them. Stored triggers written before jitter existed read as 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredTrigger {
    #[serde(flatten)]
    pub spec: TriggerSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_seconds: Option<i64>,
}

impl StoredTrigger {
    fn of(spec: &TaskSpec) -> StoredTrigger {
        StoredTrigger {
            spec: spec.trigger.clone(),
            jitter_seconds: spec.trigger.takes_jitter().then_some(spec.jitter_seconds),
        }
    }
}

#[derive(Serialize)]
struct SpecOut<'a> {
    id: &'a TaskId,
    agent_id: &'a str,
    trigger: StoredTrigger,
    execution: &'a Execution,
    dispatch: &'a Dispatch,
    context: &'a Map<String, Value>,
    notify: &'a Notify,
    circuit_breaker: &'a CircuitBreaker,
}

#[derive(Deserialize)]
struct SpecIn {
    id: TaskId,
    agent_id: String,
    trigger: StoredTrigger,
    execution: Execution,
    dispatch: Dispatch,
    context: Map<String, Value>,
    notify: Notify,
    circuit_breaker: CircuitBreaker,
}

impl Serialize for TaskSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SpecOut {
            id: &self.id,
            agent_id: &self.agent_id,
            trigger: StoredTrigger::of(self),
            execution: &self.execution,
            dispatch: &self.dispatch,
            context: &self.context,
            notify: &self.notify,
            circuit_breaker: &self.circuit_breaker,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TaskSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = SpecIn::deserialize(deserializer)?;
        Ok(TaskSpec {
            id: s.id,
            agent_id: s.agent_id,
            jitter_seconds: s.trigger.jitter_seconds.unwrap_or(0),
            trigger: s.trigger.spec,
            execution: s.execution,
            dispatch: s.dispatch,
            context: s.context,
            notify: s.notify,
            circuit_breaker: s.circuit_breaker,
        })
    }
}

/// A registered task: its spec plus the fields only kairos writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub spec: TaskSpec,
    pub paused: bool,
    pub paused_reason: Option<String>,
    pub next_fire_at: Option<DateTime<Utc>>,
    pub consecutive_failures: i32,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A PUT body: the spec, plus the optional desired pause state (absent = leave as is, so that an
/// agent re-registering its tasks at start-up does not undo an operator's or the breaker's pause).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSubmission {
    pub spec: TaskSpec,
    pub paused: Option<bool>,
    /// The trace context the definition came with (`traceparent`), stored with the task when
    /// the submission creates or changes it.
    pub trace: Option<crate::domain::trace::TraceContext>,
}

impl TaskSpec {
    /// The spec as the API shows it: write-only secrets removed.
    pub fn to_public_json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        for section in ["notify", "dispatch"] {
            if let Some(obj) = v.get_mut(section).and_then(Value::as_object_mut) {
                obj.remove("secret");
            }
        }
        v
    }
}

/// Parse and validate a PUT body for the task `path_id`. Every problem is reported, each with its
/// field path.
///
/// The read-only fields of a task (openapi.yaml) are accepted and ignored, so that a body read
/// with `GET` can be sent back.
pub fn parse_submission(path_id: &str, body: &Value) -> Result<TaskSubmission, Vec<FieldError>> {
    let mut errs = Errors::default();
    let Some(obj) = body.as_object() else {
        return Err(vec![FieldError::new("", "the body must be a JSON object")]);
    };
    let known: Vec<&str> = [
        "id",
        "agent_id",
        "trigger",
        "execution",
        "dispatch",
        "context",
        "notify",
        "circuit_breaker",
        "paused",
    ]
    .into_iter()
    .chain(READ_ONLY_FIELDS)
    .collect();
    errs.unknown_fields("", obj, &known);

    let id = match TaskId::parse(path_id) {
        Ok(id) => Some(id),
        Err(m) => {
            errs.push("id", m);
            None
        }
    };
    match obj.get("id") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == path_id => {}
        Some(Value::String(_)) => errs.push("id", "must equal the id in the URL path"),
        Some(_) => errs.push("id", "must be a string"),
    }

    let agent_id = match obj.get("agent_id") {
        Some(Value::String(s)) if valid_name(s) => Some(s.clone()),
        Some(Value::String(_)) => {
            errs.push(
                "agent_id",
                "must be 1-128 characters of letters, digits, '_', '.', '-', ':'",
            );
            None
        }
        None | Some(Value::Null) => {
            errs.push("agent_id", "is required");
            None
        }
        Some(_) => {
            errs.push("agent_id", "must be a string");
            None
        }
    };

    let mut jitter_seconds = 0;
    let trigger = match obj.get("trigger") {
        Some(Value::Object(t)) => {
            let trigger = parse_trigger(t, &mut errs);
            jitter_seconds = parse_jitter(t, trigger.as_ref(), &mut errs);
            trigger
        }
        None | Some(Value::Null) => {
            errs.push("trigger", "is required");
            None
        }
        Some(_) => {
            errs.push("trigger", "must be an object");
            None
        }
    };
    if let (Some(TriggerSpec::After { task, .. }), Some(id)) = (&trigger, &id)
        && task == id
    {
        errs.push("trigger.task", "a task cannot depend on itself");
    }

    let execution = parse_execution(obj.get("execution"), &mut errs);
    let dispatch = parse_dispatch(obj.get("dispatch"), &mut errs);

    let context = match obj.get("context") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => {
            let size = serde_json::to_vec(m).map(|v| v.len()).unwrap_or(usize::MAX);
            if size > MAX_CONTEXT_BYTES {
                errs.push(
                    "context",
                    format!("is {size} bytes serialized; at most {MAX_CONTEXT_BYTES} allowed"),
                );
            }
            m.clone()
        }
        Some(_) => {
            errs.push("context", "must be a JSON object");
            Map::new()
        }
    };

    let notify = parse_notify(obj.get("notify"), &mut errs);
    let circuit_breaker = parse_circuit_breaker(obj.get("circuit_breaker"), &mut errs);

    let paused = match obj.get("paused") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            errs.push("paused", "must be a boolean");
            None
        }
    };

    if !errs.0.is_empty() {
        return Err(errs.0);
    }
    match (id, agent_id, trigger) {
        (Some(id), Some(agent_id), Some(trigger)) => Ok(TaskSubmission {
            spec: TaskSpec {
                id,
                agent_id,
                trigger,
                jitter_seconds,
                execution,
                dispatch,
                context,
                notify,
                circuit_breaker,
            },
            paused,
            trace: None,
        }),
        _ => Err(vec![FieldError::new("", "invalid task")]),
    }
}

/// The fields of a task only kairos writes (openapi.yaml): shown by `GET`, ignored in a `PUT`.
pub const READ_ONLY_FIELDS: [&str; 6] = [
    "next_fire_at",
    "paused_reason",
    "consecutive_failures",
    "created_at",
    "updated_at",
    "version",
];

/// `circuit_breaker.failure_threshold` when not given.
pub const DEFAULT_FAILURE_THRESHOLD: i32 = 5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CircuitBreaker {
    pub failure_threshold: i32,
    pub cooldown_seconds: Option<i64>,
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        Self {
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            cooldown_seconds: None,
        }
    }
}

fn parse_circuit_breaker(value: Option<&Value>, errs: &mut Errors) -> CircuitBreaker {
    let d = CircuitBreaker::default();
    let Some(c) = errs.object(
        value,
        "circuit_breaker",
        &["failure_threshold", "cooldown_seconds"],
    ) else {
        return d;
    };
    let failure_threshold = errs.int(
        c,
        "circuit_breaker",
        "failure_threshold",
        d.failure_threshold.into(),
        1,
        1000,
    ) as i32;
    let cooldown_seconds = match c.get("cooldown_seconds") {
        None | Some(Value::Null) => None,
        Some(_) => Some(errs.int(c, "circuit_breaker", "cooldown_seconds", 0, 1, 604_800)),
    };
    CircuitBreaker {
        failure_threshold,
        cooldown_seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::error_fields as fields;
    use serde_json::json;

    #[test]
    fn minimal_task_gets_every_default() {
        let s = parse_submission(
            "daily_report_001",
            &json!({"agent_id": "report_agent", "trigger": {"type": "cron", "expr": "0 30 8 * * *", "timezone": "Asia/Shanghai"}}),
        )
        .expect("valid");
        assert_eq!(s.spec.execution, Execution::default());
        assert_eq!(s.spec.circuit_breaker.failure_threshold, 5);
        assert_eq!(s.spec.dispatch, Dispatch::Poll);
        assert_eq!(s.paused, None);
    }

    #[test]
    fn task_ids_follow_the_contract_pattern() {
        assert!(TaskId::parse("daily_report_001").is_ok());
        assert!(TaskId::parse("a.b-c_d").is_ok());
        assert!(TaskId::parse("Daily").is_err());
        assert!(TaskId::parse("_x").is_err());
        assert!(TaskId::parse("").is_err());
        assert!(TaskId::parse(&"a".repeat(129)).is_err());
        assert!(TaskId::parse(&"a".repeat(128)).is_ok());
    }

    #[test]
    fn every_invalid_field_is_named() {
        assert_eq!(
            fields(json!({"trigger": {"type": "manual"}})),
            vec!["agent_id"]
        );
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "nope"}})),
            vec!["trigger.expr"]
        );
        assert_eq!(
            fields(
                json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "* * * * *", "timezone": "Mars/Base"}})
            ),
            vec!["trigger.timezone"]
        );
        assert_eq!(
            fields(
                json!({"agent_id": "a", "trigger": {"type": "manual"}, "execution": {"max_retries": 101, "concurrency_limit": 0, "timeout_seconds": "x"}})
            ),
            vec![
                "execution.timeout_seconds",
                "execution.max_retries",
                "execution.concurrency_limit"
            ]
        );
        assert_eq!(
            fields(
                json!({"agent_id": "a", "trigger": {"type": "manual"}, "execution": {"overlap": "merge"}})
            ),
            vec!["execution.overlap"]
        );
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "manual", "timzone": "UTC"}})),
            vec!["trigger.timzone"]
        );
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "interval", "every_seconds": 0}})),
            vec!["trigger.every_seconds"]
        );
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "once", "at": "tomorrow"}})),
            vec!["trigger.at"]
        );
        assert_eq!(
            fields(
                json!({"agent_id": "a", "trigger": {"type": "after", "task": "t1", "on": "success"}})
            ),
            vec!["trigger.task"]
        );
        assert_eq!(
            fields(
                json!({"agent_id": "a", "trigger": {"type": "manual"}, "notify": {"on_failure": ["ftp://x", "https://u:p@h/"]}})
            ),
            vec!["notify.on_failure[0]", "notify.on_failure[1]"]
        );
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "manual"}, "context": [1]})),
            vec!["context"]
        );
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "manual"}, "id": "other"})),
            vec!["id"]
        );
        assert_eq!(
            fields(
                json!({"agent_id": "a", "trigger": {"type": "manual"}, "execution": {"retry_backoff": {"base_seconds": 100, "max_seconds": 10, "jitter": 2}}})
            ),
            vec![
                "execution.retry_backoff.max_seconds",
                "execution.retry_backoff.jitter"
            ]
        );
    }

    #[test]
    fn oversized_context_is_refused() {
        let big = "x".repeat(MAX_CONTEXT_BYTES);
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "manual"}, "context": {"k": big}})),
            vec!["context"]
        );
    }
}
