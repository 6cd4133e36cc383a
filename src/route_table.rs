//! `RouteTable`: the routes the API and the console add themselves to, kept as a list of
//! (method, path) pairs beside the router, so what is served can be checked against
//! `openapi.yaml`.

use axum::Router;
use axum::handler::Handler;
use axum::routing::{self, MethodRouter};

use crate::state::AppState;

/// A router that remembers which (method, path) pairs it serves. Each route is added by a method
/// named after its HTTP method, so the method is spelled once and the list cannot disagree with
/// what is served.
#[derive(Default)]
pub struct RouteTable {
    router: Router<AppState>,
    routes: Vec<(&'static str, &'static str)>,
}

impl RouteTable {
    /// The (method, path) pairs added so far, in axum's `{param}` syntax.
    pub fn served(&self) -> Vec<(&'static str, &'static str)> {
        self.routes.clone()
    }

    /// The router serving every route added.
    pub fn into_router(self) -> Router<AppState> {
        self.router
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
