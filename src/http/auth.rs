//! Bearer-token authentication and role checks, as one middleware in front of every route but
//! `/healthz` and `/readyz`. The principal is put in the request's extensions; handlers that
//! know the agent id involved (claims, instance writes) check `Principal::may_act_for`.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;
use crate::domain::access::{Principal, action_of, allows};

/// Routes anyone may call: liveness and readiness probes carry no token.
fn is_public(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz")
}

fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn unauthorized(detail: &str) -> Response {
    let mut resp = ApiError::Unauthorized(detail.to_owned()).into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"kairos\""),
    );
    resp
}

pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if is_public(&path) {
        return next.run(req).await;
    }
    let principal = if state.tokens.is_empty() {
        Principal::open()
    } else {
        let Some(token) = bearer(&req) else {
            return unauthorized("an Authorization: Bearer <token> header is required");
        };
        match state.tokens.authenticate(token) {
            Some(p) => p,
            None => {
                tracing::warn!(method = %req.method(), path = %path, reason = "unknown token", "request refused");
                return unauthorized("the bearer token is not valid");
            }
        }
    };
    let action = action_of(req.method().as_str(), &path);
    if !allows(principal.role, action) {
        tracing::warn!(principal = %principal.label, method = %req.method(), path = %path, reason = "role does not allow this", "request forbidden");
        return ApiError::Forbidden(format!(
            "a {} token may not {} {}",
            principal.role.as_str(),
            req.method(),
            path
        ))
        .into_response();
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}

/// Refuse a principal acting for another agent's work.
pub fn check_agent(principal: &Principal, agent_id: &str) -> Result<(), ApiError> {
    if principal.may_act_for(agent_id) {
        Ok(())
    } else {
        tracing::warn!(principal = %principal.label, agent_id = %agent_id, reason = "token not valid for this agent", "request forbidden");
        Err(ApiError::Forbidden(format!(
            "this token may not act for agent {agent_id:?}"
        )))
    }
}
