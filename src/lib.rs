//! kairos: a scheduler daemon for AI-agent tasks on PostgreSQL.
//!
//! The schedule decides when, the lease decides who, the fence and the window key decide how many
//! times an effect counts.
#![forbid(unsafe_code)]

/// Wires everything together: pool, migrations, HTTP server, background loops, shutdown order.
pub mod app;
/// Actors that gather callers' requests into shared transactions: group commits and claim rounds.
pub mod batching;
/// The operators' command line: a REST client of a running daemon (`kairos task`, `kairos instance`).
pub mod cli;
/// Typed settings from `config/kairos.toml`, `KAIROS_*` variables and `DATABASE_URL`.
pub mod config;
/// Pure product rules: tasks, schedules, instances, policies. No SQL, no HTTP, no clock reads.
pub mod domain;
/// The HTTP API: one file of routes and DTOs per resource, and the middleware every request passes.
pub mod http;
/// OpenTelemetry spans of a window's life and their OTLP/HTTP JSON encoding; off unless
/// `otel_endpoint` is set.
pub mod otel;
/// Outbound HTTP: signed, bounded webhook and notification requests.
pub mod outbound;
/// `ApiError`: every failure a request can end in, with its status; problem+json for the API.
pub mod problem;
/// The routes the API and the console add themselves to, with the list of what is served.
pub mod route_table;
/// The daemon's one router: the API and the console side by side, behind the API's middleware.
pub mod router;
/// Background loops, one module each (trigger loop, ...).
pub mod services;
/// What request handlers share, API and console alike (`AppState`).
pub mod state;
/// The only place with SQL: one file per table.
pub mod store;
/// Logging subscriber and the Prometheus metrics recorder.
pub mod telemetry;
/// The operators' console at `/ui/`: server-rendered pages over the store, same tokens and roles.
pub mod ui;
/// What the API and the console both do (backfill, operator moves, task visibility, cursors),
/// over plain arguments, so neither adapter calls the other.
pub mod usecases;
