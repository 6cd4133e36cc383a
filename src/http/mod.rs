//! The HTTP adapter: one file per resource, each adding its routes to a [`RouteTable`] so the
//! list of served routes is known (and checked against `openapi.yaml` by a test). Handlers parse,
//! call `store`, and render; no SQL and no product rules live here.

pub mod auth;
pub mod claims;
pub mod error;
pub mod extract;
pub mod health;
pub mod instances;
pub mod limits;
pub mod server;
pub mod tasks;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::routing::{self, MethodRouter};
use sqlx::PgPool;
use tower_http::trace::TraceLayer;

use std::sync::Arc;

use crate::config::Config;
use crate::domain::access::Tokens;
use crate::services::Heartbeats;
use crate::services::work_signal::WorkSignal;
use error::ApiError;
use tokio_util::sync::CancellationToken;

/// Limits on leases and long polls.
#[derive(Debug, Clone)]
pub struct ClaimSettings {
    /// Lease when a claim or heartbeat does not ask for one (`default_lease_seconds`).
    pub default_lease_seconds: i64,
    /// Longest lease a claim or heartbeat may ask for (`max_lease_seconds`).
    pub max_lease_seconds: i64,
    /// Longest `wait_seconds` of a long-poll claim (`claim_max_wait_seconds`).
    pub max_wait_seconds: i64,
    /// Most long polls waiting at once in this process (`claim_max_waiters`).
    pub max_waiters: usize,
    /// How long without a claim before an agent counts as absent (`agent_absent_seconds`).
    pub agent_absent_seconds: i64,
}

impl ClaimSettings {
    pub fn from_config(cfg: &Config) -> Self {
        Self {
            default_lease_seconds: cfg.default_lease_seconds,
            max_lease_seconds: cfg.max_lease_seconds,
            max_wait_seconds: cfg.claim_max_wait_seconds,
            max_waiters: cfg.claim_max_waiters,
            agent_absent_seconds: cfg.agent_absent_seconds,
        }
    }
}

impl Default for ClaimSettings {
    fn default() -> Self {
        Self::from_config(&Config::default())
    }
}

/// What handlers share.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub heartbeats: Heartbeats,
    pub node_id: String,
    pub claims: ClaimSettings,
    pub work_signal: WorkSignal,
    /// Cancelled at shutdown: long polls return at once with what they have.
    pub shutdown: CancellationToken,
    /// Bearer tokens; empty runs open (loopback only, enforced by configuration).
    pub tokens: Arc<Tokens>,
    /// Where webhook and notification URLs may point.
    pub outbound: crate::outbound::Policy,
    /// Single complete, fail and heartbeat calls share transactions through it.
    pub group: crate::store::group_commit::GroupCommit,
    /// Concurrent claims of one agent share one claim transaction through it.
    pub claim_rounds: crate::store::claim_rounds::ClaimRounds,
    /// One permit per long poll allowed to wait (`claim_max_waiters`).
    pub claim_waiters: Arc<tokio::sync::Semaphore>,
    /// How long a request may take (`http_request_timeout_seconds`); long polls get their
    /// wait on top.
    pub request_timeout: std::time::Duration,
    /// `retention_days`: windows older than this may have been pruned, so backfills and manual
    /// windows that old are refused (their uniqueness could no longer be guaranteed).
    pub retention_days: i64,
    /// Whether the database answers: while it does not, claims and writes answer 503 at once.
    pub db_health: crate::store::health::DbHealth,
    /// Where spans are recorded (off unless `otel_endpoint` is set).
    pub spans: crate::otel::Spans,
}

/// A router that remembers which (method, path) pairs it serves. Each route is added by a method
/// named after its HTTP method, so the method is spelled once and the list cannot disagree with
/// what is served.
pub struct RouteTable {
    router: Router<AppState>,
    routes: Vec<(&'static str, &'static str)>,
}

impl RouteTable {
    fn new() -> Self {
        Self {
            router: Router::new(),
            routes: Vec::new(),
        }
    }

    pub fn get<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add("get", path, routing::get(handler))
    }

    pub fn post<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add("post", path, routing::post(handler))
    }

    pub fn put<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add("put", path, routing::put(handler))
    }

    pub fn delete<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add("delete", path, routing::delete(handler))
    }

    fn add(
        mut self,
        method: &'static str,
        path: &'static str,
        handler: MethodRouter<AppState>,
    ) -> Self {
        self.routes.push((method, path));
        self.router = self.router.route(path, handler);
        self
    }
}

fn table() -> RouteTable {
    let t = RouteTable::new();
    let t = tasks::routes(t);
    let t = instances::routes(t);
    let t = limits::routes(t);
    let t = claims::routes(t);
    let t = crate::ui::routes(t);
    health::routes(t)
}

/// Every (method, path) the API serves, in axum's `{param}` syntax.
pub fn served_routes() -> Vec<(&'static str, &'static str)> {
    table().routes
}

/// The whole API.
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    table()
        .router
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
        .with_state(state)
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
