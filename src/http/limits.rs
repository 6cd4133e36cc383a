//! `/v1/limits`: shared budgets of concurrency and rate, declared like tasks, with their live
//! usage, and holds (an operator's, or an agent's after a 429).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::extract::{JsonBody, QueryParams, body_object, int_field, page_limit, string_field};
use crate::domain::limit::{MAX_HOLD_SECONDS, MAX_KEY_LEN, Rate, micros, parse_limit};
use crate::domain::schedule::format_instant;
use crate::domain::task::{MAX_REASON_LEN, TaskId};
use crate::problem::ApiError;
use crate::route_table::RouteTable;
use crate::state::AppState;
use crate::store::{self, limits as store_limits};
use crate::usecases::cursor::{cut_page, decode_cursor, encode_cursor};
use crate::usecases::limits::{self as limits_usecase, HoldRequest, not_found_limit};

pub fn routes(t: RouteTable) -> RouteTable {
    t.put("/v1/limits/{name}", put_limit)
        .get("/v1/limits/{name}", get_limit)
        .delete("/v1/limits/{name}", delete_limit)
        .get("/v1/limits", list_limits)
        .post("/v1/limits/{name}/hold", hold_limit)
        .post("/v1/limits/{name}/release", release_limit)
}

fn valid_name(name: &str) -> Result<(), ApiError> {
    TaskId::parse(name)
        .map(|_| ())
        .map_err(|m| ApiError::invalid("name", m.replace("task id", "limit name")))
}

fn rate_json(r: &Rate) -> Value {
    json!({"count": r.count, "per_seconds": r.per_seconds, "burst": r.burst})
}

/// A limit with its live usage. For a limit without `per_key`, `running`, `available_rate` and
/// `held_until` are its one budget's; for a `per_key` limit, `running` is the sum over its
/// keys, and `keys` lists the busiest keys with their own numbers.
async fn limit_view(state: &AppState, l: &store_limits::Limit) -> Result<Value, ApiError> {
    let usage = crate::usecases::limits::usage(&state.pool, &l.name).await?;
    let now = micros(usage.now);
    let available = |tat: Option<chrono::DateTime<chrono::Utc>>| {
        l.spec.rate.map(|r| r.available(tat.map(micros), now))
    };
    let mut v = json!({
        "name": l.name,
        "version": l.version,
        "per_key": l.spec.per_key,
        "running": usage.running,
        "created_at": format_instant(l.created_at),
        "updated_at": format_instant(l.updated_at),
    });
    if let Some(c) = l.spec.concurrency {
        v["concurrency"] = json!(c);
    }
    if let Some(r) = &l.spec.rate {
        v["rate"] = rate_json(r);
    }
    if l.spec.per_key {
        v["available_rate"] = Value::Null;
        v["held_until"] = Value::Null;
        v["held_reason"] = Value::Null;
        v["keys"] = usage
            .keys
            .iter()
            .map(|k| {
                json!({
                    "key": k.key,
                    "running": k.running,
                    "available_rate": available(k.tat),
                    "held_until": k.held_until.map(format_instant),
                    "held_reason": k.held_reason,
                })
            })
            .collect();
    } else {
        let one = usage.keys.iter().find(|k| k.key.is_empty());
        v["available_rate"] = json!(available(one.and_then(|k| k.tat)));
        v["held_until"] = json!(one.and_then(|k| k.held_until).map(format_instant));
        v["held_reason"] = json!(one.and_then(|k| k.held_reason.clone()));
    }
    Ok(v)
}

fn with_etag(status: StatusCode, view: Value, version: i64) -> Response {
    let mut resp = (status, Json(view)).into_response();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{version}\"")) {
        resp.headers_mut().insert(header::ETAG, etag);
    }
    resp
}

/// `If-Match: 3`, `"3"` or `*` (the limit must exist).
fn if_match(headers: &HeaderMap) -> Result<Option<Option<i64>>, ApiError> {
    let Some(raw) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let s = raw.to_str().unwrap_or("").trim();
    if s == "*" {
        return Ok(Some(None));
    }
    s.trim_matches('"')
        .parse::<i64>()
        .map(|v| Some(Some(v)))
        .map_err(|_| {
            ApiError::PreconditionFailed(format!(
                "If-Match must be a limit version such as \"3\", not {s:?}"
            ))
        })
}

