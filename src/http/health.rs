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
/// The metrics in Prometheus' text format. A token limited to some agents sees the series of
/// those agents only (`kairos_agent_last_claim_seconds` is the one labelled by agent), as it
/// sees only their tasks and instances.
async fn metrics(principal: Option<axum::Extension<crate::domain::access::Principal>>) -> Response {
    match crate::telemetry::metrics_handle() {
        Some(h) => {
            let text = h.render();
            let agents = principal.as_ref().and_then(|p| p.0.readable_agents());
            let body = match agents {
                Some(agents) => visible_to(&text, agents),
                None => text,
            };
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder unavailable",
        )
            .into_response(),
    }
}

/// The lines of a metrics page `agents` may see: every line but the samples whose `agent_id`
/// label names another agent.
fn visible_to(text: &str, agents: &[String]) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let hidden =
            !line.starts_with('#') && agent_label(line).is_some_and(|a| !agents.contains(&a));
        if !hidden {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The value of a sample line's `agent_id` label, unescaped (`\\`, `\"`, `\n`).
fn agent_label(line: &str) -> Option<String> {
    let labels = &line[line.find('{')? + 1..];
    let start = labels
        .match_indices("agent_id=\"")
        .find(|(i, _)| *i == 0 || labels[..*i].ends_with(','))?
        .0
        + "agent_id=\"".len();
    let mut value = String::new();
    let mut chars = labels[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => match chars.next()? {
                'n' => value.push('\n'),
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    None
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_limited_to_agents_sees_only_their_agent_series() {
        let page = "# HELP kairos_agent_last_claim_seconds x\n\
# TYPE kairos_agent_last_claim_seconds gauge\n\
kairos_agent_last_claim_seconds{agent_id=\"agent_a\"} 3\n\
kairos_agent_last_claim_seconds{agent_id=\"agent_b\"} 4\n\
kairos_agent_last_claim_seconds{other=\"1\",agent_id=\"a\\\"b\"} 5\n\
kairos_limit_in_use{limit=\"openai\"} 2\n\
kairos_claims_total{outcome=\"empty\"} 7\n";
        let seen = visible_to(page, &["agent_a".to_owned()]);
        assert!(seen.contains("agent_id=\"agent_a\"} 3"));
        assert!(!seen.contains("agent_b"));
        assert!(!seen.contains("} 5"));
        assert!(seen.contains("# TYPE kairos_agent_last_claim_seconds gauge"));
        assert!(seen.contains("kairos_limit_in_use{limit=\"openai\"} 2"));
        assert!(seen.contains("kairos_claims_total{outcome=\"empty\"} 7"));
        let quoted = visible_to(page, &["a\"b".to_owned()]);
        assert!(quoted.contains("} 5") && !quoted.contains("} 3"));
        // A label that merely ends in agent_id is not the agent's.
        assert_eq!(agent_label("m{not_agent_id=\"x\"} 1"), None);
    }
}
