//! Retry backoff, pure: the caller passes the random draw in, so tests are exact.
//!
//! delay = min(base · 2^(attempt−1), max), then ± jitter·delay, uniformly. The
//! jitter spreads retries of many instances that failed together (a downstream outage) so they
//! do not hammer it again in lockstep.
//!
//! [`plan_failure`] decides what a failed attempt becomes (FAILED with a backoff, or DEAD) by
//! the state machine and the backoff; the store writes what it decides.

use std::time::Duration;

use uuid::Uuid;

use super::instance::{Event, InstanceStatus, transition};
use super::task::RetryBackoff;
use super::text::bound_error;

/// The delay before the attempt after `attempt` (1-based) may be claimed. `unit` is a uniform
/// draw from [0, 1); 0.5 means no jitter.
pub fn backoff(policy: &RetryBackoff, attempt: i32, unit: f64) -> Duration {
    let exp = attempt.saturating_sub(1).clamp(0, 62) as u32;
    let base = policy.base_seconds.max(0) as f64;
    let cap = policy.max_seconds.max(0) as f64;
    let delay = (base * 2f64.powi(exp as i32)).min(cap);
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let jitter = policy.jitter.clamp(0.0, 1.0) * delay * (2.0 * unit - 1.0);
    Duration::from_secs_f64((delay + jitter).max(0.0))
}

/// Where a failing attempt stands: what deciding FAILED vs DEAD needs.
#[derive(Debug, Clone, Copy)]
pub struct FailingAttempt {
    pub id: Uuid,
    pub lease_token: Uuid,
    pub attempt: i32,
    pub max_attempts: i32,
    /// False when the task was deleted: nobody is left to retry for.
    pub task_exists: bool,
}

/// One failed attempt to record: decided in Rust (state machine, backoff), written in SQL.
#[derive(Debug, Clone)]
pub struct Failure {
    pub id: Uuid,
    pub lease_token: Uuid,
    /// FAILED (attempts remain) or DEAD.
    pub to: InstanceStatus,
    /// Backoff before the retry scanner may make it PENDING again (FAILED only).
    pub delay: Duration,
    pub error: String,
    pub error_kind: &'static str,
}

/// Decide what a failed attempt becomes (FAILED with backoff, or DEAD) by the state machine and
/// the task's backoff policy. `unit` is the jitter draw in [0, 1). `policy` gives the task's
/// backoff policy; it is asked only when the attempt will be retried.
pub fn plan_failure(
    a: &FailingAttempt,
    retryable: bool,
    error: &str,
    error_kind: &'static str,
    unit: f64,
    policy: impl FnOnce() -> RetryBackoff,
) -> Failure {
    // A task that no longer exists has nobody to retry for.
    let give_up = !retryable || a.attempt >= a.max_attempts || !a.task_exists;
    let to = transition(Some(InstanceStatus::Running), Event::Fail { give_up })
        .unwrap_or(InstanceStatus::Dead);
    let delay = match to {
        InstanceStatus::Failed => backoff(&policy(), a.attempt, unit),
        _ => Duration::ZERO,
    };
    Failure {
        id: a.id,
        lease_token: a.lease_token,
        to,
        delay,
        error: bound_error(error),
        error_kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(base: i64, max: i64, jitter: f64) -> RetryBackoff {
        RetryBackoff {
            base_seconds: base,
            max_seconds: max,
            jitter,
        }
    }

    #[test]
    fn delay_doubles_per_attempt_up_to_the_cap() {
        let p = policy(10, 600, 0.0);
        let secs: Vec<u64> = (1..=8).map(|a| backoff(&p, a, 0.9).as_secs()).collect();
        assert_eq!(secs, vec![10, 20, 40, 80, 160, 320, 600, 600]);
    }

    #[test]
    fn jitter_spreads_the_delay_both_ways() {
        let p = policy(10, 600, 0.2);
        assert_eq!(backoff(&p, 1, 0.0), Duration::from_secs(8));
        assert_eq!(backoff(&p, 1, 0.5), Duration::from_secs(10));
        assert_eq!(backoff(&p, 1, 1.0), Duration::from_secs(12));
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let p = policy(10, 600, 0.2);
        assert!(backoff(&p, i32::MAX, 0.3) <= Duration::from_secs(720));
        assert_eq!(backoff(&p, 0, 0.5), Duration::from_secs(10));
    }

    fn attempt(attempt: i32, max_attempts: i32, task_exists: bool) -> FailingAttempt {
        FailingAttempt {
            id: Uuid::nil(),
            lease_token: Uuid::nil(),
            attempt,
            max_attempts,
            task_exists,
        }
    }

    #[test]
    fn a_retryable_failure_with_attempts_left_waits_out_the_backoff() {
        let f = plan_failure(&attempt(2, 4, true), true, "boom", "error", 0.5, || {
            policy(10, 600, 0.2)
        });
        assert_eq!(f.to, InstanceStatus::Failed);
        assert_eq!(f.delay, Duration::from_secs(20));
        assert_eq!((f.error.as_str(), f.error_kind), ("boom", "error"));
    }

    #[test]
    fn no_attempts_left_not_retryable_or_task_gone_is_dead_without_asking_the_policy() {
        let cases = [
            (attempt(4, 4, true), true),
            (attempt(1, 4, true), false),
            (attempt(1, 4, false), true),
        ];
        for (a, retryable) in cases {
            let f = plan_failure(&a, retryable, "boom", "error", 0.5, || {
                panic!("the policy is read only for a retry")
            });
            assert_eq!(f.to, InstanceStatus::Dead, "{a:?} retryable={retryable}");
            assert_eq!(f.delay, Duration::ZERO);
        }
    }

    #[test]
    fn the_planned_error_is_bounded() {
        let long = "x".repeat(super::super::text::MAX_ERROR_LEN + 10);
        let f = plan_failure(&attempt(1, 1, true), true, &long, "error", 0.5, || {
            policy(1, 1, 0.0)
        });
        assert_eq!(f.error.len(), super::super::text::MAX_ERROR_LEN);
        assert!(f.error.ends_with("..."));
    }
}
