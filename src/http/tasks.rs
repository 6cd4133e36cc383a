//! `/v1/tasks` and `/v1/cron/preview`: registration, listing, pause/resume, and schedule
//! previews.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::extract::{
    JsonBody, QueryParams, body_object, int_field, page_limit, string_field, trace_context,
};
use super::instances::instance_json;
use crate::domain::access::Principal;
use crate::domain::jitter;
use crate::domain::schedule::{CronSchedule, format_instant, window_key};
use crate::domain::task::{
    FieldError, MAX_CONTEXT_BYTES, MAX_REASON_LEN, Overlap, Task, parse_submission, parse_timestamp,
};
use crate::domain::text::{at_most_chars, plain_text};
use crate::problem::ApiError;
use crate::route_table::RouteTable;
use crate::state::AppState;
use crate::store::instances::{
    self as store_instances, Backfill, ManualTrigger, Reprocess, Triggered,
};
use crate::store::{self, tasks as store_tasks};
use crate::usecases::cursor::{cut_page, decode_cursor, encode_cursor};
use crate::usecases::tasks::{
    MAX_BACKFILL_WINDOWS, check_ahead_of_retention, check_retention, not_found_task, run_backfill,
    task_json, task_trace, visible_task,
};

/// Most windows or fire times one preview returns.
pub const MAX_PREVIEW_COUNT: i64 = 1000;
/// Longest delay of a delayed run: one year.
pub const MAX_DELAY_SECONDS: i64 = 366 * 86_400;
/// Longest caller-chosen window key.
pub const MAX_WINDOW_KEY_LEN: usize = 256;
/// Longest caller-chosen debounce key.
pub const MAX_DEBOUNCE_KEY_LEN: usize = 256;

pub fn routes(t: RouteTable) -> RouteTable {
    t.put("/v1/tasks/{id}", put_task)
        .get("/v1/tasks/{id}", get_task)
        .delete("/v1/tasks/{id}", delete_task)
        .get("/v1/tasks", list_tasks)
        .post("/v1/tasks/{id}/pause", pause_task)
        .post("/v1/tasks/{id}/resume", resume_task)
        .get("/v1/tasks/{id}/preview", preview_task)
        .get("/v1/cron/preview", preview_cron)
        .post("/v1/tasks/{id}/trigger", trigger_task)
        .post("/v1/tasks/{id}/backfill", backfill_task)
}

fn task_response(status: StatusCode, t: &Task) -> Response {
    with_etag(status, task_json(t), t.version)
}

/// A task view with the task's version as a strong `ETag`.
fn with_etag(status: StatusCode, view: Value, version: i64) -> Response {
    let mut resp = (status, Json(view)).into_response();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{version}\"")) {
        resp.headers_mut().insert(header::ETAG, etag);
    }
    resp
}

/// `If-Match: 3`, `"3"` or `*`. Anything else can never match: 412.
fn if_match(headers: &HeaderMap) -> Result<Option<IfMatch>, ApiError> {
    let Some(raw) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let s = raw.to_str().unwrap_or("").trim();
    if s == "*" {
        return Ok(Some(IfMatch::Any));
    }
    s.trim_matches('"')
        .parse::<i64>()
        .map(|v| Some(IfMatch::Version(v)))
        .map_err(|_| {
            ApiError::PreconditionFailed(format!(
                "If-Match must be a task version such as \"3\", not {s:?}"
            ))
        })
}

enum IfMatch {
    Any,
    Version(i64),
}

async fn put_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    if body.is_null() {
        return Err(ApiError::Malformed(
            "a JSON task definition is required".to_owned(),
        ));
    }
    let mut sub = parse_submission(&id, &body).map_err(ApiError::Invalid)?;
    sub.trace = trace_context(&headers);
    check_outbound_hosts(&state, &sub.spec)?;
    let expected = match if_match(&headers)? {
        None => None,
        Some(IfMatch::Version(v)) => Some(v),
        Some(IfMatch::Any) => match store_tasks::get_task(&state.pool, &id).await {
            Ok(t) => Some(t.version),
            Err(store::Error::NotFound) => {
                return Err(ApiError::PreconditionFailed(
                    "If-Match: * but the task does not exist".to_owned(),
                ));
            }
            Err(e) => return Err(e.into()),
        },
    };
    let (outcome, task) = store_tasks::upsert_task(&state.pool, &sub, expected).await?;
    match outcome {
        store_tasks::Upserted::Created => {
            tracing::info!(task_id = %id, agent_id = %task.spec.agent_id, trigger = task.spec.trigger.type_name(), next_fire_at = ?task.next_fire_at, "task created");
            Ok(task_response(StatusCode::CREATED, &task))
        }
        store_tasks::Upserted::Replaced => {
            tracing::info!(task_id = %id, version = task.version, next_fire_at = ?task.next_fire_at, "task replaced");
            Ok(task_response(StatusCode::OK, &task))
        }
        store_tasks::Upserted::Unchanged => Ok(task_response(StatusCode::OK, &task)),
    }
}

