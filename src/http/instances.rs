//! `/v1/instances`: the operators' view of windows and their history.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Extension, Path, State};
use chrono::Utc;
use serde_json::{Value, json};
use uuid::Uuid;

use super::auth::check_instance_agent;
use super::extract::{
    CallerSpan, JsonBody, QueryParams, body_object, int_field, lease_token_field, page_limit,
    string_field,
};
use crate::domain::access::Principal;
use crate::domain::instance::{Instance, InstanceStatus};
use crate::domain::trace::TraceContext;
use crate::otel::{SpanKind, names};
use crate::problem::ApiError;
use crate::route_table::RouteTable;
use crate::state::AppState;
use crate::store::{self, events, instances as store_instances};
use crate::usecases::cursor::{cut_page, instance_cursor, parse_instance_cursor};
use crate::usecases::instances::{OperatorMove, not_found_instance, operator_move};

pub use crate::domain::task::MAX_RESULT_BYTES;
use crate::domain::task::{MAX_DOCUMENT_BYTES, MAX_REASON_LEN};
/// Longest `error` accepted in a fail body before it is cut (it is stored cut to 4 KiB).
const MAX_ERROR_INPUT: usize = MAX_DOCUMENT_BYTES;

pub fn routes(t: RouteTable) -> RouteTable {
    t.get("/v1/instances", list_instances)
        .get("/v1/instances/{id}", get_instance)
        .post("/v1/instances/{id}/heartbeat", heartbeat)
        .post("/v1/instances/{id}/complete", complete)
        .post("/v1/instances/{id}/fail", fail)
        .post("/v1/instances/{id}/retry", retry)
        .post("/v1/instances/{id}/cancel", cancel)
        .post("/v1/completions", complete_batch)
}

pub fn instance_json(i: &Instance) -> Value {
    serde_json::to_value(i).unwrap_or(Value::Null)
}

pub fn parse_instance_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::NotFound(format!("no instance with id {id:?}")))
}

async fn get_instance(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_instance_id(&id)?;
    let inst = store_instances::get_instance(&state.pool, id)
        .await
        .map_err(|e| not_found_instance(e, &id))?;
    if !principal.may_read(&inst.agent_id) {
        tracing::debug!(principal = %principal.label, instance_id = %id, task_id = %inst.task_id, reason = "another agent's instance", "read hidden");
        return Err(not_found_instance(store::Error::NotFound, &id));
    }
    let evs = events::list_events(&state.pool, id).await?;
    let mut v = instance_json(&inst);
    v["events"] = serde_json::to_value(&evs).unwrap_or(Value::Null);
    if matches!(
        inst.status,
        InstanceStatus::Pending | InstanceStatus::Failed
    ) {
        let absent =
            std::time::Duration::from_secs(state.claims.agent_absent_seconds.unsigned_abs());
        let waiting = crate::store::waiting::waiting_on(&state.pool, &inst, absent).await?;
        v["waiting_on"] = serde_json::to_value(&waiting).unwrap_or(Value::Null);
    }
    Ok(Json(v))
}

async fn list_instances(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    q.only(&[
        "task_id",
        "agent_id",
        "status",
        "window_key",
        "priority",
        "from",
        "to",
        "limit",
        "cursor",
    ])?;
    let limit = page_limit(&q)?;
    let statuses = match q.str("status") {
        None => Vec::new(),
        Some(s) => s
            .split(',')
            .map(|p| p.trim().parse::<InstanceStatus>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| ApiError::invalid("status", m))?,
    };
    let priority = match q.str("priority") {
        None => None,
        Some(_) => Some(q.int("priority", 0, 0, 9)? as i16),
    };
    let from = q.timestamp("from")?;
    let to = q.timestamp("to")?;
    if let (Some(f), Some(t)) = (from, to)
        && f > t
    {
        return Err(ApiError::invalid("to", "must not be before from"));
    }
    let filter = store_instances::InstanceFilter {
        task_id: q.str("task_id").map(str::to_owned),
        agent_id: q.str("agent_id").map(str::to_owned),
        agents_in: principal.readable_agents().map(<[String]>::to_vec),
        statuses,
        // As a trigger stores it: an instant in the schedule's own spelling.
        window_key: q.str("window_key").map(|k| {
            crate::domain::schedule::canonical_window_key(k).unwrap_or_else(|| k.to_owned())
        }),
        priority,
        from,
        to,
        before: q.str("cursor").map(parse_instance_cursor).transpose()?,
        limit: limit + 1,
    };
    let mut items = store_instances::list_instances(&state.pool, &filter).await?;
    let next_cursor = cut_page(&mut items, limit, instance_cursor);
    Ok(Json(json!({
        "items": items.iter().map(instance_json).collect::<Vec<_>>(),
        "next_cursor": next_cursor,
    })))
}

