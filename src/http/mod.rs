//! The HTTP adapter: one file per resource, each adding its routes to a [`RouteTable`] so the
//! list of served routes is known (and checked against `openapi.yaml` by a test). Handlers parse,
//! call `store`, and render; no SQL and no product rules live here.

pub mod auth;
pub mod claims;
pub mod error;
pub mod extract;
pub mod health;
pub mod instances;
pub mod tasks;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::MethodRouter;
use sqlx::PgPool;
use tower_http::trace::TraceLayer;

use std::sync::Arc;

use crate::domain::access::Tokens;
use crate::outbound::AllowList;
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
}

impl Default for ClaimSettings {
    fn default() -> Self {
        Self {
            default_lease_seconds: 60,
            max_lease_seconds: 3600,
            max_wait_seconds: 30,
        }
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
    /// Hosts webhook and notification URLs may name.
    pub allow_list: AllowList,
    /// Single complete, fail and heartbeat calls share transactions through it.
    pub group: crate::store::group_commit::GroupCommit,
}

/// A router that remembers which (method, path) pairs it serves.
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

    pub fn add(
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
    let t = claims::routes(t);
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
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}
