//! Trigger jitter (`trigger.jitter_seconds` of cron and interval triggers): each window becomes
//! claimable a little after its instant, by an offset that spreads many tasks on one schedule
//! over `[0, jitter)` instead of waking every agent at the top of the minute.
//!
//! The offset is a pure function of the task id and the window key, so every replica, every
//! pass and every preview computes the same one: the first 8 bytes of
//! `SHA-256("<task id>\n<window key>")` read as a big-endian unsigned integer, modulo the jitter
//! in milliseconds. The window keeps its nominal instant (`window_key`, `scheduled_at`); only
//! `available_at` carries the offset.
//!
//! A jitter must stay below the shortest gap between two fire times of its trigger, so that a
//! window is always claimable before the next one's instant and windows stay in order: for an
//! interval that gap is `every_seconds`; for a cron expression it is measured over the fire
//! times of the year after registration ([`shortest_cron_gap`]).

use chrono::{DateTime, Duration, Offset, TimeZone, Utc};
use sha2::{Digest, Sha256};

use super::schedule::CronSchedule;
use super::task::FieldError;

/// Largest `trigger.jitter_seconds`: one hour.
pub const MAX_JITTER_SECONDS: i64 = 3600;
/// At most this many upcoming fire times of a cron expression are measured ([`shortest_cron_gap`]).
pub const GAP_FIRES: usize = 1000;
/// The fire times of this many days after registration are measured, unless [`GAP_FIRES`] come
/// first.
pub const GAP_DAYS: i64 = 366;
/// Around each change of the zone's UTC offset within [`GAP_DAYS`], the fire times this long
/// before and after it are measured too (DST moves fire times by at most a few hours).
const AROUND_OFFSET_CHANGE: Duration = Duration::hours(6);
/// At most this many fire times are measured around one change of the zone's offset.
const FIRES_AROUND_CHANGE: usize = 2000;