async fn heartbeat(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Instance>, ApiError> {
    let id = parse_instance_id(&id)?;
    scoped_lease_holder(&state, &principal, id).await?;
    let m = body_object(body, &["lease_token", "lease_seconds"])?;
    let token = lease_token_field(&m)?;
    let lease = int_field(
        &m,
        "lease_seconds",
        state.claims.default_lease_seconds,
        1,
        state.claims.max_lease_seconds,
    )?;
    let inst = state
        .group
        .heartbeat(store_instances::LeaseExtension {
            id,
            lease_token: token,
            lease_seconds: lease,
        })
        .await
        .map_err(|e| not_found_instance(e, &id))?;
    Ok(Json(inst))
}

async fn complete(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    CallerSpan(caller): CallerSpan,
    JsonBody(body): JsonBody,
) -> Result<Json<Instance>, ApiError> {
    // Read only when spans are exported: a report costs nothing more otherwise.
    let started = state.spans.is_on().then(Utc::now);
    let id = parse_instance_id(&id)?;
    scoped_lease_holder(&state, &principal, id).await?;
    let m = body_object(body, &["lease_token", "result"])?;
    let token = lease_token_field(&m)?;
    let result = m.get("result").filter(|v| !v.is_null());
    if let Some(r) = result {
        let size = serde_json::to_vec(r).map(|v| v.len()).unwrap_or(usize::MAX);
        if size > MAX_RESULT_BYTES {
            return Err(ApiError::TooLarge(format!(
                "result is {size} bytes serialized; at most {MAX_RESULT_BYTES} are kept. Store large outputs elsewhere and return a reference"
            )));
        }
    }
    // The actor is the lease holder, `agent:<worker_id>`, read in the same statement.
    let inst = state
        .group
        .complete(store_instances::Completion {
            id,
            lease_token: token,
            result: result.cloned(),
            actor: None,
        })
        .await
        .map_err(|e| not_found_instance(e, &id))?;
    if state.spans.is_on() {
        state.spans.attempt(
            names::COMPLETE,
            SpanKind::Server,
            &inst,
            token,
            caller.as_ref(),
            started.unwrap_or_else(Utc::now),
            Utc::now(),
            None,
        );
    }
    tracing::info!(task_id = %inst.task_id, window_key = %inst.window_key, instance_id = %inst.id, attempt = inst.attempt, "instance succeeded");
    Ok(Json(inst))
}

/// For a token limited to some agents: check it may act for the instance's agent (404 for an
/// unknown instance, 403 for another agent's). Other principals may act for any agent, and
/// the lease token decides: no lookup is spent on them.
async fn scoped_lease_holder(
    state: &AppState,
    principal: &Principal,
    id: Uuid,
) -> Result<(), ApiError> {
    if principal.agents.is_none() {
        return Ok(());
    }
    let inst = store_instances::get_instance(&state.pool, id)
        .await
        .map_err(|e| not_found_instance(e, &id))?;
    check_instance_agent(principal, id, &inst.agent_id)
}

/// Longest `retry_after_seconds` of a throttled `fail`: one day.
const MAX_RETRY_AFTER_SECONDS: i64 = 86_400;

async fn fail(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    CallerSpan(caller): CallerSpan,
    JsonBody(body): JsonBody,
) -> Result<Json<Instance>, ApiError> {
    // Read only when spans are exported: a report costs nothing more otherwise.
    let started = state.spans.is_on().then(Utc::now);
    let id = parse_instance_id(&id)?;
    scoped_lease_holder(&state, &principal, id).await?;
    let m = body_object(
        body,
        &[
            "lease_token",
            "error",
            "retryable",
            "retry_at_once",
            "retry_after_seconds",
            "hold_limit",
        ],
    )?;
    let token = lease_token_field(&m)?;
    let error = string_field(&m, "error", true, MAX_ERROR_INPUT)?.unwrap_or_default();
    let flag = |name: &str, default: bool| match m.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(name, "must be a boolean")),
    };
    let retryable = flag("retryable", true)?;
    // An agent giving an attempt back (shutting down, say) rather than failing it: the retry
    // may start at once instead of after the task's backoff. A failure that is not retried
    // (`retryable: false`, or no attempts left) has no retry to hurry, so it changes nothing.
    let retry_at_once = flag("retry_at_once", false)?;
    // A quota refused the attempt (an HTTP 429): it waits as PENDING, its attempt unspent.
    let throttle_seconds = match m.get("retry_after_seconds") {
        None | Some(Value::Null) => None,
        Some(_) => Some(int_field(
            &m,
            "retry_after_seconds",
            1,
            1,
            MAX_RETRY_AFTER_SECONDS,
        )?),
    };
    // Hold the limit (for this instance's key) until the same instant: checked before
    // anything is written, so a refused fail leaves the instance RUNNING under its lease.
    let mut throttle_until = None;
    if let Some(name) = string_field(&m, "hold_limit", false, 128)? {
        let Some(seconds) = throttle_seconds else {
            return Err(ApiError::invalid(
                "hold_limit",
                "needs retry_after_seconds: the limit is held until the same instant",
            ));
        };
        let key = crate::store::limits::instance_draw(&state.pool, id, &name)
            .await
            .map_err(|e| not_found_instance(e, &id))?;
        let Some(key) = key else {
            return Err(ApiError::invalid(
                "hold_limit",
                format!("the instance draws on no limit named {name:?}"),
            ));
        };
        // Without the lease, nothing is held and the fail below answers 409 (or as before,
        // for a repeat that landed). The retry comes back the instant the hold asked to end.
        throttle_until = crate::usecases::limits::hold_for_attempt(
            &state.pool,
            (id, token),
            &name,
            &key,
            seconds,
            &error,
        )
        .await?;
    }
    let inst = state
        .group
        .fail(store_instances::FailureReport {
            id,
            lease_token: token,
            error,
            retryable,
            retry_at_once,
            error_kind: "agent",
            actor: None,
            throttle_seconds,
            throttle_until,
        })
        .await
        .map_err(|e| not_found_instance(e, &id))?;
    if state.spans.is_on() {
        state.spans.attempt(
            names::FAIL,
            SpanKind::Server,
            &inst,
            token,
            caller.as_ref(),
            started.unwrap_or_else(Utc::now),
            Utc::now(),
            Some(inst.error.clone().unwrap_or_default()),
        );
    }
    if throttle_seconds.is_some() {
        metrics::counter!("kairos_throttled_total").increment(1);
        tracing::info!(task_id = %inst.task_id, window_key = %inst.window_key, instance_id = %inst.id, attempt = inst.attempt, available_at = %inst.available_at, reason = %inst.error.as_deref().unwrap_or(""), "instance throttled; its attempt is not spent");
    } else {
        tracing::info!(task_id = %inst.task_id, window_key = %inst.window_key, instance_id = %inst.id, attempt = inst.attempt, status = %inst.status, retryable, retry_at_once, reason = %inst.error.as_deref().unwrap_or(""), "instance failed");
    }
    Ok(Json(inst))
}

