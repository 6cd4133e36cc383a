//! What the API and the console both do: the rules and store calls behind an action that either
//! can start (a backfill, an operator's retry or cancel), what a caller may see of a task, the
//! list cursors, the open-mode addressing check. Functions take plain arguments (the pool, the
//! caller's principal, the settings they need) and return store values or [`ApiError`]; they
//! know no request, extractor or page, so both adapters can call them and neither calls the
//! other.
//!
//! [`ApiError`]: crate::problem::ApiError

pub mod access;
pub mod cursor;
pub mod instances;
pub mod limits;
pub mod tasks;