/// The offset, in milliseconds in `[0, jitter_seconds · 1000)`, of the window `window_key` of
/// task `task_id`; 0 without jitter.
pub fn offset_ms(task_id: &str, window_key: &str, jitter_seconds: i64) -> i64 {
    let Ok(span) = u64::try_from(jitter_seconds.saturating_mul(1000)) else {
        return 0;
    };
    if span == 0 {
        return 0;
    }
    let mut hash = Sha256::new();
    hash.update(task_id.as_bytes());
    hash.update(b"\n");
    hash.update(window_key.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // span ≤ 3,600,000: the remainder fits an i64.
    (u64::from_be_bytes(first) % span) as i64
}

/// When the window `window_key` scheduled at `scheduled_at` becomes claimable.
pub fn available_at(
    task_id: &str,
    window_key: &str,
    scheduled_at: DateTime<Utc>,
    jitter_seconds: i64,
) -> DateTime<Utc> {
    let at = scheduled_at + Duration::milliseconds(offset_ms(task_id, window_key, jitter_seconds));
    // A window late on 9999-12-31 (none lies later) becomes available no later than the last
    // instant an API timestamp can write.
    at.min(crate::domain::schedule::LAST_WINDOW_INSTANT)
}

/// The shortest gap, in seconds, between two consecutive fire times of `cron` after `from`:
/// measured over the next [`GAP_FIRES`] fire times or the fire times of the [`GAP_DAYS`] days
/// after `from`, whichever ends first (but at least two fire times), and over the fire times
/// within six hours of every change of the zone's UTC offset in those days (DST can bring two
/// fire times of a fixed-time job closer, e.g. `55 1,2 * * *` fires at 01:55 and, for the
/// missing 02:55, at 03:00). `None` when the expression fires at most once.
pub fn shortest_cron_gap(cron: &CronSchedule, from: DateTime<Utc>) -> Option<i64> {
    let horizon = from + Duration::days(GAP_DAYS);
    let mut shortest: Option<i64> = None;
    let mut measure = |start: DateTime<Utc>, until: DateTime<Utc>, most: usize| {
        let mut previous = cron.next_after(start)?;
        for _ in 1..most {
            let next = cron.next_after(previous)?;
            let gap = (next - previous).num_seconds();
            shortest = Some(shortest.map_or(gap, |s| s.min(gap)));
            if next > until {
                break;
            }
            previous = next;
        }
        Some(())
    };
    measure(from, horizon, GAP_FIRES);
    for change in offset_changes(cron, from, horizon) {
        measure(
            change - AROUND_OFFSET_CHANGE,
            change + AROUND_OFFSET_CHANGE,
            FIRES_AROUND_CHANGE,
        );
    }
    shortest
}

/// Instants (to the hour) at which the UTC offset of `cron`'s zone changes between `from` and
/// `until`.
fn offset_changes(
    cron: &CronSchedule,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let tz = cron.timezone();
    let offset = |t: DateTime<Utc>| tz.offset_from_utc_datetime(&t.naive_utc()).fix();
    let mut out = Vec::new();
    let mut t = from;
    let mut last = offset(t);
    while t < until {
        t += Duration::hours(1);
        let now = offset(t);
        if now != last {
            out.push(t);
            last = now;
        }
    }
    out
}

/// Refuse a cron trigger's jitter that is not below its shortest gap ([`shortest_cron_gap`],
/// measured from `now`, the registration).
pub fn check_cron_jitter(
    expr: &str,
    timezone: &str,
    jitter_seconds: i64,
    now: DateTime<Utc>,
) -> Result<(), FieldError> {
    if jitter_seconds <= 0 {
        return Ok(());
    }
    let cron = CronSchedule::parse(expr, timezone)
        .map_err(|e| FieldError::new(format!("trigger.{}", e.field), e.message))?;
    match shortest_cron_gap(&cron, now) {
        Some(gap) if jitter_seconds >= gap => Err(FieldError::new(
            "trigger.jitter_seconds",
            format!(
                "must be less than the shortest gap between two fire times of `{expr}` in \
                 {timezone} ({gap} s, over its next {GAP_FIRES} fire times or year, DST \
                 changes included)"
            ),
        )),
        _ => Ok(()),
    }
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
    fn offsets_are_a_stable_hash_of_task_and_window() {
        // Fixed values: a change of the hash would move every deployed task's windows.
        let a = offset_ms("daily_report_001", "2026-11-29T00:30:00Z", 600);
        assert_eq!(
            a,
            offset_ms("daily_report_001", "2026-11-29T00:30:00Z", 600)
        );
        assert!((0..600_000).contains(&a), "{a}");
        let digest = Sha256::digest(b"daily_report_001\n2026-11-29T00:30:00Z");
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        assert_eq!(a, (u64::from_be_bytes(first) % 600_000) as i64);
        assert_ne!(
            a,
            offset_ms("daily_report_002", "2026-11-29T00:30:00Z", 600)
        );
        assert_ne!(
            a,
            offset_ms("daily_report_001", "2026-11-30T00:30:00Z", 600)
        );
        assert_eq!(offset_ms("daily_report_001", "2026-11-29T00:30:00Z", 0), 0);
        assert_eq!(
            available_at("t", "k", t("2026-11-29T00:30:00Z"), 0),
            t("2026-11-29T00:30:00Z")
        );
    }

    #[test]
    fn a_window_late_in_9999_is_available_by_the_last_writable_instant() {
        let late = t("9999-12-31T23:59:00Z");
        let key = "9999-12-31T23:59:00Z";
        let jittered = (0..50)
            .map(|i| available_at(&format!("task-{i}"), key, late, 3600))
            .collect::<Vec<_>>();
        assert!(
            jittered
                .iter()
                .all(|a| *a >= late && *a <= t("9999-12-31T23:59:59Z"))
        );
        assert!(jittered.contains(&t("9999-12-31T23:59:59Z")));
    }

    #[test]
    fn offsets_of_many_tasks_spread_over_the_whole_range() {
        let mut deciles = [0usize; 10];
        for i in 0..10_000 {
            let o = offset_ms(&format!("task-{i}"), "2026-11-29T00:30:00Z", 60);
            assert!((0..60_000).contains(&o));
            deciles[(o / 6_000) as usize] += 1;
        }
        for (d, n) in deciles.iter().enumerate() {
            assert!((800..1200).contains(n), "decile {d}: {n} of 10000");
        }
    }

    #[test]
    fn the_shortest_cron_gap_is_measured_over_the_coming_year() {
        let gap = |expr: &str, tz: &str, from: &str| {
            shortest_cron_gap(&CronSchedule::parse(expr, tz).expect("cron"), t(from))
        };
        assert_eq!(
            gap("*/10 * * * * *", "UTC", "2026-01-01T00:00:00Z"),
            Some(10)
        );
        assert_eq!(
            gap("0 30 8 * * *", "Asia/Shanghai", "2026-01-01T00:00:00Z"),
            Some(86_400)
        );
        assert_eq!(
            gap("0 0,45 9 * * MON-FRI", "UTC", "2026-01-01T00:00:00Z"),
            Some(2_700)
        );
        // Fires at 01:55 and 02:55; on the spring-forward day 02:55 does not exist and fires
        // when the gap ends, at 03:00: five minutes after 01:55. Months away, still measured.
        assert_eq!(
            gap("0 55 1,2 * * *", "America/New_York", "2026-01-01T00:00:00Z"),
            Some(300)
        );
        assert_eq!(
            gap("0 55 1,2 * * *", "UTC", "2026-01-01T00:00:00Z"),
            Some(3_600)
        );
        // Once in four years: the two next fire times, beyond the year.
        assert_eq!(
            gap("0 0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z"),
            Some(4 * 365 * 86_400 + 86_400)
        );
    }

    #[test]
    fn a_cron_jitter_must_stay_below_the_shortest_gap() {
        let now = t("2026-01-01T00:00:00Z");
        assert!(check_cron_jitter("*/10 * * * * *", "UTC", 9, now).is_ok());
        let e = check_cron_jitter("*/10 * * * * *", "UTC", 10, now).expect_err("10 s gap");
        assert_eq!(e.field, "trigger.jitter_seconds");
        assert!(e.message.contains("10 s"), "{}", e.message);
        assert!(check_cron_jitter("0 55 1,2 * * *", "America/New_York", 300, now).is_err());
        assert!(check_cron_jitter("0 55 1,2 * * *", "America/New_York", 299, now).is_ok());
        assert!(check_cron_jitter("* * * * * *", "UTC", 0, now).is_ok());
    }
}