async fn put_limit(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    valid_name(&name)?;
    if body.is_null() {
        return Err(ApiError::Malformed(
            "a JSON limit definition is required".to_owned(),
        ));
    }
    let spec = parse_limit(&body).map_err(ApiError::Invalid)?;
    if let Some(Value::String(n)) = body.get("name")
        && n != &name
    {
        return Err(ApiError::invalid(
            "name",
            "must equal the name in the URL path",
        ));
    }
    let expected = match if_match(&headers)? {
        None => None,
        Some(Some(v)) => Some(v),
        Some(None) => match store_limits::get_limit(&state.pool, &name).await {
            Ok(l) => Some(l.version),
            Err(store::Error::NotFound) => {
                return Err(ApiError::PreconditionFailed(
                    "If-Match: * but the limit does not exist".to_owned(),
                ));
            }
            Err(e) => return Err(e.into()),
        },
    };
    let (outcome, limit) = store_limits::upsert_limit(&state.pool, &name, &spec, expected).await?;
    let status = match outcome {
        store_limits::Upserted::Created => {
            tracing::info!(limit = %name, concurrency = ?spec.concurrency, rate = ?spec.rate, per_key = spec.per_key, "limit created");
            StatusCode::CREATED
        }
        store_limits::Upserted::Replaced => {
            tracing::info!(limit = %name, version = limit.version, concurrency = ?spec.concurrency, rate = ?spec.rate, per_key = spec.per_key, "limit replaced");
            StatusCode::OK
        }
        store_limits::Upserted::Unchanged => StatusCode::OK,
    };
    let view = limit_view(&state, &limit).await?;
    Ok(with_etag(status, view, limit.version))
}

async fn get_limit(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let limit = store_limits::get_limit(&state.pool, &name)
        .await
        .map_err(|e| not_found_limit(e, &name))?;
    let view = limit_view(&state, &limit).await?;
    Ok(with_etag(StatusCode::OK, view, limit.version))
}

/// `GET /v1/limits?limit=&cursor=`: one page of limits by name, each with its live usage;
/// `next_cursor` names the next page (null on the last).
async fn list_limits(
    State(state): State<AppState>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    q.only(&["limit", "cursor"])?;
    let limit = page_limit(&q)?;
    let after = q.str("cursor").map(decode_cursor).transpose()?;
    let mut limits = store_limits::list_limits(&state.pool, after.as_deref(), limit + 1).await?;
    let next_cursor = cut_page(&mut limits, limit, |l| encode_cursor(&l.name));
    let mut items = Vec::with_capacity(limits.len());
    for l in &limits {
        items.push(limit_view(&state, l).await?);
    }
    Ok(Json(json!({ "items": items, "next_cursor": next_cursor })))
}

async fn delete_limit(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    store_limits::delete_limit(&state.pool, &name)
        .await
        .map_err(|e| not_found_limit(e, &name))?;
    tracing::info!(limit = %name, "limit deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/limits/{name}/hold {"seconds", "key"?, "reason"?}`: nothing starts on the limit
/// (on that key, for a per_key limit) until now + seconds.
async fn hold_limit(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let m = body_object(body, &["seconds", "key", "reason"])?;
    if m.get("seconds").is_none_or(Value::is_null) {
        return Err(ApiError::invalid("seconds", "is required"));
    }
    let seconds = int_field(&m, "seconds", 1, 1, MAX_HOLD_SECONDS)?;
    let req = HoldRequest {
        seconds,
        key: string_field(&m, "key", false, MAX_KEY_LEN)?,
        reason: string_field(&m, "reason", false, MAX_REASON_LEN)?,
    };
    let (limit, _) = limits_usecase::hold(&state.pool, &name, req, "api").await?;
    let view = limit_view(&state, &limit).await?;
    Ok(with_etag(StatusCode::OK, view, limit.version))
}

/// `POST /v1/limits/{name}/release {"key"?}`: lift the hold of that key (every hold of the
/// limit when no key is given).
async fn release_limit(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let m = body_object(body, &["key"])?;
    let key = string_field(&m, "key", false, MAX_KEY_LEN)?;
    let (limit, _) = limits_usecase::release(&state.pool, &name, key.as_deref(), "api").await?;
    let view = limit_view(&state, &limit).await?;
    Ok(with_etag(StatusCode::OK, view, limit.version))
}
