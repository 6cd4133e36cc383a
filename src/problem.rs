//! `ApiError`: every failure a request can end in, API call or console page, with its HTTP
//! status and client-facing detail; the API renders it once as `application/problem+json`
//! (`type, title, status, detail`, plus `errors: [{field, message}]` for validation), the
//! console as a page. Server errors are opaque to the client and logged in full.
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::domain::task::FieldError;
use crate::store;

#[derive(Debug)]
pub enum ApiError {
    /// 400: the body is not JSON, or not the JSON shape at all.
    Malformed(String),
    /// 401: no or an unknown bearer token.
    Unauthorized(String),
    /// 403: the token's role or agent list does not allow this.
    Forbidden(String),
    /// 404.
    NotFound(String),
    /// 405.
    MethodNotAllowed(String),
    /// 409: a conflict, a stale fence or an illegal transition.
    Conflict(String),
    /// 408: the request did not finish within `http_request_timeout_seconds`.
    RequestTimeout(String),
    /// 412: `If-Match` named another version.
    PreconditionFailed(String),
    /// 413.
    TooLarge(String),
    /// 415.
    UnsupportedMediaType(String),
    /// 421: in open mode, a `Host` that is not a loopback name or address.
    MisdirectedRequest(String),
    /// 422: values that parse but are not allowed.
    Invalid(Vec<FieldError>),
    /// 429 with `Retry-After`: a per-process limit (long-poll waiters) is reached.
    TooManyRequests { detail: String, retry_after_s: u64 },
    /// 503 with `Retry-After`: this replica is shutting down and takes no new work.
    ShuttingDown(String),
    /// 503 with `Retry-After`: the database is unavailable (or the transaction lost a race).
    Unavailable(String),
    /// 500: logged, never detailed to the client.
    Internal(String),
}

/// `Retry-After` of a claim refused during shutdown: another replica can take it at once.
pub const SHUTDOWN_RETRY_AFTER_S: u64 = 1;
/// `Retry-After` while the database is unavailable: the watch probes it several times a second.
pub const UNAVAILABLE_RETRY_AFTER_S: u64 = 1;

impl ApiError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Invalid(vec![FieldError::new(field, message)])
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// The client-facing detail (opaque for server errors).
    pub fn detail(&self) -> String {
        match self {
            ApiError::Invalid(errors) => errors
                .iter()
                .map(|e| {
                    if e.field.is_empty() {
                        e.message.clone()
                    } else {
                        format!("{}: {}", e.field, e.message)
                    }
                })
                .collect::<Vec<_>>()
                .join("; "),
            ApiError::Internal(_) => "the server failed; the error was logged".to_owned(),
            ApiError::Unavailable(_) => "the database is unavailable; retry later".to_owned(),
            ApiError::Malformed(m)
            | ApiError::NotFound(m)
            | ApiError::Unauthorized(m)
            | ApiError::Forbidden(m)
            | ApiError::MethodNotAllowed(m)
            | ApiError::Conflict(m)
            | ApiError::PreconditionFailed(m)
            | ApiError::TooLarge(m)
            | ApiError::UnsupportedMediaType(m)
            | ApiError::RequestTimeout(m)
            | ApiError::MisdirectedRequest(m)
            | ApiError::ShuttingDown(m)
            | ApiError::TooManyRequests { detail: m, .. } => m.clone(),
        }
    }

    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            ApiError::Malformed(_) => (
                StatusCode::BAD_REQUEST,
                "malformed-request",
                "Malformed request",
            ),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not-found", "Not found"),
            ApiError::MethodNotAllowed(_) => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
            ),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict", "Conflict"),
            ApiError::PreconditionFailed(_) => (
                StatusCode::PRECONDITION_FAILED,
                "version-mismatch",
                "Version mismatch",
            ),
            ApiError::TooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "too-large",
                "Payload too large",
            ),
            ApiError::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type",
            ),
            ApiError::RequestTimeout(_) => (
                StatusCode::REQUEST_TIMEOUT,
                "request-timeout",
                "Request timeout",
            ),
            ApiError::MisdirectedRequest(_) => (
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected-request",
                "Misdirected request",
            ),
            ApiError::TooManyRequests { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "too-many-requests",
                "Too many requests",
            ),
            ApiError::ShuttingDown(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting-down",
                "Shutting down",
            ),
            ApiError::Invalid(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "validation-failed",
                "Invalid request values",
            ),
            ApiError::Unavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "Service unavailable",
            ),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal server error",
            ),
        }
    }
}

impl From<store::Error> for ApiError {
    fn from(e: store::Error) -> Self {
        match e {
            store::Error::NotFound => ApiError::NotFound("no such resource".to_owned()),
            store::Error::Conflict(m) | store::Error::Stale(m) => ApiError::Conflict(m),
            store::Error::VersionMismatch { current } => ApiError::PreconditionFailed(format!(
                "If-Match does not match the current version {current}"
            )),
            store::Error::Invalid(fe) => ApiError::Invalid(vec![fe]),
            store::Error::Fenced {
                instance_id,
                task_id,
                window_key,
                attempt,
                status,
            } => {
                metrics::counter!("kairos_fence_rejections_total").increment(1);
                tracing::warn!(
                    %instance_id,
                    %task_id,
                    %window_key,
                    attempt,
                    status = %status,
                    reason = "lease token does not match a running lease",
                    "fence rejection"
                );
                ApiError::Conflict(format!(
                    "stale lease: instance {instance_id} (task {task_id}, window {window_key}) is {status} at attempt {attempt}; \
                     this lease token no longer holds it"
                ))
            }
            store::Error::Illegal {
                instance_id,
                status,
            } => ApiError::Conflict(format!(
                "instance {instance_id} is {status}; that transition is not allowed from {status}"
            )),
            // Every `sqlx::Error` becomes a `store::Error` through `map_db_error` (a bare `?`
            // included); an `Error::Db` built by hand that holds a data exception is still the
            // caller's input.
            store::Error::Db(ref db) if let Some(fe) = store::data_exception(db) => {
                ApiError::Invalid(vec![fe])
            }
            // The database restarting, failing over, out of connections, or this transaction
            // losing a race: the same request later will do (503 with Retry-After).
            store::Error::Db(ref db) if store::is_transient(db) => {
                ApiError::Unavailable(db.to_string())
            }
            other => ApiError::Internal(crate::telemetry::error_chain(&other)),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, slug, title) = self.parts();
        let mut body = json!({
            "type": format!("https://kairos.dev/problems/{slug}"),
            "title": title,
            "status": status.as_u16(),
        });
        body["detail"] = json!(self.detail());
        match &self {
            ApiError::Invalid(errors) => body["errors"] = json!(errors),
            ApiError::Internal(m) => tracing::error!(error = %m, "internal error"),
            ApiError::Unavailable(m) => tracing::warn!(error = %m, "database unavailable"),
            _ => {}
        }
        let retry_after_s = match &self {
            ApiError::TooManyRequests { retry_after_s, .. } => Some(*retry_after_s),
            ApiError::ShuttingDown(_) => Some(SHUTDOWN_RETRY_AFTER_S),
            ApiError::Unavailable(_) => Some(UNAVAILABLE_RETRY_AFTER_S),
            _ => None,
        };
        let mut resp = (status, axum::Json(body)).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(s) = retry_after_s {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}
