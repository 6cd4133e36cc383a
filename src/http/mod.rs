//! The HTTP adapter: one file per resource, each adding its routes to a `RouteTable` so the
//! list of served routes is known (and checked against `openapi.yaml` by a test), and the
//! middleware every request passes (authentication, body limit, database gate, timeout).
//! Handlers parse, call `store` or the shared `usecases`, and render; no SQL and no product
//! rules live here, and nothing of the console: `router` puts the two side by side.

pub mod auth;
pub mod claims;
pub mod extract;
pub mod health;
pub mod instances;
pub mod limits;
pub mod server;
pub mod tasks;

/// The API's errors, by the path they have always had; the type is shared with the console.
pub use crate::problem as error;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tower_http::trace::TraceLayer;

use crate::problem::ApiError;
use crate::route_table::RouteTable;
use crate::state::AppState;

/// Add the API's routes to `t`.
pub fn routes(t: RouteTable) -> RouteTable {
    let t = tasks::routes(t);
    let t = instances::routes(t);
    let t = limits::routes(t);
    let t = claims::routes(t);
    health::routes(t)
}

/// `routes` behind the API's middleware, with problem+json answers for unknown routes and
/// methods. Whatever `routes` holds passes the same layers, the console's pages included.
pub fn layered(routes: Router<AppState>, state: AppState, max_body_bytes: usize) -> Router {
    routes
        .route_layer(axum::middleware::from_fn(extract::refuse_unstorable_path))
        .fallback(|| async { ApiError::NotFound("no such route".to_owned()) })
        .method_not_allowed_fallback(|| async {
            ApiError::MethodNotAllowed("this route does not accept that method".to_owned())
        })
        // Inside authentication: a caller without a valid token gets 401 whatever it declares.
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                refuse_declared_oversize(req, next, max_body_bytes)
            },
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            database_gate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            request_timeout,
        ))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(TraceLayer::new_for_http())
        .layer(axum::middleware::from_fn(safety_headers))
        .with_state(state)
}

/// Headers every answer carries, the refusals included: no content sniffing (a JSON or text
/// body is never taken for HTML), and no `Referer` with a console URL (its filters, an
/// instance id) sent to another site. `same-origin`, not `no-referrer`: with the latter a
/// browser sends `Origin: null` on the console's own forms, which are then refused.
async fn safety_headers(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{HeaderValue, header};
    let mut resp = next.run(req).await;
    let headers = resp.headers_mut();
    headers
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    headers
        .entry(header::REFERRER_POLICY)
        .or_insert(HeaderValue::from_static("same-origin"));
    resp
}

/// A body whose declared `Content-Length` is over `max_body_bytes` is refused with 413 at once,
/// without waiting for bytes that would be refused anyway (a client that declares a huge body
/// and sends nothing would otherwise hold the connection until the request timeout).
async fn refuse_declared_oversize(
    req: axum::extract::Request,
    next: axum::middleware::Next,
    max_body_bytes: usize,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body_bytes as u64) {
        return ApiError::TooLarge(format!(
            "the request body is larger than the server accepts ({max_body_bytes} bytes)"
        ))
        .into_response();
    }
    next.run(req).await
}

/// While the database is unreachable, API calls (`/v1/…`) answer 503 with `Retry-After` at
/// once instead of waiting for a connection; one in flight when the database is found
/// unreachable answers 503 then (what it did may or may not have committed: a claim's rows are
/// given back, a repeated report is answered as the first was, a repeated claim with the same
/// `claim_id` gets the same instances).
async fn database_gate(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !req.uri().path().starts_with("/v1/") {
        return next.run(req).await;
    }
    let down = match state.db_health.gate() {
        Ok(down) => down,
        Err(for_how_long) => {
            metrics::counter!("kairos_requests_refused_total", "reason" => "database_unreachable")
                .increment(1);
            return ApiError::Unavailable(format!(
                "the database has been unreachable for {} ms",
                for_how_long.as_millis()
            ))
            .into_response();
        }
    };
    let went_down = down.notified();
    tokio::pin!(went_down);
    went_down.as_mut().enable();
    tokio::select! {
        resp = next.run(req) => resp,
        _ = went_down => {
            state.db_health.doubt();
            ApiError::Unavailable("the database became unreachable during the request".to_owned())
                .into_response()
        }
    }
}

/// Cut off a request that takes longer than `http_request_timeout_seconds` (a long poll gets its
/// longest wait on top): 408. A transaction the handler held is rolled back; a write already
/// handed to group commit (single complete, fail, heartbeat) still commits, so a retry of it may
/// find the instance already moved on (409).
async fn request_timeout(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut limit = state.request_timeout;
    if req.uri().path() == "/v1/claims" {
        limit += std::time::Duration::from_secs(state.claims.max_wait_seconds.unsigned_abs());
    }
    // Both are reference-counted: no copy on the way in, read only on a timeout.
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let handler = next.run(req);
    tokio::pin!(handler);
    tokio::select! {
        resp = &mut handler => resp,
        _ = tokio::time::sleep(limit) => {
            // In doubt before the handler (and any connection it holds) is dropped: a
            // connection it abandons mid-statement is pinged with a bound before reuse.
            state.db_health.doubt();
            let path = uri.path();
            tracing::warn!(%method, %path, timeout_s = limit.as_secs(), reason = "request timeout", "request cut off");
            ApiError::RequestTimeout(format!(
                "the request did not finish within {} s",
                limit.as_secs()
            ))
            .into_response()
        }
    }
}
