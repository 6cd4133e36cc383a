//! Task definitions: the shape an agent registers over `PUT /v1/tasks/{id}`, its defaults and its
//! validation ("parse, don't validate": a [`TaskSpec`] that exists is valid).
//!
//! Validation walks the submitted JSON by hand so that every problem is reported at once with the
//! dotted path of the field it concerns (`execution.max_retries`), which is what the API's
//! `errors[]` promises. Unknown fields are refused: a typo such as `timzone` must not be silently
//! ignored by a scheduler.
//!
//! One file per section of the body, each with its type, its defaults and bounds, and its
//! reader: `trigger`, `execution`, `dispatch`, `notify`; `spec` holds the whole task and walks
//! the body; `fields` is the walker the readers share.

mod dispatch;
mod execution;
mod fields;
mod notify;
mod spec;
mod trigger;

pub use dispatch::{DEFAULT_DISPATCH_TIMEOUT_SECONDS, Dispatch, MAX_DISPATCH_TIMEOUT_SECONDS};
pub use execution::{
    Catchup, DEFAULT_CONCURRENCY_LIMIT, DEFAULT_PRIORITY, DEFAULT_TIMEOUT_SECONDS, Debounce,
    Execution, MAX_CATCHUP_WINDOW_SECONDS, MAX_DEBOUNCE_SECONDS, MAX_DEBOUNCE_WAIT_SECONDS,
    MAX_MISFIRE_GRACE_SECONDS, Overlap, RetryBackoff,
};
pub use fields::{FieldError, MAX_NAME_LEN, check_url, json_integer, parse_timestamp, valid_name};
pub use notify::{MAX_NOTIFY_URLS, Notify};
pub use spec::{
    CircuitBreaker, DEFAULT_FAILURE_THRESHOLD, MAX_CONTEXT_BYTES, MAX_DOCUMENT_BYTES,
    MAX_REASON_LEN, MAX_RESULT_BYTES, READ_ONLY_FIELDS, StoredTrigger, Task, TaskId, TaskSpec,
    TaskSubmission, parse_submission,
};
pub use trigger::{AfterOn, MAX_INTERVAL_SECONDS, TriggerSpec};

/// The field paths the errors of a body for task `t1` name, in order (none when it is valid).
#[cfg(test)]
fn error_fields(body: serde_json::Value) -> Vec<String> {
    match parse_submission("t1", &body) {
        Ok(_) => Vec::new(),
        Err(errs) => errs.into_iter().map(|e| e.field).collect(),
    }
}