fn reason_of(body: Value, default: &str) -> Result<String, ApiError> {
    let m = body_object(body, &["reason"])?;
    Ok(string_field(&m, "reason", false, MAX_REASON_LEN)?.unwrap_or_else(|| default.to_owned()))
}

async fn operator_action(
    state: &AppState,
    id: &str,
    body: Value,
    what: OperatorMove,
) -> Result<Json<Value>, ApiError> {
    let id = parse_instance_id(id)?;
    let (reason, priority) = match what {
        OperatorMove::Retry => {
            let m = body_object(body, &["reason", "priority"])?;
            let reason = string_field(&m, "reason", false, MAX_REASON_LEN)?
                .unwrap_or_else(|| what.default_reason().to_owned());
            (reason, super::extract::priority_field(&m)?)
        }
        OperatorMove::Cancel => (reason_of(body, what.default_reason())?, None),
    };
    let inst = operator_move(&state.pool, id, what, &reason, priority).await?;
    Ok(Json(instance_json(&inst)))
}

async fn retry(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    operator_action(&state, &id, body, OperatorMove::Retry).await
}

async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    operator_action(&state, &id, body, OperatorMove::Cancel).await
}

/// Most completions in one `POST /v1/completions`.
pub const MAX_COMPLETIONS_PER_CALL: usize = 500;

