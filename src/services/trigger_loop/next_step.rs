//! What the loop does after a pass: stage the earliest coming instant when it is within the
//! lead, else sleep until it is (or until it comes), by the database clock, never longer than
//! `max_sleep` or the wake horizon.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::TriggerLoop;
use crate::store;
use crate::store::tasks::{WAKE_HORIZON, earliest_fire_at};

/// When a due task is held by another replica, wait this long before looking again.
const CONTENDED_SLEEP: Duration = Duration::from_millis(20);

/// What the loop does after a pass.
pub(super) enum Next {
    Sleep(Duration),
    /// Stage the windows of this coming instant, `ahead` from now.
    Stage {
        at: DateTime<Utc>,
        ahead: Duration,
    },
}

impl TriggerLoop {
    /// What to do after a pass: stage the earliest coming instant when it is within the lead
    /// (unless a staging pass is in flight), else sleep until it is, or until it comes when it
    /// is being staged (by the database clock), at most `max_sleep`.
    pub(super) async fn next_step(&self, did_work: bool, staging: bool) -> store::Result<Next> {
        let (earliest, now) = earliest_fire_at(&self.pool).await?;
        let sleep = match earliest {
            None => self.config.max_sleep,
            Some(at) if at <= now => {
                // Due but not taken by us: another replica, or our staging pass about to
                // publish, holds it. Do not spin.
                if did_work {
                    Duration::ZERO
                } else {
                    CONTENDED_SLEEP
                }
            }
            Some(at) => {
                let ahead = (at - now).to_std().unwrap_or(Duration::ZERO);
                let within = !self.config.lead.is_zero() && ahead <= self.config.lead;
                if within && !staging {
                    return Ok(Next::Stage { at, ahead });
                }
                if within {
                    ahead
                } else {
                    ahead
                        .saturating_sub(self.config.lead)
                        .min(self.config.max_sleep)
                }
            }
        };
        // Changes due later than the wake horizon send no notification: look again by then.
        Ok(Next::Sleep(sleep.min(WAKE_HORIZON)))
    }
}