async fn get_task(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let task = store_tasks::get_task(&state.pool, &id)
        .await
        .map_err(|e| not_found_task(e, &id))?;
    Ok(with_etag(
        StatusCode::OK,
        visible_task(&task, &principal)?,
        task.version,
    ))
}

/// Webhook and notification URLs must name an allowed host (`outbound_allowed_hosts`) and,
/// when they hold a literal address, one that may be reached (names are checked at send time).
fn check_outbound_hosts(
    state: &AppState,
    spec: &crate::domain::task::TaskSpec,
) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    let mut check = |field: String, url: &str| {
        if !state.outbound.allow_list.allows(url) {
            errors.push(FieldError::new(
                field,
                "names a host outside outbound_allowed_hosts",
            ));
        } else if let Some(reason) = state.outbound.refuse_url(url) {
            errors.push(FieldError::new(field, reason));
        }
    };
    if let crate::domain::task::Dispatch::Webhook { url, .. } = &spec.dispatch {
        check("dispatch.url".to_owned(), url);
    }
    for (list, urls) in [
        ("on_success", &spec.notify.on_success),
        ("on_failure", &spec.notify.on_failure),
    ] {
        for (i, url) in urls.iter().enumerate() {
            check(format!("notify.{list}[{i}]"), url);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Invalid(errors))
    }
}

async fn delete_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let cancelled = store_tasks::delete_task(&state.pool, &id, "api")
        .await
        .map_err(|e| not_found_task(e, &id))?;
    tracing::info!(task_id = %id, cancelled, "task deleted");
    Ok(StatusCode::NO_CONTENT)
}

async fn list_tasks(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    q.only(&["agent_id", "paused", "limit", "cursor"])?;
    let limit = page_limit(&q)?;
    let after_id = q.str("cursor").map(decode_cursor).transpose()?;
    let filter = store_tasks::TaskFilter {
        agent_id: q.str("agent_id").map(str::to_owned),
        agents_in: principal.readable_agents().map(<[String]>::to_vec),
        paused: q.bool("paused")?,
        trigger_type: None,
        after_id,
        limit: limit + 1,
    };
    let mut tasks = store_tasks::list_tasks(&state.pool, &filter).await?;
    let next_cursor = cut_page(&mut tasks, limit, |t| encode_cursor(t.spec.id.as_str()));
    Ok(Json(json!({
        "items": tasks
            .iter()
            .map(|t| visible_task(t, &principal))
            .collect::<Result<Vec<_>, _>>()?,
        "next_cursor": next_cursor,
    })))
}

async fn pause_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let reason = match &body {
        Value::Null => None,
        Value::Object(o) => {
            if let Some(k) = o.keys().find(|k| k.as_str() != "reason") {
                return Err(ApiError::invalid(k.clone(), "unknown field"));
            }
            match o.get("reason") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) if at_most_chars(s, MAX_REASON_LEN) => Some(s.clone()),
                Some(_) => {
                    return Err(ApiError::invalid(
                        "reason",
                        format!("must be a string of at most {MAX_REASON_LEN} characters"),
                    ));
                }
            }
        }
        _ => return Err(ApiError::invalid("", "the body must be a JSON object")),
    };
    let reason = reason.unwrap_or_else(|| "paused by operator".to_owned());
    let task = store_tasks::pause_task(&state.pool, &id, &reason)
        .await
        .map_err(|e| not_found_task(e, &id))?;
    tracing::info!(task_id = %id, reason = %reason, "task paused");
    Ok(task_response(StatusCode::OK, &task))
}

async fn resume_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let task = store_tasks::resume_task(&state.pool, &id)
        .await
        .map_err(|e| not_found_task(e, &id))?;
    tracing::info!(task_id = %id, next_fire_at = ?task.next_fire_at, "task resumed");
    Ok(task_response(StatusCode::OK, &task))
}

