//! Task definitions: the shape an agent registers over `PUT /v1/tasks/{id}`, its defaults and its
//! validation ("parse, don't validate": a [`TaskSpec`] that exists is valid).
//!
//! Validation walks the submitted JSON by hand so that every problem is reported at once with the
//! dotted path of the field it concerns (`execution.max_retries`), which is what the API's
//! `errors[]` promises. Unknown fields are refused: a typo such as `timzone` must not be silently
//! ignored by a scheduler.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::schedule::{CronSchedule, Schedule};

/// Largest serialized JSON document kept in one field (openapi.yaml): a task's `context`, an
/// instance's `result`.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// Largest serialized `context` accepted.
pub const MAX_CONTEXT_BYTES: usize = MAX_DOCUMENT_BYTES;
/// Largest serialized `result` an agent or a webhook receiver may report.
pub const MAX_RESULT_BYTES: usize = MAX_DOCUMENT_BYTES;
/// Longest operator or agent reason kept (pause, cancel, retry).
pub const MAX_REASON_LEN: usize = 1024;
/// Largest `interval.every_seconds`: one year.
pub const MAX_INTERVAL_SECONDS: i64 = 366 * 86_400;
/// Largest `catchup_window_seconds`: 30 days.
pub const MAX_CATCHUP_WINDOW_SECONDS: i64 = 30 * 86_400;
/// Largest `misfire_grace_seconds`: one day.
pub const MAX_MISFIRE_GRACE_SECONDS: i64 = 86_400;
/// Longest `agent_id`, `paused_reason` and similar free-text identifiers.
pub const MAX_NAME_LEN: usize = 128;
/// Most URLs in one `notify` list.
pub const MAX_NOTIFY_URLS: usize = 10;
/// Default `dispatch.timeout_seconds`: how long a webhook push waits for the receiver's answer.
pub const DEFAULT_DISPATCH_TIMEOUT_SECONDS: i64 = 30;
/// Largest `dispatch.timeout_seconds`.
pub const MAX_DISPATCH_TIMEOUT_SECONDS: i64 = 900;

/// One validation failure: the dotted path of the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

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
        let field = |e: super::schedule::ScheduleError| {
            FieldError::new(format!("trigger.{}", e.field), e.message)
        };
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
    /// Shared limits the task draws on (`execution.limits`, [`super::limit`]).
    #[serde(default)]
    pub limits: Vec<super::limit::Draw>,
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
/// `circuit_breaker.failure_threshold` when not given.
pub const DEFAULT_FAILURE_THRESHOLD: i32 = 5;

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

/// How instances reach the agent: agents claim them (`poll`), or kairos pushes each one to
/// `url` signed with `secret` and waits up to `timeout_seconds` for the answer (`webhook`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Dispatch {
    Poll,
    Webhook {
        url: String,
        /// Write-only: never returned by the API.
        secret: String,
        /// The wait for the receiver's answer; separate from `execution.timeout_seconds`,
        /// which bounds the whole run (a `202` answer holds a lease of that).
        #[serde(default = "default_dispatch_timeout")]
        timeout_seconds: i64,
    },
}

fn default_dispatch_timeout() -> i64 {
    DEFAULT_DISPATCH_TIMEOUT_SECONDS
}

impl Dispatch {
    pub fn mode(&self) -> &'static str {
        match self {
            Dispatch::Poll => "poll",
            Dispatch::Webhook { .. } => "webhook",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Notify {
    pub on_success: Vec<String>,
    pub on_failure: Vec<String>,
    /// Write-only: never returned by the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

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
    /// up to this long after its instant ([`super::jitter`]); 0 for the other triggers.
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

/// Agent ids, worker ids and similar: printable, no spaces, bounded.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':'))
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

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(field, message));
    }

    fn unknown_fields(&mut self, prefix: &str, obj: &Map<String, Value>, known: &[&str]) {
        for key in obj.keys() {
            if !known.contains(&key.as_str()) {
                self.push(join(prefix, key), "unknown field");
            }
        }
    }

