//! Request extractors that fail as problem+json: malformed JSON is 400, a body over the limit
//! 413, a non-JSON content type 415; query parameters are parsed by name so a bad one is a 422
//! naming it. Text PostgreSQL cannot store (U+0000) is refused here, in bodies, query strings
//! and path parameters alike, as a 422 naming where it was found.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, RawPathParams, Request};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::task::{FieldError, json_integer, parse_timestamp};
use crate::domain::text::{NUL_REFUSED, at_most_chars, has_nul, nul_in_json};
use crate::problem::ApiError;

/// A JSON body. An empty body is `Value::Null` (handlers decide whether that is allowed).
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let mime = media_type(ct);
            if !is_json(&mime) {
                return Err(ApiError::UnsupportedMediaType(format!(
                    "content-type must be application/json, not {mime:?}"
                )));
            }
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rej| {
            if rej.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge("the request body is larger than the server accepts".to_owned())
            } else {
                ApiError::Malformed(format!("cannot read the request body: {rej}"))
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(Value::Null));
        }
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::Malformed(format!("the body is not valid JSON: {e}")))?;
        if let Some(field) = nul_in_json(&value, "") {
            return Err(ApiError::invalid(field, NUL_REFUSED));
        }
        Ok(JsonBody(value))
    }
}

/// A route layer that refuses path parameters PostgreSQL could not store (`/v1/tasks/a%00b`:
/// 422 naming `id`), and ones that are not UTF-8 once percent-decoded (400), before any
/// handler sees them.
pub async fn refuse_unstorable_path(req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    match RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(params) => {
            let errors: Vec<FieldError> = params
                .iter()
                .filter(|(_, v)| has_nul(v))
                .map(|(k, _)| FieldError::new(k, NUL_REFUSED))
                .collect();
            if !errors.is_empty() {
                tracing::info!(path = %parts.uri.path(), reason = "U+0000 in a path parameter", "request refused");
                return ApiError::Invalid(errors).into_response();
            }
        }
        Err(axum::extract::rejection::RawPathParamsRejection::InvalidUtf8InPathParam(e)) => {
            return ApiError::Malformed(e.body_text()).into_response();
        }
        // Routes without parameters.
        Err(_) => {}
    }
    next.run(Request::from_parts(parts, body)).await
}

/// The media type of a `Content-Type` value, lower case, without parameters.
pub fn media_type(content_type: &axum::http::HeaderValue) -> String {
    let ct = content_type.to_str().unwrap_or("").to_ascii_lowercase();
    ct.split(';').next().unwrap_or("").trim().to_owned()
}

/// `application/json` or any `+json` type.
pub fn is_json(media_type: &str) -> bool {
    media_type == "application/json" || media_type.ends_with("+json")
}

/// Query parameters by name, with typed getters that report the parameter by name.
pub struct QueryParams(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::Malformed(format!("cannot parse the query string: {e}")))?;
        let errors: Vec<FieldError> = pairs
            .iter()
            .filter(|(k, v)| has_nul(k) || has_nul(v))
            .map(|(k, _)| FieldError::new(k.replace('\0', ""), NUL_REFUSED))
            .collect();
        if !errors.is_empty() {
            return Err(ApiError::Invalid(errors));
        }
        Ok(QueryParams(pairs))
    }
}

impl QueryParams {
    /// Refuse parameters this endpoint does not know, and repeated ones.
    pub fn only(&self, known: &[&str]) -> Result<(), ApiError> {
        let mut errs = Vec::new();
        for (i, (k, _)) in self.0.iter().enumerate() {
            if !known.contains(&k.as_str()) {
                errs.push(FieldError::new(k.clone(), "unknown query parameter"));
            } else if self.0[..i].iter().any(|(p, _)| p == k) {
                errs.push(FieldError::new(k.clone(), "given more than once"));
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ApiError::Invalid(errs))
        }
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn int(&self, name: &str, default: i64, min: i64, max: i64) -> Result<i64, ApiError> {
        match self.str(name) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<i64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(ApiError::invalid(
                    name,
                    format!("must be an integer from {min} to {max}"),
                )),
            },
        }
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.str(name) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(_) => Err(ApiError::invalid(name, "must be true or false")),
        }
    }

    pub fn timestamp(&self, name: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
        match self.str(name) {
            None => Ok(None),
            Some(v) => parse_timestamp(v).map(Some).ok_or_else(|| {
                ApiError::invalid(
                    name,
                    "must be an RFC 3339 timestamp, e.g. 2026-11-29T08:30:00Z",
                )
            }),
        }
    }
}