async fn preview_task(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    q.only(&["count", "from"])?;
    let count = q.int("count", 10, 1, MAX_PREVIEW_COUNT)?;
    let from = q.timestamp("from")?;
    let task = store_tasks::get_task(&state.pool, &id)
        .await
        .map_err(|e| not_found_task(e, &id))?;
    visible_task(&task, &principal)?;
    let from = match from {
        Some(f) => f,
        None => store::now(&state.pool).await?,
    };
    let schedule = task
        .spec
        .trigger
        .schedule()
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let windows: Vec<Value> = schedule
        .upcoming(from, count as usize)
        .into_iter()
        .map(|t| {
            let key = window_key(t);
            // When the window becomes claimable: its instant plus the task's jitter offset,
            // as the trigger loop writes it.
            let available_at = jitter::available_at(&id, &key, t, task.spec.jitter_seconds);
            json!({
                "scheduled_at": format_instant(t),
                "window_key": key,
                "available_at": format_instant(available_at),
            })
        })
        .collect();
    Ok(Json(json!({ "windows": windows })))
}

async fn preview_cron(
    State(state): State<AppState>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    q.only(&["expr", "timezone", "count", "from"])?;
    let expr = q
        .str("expr")
        .ok_or_else(|| ApiError::invalid("expr", "is required"))?;
    let timezone = q.str("timezone").unwrap_or("UTC");
    let count = q.int("count", 10, 1, MAX_PREVIEW_COUNT)?;
    let schedule =
        CronSchedule::parse(expr, timezone).map_err(|e| ApiError::invalid(e.field, e.message))?;
    let given = q.timestamp("from")?;
    let from = match given {
        Some(f) => f,
        None => store::now(&state.pool).await?,
    };
    // An expression that never fires is refused here as at registration. One that fires, only
    // not within the search horizon after a far `from`, blames `from`.
    let first = match schedule.first_fire_after(from) {
        Ok(t) => t,
        Err(e) => {
            let fires_from_now = given.is_some()
                && schedule
                    .first_fire_after(store::now(&state.pool).await?)
                    .is_ok();
            let field = if fires_from_now { "from" } else { e.field };
            return Err(ApiError::invalid(field, e.message));
        }
    };
    let mut out = vec![format_instant(first)];
    let mut cursor = first;
    while (out.len() as i64) < count {
        match schedule.next_after(cursor) {
            Some(t) => {
                out.push(format_instant(t));
                cursor = t;
            }
            None => break,
        }
    }
    Ok(Json(json!({
        "expr": schedule.expr(),
        "timezone": timezone,
        "fire_times": out,
    })))
}

async fn trigger_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let m = body_object(
        body,
        &[
            "window_key",
            "delay_seconds",
            "run_at",
            "context",
            "debounce_key",
            "priority",
        ],
    )?;
    let priority = super::extract::priority_field(&m)?;
    let window_key = string_field(&m, "window_key", false, MAX_WINDOW_KEY_LEN)?;
    if let Some(k) = &window_key
        && (k.is_empty() || !plain_text(k, MAX_WINDOW_KEY_LEN))
    {
        return Err(ApiError::invalid(
            "window_key",
            "must be 1-256 characters without control characters",
        ));
    }
    let debounce_key = string_field(&m, "debounce_key", false, MAX_DEBOUNCE_KEY_LEN)?;
    if let Some(k) = &debounce_key {
        if k.is_empty() || !plain_text(k, MAX_DEBOUNCE_KEY_LEN) {
            return Err(ApiError::invalid(
                "debounce_key",
                "must be 1-256 characters without control characters",
            ));
        }
        if window_key.is_some() {
            return Err(ApiError::invalid(
                "debounce_key",
                "a trigger with a window_key is not debounced: give one or the other",
            ));
        }
    }
    let delay_seconds = match m.get("delay_seconds") {
        None | Some(Value::Null) => None,
        Some(_) => Some(int_field(&m, "delay_seconds", 0, 0, MAX_DELAY_SECONDS)?),
    };
    let run_at = match m.get("run_at") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(parse_timestamp(s).ok_or_else(|| {
            ApiError::invalid(
                "run_at",
                "must be an RFC 3339 timestamp, e.g. 2026-11-29T08:30:00Z",
            )
        })?),
        Some(_) => {
            return Err(ApiError::invalid(
                "run_at",
                "must be an RFC 3339 timestamp string",
            ));
        }
    };
    if run_at.is_some() && delay_seconds.is_some() {
        return Err(ApiError::invalid(
            "run_at",
            "give run_at or delay_seconds, not both",
        ));
    }
    let context = match m.get("context") {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) => {
            let size = serde_json::to_vec(o).map(|v| v.len()).unwrap_or(usize::MAX);
            if size > MAX_CONTEXT_BYTES {
                return Err(ApiError::invalid(
                    "context",
                    format!("is {size} bytes serialized; at most {MAX_CONTEXT_BYTES} allowed"),
                ));
            }
            Some(Value::Object(o.clone()))
        }
        Some(_) => return Err(ApiError::invalid("context", "must be a JSON object")),
    };
    // A window key that is an instant names a schedule window; it and `run_at` (the scheduled
    // time) must be within retention, like a backfill.
    let key_instant = window_key.as_deref().and_then(parse_timestamp);
    if key_instant.is_some() || run_at.is_some() {
        let now = store::now(&state.pool).await?;
        let cutoff = now - chrono::Duration::days(state.retention_days);
        for (field, at) in [("window_key", key_instant), ("run_at", run_at)] {
            if let Some(at) = at {
                check_retention(state.retention_days, &id, field, at, cutoff)?;
            }
        }
        if let Some(at) = key_instant {
            let runs_at =
                run_at.unwrap_or(now + chrono::Duration::seconds(delay_seconds.unwrap_or(0)));
            check_ahead_of_retention(state.retention_days, &id, at, runs_at)?;
        }
    }
    let trigger = ManualTrigger {
        window_key,
        run_at,
        delay_seconds,
        context,
        priority,
        trace: trace_context(&headers),
    };
    let (what, inst) =
        store_instances::trigger_run(&state.pool, &id, &trigger, debounce_key.as_deref(), "api")
            .await
            .map_err(|e| not_found_task(e, &id))?;
    let status = match what {
        Triggered::Created => {
            state.spans.window(
                inst.id,
                &inst.task_id,
                &inst.window_key,
                inst.trace.as_ref(),
                task_trace(&state.pool, &state.spans, &id).await.as_ref(),
                inst.created_at,
            );
            tracing::info!(task_id = %id, window_key = %inst.window_key, instance_id = %inst.id, available_at = %format_instant(inst.available_at), "manual run created");
            StatusCode::CREATED
        }
        Triggered::Existing => {
            tracing::info!(task_id = %id, window_key = %inst.window_key, instance_id = %inst.id, reason = "window already exists", "manual run conflict");
            StatusCode::OK
        }
        Triggered::Debounced => {
            tracing::info!(task_id = %id, window_key = %inst.window_key, instance_id = %inst.id, available_at = %format_instant(inst.available_at), reason = "debounced", "manual run postponed");
            StatusCode::OK
        }
    };
    let mut body = instance_json(&inst);
    if let Some(o) = body.as_object_mut() {
        o.insert("debounced".into(), json!(what == Triggered::Debounced));
    }
    Ok((status, Json(body)).into_response())
}

