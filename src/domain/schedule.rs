//! When windows occur: the schedule of a trigger, its next fire times and the window key of each.
//!
//! The cron engine lives in the private `cron` submodule; nothing outside this module sees the
//! cron crate. All instants are UTC with whole-second resolution; a time zone matters only while
//! a cron expression is evaluated (openapi.yaml).

mod cron;

use chrono::{DateTime, Utc};

pub use cron::{CronSchedule, DstNote, ScheduleError};

/// A trigger reduced to what the trigger loop needs: a sequence of window instants.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Boxed: the parsed expression is large beside the other variants.
    Cron(Box<CronSchedule>),
    /// Windows at `start_at + k·every_seconds` for k ≥ 0.
    Interval {
        every_seconds: i64,
        start_at: DateTime<Utc>,
    },
    /// One window at `at`.
    Once { at: DateTime<Utc> },
    /// No windows of its own (`manual` and `after` tasks are instantiated by other paths).
    None,
}

/// The last instant a window may have: 9999-12-31T23:59:59Z, the last one RFC 3339 can write
/// (a later one would be written `+10000-…`, which no client parses as a timestamp). A schedule
/// has no windows after it.
pub const LAST_WINDOW_INSTANT: DateTime<Utc> = match DateTime::from_timestamp(253_402_300_799, 0) {
    Some(at) => at,
    None => DateTime::<Utc>::MAX_UTC,
};

impl Schedule {
    /// The first window strictly after `after`, or `None` when there is none (none lies past
    /// [`LAST_WINDOW_INSTANT`]).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.next_unbounded(after)
            .filter(|&at| at <= LAST_WINDOW_INSTANT)
    }

    fn next_unbounded(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Cron(c) => c.next_after(after),
            Schedule::Interval {
                every_seconds,
                start_at,
            } => {
                if after < *start_at {
                    return Some(*start_at);
                }
                let elapsed = (after - *start_at).num_seconds();
                let k = elapsed / every_seconds + 1;
                start_at
                    .checked_add_signed(chrono::Duration::seconds(k.checked_mul(*every_seconds)?))
            }
            Schedule::Once { at } => (*at > after).then_some(*at),
            Schedule::None => None,
        }
    }

    /// The first window at or after `from`.
    ///
    /// Windows are at least a second apart, so at most one window lies in `(from - 1 s, from)`
    /// (when `from` has a fraction of a second, e.g. the database clock): it is stepped over.
    pub fn next_at_or_after(&self, from: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut w = self.next_after(from - chrono::Duration::seconds(1))?;
        while w < from {
            w = self.next_after(w)?;
        }
        Some(w)
    }

    /// Up to `count` windows strictly after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(count.min(1024));
        let mut cursor = after;
        while out.len() < count {
            match self.next_after(cursor) {
                Some(t) => {
                    out.push(t);
                    cursor = t;
                }
                None => break,
            }
        }
        out
    }
}

