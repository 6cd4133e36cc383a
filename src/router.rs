//! The daemon's one router: the API's routes and the console's in one `RouteTable`, behind
//! the API's middleware. The only place that knows both adapters, so neither imports the other.

use axum::Router;

use crate::route_table::RouteTable;
use crate::state::AppState;
use crate::{http, ui};

fn table() -> RouteTable {
    ui::routes(http::routes(RouteTable::default()))
}

/// Every (method, path) the daemon serves, API and console, in axum's `{param}` syntax.
pub fn served_routes() -> Vec<(&'static str, &'static str)> {
    table().served()
}

/// The whole HTTP surface: the API and the console.
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    http::layered(table().into_router(), state, max_body_bytes)
}
