//! Batching actors: tasks that gather many callers' requests and serve them in one transaction
//! each, answering every caller as if it had run alone. `group_commit` shares commits among
//! single lease-holder calls (heartbeats, completions, failures); `claim_rounds` shares claim
//! transactions among one agent's concurrent claims.
//!
//! They sit above `store` and use its statements; `store` never uses them, so the table access
//! stays free of queues and tasks.

pub mod claim_rounds;
pub mod group_commit;