/// `limit`, 1–500, default 100 (openapi.yaml).
pub fn page_limit(q: &QueryParams) -> Result<i64, ApiError> {
    q.int("limit", 100, 1, 500)
}

/// A JSON object body with only `known` fields; an empty body counts as `{}`.
pub fn body_object(v: Value, known: &[&str]) -> Result<serde_json::Map<String, Value>, ApiError> {
    let map = match v {
        Value::Null => serde_json::Map::new(),
        Value::Object(m) => m,
        _ => return Err(ApiError::invalid("", "the body must be a JSON object")),
    };
    let unknown: Vec<FieldError> = map
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| FieldError::new(k.clone(), "unknown field"))
        .collect();
    if unknown.is_empty() {
        Ok(map)
    } else {
        Err(ApiError::Invalid(unknown))
    }
}

/// A required or optional string field of at most `max` bytes.
pub fn string_field(
    m: &serde_json::Map<String, Value>,
    key: &str,
    required: bool,
    max: usize,
) -> Result<Option<String>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) if required => Err(ApiError::invalid(key, "is required")),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if at_most_chars(s, max) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(
            key,
            format!("must be a string of at most {max} characters"),
        )),
    }
}

/// An optional integer field in `[min, max]`.
pub fn int_field(
    m: &serde_json::Map<String, Value>,
    key: &str,
    default: i64,
    min: i64,
    max: i64,
) -> Result<i64, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Number(n)) => match json_integer(n) {
            Some(v) if (min..=max).contains(&v) => Ok(v),
            _ => Err(ApiError::invalid(
                key,
                format!("must be an integer from {min} to {max}"),
            )),
        },
        Some(_) => Err(ApiError::invalid(
            key,
            format!("must be an integer from {min} to {max}"),
        )),
    }
}

/// A required lease token (UUID).
pub fn lease_token_field(m: &serde_json::Map<String, Value>) -> Result<uuid::Uuid, ApiError> {
    match m.get("lease_token") {
        Some(Value::String(s)) => uuid::Uuid::parse_str(s)
            .map_err(|_| ApiError::invalid("lease_token", "must be the UUID a claim returned")),
        None | Some(Value::Null) => Err(ApiError::invalid("lease_token", "is required")),
        Some(_) => Err(ApiError::invalid(
            "lease_token",
            "must be the UUID a claim returned",
        )),
    }
}

/// An optional `priority` (0 most urgent to 9): `None` when absent or null.
pub fn priority_field(m: &serde_json::Map<String, Value>) -> Result<Option<i16>, ApiError> {
    match m.get("priority") {
        None | Some(Value::Null) => Ok(None),
        Some(_) => int_field(m, "priority", 5, 0, 9).map(|p| Some(p as i16)),
    }
}

/// The W3C trace context of a request (`traceparent`, `tracestate`): `None` when absent or
/// invalid. An invalid one is ignored, never refused (docs/tracing.md).
pub fn trace_context(
    headers: &axum::http::HeaderMap,
) -> Option<crate::domain::trace::TraceContext> {
    let parent = headers.get("traceparent")?.to_str().ok()?;
    // Several `tracestate` headers are one list.
    let states: Vec<&str> = headers
        .get_all("tracestate")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let state = (!states.is_empty()).then(|| states.join(","));
    crate::domain::trace::TraceContext::parse(parent, state.as_deref())
}

/// The caller's span for the spans kairos exports (a report's `traceparent`): read only when
/// spans are exported, so a report costs nothing more when they are not.
pub struct CallerSpan(pub Option<crate::domain::trace::TraceContext>);

impl FromRequestParts<crate::state::AppState> for CallerSpan {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &crate::state::AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(CallerSpan(if state.spans.is_on() {
            trace_context(&parts.headers)
        } else {
            None
        }))
    }
}
