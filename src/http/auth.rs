//! Bearer-token authentication and role checks, as one middleware in front of every route but
//! `/healthz` and `/readyz`. The principal is put in the request's extensions; handlers that
//! know the agent id involved (claims, instance writes) check `Principal::may_act_for`.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::extract::{is_json, media_type};
use crate::domain::access::{Principal, action_of, allows};
use crate::problem::ApiError;
use crate::state::AppState;
use crate::usecases::access::open_mode_addressing;

/// Routes this middleware lets through: liveness and readiness probes carry no token, and the
/// console (`/ui/…`) authenticates with its own cookie session.
fn is_public(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/ui") || path.starts_with("/ui/")
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
        if let Err(e) = open_mode_check(&req) {
            tracing::warn!(method = %req.method(), path = %path, reason = %e.detail(), "request refused (open mode)");
            return e.into_response();
        }
        Principal::open()
    } else {
        // Two credentials are no credential: which one a proxy or a client meant is unknown.
        if req.headers().get_all(header::AUTHORIZATION).iter().count() > 1 {
            tracing::warn!(method = %req.method(), path = %path, reason = "several Authorization headers", "request refused");
            return unauthorized("send exactly one Authorization: Bearer <token> header");
        }
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
            "{} {} token may not {} {}",
            crate::domain::text::article(principal.role.as_str()),
            principal.role.as_str(),
            req.method(),
            path
        ))
        .into_response();
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}

/// Without tokens anyone who can reach the port is an admin, so kairos listens on loopback only
/// and refuses what a web page could make a browser send there: a `Host` that is not a loopback
/// name or address (DNS rebinding: 421), an `Origin` that is not loopback (cross-site requests:
/// 403), and a body that is not JSON (HTML forms: 415).
fn open_mode_check(req: &Request) -> Result<(), ApiError> {
    let headers = req.headers();
    open_mode_addressing(headers)?;
    let has_body = headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || headers.contains_key(header::TRANSFER_ENCODING);
    let content_type = headers.get(header::CONTENT_TYPE);
    if has_body || content_type.is_some() {
        let mime = content_type.map(media_type).unwrap_or_default();
        if !is_json(&mime) {
            return Err(ApiError::UnsupportedMediaType(format!(
                "without auth_tokens a request body must be sent as content-type application/json, not {mime:?}"
            )));
        }
    }
    Ok(())
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

/// Like [`check_agent`], for a write to instance `id` of `agent_id`: the refusal does not name
/// the agent, which the token may not read (openapi.yaml, scoped reads).
pub fn check_instance_agent(
    principal: &Principal,
    id: uuid::Uuid,
    agent_id: &str,
) -> Result<(), ApiError> {
    if principal.may_act_for(agent_id) {
        Ok(())
    } else {
        tracing::warn!(principal = %principal.label, agent_id = %agent_id, instance_id = %id, reason = "token not valid for the instance's agent", "request forbidden");
        Err(ApiError::Forbidden(format!(
            "instance {id} belongs to an agent this token may not act for"
        )))
    }
}
