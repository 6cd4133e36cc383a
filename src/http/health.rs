//! Liveness, readiness, metrics and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::route_table::RouteTable;
use crate::state::AppState;
use crate::store;

/// The API description, served as written in the repository.
pub const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

pub fn routes(t: RouteTable) -> RouteTable {
    t.get("/healthz", healthz)
        .get("/readyz", readyz)
        .get("/metrics", metrics)
        .get("/openapi.yaml", openapi)
}

/// The process is up and serving HTTP.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// How long `/readyz` waits for the database before it reports it unreachable.
const READY_DB_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// The database answers, every migration is applied, and every loop ticked recently.
async fn readyz(State(state): State<AppState>) -> Response {
    let mut problems = Vec::new();
    let database = if let Some((for_how_long, _why)) = state.db_health.unreachable() {
        // The reason (host names, server messages) goes to the log, not to this caller.
        problems.push(format!(
            "database unreachable for {:.1} s",
            for_how_long.as_secs_f64()
        ));
        "unreachable".to_owned()
    } else {
        match state
            .db_health
            .within(READY_DB_CHECK, store::migrations_applied(&state.pool))
            .await
            .unwrap_or(Err(store::Error::Db(sqlx::Error::PoolTimedOut)))
        {
            Ok(true) => "ok".to_owned(),
            Ok(false) => {
                problems.push("migrations are not all applied".to_owned());
                "migrations pending".to_owned()
            }
            Err(e) => {
                // The detail (host names, roles, server messages) goes to the log, not to an
                // unauthenticated caller.
                tracing::warn!(error = %crate::services::error_chain(&e), "readiness: database unreachable");
                problems.push("database unreachable".to_owned());
                "unreachable".to_owned()
            }
        }
    };
    if state.shutdown.is_cancelled() {
        // Draining: still answering, but load balancers should send new work elsewhere.
        problems.push("shutting down: this replica takes no new work".to_owned());
    }
    let stale = state.heartbeats.stale();
    for (name, age) in &stale {
        problems.push(format!("{name} loop has not ticked for {age:.1} s"));
    }
    let loops: serde_json::Map<String, serde_json::Value> = state
        .heartbeats
        .names()
        .into_iter()
        .map(|n| {
            let ok = !stale.iter().any(|(s, _)| *s == n);
            (n.to_owned(), json!(if ok { "ok" } else { "stale" }))
        })
        .collect();
    let status = if problems.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({
            "status": if problems.is_empty() { "ready" } else { "not ready" },
            "node_id": state.node_id,
            "database": database,
            "loops": loops,
            "problems": problems,
        })),
    )
        .into_response()
}

/// Prometheus text exposition of every kairos metric.
async fn metrics() -> Response {
    match crate::telemetry::metrics_handle() {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder unavailable",
        )
            .into_response(),
    }
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML).into_response()
}
