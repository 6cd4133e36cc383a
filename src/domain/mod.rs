//! Pure product rules. Nothing here touches the database, the network or the clock: callers pass
//! `now` in, so every rule is a plain function with unit tests beside it.

pub mod access;
pub mod claim;
pub mod instance;
pub mod jitter;
pub mod limit;
pub mod policy;
pub mod retry;
pub mod schedule;
pub mod task;
pub mod text;
pub mod trace;