/// The answer to `POST /v1/completions`: one result per item, in order.
#[derive(serde::Serialize)]
struct BatchBody {
    results: Vec<BatchItem>,
}

/// One item's outcome: the instance written, or why the compare-and-swap missed.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum BatchItem {
    Done {
        id: Uuid,
        status: u16,
        instance: Box<Instance>,
    },
    Refused {
        id: Uuid,
        status: u16,
        detail: String,
    },
}

/// Complete many instances in one request and one database commit. Each item is its own
/// compare-and-swap, answered on its own (openapi.yaml): `200` with the instance, `409` for a
/// stale lease, `404` for an unknown instance, `403` for an instance of an agent the token may
/// not act for. An instance listed several times gets each of its items tried in order, as
/// successive single completes would be.
async fn complete_batch(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    CallerSpan(trace): CallerSpan,
    JsonBody(body): JsonBody,
) -> Result<Json<BatchBody>, ApiError> {
    // Read only when spans are exported: a report costs nothing more otherwise.
    let started = state.spans.is_on().then(Utc::now);
    let m = body_object(body, &["completions"])?;
    let Some(Value::Array(list)) = m.get("completions") else {
        return Err(ApiError::invalid(
            "completions",
            "is required: an array of {id, lease_token, result?}",
        ));
    };
    if list.is_empty() || list.len() > MAX_COMPLETIONS_PER_CALL {
        return Err(ApiError::invalid(
            "completions",
            format!("must hold 1 to {MAX_COMPLETIONS_PER_CALL} items"),
        ));
    }
    let mut items = Vec::with_capacity(list.len());
    let mut item_traces: Vec<Option<TraceContext>> = Vec::with_capacity(list.len());
    for (n, raw) in list.iter().enumerate() {
        let field = |f: &str| format!("completions[{n}].{f}");
        let Value::Object(o) = raw else {
            return Err(ApiError::invalid(
                format!("completions[{n}]"),
                "must be an object",
            ));
        };
        if let Some(k) = o
            .keys()
            .find(|k| !["id", "lease_token", "result", "traceparent"].contains(&k.as_str()))
        {
            return Err(ApiError::invalid(field(k), "unknown field"));
        }
        let id = o
            .get("id")
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
            .ok_or_else(|| ApiError::invalid(field("id"), "must be an instance id (UUID)"))?;
        let lease_token = o
            .get("lease_token")
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
            .ok_or_else(|| {
                ApiError::invalid(field("lease_token"), "must be the UUID a claim returned")
            })?;
        let result = o.get("result").filter(|v| !v.is_null()).cloned();
        if let Some(r) = &result {
            let size = serde_json::to_vec(r).map(|v| v.len()).unwrap_or(usize::MAX);
            if size > MAX_RESULT_BYTES {
                return Err(ApiError::TooLarge(format!(
                    "completions[{n}].result is {size} bytes serialized; at most {MAX_RESULT_BYTES} are kept"
                )));
            }
        }
        // The agent's span for this item: a string (another type is refused, as the schema
        // says); like the header, a string that is no valid traceparent is ignored.
        if o.get("traceparent").is_some_and(|t| !t.is_string()) {
            return Err(ApiError::invalid(
                field("traceparent"),
                "must be a string (a W3C traceparent)",
            ));
        }
        item_traces.push(if state.spans.is_on() {
            o.get("traceparent")
                .and_then(Value::as_str)
                .and_then(|t| TraceContext::parse(t, None))
        } else {
            None
        });
        items.push(store_instances::Completion {
            id,
            lease_token,
            result,
            actor: None,
        });
    }
    // Before any write: the instances of agents the token may not act for.
    let mut refused: HashMap<Uuid, ApiError> = HashMap::new();
    if !principal.may_act_for_all() {
        let ids: Vec<Uuid> = items.iter().map(|c| c.id).collect();
        for (id, agent) in store_instances::agents_of(&state.pool, &ids).await? {
            if let Err(e) = check_instance_agent(&principal, id, &agent) {
                refused.insert(id, e);
            }
        }
    }
    // Each item is its own compare-and-swap, in request order: an instance listed several
    // times is written in passes, its n-th item in the n-th, so a later item meets the instance
    // as the earlier ones left it (a second complete after a success is a 409; a later item
    // holding the current token succeeds after an earlier stale one).
    let ids: Vec<Uuid> = items.iter().map(|c| c.id).collect();
    let mut answers: Vec<Option<BatchItem>> = ids.iter().map(|_| None).collect();
    let mut passes: Vec<Vec<(usize, store_instances::Completion)>> = Vec::new();
    let mut seen: HashMap<Uuid, usize> = HashMap::new();
    for (n, c) in items.into_iter().enumerate() {
        if let Some(e) = refused.get(&c.id) {
            answers[n] = Some(refused_item(c.id, e));
            continue;
        }
        let pass = seen.entry(c.id).or_insert(0);
        if *pass == passes.len() {
            passes.push(Vec::new());
        }
        passes[*pass].push((n, c));
        *pass += 1;
    }
    for pass in passes {
        let (at, batch): (Vec<usize>, Vec<store_instances::Completion>) = pass.into_iter().unzip();
        let tokens: Vec<Uuid> = batch.iter().map(|c| c.lease_token).collect();
        // One answer per item, in order.
        let outcomes = state.group.complete_all(batch).await?;
        for ((n, outcome), token) in at.into_iter().zip(outcomes).zip(tokens) {
            let id = ids[n];
            if let Ok(instance) = &outcome {
                let parent = item_traces.get(n).and_then(Option::as_ref);
                state.spans.attempt(
                    names::COMPLETE,
                    SpanKind::Server,
                    instance,
                    token,
                    parent.or(trace.as_ref()),
                    started.unwrap_or_else(Utc::now),
                    Utc::now(),
                    None,
                );
            }
            answers[n] = Some(match outcome {
                Ok(instance) => BatchItem::Done {
                    id,
                    status: 200,
                    instance: Box::new(instance),
                },
                Err(e) => refused_item(id, &not_found_instance(e, &id)),
            });
        }
    }
    let results: Vec<BatchItem> = answers.into_iter().flatten().collect();
    Ok(Json(BatchBody { results }))
}

fn refused_item(id: Uuid, e: &ApiError) -> BatchItem {
    BatchItem::Refused {
        id,
        status: e.status().as_u16(),
        detail: e.detail(),
    }
}
