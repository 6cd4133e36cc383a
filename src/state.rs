//! What request handlers share, API and console alike: the pool, the settings they read, and
//! the handles of the services they hand work to. Built once by `app`; holds no behaviour.

use std::sync::Arc;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::domain::access::Tokens;
use crate::services::Heartbeats;
use crate::services::work_signal::WorkSignal;

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
    pub group: crate::batching::group_commit::GroupCommit,
    /// Concurrent claims of one agent share one claim transaction through it.
    pub claim_rounds: crate::batching::claim_rounds::ClaimRounds,
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