    /// An optional integer in `[min, max]`, `default` when absent.
    fn int(
        &mut self,
        obj: &Map<String, Value>,
        prefix: &str,
        key: &str,
        default: i64,
        min: i64,
        max: i64,
    ) -> i64 {
        let field = join(prefix, key);
        match obj.get(key) {
            None | Some(Value::Null) => default,
            Some(Value::Number(n)) => match json_integer(n) {
                Some(v) if (min..=max).contains(&v) => v,
                _ => {
                    self.push(field, format!("must be an integer from {min} to {max}"));
                    default
                }
            },
            Some(_) => {
                self.push(field, format!("must be an integer from {min} to {max}"));
                default
            }
        }
    }

    fn enum_value<T: Copy>(
        &mut self,
        obj: &Map<String, Value>,
        prefix: &str,
        key: &str,
        default: T,
        options: &[(&str, T)],
    ) -> T {
        let field = join(prefix, key);
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        match obj.get(key) {
            None | Some(Value::Null) => default,
            Some(Value::String(s)) => match options.iter().find(|(n, _)| n == s) {
                Some((_, v)) => *v,
                None => {
                    self.push(field, format!("must be one of {}", names.join(", ")));
                    default
                }
            },
            Some(_) => {
                self.push(field, format!("must be one of {}", names.join(", ")));
                default
            }
        }
    }

    fn object<'a>(
        &mut self,
        value: Option<&'a Value>,
        field: &str,
        known: &[&str],
    ) -> Option<&'a Map<String, Value>> {
        match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => {
                self.unknown_fields(field, m, known);
                Some(m)
            }
            Some(_) => {
                self.push(field, "must be an object");
                None
            }
        }
    }

    fn timestamp(&mut self, value: Option<&Value>, field: &str) -> Option<DateTime<Utc>> {
        match value {
            Some(Value::String(s)) => match parse_timestamp(s) {
                Some(t) => Some(t),
                None => {
                    self.push(
                        field,
                        "must be an RFC 3339 timestamp, e.g. 2026-11-29T08:30:00Z",
                    );
                    None
                }
            },
            None | Some(Value::Null) => None,
            Some(_) => {
                self.push(field, "must be an RFC 3339 timestamp string");
                None
            }
        }
    }
}

