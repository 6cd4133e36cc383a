//! Retry backoff, pure: the caller passes the random draw in, so tests are exact.
//!
//! delay = min(base · 2^(attempt−1), max), then ± jitter·delay, uniformly (CONTRACT §3). The
//! jitter spreads retries of many instances that failed together (a downstream outage) so they
//! do not hammer it again in lockstep.

use std::time::Duration;

use super::task::RetryBackoff;

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
}