/// The one spelling of a window key that is an RFC 3339 instant: the schedule's own
/// (`2026-11-29T00:30:00Z`), or with its fraction of a second when it has one. `None` for any
/// other key (kept as given). Without this, `…T08:00:00+08:00` and `…T00:00:00.000Z` would be
/// new windows beside `…T00:00:00Z`, and run a window that already ran.
pub fn canonical_window_key(key: &str) -> Option<String> {
    use chrono::Timelike;
    let at = DateTime::parse_from_rfc3339(key).ok()?.with_timezone(&Utc);
    if at.nanosecond() == 0 {
        Some(window_key(at))
    } else {
        Some(at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
    }
}

/// The window key of a scheduled instant: RFC 3339 UTC with seconds, e.g. `2026-11-29T00:30:00Z`.
///
/// Written with integer formatting, because the trigger loop keys every window it writes and
/// `format` parses its pattern on each call. Instants `format` would write differently (years
/// outside 0–9999, a leap second) still go through it.
pub fn window_key(at: DateTime<Utc>) -> String {
    use chrono::{Datelike, Timelike};
    let year = at.year();
    if !(0..=9999).contains(&year) || at.nanosecond() >= 1_000_000_000 {
        return at.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    }
    format!(
        "{year:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// An API timestamp: RFC 3339 UTC with a `Z` suffix, sub-second digits only when present.
pub fn format_instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("test timestamp")
            .with_timezone(&Utc)
    }

    #[test]
    fn no_window_lies_past_the_last_instant_rfc_3339_can_write() {
        assert_eq!(format_instant(LAST_WINDOW_INSTANT), "9999-12-31T23:59:59Z");
        let every_day = Schedule::Interval {
            every_seconds: 86_400,
            start_at: t("9999-12-30T12:00:00Z"),
        };
        assert_eq!(
            every_day.upcoming(t("9999-12-01T00:00:00Z"), 5),
            vec![t("9999-12-30T12:00:00Z"), t("9999-12-31T12:00:00Z")]
        );
    }

    #[test]
    fn window_keys_are_what_the_rfc_3339_pattern_writes() {
        let pattern = |at: DateTime<Utc>| at.format("%Y-%m-%dT%H:%M:%SZ").to_string();
        assert_eq!(
            window_key(t("2026-11-29T00:30:00Z")),
            "2026-11-29T00:30:00Z"
        );
        // A spread of instants over the years 0–9999, and a few outside that range.
        let mut secs: i64 = -62_167_219_200; // 0000-01-01T00:00:00Z
        while secs < 253_402_300_800 {
            let at = DateTime::from_timestamp(secs, 0).expect("in range");
            assert_eq!(window_key(at), pattern(at), "at {secs}");
            secs += 7_777_777 + secs.rem_euclid(86_399);
        }
        for at in [
            DateTime::from_timestamp(-62_167_219_201, 0),
            DateTime::from_timestamp(253_402_300_800, 0),
            DateTime::from_timestamp(1_798_761_599, 1_500_000_000),
        ] {
            let at = at.expect("in range");
            assert_eq!(window_key(at), pattern(at));
        }
    }

    #[test]
    fn interval_windows_sit_on_a_grid_from_start_at() {
        let s = Schedule::Interval {
            every_seconds: 90,
            start_at: t("2026-01-01T00:00:00Z"),
        };
        assert_eq!(
            s.next_after(t("2025-12-31T00:00:00Z")),
            Some(t("2026-01-01T00:00:00Z"))
        );
        assert_eq!(
            s.next_after(t("2026-01-01T00:00:00Z")),
            Some(t("2026-01-01T00:01:30Z"))
        );
        assert_eq!(
            s.next_after(t("2026-01-01T00:01:29Z")),
            Some(t("2026-01-01T00:01:30Z"))
        );
        assert_eq!(
            s.next_at_or_after(t("2026-01-01T00:01:30Z")),
            Some(t("2026-01-01T00:01:30Z"))
        );
    }

    #[test]
    fn interval_without_start_is_aligned_to_the_epoch() {
        let s = Schedule::Interval {
            every_seconds: 60,
            start_at: DateTime::<Utc>::UNIX_EPOCH,
        };
        assert_eq!(
            s.next_after(t("2026-11-29T08:30:12Z")),
            Some(t("2026-11-29T08:31:00Z"))
        );
    }

    #[test]
    fn next_at_or_after_never_returns_a_window_before_a_fractional_from() {
        let interval = Schedule::Interval {
            every_seconds: 60,
            start_at: DateTime::<Utc>::UNIX_EPOCH,
        };
        let cron = Schedule::Cron(Box::new(
            CronSchedule::parse("0 * * * * *", "UTC").expect("valid cron"),
        ));
        let once = Schedule::Once {
            at: t("2026-11-29T08:30:00Z"),
        };
        for s in [&interval, &cron] {
            assert_eq!(
                s.next_at_or_after(t("2026-11-29T08:30:00.500Z")),
                Some(t("2026-11-29T08:31:00Z")),
                "{s:?}"
            );
            assert_eq!(
                s.next_at_or_after(t("2026-11-29T08:30:00Z")),
                Some(t("2026-11-29T08:30:00Z")),
                "{s:?}"
            );
            assert_eq!(
                s.next_at_or_after(t("2026-11-29T08:29:59.999Z")),
                Some(t("2026-11-29T08:30:00Z")),
                "{s:?}"
            );
        }
        assert_eq!(once.next_at_or_after(t("2026-11-29T08:30:00.001Z")), None);
        assert_eq!(
            once.next_at_or_after(t("2026-11-29T08:30:00Z")),
            Some(t("2026-11-29T08:30:00Z"))
        );
    }

    #[test]
    fn once_fires_only_while_in_the_future() {
        let s = Schedule::Once {
            at: t("2026-11-29T08:30:00Z"),
        };
        assert_eq!(
            s.next_after(t("2026-11-29T08:00:00Z")),
            Some(t("2026-11-29T08:30:00Z"))
        );
        assert_eq!(s.next_after(t("2026-11-29T08:30:00Z")), None);
        assert_eq!(s.upcoming(t("2026-01-01T00:00:00Z"), 5).len(), 1);
    }

    #[test]
    fn window_keys_are_utc_with_seconds() {
        assert_eq!(
            window_key(t("2026-11-29T08:30:00+08:00")),
            "2026-11-29T00:30:00Z"
        );
    }
}