async fn backfill_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let m = body_object(
        body,
        &["from", "to", "dry_run", "overlap", "reprocess", "priority"],
    )?;
    let priority = super::extract::priority_field(&m)?;
    let stamp = |key: &str| -> Result<DateTime<Utc>, ApiError> {
        match m.get(key) {
            Some(Value::String(s)) => parse_timestamp(s).ok_or_else(|| {
                ApiError::invalid(
                    key,
                    "must be an RFC 3339 timestamp, e.g. 2026-11-29T08:30:00Z",
                )
            }),
            None | Some(Value::Null) => Err(ApiError::invalid(key, "is required")),
            Some(_) => Err(ApiError::invalid(
                key,
                "must be an RFC 3339 timestamp string",
            )),
        }
    };
    let from = stamp("from")?;
    let to = stamp("to")?;
    let dry_run = match m.get("dry_run") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::invalid("dry_run", "must be a boolean")),
    };
    let overlap = match m.get("overlap") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_str().and_then(Overlap::parse).ok_or_else(|| {
            let names: Vec<&str> = Overlap::NAMES.iter().map(|(n, _)| *n).collect();
            ApiError::invalid("overlap", format!("must be one of {}", names.join(", ")))
        })?),
    };
    let reprocess = match m.get("reprocess") {
        None | Some(Value::Null) => Reprocess::None,
        Some(Value::String(s)) if s == "none" => Reprocess::None,
        Some(Value::String(s)) if s == "failed" => Reprocess::Failed,
        Some(_) => {
            return Err(ApiError::invalid(
                "reprocess",
                "must be one of none, failed",
            ));
        }
    };
    let req = Backfill {
        from,
        to,
        dry_run,
        max_windows: MAX_BACKFILL_WINDOWS,
        overlap,
        reprocess,
        priority,
    };
    let report = run_backfill(&state.pool, &state.spans, state.retention_days, &id, &req).await?;
    let mut out = json!({
        "dry_run": dry_run,
        "created": report.created,
        "existing": report.existing,
        "skipped": report.skipped,
        "cancelled": report.cancelled,
        "reprocessed": report.reprocessed,
    });
    if dry_run {
        out["windows"] = report
            .windows
            .iter()
            .map(|(k, o)| json!({"window_key": k, "outcome": o}))
            .collect();
    }
    Ok(Json(out))
}