/// A JSON number as an integer, as JSON Schema counts integers: `10` and `10.0` are 10, `10.5`
/// and numbers outside `i64` are not integers.
pub fn json_integer(n: &serde_json::Number) -> Option<i64> {
    if let Some(v) = n.as_i64() {
        return Some(v);
    }
    let f = n.as_f64()?;
    // `i64::MAX as f64` rounds up to 2^63, which is already out of range.
    (f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
}

/// RFC 3339 with an offset, truncated to whole seconds (window keys have second resolution).
pub fn parse_timestamp(s: &str) -> Option<DateTime<Utc>> {
    let t = DateTime::parse_from_rfc3339(s).ok()?.with_timezone(&Utc);
    DateTime::<Utc>::from_timestamp(t.timestamp(), 0)
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// `trigger.jitter_seconds`: 0 to [`MAX_JITTER_SECONDS`](super::jitter::MAX_JITTER_SECONDS),
/// for cron and interval triggers only, and below an interval's `every_seconds` (a cron
/// expression's shortest gap needs the registration's clock: [`super::jitter::check_cron_jitter`]).
fn parse_jitter(t: &Map<String, Value>, trigger: Option<&TriggerSpec>, errs: &mut Errors) -> i64 {
    use super::jitter::MAX_JITTER_SECONDS;
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

fn parse_trigger(t: &Map<String, Value>, errs: &mut Errors) -> Option<TriggerSpec> {
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

fn parse_execution(value: Option<&Value>, errs: &mut Errors) -> Execution {
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
    let limits = super::limit::parse_draws(e.get("limits"), &mut errs.0);
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

fn parse_dispatch(value: Option<&Value>, errs: &mut Errors) -> Dispatch {
    let Some(d) = errs.object(
        value,
        "dispatch",
        &["mode", "url", "secret", "timeout_seconds"],
    ) else {
        return Dispatch::Poll;
    };
    match d.get("mode") {
        None | Some(Value::Null) => Dispatch::Poll,
        Some(Value::String(s)) if s == "poll" => {
            for key in ["url", "secret", "timeout_seconds"] {
                if d.contains_key(key) {
                    errs.push(format!("dispatch.{key}"), "only allowed with mode webhook");
                }
            }
            Dispatch::Poll
        }
        Some(Value::String(s)) if s == "webhook" => {
            let url = match d.get("url") {
                Some(Value::String(u)) => match check_url(u) {
                    Ok(()) => Some(u.clone()),
                    Err(m) => {
                        errs.push("dispatch.url", m);
                        None
                    }
                },
                None | Some(Value::Null) => {
                    errs.push("dispatch.url", "is required for webhook dispatch");
                    None
                }
                Some(_) => {
                    errs.push("dispatch.url", "must be a URL string");
                    None
                }
            };
            let secret = match d.get("secret") {
                Some(Value::String(s)) if !s.is_empty() && s.len() <= 1024 => Some(s.clone()),
                None | Some(Value::Null) => {
                    errs.push(
                        "dispatch.secret",
                        "is required for webhook dispatch: pushes are signed with it",
                    );
                    None
                }
                Some(_) => {
                    errs.push("dispatch.secret", "must be a string of 1-1024 characters");
                    None
                }
            };
            let timeout_seconds = errs.int(
                d,
                "dispatch",
                "timeout_seconds",
                DEFAULT_DISPATCH_TIMEOUT_SECONDS,
                1,
                MAX_DISPATCH_TIMEOUT_SECONDS,
            );
            match (url, secret) {
                (Some(url), Some(secret)) => Dispatch::Webhook {
                    url,
                    secret,
                    timeout_seconds,
                },
                _ => Dispatch::Poll,
            }
        }
        Some(_) => {
            errs.push("dispatch.mode", "must be one of poll, webhook");
            Dispatch::Poll
        }
    }
}

fn parse_notify(value: Option<&Value>, errs: &mut Errors) -> Notify {
    let Some(n) = errs.object(value, "notify", &["on_success", "on_failure", "secret"]) else {
        return Notify::default();
    };
    let mut list = |key: &str| -> Vec<String> {
        let field = format!("notify.{key}");
        match n.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                if items.len() > MAX_NOTIFY_URLS {
                    errs.push(field.clone(), format!("at most {MAX_NOTIFY_URLS} URLs"));
                }
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(url) => match check_url(url) {
                            Ok(()) => out.push(url.to_owned()),
                            Err(m) => errs.push(format!("{field}[{i}]"), m),
                        },
                        None => errs.push(format!("{field}[{i}]"), "must be a URL string"),
                    }
                }
                out
            }
            Some(_) => {
                errs.push(field, "must be an array of URLs");
                Vec::new()
            }
        }
    };
    let on_success = list("on_success");
    let on_failure = list("on_failure");
    let secret = match n.get("secret") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 1024 => Some(s.clone()),
        Some(_) => {
            errs.push("notify.secret", "must be a string of 1-1024 characters");
            None
        }
    };
    Notify {
        on_success,
        on_failure,
        secret,
    }
}

