//! `/v1/instances`: the operators' view of windows and their history.

use axum::Json;
use axum::extract::{Path, State};
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{QueryParams, decode_cursor, encode_cursor, page_limit};
use super::{AppState, RouteTable};
use crate::domain::instance::{Instance, InstanceStatus};
use crate::store::{self, events, instances as store_instances};

pub fn routes(t: RouteTable) -> RouteTable {
    t.add("get", "/v1/instances", get(list_instances)).add(
        "get",
        "/v1/instances/{id}",
        get(get_instance),
    )
}

pub fn instance_json(i: &Instance) -> Value {
    serde_json::to_value(i).unwrap_or(Value::Null)
}

pub fn parse_instance_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::NotFound(format!("no instance with id {id:?}")))
}

fn not_found_instance(e: store::Error, id: &Uuid) -> ApiError {
    match e {
        store::Error::NotFound => ApiError::NotFound(format!("no instance with id {id}")),
        other => other.into(),
    }
}

async fn get_instance(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_instance_id(&id)?;
    let inst = store_instances::get_instance(&state.pool, id)
        .await
        .map_err(|e| not_found_instance(e, &id))?;
    let evs = events::list_events(&state.pool, id).await?;
    let mut v = instance_json(&inst);
    v["events"] = serde_json::to_value(&evs).unwrap_or(Value::Null);
    Ok(Json(v))
}

fn parse_cursor(raw: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let bad = || ApiError::invalid("cursor", "is not a cursor this server issued");
    let text = decode_cursor(raw)?;
    let (micros, id) = text.split_once('|').ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    let at = DateTime::<Utc>::from_timestamp_micros(micros).ok_or_else(bad)?;
    let id = Uuid::parse_str(id).map_err(|_| bad())?;
    Ok((at, id))
}

async fn list_instances(
    State(state): State<AppState>,
    q: QueryParams,
) -> Result<Json<Value>, ApiError> {
    q.only(&[
        "task_id",
        "status",
        "window_key",
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
    let from = q.timestamp("from")?;
    let to = q.timestamp("to")?;
    if let (Some(f), Some(t)) = (from, to)
        && f > t
    {
        return Err(ApiError::invalid("to", "must not be before from"));
    }
    let filter = store_instances::InstanceFilter {
        task_id: q.str("task_id").map(str::to_owned),
        statuses,
        window_key: q.str("window_key").map(str::to_owned),
        from,
        to,
        before: q.str("cursor").map(parse_cursor).transpose()?,
        limit: limit + 1,
    };
    let mut items = store_instances::list_instances(&state.pool, &filter).await?;
    let next_cursor = if items.len() as i64 > limit {
        items.truncate(limit as usize);
        items
            .last()
            .map(|i| encode_cursor(&format!("{}|{}", i.scheduled_at.timestamp_micros(), i.id)))
    } else {
        None
    };
    Ok(Json(json!({
        "items": items.iter().map(instance_json).collect::<Vec<_>>(),
        "next_cursor": next_cursor,
    })))
}