/// Outbound URLs: http or https, a host, no credentials, bounded length.
pub fn check_url(url: &str) -> Result<(), String> {
    if url.len() > 2048 {
        return Err("must be at most 2048 characters".to_owned());
    }
    let rest = if let Some(r) = url.strip_prefix("https://") {
        r
    } else if let Some(r) = url.strip_prefix("http://") {
        r
    } else {
        return Err("must be an http:// or https:// URL".to_owned());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err("must not carry credentials (user:password@)".to_owned());
    }
    if authority.is_empty()
        || authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("must name a host".to_owned());
    }
    // The outbound client's own parser: what it cannot send to is refused now, not at the
    // first push (an IPv6 zone id, a port out of range, a malformed host).
    let parsed =
        url::Url::parse(url).map_err(|e| format!("is not a URL kairos can send to: {e}"))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".to_owned());
    }
    if parsed.port() == Some(0) {
        return Err("port 0 cannot be connected to".to_owned());
    }
    Ok(())
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
    #[test]
    fn urls_the_outbound_client_cannot_send_to_are_refused_at_registration() {
        for ok in [
            "http://127.0.0.1:18129/hook",
            "https://hooks.example.com/a?b=c",
            "http://[::1]:8080/",
        ] {
            assert_eq!(super::check_url(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("http://[fe80::1%25eth0]/", "kairos can send to"),
            ("http://example.com:99999/", "kairos can send to"),
            ("http://example.com:0/", "port 0"),
            ("ftp://example.com/", "http:// or https://"),
            ("http://u:p@example.com/", "credentials"),
        ] {
            let err = super::check_url(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn integral_numbers_are_integers_as_json_schema_counts_them() {
        let n = |s: &str| serde_json::from_str::<serde_json::Number>(s).expect("number");
        assert_eq!(super::json_integer(&n("63")), Some(63));
        assert_eq!(super::json_integer(&n("63.0")), Some(63));
        assert_eq!(super::json_integer(&n("-2.0e1")), Some(-20));
        assert_eq!(super::json_integer(&n("63.5")), None);
        assert_eq!(super::json_integer(&n("1e300")), None);
    }

    use super::*;
    use serde_json::json;

    fn fields(body: Value) -> Vec<String> {
        match parse_submission("t1", &body) {
            Ok(_) => Vec::new(),
            Err(errs) => errs.into_iter().map(|e| e.field).collect(),
        }
    }

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

    #[test]
    fn oversized_context_is_refused() {
        let big = "x".repeat(MAX_CONTEXT_BYTES);
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "manual"}, "context": {"k": big}})),
            vec!["context"]
        );
    }

    #[test]
    fn webhook_dispatch_needs_a_url_and_a_secret_that_is_never_shown() {
        assert_eq!(
            fields(
                json!({"agent_id": "a", "trigger": {"type": "manual"}, "dispatch": {"mode": "webhook"}})
            ),
            vec!["dispatch.url", "dispatch.secret"]
        );
        let s = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "manual"},
                    "dispatch": {"mode": "webhook", "url": "https://agent.example/run", "secret": "hush-hush"}}),
        )
        .expect("valid");
        assert_eq!(s.spec.dispatch.mode(), "webhook");
        let Dispatch::Webhook {
            timeout_seconds, ..
        } = &s.spec.dispatch
        else {
            panic!("webhook dispatch")
        };
        assert_eq!(*timeout_seconds, DEFAULT_DISPATCH_TIMEOUT_SECONDS);
        let public = s.spec.to_public_json().to_string();
        assert!(!public.contains("hush-hush"), "{public}");
        assert!(public.contains("https://agent.example/run"));
    }

    #[test]
    fn dispatch_timeout_is_bounded_and_only_for_webhooks() {
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "manual"},
                          "dispatch": {"mode": "webhook", "url": "https://a.example/", "secret": "s",
                                       "timeout_seconds": 901}})),
            vec!["dispatch.timeout_seconds"]
        );
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "manual"},
                          "dispatch": {"mode": "poll", "timeout_seconds": 5}})),
            vec!["dispatch.timeout_seconds"]
        );
        let s = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "manual"},
                    "dispatch": {"mode": "webhook", "url": "https://a.example/", "secret": "s",
                                 "timeout_seconds": 900}}),
        )
        .expect("valid");
        assert_eq!(s.spec.to_public_json()["dispatch"]["timeout_seconds"], 900);
        // A spec stored before the field existed reads with the default.
        let old: Dispatch = serde_json::from_value(
            json!({"mode": "webhook", "url": "https://a.example/", "secret": "s"}),
        )
        .expect("old spec");
        assert_eq!(
            old,
            Dispatch::Webhook {
                url: "https://a.example/".to_owned(),
                secret: "s".to_owned(),
                timeout_seconds: DEFAULT_DISPATCH_TIMEOUT_SECONDS,
            }
        );
    }

    #[test]
    fn notify_secret_is_never_shown() {
        let s = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "manual"}, "notify": {"secret": "shh"}}),
        )
        .expect("valid");
        assert_eq!(s.spec.notify.secret.as_deref(), Some("shh"));
        assert!(!s.spec.to_public_json().to_string().contains("shh"));
    }

    #[test]
    fn timestamps_are_truncated_to_seconds() {
        let t = parse_timestamp("2026-11-29T08:30:00.750+08:00").expect("valid");
        assert_eq!(t.to_rfc3339(), "2026-11-29T00:30:00+00:00");
        assert!(parse_timestamp("2026-11-29 08:30").is_none());
    }
}
