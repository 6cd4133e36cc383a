//! Cron schedules for kairos: parsing, validation and "next fire time" with exact DST rules
//! (openapi.yaml, "Time").
//!
//! # Expressions
//! 5 fields `min hour dom mon dow` (second 0) or 6 fields `sec min hour dom mon dow`; names
//! (`JAN`, `MON-FRI`), Sunday as `0` or `7`, lists, ranges, steps, `L`, `W`, `#`, `?` and the
//! macros `@hourly @daily @midnight @weekly @monthly @yearly @annually` (`@reboot` is refused:
//! there is no boot event). Parsing and field matching are
//! done by `croner` 4.0.3. Two things are added on top of it:
//! - 7-field expressions (a year field) are refused: croner accepts them, the contract does not.
//! - Day fields follow Vixie cron/cronie: when day-of-month and day-of-week are both restricted a
//!   day matching EITHER fires; a day field starting with `*` (or `?`) counts as unrestricted and
//!   then both must match. Croner only treats a field that is exactly `*` as unrestricted, so
//!   `0 0 */2 * MON` would be OR there; we switch croner to AND mode for such expressions.
//!
//! # DST, as cronie does it
//! The classification comes from the expression text (after macro expansion):
//! - A **wildcard** job has a minute or hour field starting with `*` (`*`, `*/15`; `@hourly`).
//!   It follows the wall clock: local times inside the spring-forward gap do not exist and do not
//!   fire; matching local times inside the repeated fall-back hour fire in both passes, in order.
//! - Every other job is **fixed-time** (the seconds field never changes the class; `@daily` is
//!   fixed). A matching local time inside the gap fires once, at the instant the gap ends (several
//!   such times collapse into that one instant); a matching local time in the repeated hour fires
//!   only on its first occurrence.
//!
//! Croner gets wildcard jobs right, so they are delegated to it with the zone. But croner calls a
//! job fixed only when second, minute and hour are each a single value, so `30 2,14 * * *` would
//! lose 02:30 on the spring-forward day and `30 1,13 * * *` would fire twice on the fall-back day.
//! Fixed-time jobs are therefore evaluated here: croner finds matches on the *naive local* wall
//! clock (a timeline with no DST), and each naive match is mapped to an instant by the rule above:
//! unique → that instant; repeated → the earlier one; in the gap → the instant the gap ends.
//! That mapping never goes backwards in time, so the first naive match whose instant is strictly
//! after the base is the answer (matches whose instant is not after the base, e.g. the first pass
//! of the repeated hour when the base is in the second pass, are skipped).
//!
//! "Next" is always strictly after the base instant, and every search is bounded to about five
//! years of local dates, so an expression that can never fire (`0 0 30 2 *`) yields `None`
//! quickly instead of looping.

use std::cmp::Ordering;

use chrono::{DateTime, Days, NaiveDateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use croner::{CivilDate, CivilDateTime, Cron, CronDateTime, Resolution};

/// How many years past the base instant a search may look before giving up: an expression with
/// no fire time within it is refused at registration.
pub const SEARCH_HORIZON_YEARS: u64 = 5;

/// [`SEARCH_HORIZON_YEARS`] in local dates.
const SEARCH_HORIZON_DAYS: u64 = SEARCH_HORIZON_YEARS * 366;

/// No real time zone skips more than a few hours; bounds the search for a gap's end.
const MAX_GAP_SECONDS: i64 = 2 * 86_400;

/// Field names of a 6-field expression, for error messages.
const FIELD_NAMES: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
];

const EXPECTED_SHAPE: &str = "expected 5 fields (min hour dom mon dow), 6 fields \
     (sec min hour dom mon dow) or a macro (@hourly @daily @midnight @weekly @monthly @yearly \
     @annually)";

/// What is wrong with a cron expression or zone; `field` is "expr" or "timezone".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScheduleError {
    pub field: &'static str,
    pub message: String,
}

impl ScheduleError {
    fn expr(message: impl Into<String>) -> Self {
        ScheduleError {
            field: "expr",
            message: message.into(),
        }
    }

    fn timezone(message: impl Into<String>) -> Self {
        ScheduleError {
            field: "timezone",
            message: message.into(),
        }
    }
}

/// A parsed cron expression bound to the IANA zone it is evaluated in.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    timezone: Tz,
    cron: Cron,
    wildcard: bool,
}

impl CronSchedule {
    /// Parse a 5- or 6-field expression (or a macro) evaluated in the IANA zone `timezone`
    /// (e.g. "Asia/Shanghai", "UTC").
    pub fn parse(expr: &str, timezone: &str) -> Result<CronSchedule, ScheduleError> {
        let trimmed = expr.trim();
        if trimmed.is_empty() {
            return Err(ScheduleError::expr(format!(
                "cron expression is empty; {EXPECTED_SHAPE}"
            )));
        }

        // Expand macros ourselves: classification (wildcard or fixed) and the day rule are
        // decided on the expanded fields, and unknown macros deserve a clear message.
        let expanded = if trimmed.starts_with('@') {
            expand_macro(trimmed)?.to_string()
        } else {
            trimmed.to_string()
        };

        let fields: Vec<&str> = expanded.split_whitespace().collect();
        match fields.len() {
            5 | 6 => {}
            7 => {
                return Err(ScheduleError::expr(format!(
                    "`{trimmed}` has 7 fields; a year field is not supported, {EXPECTED_SHAPE}"
                )));
            }
            n => {
                return Err(ScheduleError::expr(format!(
                    "`{trimmed}` has {n} field{}; {EXPECTED_SHAPE}",
                    if n == 1 { "" } else { "s" }
                )));
            }
        }
        // Index of the minute field: 0 for 5 fields, 1 when a seconds field leads.
        let m = fields.len() - 5;
        let (minute, hour, dom, dow) = (fields[m], fields[m + 1], fields[m + 2], fields[m + 4]);

        // Croner's `+` prefix forces AND on the day fields; the contract's day rule is Vixie's,
        // so keep the expression language to what the contract documents.
        if dow.starts_with('+') {
            return Err(ScheduleError::expr(format!(
                "day-of-week field `{dow}`: the `+` (AND) prefix is not supported; day fields \
                 follow Vixie cron (both restricted: either matches; one starting with `*`: both)"
            )));
        }

        let wildcard = minute.starts_with('*') || hour.starts_with('*');
        // Vixie/cronie: a day field starting with `*` is unrestricted, and then a day must match
        // both fields. Croner only knows "exactly `*`" (where the AND/OR choice does not matter),
        // so ask it for AND whenever either field starts with `*`; otherwise keep its OR.
        let unrestricted = |f: &str| f.starts_with('*') || f.starts_with('?');
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .dom_and_dow(unrestricted(dom) || unrestricted(dow))
            .build();
        let cron = parser
            .parse(&expanded)
            .map_err(|err| ScheduleError::expr(explain_parse_error(&parser, &fields, &err)))?;

        let timezone = timezone.trim().parse::<Tz>().map_err(|_| {
            ScheduleError::timezone(format!(
                "unknown IANA time zone `{timezone}` (use a name such as \"UTC\" or \"Europe/London\")"
            ))
        })?;

        Ok(CronSchedule {
            expr: trimmed.to_string(),
            timezone,
            cron,
            wildcard,
        })
    }

    /// The expression as given (trimmed).
    pub fn expr(&self) -> &str {
        &self.expr
    }

    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// The first fire instant strictly after `after`, or why there is none: an expression that
    /// does not fire within `SEARCH_HORIZON_YEARS` years (`0 0 30 2 *`) would never run, so
    /// registration refuses it. The search is bounded by the horizon, so this is cheap even for
    /// hostile expressions.
    pub fn first_fire_after(&self, after: DateTime<Utc>) -> Result<DateTime<Utc>, ScheduleError> {
        self.next_after(after).ok_or_else(|| {
            ScheduleError::expr(format!(
                "`{}` has no fire time within {SEARCH_HORIZON_YEARS} years after {} in {}; \
                 it would never run (check the day-of-month and month fields, e.g. 30 February)",
                self.expr,
                after.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                self.timezone.name()
            ))
        })
    }

    /// True when the minute or hour field starts with `*` (after macro expansion): a job that
    /// follows the wall clock through DST changes (openapi.yaml, "wildcard job").
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The first fire instant strictly after `after`, with whole-second resolution. `None` when
    /// the expression does not fire within about five years of local dates (e.g. `0 0 30 2 *`).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // croner searches years 1..=5000 only, and chrono panics when converting instants near
        // its own range limits to local time: outside that span there is nothing to find.
        if !(1..croner::YEAR_UPPER_LIMIT).contains(&chrono::Datelike::year(&after)) {
            return None;
        }
        let local = after.with_timezone(&self.timezone);
        let last = local
            .date_naive()
            .checked_add_days(Days::new(SEARCH_HORIZON_DAYS))?;
        let limit = CivilDate::from_ymd_opt(
            chrono::Datelike::year(&last),
            chrono::Datelike::month(&last),
            chrono::Datelike::day(&last),
        )?;
        if self.wildcard {
            self.next_wildcard(after, limit)
        } else {
            self.next_fixed(after, limit)
        }
    }

    /// Wildcard jobs: croner, evaluating in the zone, already follows the wall clock (skips gap
    /// times, fires both passes of the repeated hour in order).
    fn next_wildcard(&self, after: DateTime<Utc>, limit: CivilDate) -> Option<DateTime<Utc>> {
        let mut base = Bounded {
            inner: after.with_timezone(&self.timezone),
            limit,
        };
        // Croner answers strictly after its base; re-asking is only a guard for "strictly
        // after" should it ever hand back the base's own second.
        for _ in 0..4 {
            let found = self.cron.find_next_occurrence(&base, false).ok()?;
            let instant = found.inner.with_timezone(&Utc);
            if instant > after {
                return Some(instant);
            }
            base = found;
        }
        None
    }

    /// Fixed-time jobs: croner walks the naive local wall clock (no DST there), and each match is
    /// mapped to an instant with [`fixed_instant`]. That mapping is monotone, so the first match
    /// mapped strictly after `after` is the earliest fire.
    fn next_fixed(&self, after: DateTime<Utc>, limit: CivilDate) -> Option<DateTime<Utc>> {
        // Every naive time before the base's own wall-clock time maps to an instant at or
        // before `after`, so the walk can start there.
        let mut cursor = Bounded {
            inner: after.with_timezone(&self.timezone).naive_local(),
            limit,
        };
        loop {
            // Each round moves the naive cursor forward and croner stops at the horizon, so
            // this ends. Rounds that skip happen only in the repeated hour (base in its second
            // pass) or just after a gap.
            let found = self.cron.find_next_occurrence(&cursor, false).ok()?;
            if let Some(instant) = fixed_instant(self.timezone, found.inner)
                && instant > after
            {
                return Some(instant);
            }
            cursor = found;
        }
    }
}

/// How a time-zone change shaped one fire time, for people reading a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DstNote {
    /// A fixed-time job whose local time did not exist (spring forward): it fires once, when
    /// the gap ends.
    Shifted {
        wanted: NaiveDateTime,
        gap_start: NaiveDateTime,
        gap_end: NaiveDateTime,
    },
    /// A fixed-time job whose local time occurs twice (fall back): it fires on the first pass.
    FoldFirst { local: NaiveDateTime },
    /// A wildcard job inside the repeated hour: it fires in both passes; this is `pass` 1 or 2.
    FoldPass { local: NaiveDateTime, pass: u8 },
    /// A wildcard job's first fire after clocks moved forward: the local times in the gap did
    /// not exist and were not fired.
    AfterGap { forward_minutes: i64 },
}

impl DstNote {
    /// Which rule applied, in a sentence.
    pub fn describe(&self) -> String {
        let hm = |n: &NaiveDateTime| n.format("%H:%M").to_string();
        match self {
            DstNote::Shifted {
                wanted,
                gap_start,
                gap_end,
            } => format!(
                "shifted by DST: {} did not exist on {} (clocks jumped from {} to {}); a \
                 fixed-time job fires once, when the gap ends",
                hm(wanted),
                wanted.format("%Y-%m-%d"),
                hm(gap_start),
                hm(gap_end)
            ),
            DstNote::FoldFirst { local } => format!(
                "folded by DST: {} occurs twice on {} (clocks fall back); a fixed-time job fires \
                 on the first pass only",
                hm(local),
                local.format("%Y-%m-%d")
            ),
            DstNote::FoldPass { local, pass } => format!(
                "repeated hour: {} occurs twice on {} (clocks fall back); a wildcard job fires in \
                 both passes, this is pass {pass}",
                hm(local),
                local.format("%Y-%m-%d")
            ),
            DstNote::AfterGap { forward_minutes } => format!(
                "after a DST gap: clocks moved forward {forward_minutes} min since the previous \
                 fire; a wildcard job skips local times that did not exist"
            ),
        }
    }
}

impl CronSchedule {
    /// How DST shaped `fire` (a fire time of this schedule), given the fire before it, if any.
    pub fn dst_note(
        &self,
        previous: Option<DateTime<Utc>>,
        fire: DateTime<Utc>,
    ) -> Option<DstNote> {
        use chrono::Offset;
        let tz = self.timezone;
        let offset = |t: DateTime<Utc>| t.with_timezone(&tz).offset().fix().local_minus_utc();
        let local = fire.with_timezone(&tz).naive_local();
        let just_before = fire - TimeDelta::seconds(1);
        if !self.wildcard && offset(fire) > offset(just_before) {
            // `fire` is the end of a gap: did the expression name a time inside it?
            let gap_start = just_before.with_timezone(&tz).naive_local() + TimeDelta::seconds(1);
            let limit_date = local.date().checked_add_days(Days::new(2))?;
            let limit = CivilDate::from_ymd_opt(
                chrono::Datelike::year(&limit_date),
                chrono::Datelike::month(&limit_date),
                chrono::Datelike::day(&limit_date),
            )?;
            let cursor = Bounded {
                inner: gap_start - TimeDelta::seconds(1),
                limit,
            };
            if let Ok(found) = self.cron.find_next_occurrence(&cursor, false)
                && found.inner < local
            {
                return Some(DstNote::Shifted {
                    wanted: found.inner,
                    gap_start,
                    gap_end: local,
                });
            }
        }
        if let chrono::LocalResult::Ambiguous(first, _) = tz.from_local_datetime(&local) {
            return Some(if self.wildcard {
                let pass = if first.with_timezone(&Utc) == fire {
                    1
                } else {
                    2
                };
                DstNote::FoldPass { local, pass }
            } else {
                DstNote::FoldFirst { local }
            });
        }
        if self.wildcard
            && let Some(prev) = previous
        {
            let forward = offset(fire) - offset(prev);
            if forward > 0 {
                return Some(DstNote::AfterGap {
                    forward_minutes: i64::from(forward) / 60,
                });
            }
        }
        None
    }
}

/// Replaces a macro by its 5-field expression (the same expansions croner uses).
fn expand_macro(expr: &str) -> Result<&'static str, ScheduleError> {
    match expr.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => Ok("0 0 1 1 *"),
        "@monthly" => Ok("0 0 1 * *"),
        "@weekly" => Ok("0 0 * * 0"),
        "@daily" | "@midnight" => Ok("0 0 * * *"),
        "@hourly" => Ok("0 * * * *"),
        "@reboot" => Err(ScheduleError::expr(
            "@reboot is not a schedule: kairos has no boot event (replicas start and stop \
             independently); use a manual trigger (POST /v1/tasks/{id}/trigger) instead",
        )),
        _ => Err(ScheduleError::expr(format!(
            "unknown macro `{expr}`; supported: @hourly @daily @midnight @weekly @monthly \
             @yearly @annually"
        ))),
    }
}

/// Names the offending field when croner refuses an expression: croner's own messages
/// ("Number out of bounds.") do not say which field. Each field is re-parsed alone, with every
/// other field `*`.
fn explain_parse_error(parser: &CronParser, fields: &[&str], err: &CronError) -> String {
    let first_name = FIELD_NAMES.len() - fields.len();
    for (i, field) in fields.iter().enumerate() {
        let mut probe = ["*"; 6];
        probe[first_name + i] = field;
        if let Err(field_err) = parser.parse(&probe.join(" ")) {
            return format!(
                "{} field `{field}` is invalid: {field_err}",
                FIELD_NAMES[first_name + i]
            );
        }
    }
    format!("invalid cron expression `{}`: {err}", fields.join(" "))
}

/// Maps a naive local time matched by a fixed-time job to its fire instant: unique → that
/// instant; repeated (fall back) → the first occurrence; nonexistent (spring forward) → the
/// instant the gap ends.
fn fixed_instant(tz: Tz, naive: NaiveDateTime) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&naive).earliest() {
        Some(instant) => Some(instant.with_timezone(&Utc)),
        None => gap_end(tz, naive),
    }
}

/// The instant a DST gap containing the naive local time `inside` ends: the transition instant,
/// whose local time is the first wall-clock time after the gap (03:00 EDT in New York, 02:30 in
/// Lord Howe, where the shift is 30 minutes). Found by bisecting the naive wall clock for the
/// first time that exists, so it does not assume any gap length.
fn gap_end(tz: Tz, inside: NaiveDateTime) -> Option<DateTime<Utc>> {
    let exists = |n: NaiveDateTime| tz.from_local_datetime(&n).earliest().is_some();
    let plus = |seconds: i64| inside.checked_add_signed(TimeDelta::try_seconds(seconds)?);

    // Gallop forward until a time exists: `lo` is in the gap, `hi` is not.
    let mut lo = inside;
    let mut step = 1;
    let mut hi = plus(step)?;
    while !exists(hi) {
        if step > MAX_GAP_SECONDS {
            return None;
        }
        lo = hi;
        step *= 2;
        hi = plus(step)?;
    }
    // Bisect down to the first existing second.
    loop {
        let span = (hi - lo).num_seconds();
        if span <= 1 {
            break;
        }
        let mid = lo.checked_add_signed(TimeDelta::try_seconds(span / 2)?)?;
        if exists(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    tz.from_local_datetime(&hi)
        .earliest()
        .map(|instant| instant.with_timezone(&Utc))
}

/// A search position handed to croner that refuses to resolve wall-clock times past `limit`.
///
/// Croner's own bound is an iteration count that can run to the year 5000; every step of its
/// search resolves the cursor, so failing that resolution once the cursor passes `limit` caps
/// the search at our horizon. `T` is `DateTime<Tz>` for wildcard jobs (croner applies the
/// zone's DST) and `NaiveDateTime` for fixed-time jobs (a DST-free wall clock).
#[derive(Debug, Clone)]
struct Bounded<T> {
    inner: T,
    limit: CivilDate,
}

impl<T> Bounded<T> {
    fn with(&self, inner: T) -> Self {
        Bounded {
            inner,
            limit: self.limit,
        }
    }
}

impl<T: CronDateTime> CronDateTime for Bounded<T> {
    fn to_civil(&self) -> CivilDateTime {
        CronDateTime::to_civil(&self.inner)
    }

    fn civil_weekday(&self) -> croner::Weekday {
        CronDateTime::civil_weekday(&self.inner)
    }

    fn resolve_civil(&self, civil: CivilDateTime) -> Result<Resolution<Self>, CronError> {
        if civil.date() > self.limit {
            return Err(CronError::TimeSearchLimitExceeded);
        }
        Ok(match CronDateTime::resolve_civil(&self.inner, civil)? {
            Resolution::Single(one) => Resolution::Single(self.with(one)),
            Resolution::Ambiguous(earlier, later) => {
                Resolution::Ambiguous(self.with(earlier), self.with(later))
            }
            Resolution::Gap => Resolution::Gap,
        })
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        CronDateTime::checked_add_seconds(&self.inner, seconds).map(|inner| self.with(inner))
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        CronDateTime::cmp_instant(&self.inner, &other.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).single().unwrap()
    }

    fn sched(expr: &str, tz: &str) -> CronSchedule {
        CronSchedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr} in {tz}: {e}"))
    }

    /// The first `n` fire instants strictly after `from`.
    fn fires(expr: &str, tz: &str, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let s = sched(expr, tz);
        let mut out = Vec::with_capacity(n);
        let mut t = from;
        for _ in 0..n {
            t = s
                .next_after(t)
                .unwrap_or_else(|| panic!("{expr} in {tz}: none after {t}"));
            out.push(t);
        }
        out
    }

    /// Every fire in [from, until).
    fn fires_until(
        expr: &str,
        tz: &str,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let s = sched(expr, tz);
        let mut out = Vec::new();
        let mut t = from;
        while let Some(next) = s.next_after(t) {
            if next >= until {
                break;
            }
            out.push(next);
            t = next;
        }
        out
    }

    fn local_hms(t: DateTime<Utc>, tz: &str) -> String {
        let tz: Tz = tz.parse().unwrap();
        t.with_timezone(&tz).format("%m-%d %H:%M:%S%:z").to_string()
    }

    fn expr_err(expr: &str) -> ScheduleError {
        let err = CronSchedule::parse(expr, "UTC").expect_err(expr);
        assert_eq!(err.field, "expr", "{expr}: {err}");
        err
    }

    // ---- New York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST ----

    #[test]
    fn dst_notes_name_the_rule_that_applied() {
        let s = sched("30 2 * * *", "America/New_York");
        let spring = fires(
            "30 2 * * *",
            "America/New_York",
            utc(2026, 3, 7, 12, 0, 0),
            2,
        );
        assert_eq!(spring[0], utc(2026, 3, 8, 7, 0, 0));
        let note = s
            .dst_note(None, spring[0])
            .expect("the 03-08 fire is shifted");
        assert!(matches!(note, DstNote::Shifted { .. }), "{note:?}");
        assert!(
            note.describe()
                .contains("02:30 did not exist on 2026-03-08"),
            "{}",
            note.describe()
        );
        assert_eq!(s.dst_note(Some(spring[0]), spring[1]), None);
        // A job that names 03:00 itself is not shifted.
        let three = sched("0 3 * * *", "America/New_York");
        assert_eq!(three.dst_note(None, utc(2026, 3, 8, 7, 0, 0)), None);
        // Fall back: 01:30 occurs twice on 2026-11-01.
        let fold = sched("30 1 * * *", "America/New_York");
        let f = fires(
            "30 1 * * *",
            "America/New_York",
            utc(2026, 10, 31, 12, 0, 0),
            1,
        )[0];
        assert!(matches!(
            fold.dst_note(None, f),
            Some(DstNote::FoldFirst { .. })
        ));
        let wild = sched("*/30 * * * *", "America/New_York");
        let both = fires(
            "*/30 * * * *",
            "America/New_York",
            utc(2026, 11, 1, 5, 15, 0),
            4,
        );
        let passes: Vec<_> = both.iter().map(|t| wild.dst_note(None, *t)).collect();
        assert!(
            matches!(passes[0], Some(DstNote::FoldPass { pass: 1, .. })),
            "{passes:?}"
        );
        assert!(
            matches!(passes[2], Some(DstNote::FoldPass { pass: 2, .. })),
            "{passes:?}"
        );
        let gap = fires(
            "*/30 * * * *",
            "America/New_York",
            utc(2026, 3, 8, 6, 45, 0),
            2,
        );
        assert_eq!(
            wild.dst_note(Some(utc(2026, 3, 8, 6, 30, 0)), gap[0]),
            Some(DstNote::AfterGap {
                forward_minutes: 60
            })
        );
    }

    #[test]
    fn fixed_job_in_the_new_york_spring_gap_fires_once_at_the_gap_end() {
        assert_eq!(
            fires(
                "30 2 * * *",
                "America/New_York",
                utc(2026, 3, 7, 12, 0, 0),
                2
            ),
            // 02:30 does not exist on 03-08: 03:00 EDT; then 02:30 EDT.
            vec![utc(2026, 3, 8, 7, 0, 0), utc(2026, 3, 9, 6, 30, 0)]
        );
    }

    #[test]
    fn fixed_job_in_the_new_york_repeated_hour_fires_only_on_the_first_pass() {
        assert_eq!(
            fires(
                "30 1 * * *",
                "America/New_York",
                utc(2026, 10, 31, 12, 0, 0),
                2
            ),
            // 01:30 EDT, then 01:30 EST the next day (not 01:30 EST on 11-01 = 06:30Z).
            vec![utc(2026, 11, 1, 5, 30, 0), utc(2026, 11, 2, 6, 30, 0)]
        );
    }

    #[test]
    fn base_inside_the_second_pass_moves_a_fixed_job_to_the_next_day() {
        // 06:10Z = 01:10 EST, the second pass; 01:30 EDT (05:30Z) is already behind.
        let s = sched("30 1 * * *", "America/New_York");
        assert_eq!(
            s.next_after(utc(2026, 11, 1, 6, 10, 0)),
            Some(utc(2026, 11, 2, 6, 30, 0))
        );
        // Also from exactly the first-pass fire, and from inside the first pass after it.
        assert_eq!(
            s.next_after(utc(2026, 11, 1, 5, 30, 0)),
            Some(utc(2026, 11, 2, 6, 30, 0))
        );
        assert_eq!(
            s.next_after(utc(2026, 11, 1, 5, 45, 0)),
            Some(utc(2026, 11, 2, 6, 30, 0))
        );
    }

    #[test]
    fn wildcard_job_skips_gap_times_in_new_york() {
        let got = fires(
            "0 */15 * * * *",
            "America/New_York",
            utc(2026, 3, 8, 6, 30, 0),
            4,
        );
        // 01:45 EST, then 02:00-02:45 do not exist, 03:00 EDT, 03:15 EDT.
        assert_eq!(
            got,
            vec![
                utc(2026, 3, 8, 6, 45, 0),
                utc(2026, 3, 8, 7, 0, 0),
                utc(2026, 3, 8, 7, 15, 0),
                utc(2026, 3, 8, 7, 30, 0),
            ]
        );
        for t in got {
            assert!(!local_hms(t, "America/New_York").contains(" 02:"), "{t}");
        }
    }

    #[test]
    fn wildcard_job_fires_both_passes_of_the_new_york_repeated_hour_in_order() {
        assert_eq!(
            fires(
                "0 */15 * * * *",
                "America/New_York",
                utc(2026, 11, 1, 4, 50, 0),
                9
            ),
            vec![
                utc(2026, 11, 1, 5, 0, 0),  // 01:00 EDT
                utc(2026, 11, 1, 5, 15, 0), // 01:15 EDT
                utc(2026, 11, 1, 5, 30, 0), // 01:30 EDT
                utc(2026, 11, 1, 5, 45, 0), // 01:45 EDT
                utc(2026, 11, 1, 6, 0, 0),  // 01:00 EST
                utc(2026, 11, 1, 6, 15, 0), // 01:15 EST
                utc(2026, 11, 1, 6, 30, 0), // 01:30 EST
                utc(2026, 11, 1, 6, 45, 0), // 01:45 EST
                utc(2026, 11, 1, 7, 0, 0),  // 02:00 EST
            ]
        );
        // From inside the second pass it carries on in the second pass.
        let s = sched("0 */15 * * * *", "America/New_York");
        assert_eq!(
            s.next_after(utc(2026, 11, 1, 6, 10, 0)),
            Some(utc(2026, 11, 1, 6, 15, 0))
        );
    }

    #[test]
    fn wildcard_hour_with_fixed_minute_follows_the_wall_clock() {
        // `30 * * * *` is wildcard (hour `*`): 02:30 on 03-08 does not exist and is not moved.
        assert_eq!(
            fires(
                "30 * * * *",
                "America/New_York",
                utc(2026, 3, 8, 6, 0, 0),
                2
            ),
            vec![utc(2026, 3, 8, 6, 30, 0), utc(2026, 3, 8, 7, 30, 0)]
        );
        // ...and 01:30 fires in both passes on 11-01.
        assert_eq!(
            fires(
                "30 * * * *",
                "America/New_York",
                utc(2026, 11, 1, 5, 0, 0),
                3
            ),
            vec![
                utc(2026, 11, 1, 5, 30, 0),
                utc(2026, 11, 1, 6, 30, 0),
                utc(2026, 11, 1, 7, 30, 0)
            ]
        );
    }

    #[test]
    fn multi_hour_fixed_job_keeps_its_gap_time_on_the_spring_day() {
        assert_eq!(
            fires(
                "30 2,14 * * *",
                "America/New_York",
                utc(2026, 3, 8, 0, 0, 0),
                3
            ),
            vec![
                utc(2026, 3, 8, 7, 0, 0),
                utc(2026, 3, 8, 18, 30, 0),
                utc(2026, 3, 9, 6, 30, 0)
            ]
        );
    }

    #[test]
    fn multi_hour_fixed_job_fires_once_in_the_repeated_hour_on_the_fall_day() {
        assert_eq!(
            fires(
                "30 1,13 * * *",
                "America/New_York",
                utc(2026, 11, 1, 0, 0, 0),
                3
            ),
            vec![
                utc(2026, 11, 1, 5, 30, 0),
                utc(2026, 11, 1, 18, 30, 0),
                utc(2026, 11, 2, 6, 30, 0)
            ]
        );
    }

    #[test]
    fn croner_alone_misclassifies_multi_value_hours_which_is_why_fixed_jobs_are_mapped_here() {
        // Evidence for the gap this module closes (croner 4.0.3 with the zone, no mapping).
        let ny: Tz = "America/New_York".parse().unwrap();
        let spring: Cron = CronParser::new().parse("30 2,14 * * *").unwrap();
        let first = spring
            .find_next_occurrence(&utc(2026, 3, 8, 0, 0, 0).with_timezone(&ny), false)
            .unwrap();
        assert_eq!(first.with_timezone(&Utc), utc(2026, 3, 8, 18, 30, 0)); // 02:30 lost
        let fall: Cron = CronParser::new().parse("30 1,13 * * *").unwrap();
        let a = fall
            .find_next_occurrence(&utc(2026, 11, 1, 0, 0, 0).with_timezone(&ny), false)
            .unwrap();
        let b = fall.find_next_occurrence(&a, false).unwrap();
        assert_eq!(b.with_timezone(&Utc), utc(2026, 11, 1, 6, 30, 0)); // fired twice
    }

    #[test]
    fn several_fixed_gap_times_on_the_spring_day_fire_once_together_at_the_gap_end() {
        // sec 0, min 15,45, hour 2: 02:15 and 02:45 both fall in the gap.
        let got = fires_until(
            "0 15,45 2 * * *",
            "America/New_York",
            utc(2026, 3, 8, 0, 0, 0),
            utc(2026, 3, 9, 5, 0, 0),
        );
        assert_eq!(got, vec![utc(2026, 3, 8, 7, 0, 0)]);
        let s = sched("0 15,45 2 * * *", "America/New_York");
        assert_eq!(
            s.next_after(utc(2026, 3, 8, 7, 0, 0)),
            Some(utc(2026, 3, 9, 6, 15, 0))
        );
        // A per-second fixed job inside the gap also collapses to one instant.
        let got = fires_until(
            "* 30 2 * * *",
            "America/New_York",
            utc(2026, 3, 8, 0, 0, 0),
            utc(2026, 3, 9, 0, 0, 0),
        );
        assert_eq!(got, vec![utc(2026, 3, 8, 7, 0, 0)]);
    }

    #[test]
    fn next_is_strictly_after_the_base_even_at_a_fire_instant_or_with_subseconds() {
        let s = sched("30 2 * * *", "America/New_York");
        assert_eq!(
            s.next_after(utc(2026, 3, 8, 7, 0, 0)),
            Some(utc(2026, 3, 9, 6, 30, 0))
        );
        let just_before = utc(2026, 3, 8, 7, 0, 0) - TimeDelta::milliseconds(1);
        assert_eq!(s.next_after(just_before), Some(utc(2026, 3, 8, 7, 0, 0)));
        let w = sched("*/10 * * * * *", "UTC");
        let base = utc(2026, 5, 1, 0, 0, 10) + TimeDelta::milliseconds(500);
        assert_eq!(w.next_after(base), Some(utc(2026, 5, 1, 0, 0, 20)));
        assert_eq!(
            w.next_after(utc(2026, 5, 1, 0, 0, 10)),
            Some(utc(2026, 5, 1, 0, 0, 20))
        );
    }

    // ---- London: 2026-03-29 01:00 GMT -> 02:00 BST; 2026-10-25 02:00 BST -> 01:00 GMT ----

    #[test]
    fn london_fixed_job_in_the_gap_and_in_the_repeated_hour() {
        assert_eq!(
            fires("30 1 * * *", "Europe/London", utc(2026, 3, 28, 12, 0, 0), 2),
            // gap end 02:00 BST = 01:00Z; then 01:30 BST = 00:30Z.
            vec![utc(2026, 3, 29, 1, 0, 0), utc(2026, 3, 30, 0, 30, 0)]
        );
        assert_eq!(
            fires(
                "30 1 * * *",
                "Europe/London",
                utc(2026, 10, 24, 12, 0, 0),
                2
            ),
            // 01:30 BST = 00:30Z only; next day 01:30 GMT.
            vec![utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 26, 1, 30, 0)]
        );
    }

    #[test]
    fn london_wildcard_job_in_the_gap_and_in_the_repeated_hour() {
        assert_eq!(
            fires(
                "*/30 * * * *",
                "Europe/London",
                utc(2026, 3, 29, 0, 0, 0),
                3
            ),
            // 00:30 GMT, (01:00 and 01:30 missing), 02:00 BST, 02:30 BST.
            vec![
                utc(2026, 3, 29, 0, 30, 0),
                utc(2026, 3, 29, 1, 0, 0),
                utc(2026, 3, 29, 1, 30, 0)
            ]
        );
        assert_eq!(
            local_hms(utc(2026, 3, 29, 1, 0, 0), "Europe/London"),
            "03-29 02:00:00+01:00"
        );
        assert_eq!(
            fires(
                "*/30 * * * *",
                "Europe/London",
                utc(2026, 10, 24, 23, 45, 0),
                5
            ),
            vec![
                utc(2026, 10, 25, 0, 0, 0),  // 01:00 BST
                utc(2026, 10, 25, 0, 30, 0), // 01:30 BST
                utc(2026, 10, 25, 1, 0, 0),  // 01:00 GMT
                utc(2026, 10, 25, 1, 30, 0), // 01:30 GMT
                utc(2026, 10, 25, 2, 0, 0),  // 02:00 GMT
            ]
        );
    }

    // ---- Lord Howe (30-minute shift). Probed in chrono-tz: 2026-04-04T15:00Z 02:00 +11 ->
    // 01:30 +10:30 (01:30-01:59 repeat); 2026-10-03T15:30Z 02:00 +10:30 -> 02:30 +11. ----

    #[test]
    fn lord_howe_transitions_are_where_the_tests_assume() {
        let lh: Tz = "Australia/Lord_Howe".parse().unwrap();
        let off = |t: DateTime<Utc>| t.with_timezone(&lh).format("%:z").to_string();
        assert_eq!(off(utc(2026, 4, 4, 14, 59, 59)), "+11:00");
        assert_eq!(off(utc(2026, 4, 4, 15, 0, 0)), "+10:30");
        assert_eq!(off(utc(2026, 10, 3, 15, 29, 59)), "+10:30");
        assert_eq!(off(utc(2026, 10, 3, 15, 30, 0)), "+11:00");
    }

    #[test]
    fn lord_howe_fixed_job_in_the_half_hour_gap_fires_at_the_gap_end() {
        let got = fires(
            "15 2 * * *",
            "Australia/Lord_Howe",
            utc(2026, 10, 3, 0, 0, 0),
            2,
        );
        // 02:15 does not exist on 10-04: gap end 02:30 +11 = 15:30Z; then 02:15 +11.
        assert_eq!(
            got,
            vec![utc(2026, 10, 3, 15, 30, 0), utc(2026, 10, 4, 15, 15, 0)]
        );
        assert_eq!(
            local_hms(got[0], "Australia/Lord_Howe"),
            "10-04 02:30:00+11:00"
        );
        // Two gap times collapse into that one instant.
        assert_eq!(
            fires_until(
                "0,20 2 * * *",
                "Australia/Lord_Howe",
                utc(2026, 10, 3, 0, 0, 0),
                utc(2026, 10, 4, 0, 0, 0)
            ),
            vec![utc(2026, 10, 3, 15, 30, 0)]
        );
    }

    #[test]
    fn lord_howe_fixed_job_in_the_repeated_half_hour_fires_once() {
        let got = fires(
            "45 1 * * *",
            "Australia/Lord_Howe",
            utc(2026, 4, 4, 0, 0, 0),
            2,
        );
        // 01:45 +11 = 14:45Z; not 01:45 +10:30 = 15:15Z; next 04-06 01:45 +10:30.
        assert_eq!(
            got,
            vec![utc(2026, 4, 4, 14, 45, 0), utc(2026, 4, 5, 15, 15, 0)]
        );
        let s = sched("45 1 * * *", "Australia/Lord_Howe");
        // Base in the second pass (01:35 +10:30).
        assert_eq!(
            s.next_after(utc(2026, 4, 4, 15, 5, 0)),
            Some(utc(2026, 4, 5, 15, 15, 0))
        );
    }

    #[test]
    fn lord_howe_wildcard_job_fires_in_both_passes_and_skips_the_gap() {
        let got = fires(
            "*/15 * * * *",
            "Australia/Lord_Howe",
            utc(2026, 4, 4, 14, 0, 0),
            6,
        );
        assert_eq!(
            got,
            vec![
                utc(2026, 4, 4, 14, 15, 0), // 01:15 +11
                utc(2026, 4, 4, 14, 30, 0), // 01:30 +11
                utc(2026, 4, 4, 14, 45, 0), // 01:45 +11
                utc(2026, 4, 4, 15, 0, 0),  // 01:30 +10:30
                utc(2026, 4, 4, 15, 15, 0), // 01:45 +10:30
                utc(2026, 4, 4, 15, 30, 0), // 02:00 +10:30
            ]
        );
        assert_eq!(
            local_hms(got[3], "Australia/Lord_Howe"),
            "04-05 01:30:00+10:30"
        );
        assert_eq!(
            fires(
                "*/15 * * * *",
                "Australia/Lord_Howe",
                utc(2026, 10, 3, 15, 0, 0),
                3
            ),
            // 01:45 +10:30, (02:00 and 02:15 missing), 02:30 +11, 02:45 +11.
            vec![
                utc(2026, 10, 3, 15, 15, 0),
                utc(2026, 10, 3, 15, 30, 0),
                utc(2026, 10, 3, 15, 45, 0)
            ]
        );
    }

    // ---- Fields ----

    #[test]
    fn six_field_expressions_carry_seconds() {
        assert_eq!(
            fires("*/10 * * * * *", "UTC", utc(2026, 1, 1, 0, 0, 5), 3),
            vec![
                utc(2026, 1, 1, 0, 0, 10),
                utc(2026, 1, 1, 0, 0, 20),
                utc(2026, 1, 1, 0, 0, 30)
            ]
        );
        // 08:30:15 CST (+08:00) = 00:30:15Z.
        assert_eq!(
            fires(
                "15 30 8 * * *",
                "Asia/Shanghai",
                utc(2026, 1, 1, 1, 0, 0),
                2
            ),
            vec![utc(2026, 1, 2, 0, 30, 15), utc(2026, 1, 3, 0, 30, 15)]
        );
        assert!(!sched("15 30 8 * * *", "Asia/Shanghai").is_wildcard());
        assert!(sched("*/10 * * * * *", "UTC").is_wildcard());
        // The seconds field never makes a job wildcard.
        assert!(!sched("* 30 8 * * *", "UTC").is_wildcard());
    }

    #[test]
    fn last_day_nth_weekday_and_nearest_weekday_modifiers_work() {
        assert_eq!(
            fires("0 0 L * *", "UTC", utc(2026, 2, 10, 0, 0, 0), 3),
            vec![
                utc(2026, 2, 28, 0, 0, 0),
                utc(2026, 3, 31, 0, 0, 0),
                utc(2026, 4, 30, 0, 0, 0)
            ]
        );
        // Second Monday: 2026-03-09, 2026-04-13.
        assert_eq!(
            fires("0 9 * * 1#2", "UTC", utc(2026, 3, 1, 0, 0, 0), 2),
            vec![utc(2026, 3, 9, 9, 0, 0), utc(2026, 4, 13, 9, 0, 0)]
        );
        // 2026-08-15 is a Saturday: nearest weekday is Friday 08-14; 2026-09-15 is a Tuesday.
        assert_eq!(
            fires("0 0 15W * *", "UTC", utc(2026, 8, 1, 0, 0, 0), 2),
            vec![utc(2026, 8, 14, 0, 0, 0), utc(2026, 9, 15, 0, 0, 0)]
        );
        // `?` is accepted as "no restriction" in a day field.
        assert_eq!(
            fires("0 0 ? * MON", "UTC", utc(2026, 3, 1, 0, 0, 0), 1),
            vec![utc(2026, 3, 2, 0, 0, 0)]
        );
    }

    #[test]
    fn both_day_fields_restricted_fire_on_either_match() {
        // March 2026: the 1st is a Sunday; Mondays are 2, 9, 16, 23, 30.
        assert_eq!(
            fires("0 0 1,15 * MON", "UTC", utc(2026, 2, 28, 12, 0, 0), 8),
            vec![
                utc(2026, 3, 1, 0, 0, 0),
                utc(2026, 3, 2, 0, 0, 0),
                utc(2026, 3, 9, 0, 0, 0),
                utc(2026, 3, 15, 0, 0, 0),
                utc(2026, 3, 16, 0, 0, 0),
                utc(2026, 3, 23, 0, 0, 0),
                utc(2026, 3, 30, 0, 0, 0),
                utc(2026, 4, 1, 0, 0, 0),
            ]
        );
    }

    #[test]
    fn a_day_field_starting_with_star_makes_both_day_fields_required() {
        // Mondays with an odd day of month: 03-09, 03-23, 04-13, 04-27 (croner alone: OR).
        assert_eq!(
            fires("0 0 */2 * MON", "UTC", utc(2026, 3, 1, 0, 0, 0), 4),
            vec![
                utc(2026, 3, 9, 0, 0, 0),
                utc(2026, 3, 23, 0, 0, 0),
                utc(2026, 4, 13, 0, 0, 0),
                utc(2026, 4, 27, 0, 0, 0),
            ]
        );
        // Same rule with the star in day-of-week: the 1st and 15th only when on Sun/Tue/Thu/Sat.
        // 2026-03-01 Sun, 03-15 Sun, 04-01 Wed (no), 04-15 Wed (no), 05-01 Fri (no), 05-15 Fri
        // (no), 06-01 Mon (no), 06-15 Mon (no), 07-01 Wed (no), 07-15 Wed (no), 08-01 Sat.
        assert_eq!(
            fires("0 0 1,15 * */2", "UTC", utc(2026, 2, 28, 0, 0, 0), 3),
            vec![
                utc(2026, 3, 1, 0, 0, 0),
                utc(2026, 3, 15, 0, 0, 0),
                utc(2026, 8, 1, 0, 0, 0)
            ]
        );
        // Only the day-of-week restricted: Mondays only.
        assert_eq!(
            fires("0 0 * * MON", "UTC", utc(2026, 3, 1, 0, 0, 0), 3),
            vec![
                utc(2026, 3, 2, 0, 0, 0),
                utc(2026, 3, 9, 0, 0, 0),
                utc(2026, 3, 16, 0, 0, 0)
            ]
        );
    }

    #[test]
    fn sunday_is_zero_or_seven_and_names_are_accepted() {
        let from = utc(2026, 3, 1, 12, 0, 0);
        let zero = fires("0 0 * * 0", "UTC", from, 5);
        assert_eq!(zero[0], utc(2026, 3, 8, 0, 0, 0));
        assert_eq!(fires("0 0 * * 7", "UTC", from, 5), zero);
        assert_eq!(fires("0 0 * * SUN", "UTC", from, 5), zero);
        assert_eq!(fires("0 0 * * sun", "UTC", from, 5), zero);
        // FRI-SUN is Friday, Saturday, Sunday.
        assert_eq!(
            fires("0 0 * * FRI-SUN", "UTC", from, 3),
            vec![
                utc(2026, 3, 6, 0, 0, 0),
                utc(2026, 3, 7, 0, 0, 0),
                utc(2026, 3, 8, 0, 0, 0)
            ]
        );
        assert_eq!(
            fires("0 0 1 JAN *", "UTC", from, 1),
            vec![utc(2027, 1, 1, 0, 0, 0)]
        );
        // From Friday 2026-03-06 10:00: Mon 03-09 09:00 (weekend skipped).
        assert_eq!(
            fires("0 9 * * MON-FRI", "UTC", utc(2026, 3, 6, 10, 0, 0), 2),
            vec![utc(2026, 3, 9, 9, 0, 0), utc(2026, 3, 10, 9, 0, 0)]
        );
    }

    #[test]
    fn macros_expand_and_classify() {
        let from = utc(2026, 3, 4, 10, 20, 0); // a Wednesday
        assert_eq!(
            fires("@hourly", "UTC", from, 1),
            vec![utc(2026, 3, 4, 11, 0, 0)]
        );
        assert_eq!(
            fires("@daily", "UTC", from, 1),
            vec![utc(2026, 3, 5, 0, 0, 0)]
        );
        assert_eq!(
            fires("@weekly", "UTC", from, 1),
            vec![utc(2026, 3, 8, 0, 0, 0)]
        );
        assert_eq!(
            fires("@monthly", "UTC", from, 1),
            vec![utc(2026, 4, 1, 0, 0, 0)]
        );
        assert_eq!(
            fires("@yearly", "UTC", from, 1),
            vec![utc(2027, 1, 1, 0, 0, 0)]
        );
        assert_eq!(
            fires("@annually", "UTC", from, 1),
            vec![utc(2027, 1, 1, 0, 0, 0)]
        );
        assert_eq!(
            fires("@midnight", "UTC", from, 2),
            fires("@daily", "UTC", from, 2)
        );
        assert!(!sched("@midnight", "UTC").is_wildcard());
        assert_eq!(
            fires("@DAILY", "Asia/Shanghai", from, 1),
            vec![utc(2026, 3, 4, 16, 0, 0)]
        );
        assert!(sched("@hourly", "UTC").is_wildcard());
        assert!(!sched("@daily", "UTC").is_wildcard());
        assert!(!sched("@weekly", "UTC").is_wildcard());
        // @daily is fixed: midnight in a gap (Santiago springs forward 2026-09-06 00:00 -> 01:00)
        // fires at the gap end, 01:00 -03 = 04:00Z.
        assert_eq!(
            fires("@daily", "America/Santiago", utc(2026, 9, 5, 12, 0, 0), 1),
            vec![utc(2026, 9, 6, 4, 0, 0)]
        );
    }

    #[test]
    fn accessors_report_what_was_parsed() {
        let s = sched("  0 30 8 * * *  ", "Asia/Shanghai");
        assert_eq!(s.expr(), "0 30 8 * * *");
        assert_eq!(s.timezone(), chrono_tz::Asia::Shanghai);
        assert!(!s.is_wildcard());
        assert!(sched("0 */2 * * *", "UTC").is_wildcard());
        assert!(sched("*/5 9 * * *", "UTC").is_wildcard());
        assert!(!sched("0-59 9 * * *", "UTC").is_wildcard());
        assert!(!sched("30 2,14 * * *", "UTC").is_wildcard());
    }

    #[test]
    fn bad_expressions_and_zones_are_refused_with_a_reason() {
        let err = expr_err("0 0 0 * * * 2027");
        assert!(
            err.message.contains("7 fields") && err.message.contains("year"),
            "{err}"
        );
        assert!(expr_err("").message.contains("empty"));
        assert!(expr_err("   ").message.contains("empty"));
        let err = expr_err("61 * * * *");
        assert!(err.message.contains("minute field `61`"), "{err}");
        let err = expr_err("0 0 32 * *");
        assert!(err.message.contains("day-of-month field `32`"), "{err}");
        let err = expr_err("* * *");
        assert!(err.message.contains("3 fields"), "{err}");
        assert!(expr_err("hello").message.contains("1 field;"));
        assert!(expr_err("a b c d e").message.contains("minute field `a`"));
        assert!(expr_err("0 0 * * FOO").message.contains("day-of-week"));
        assert!(expr_err("*/0 * * * *").message.contains("minute"));
        assert!(expr_err("@every_minute").message.contains("unknown macro"));
        let err = expr_err("@reboot");
        assert!(
            err.message.contains("not a schedule") && err.message.contains("manual trigger"),
            "{err}"
        );
        assert!(expr_err("0 0 * * +MON").message.contains("`+`"));
        assert_eq!(
            expr_err("").to_string().split(':').next(),
            Some("expr"),
            "Display is `field: message`"
        );

        let err = CronSchedule::parse("0 0 * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(err.field, "timezone");
        assert!(err.message.contains("Mars/Olympus"), "{err}");
        assert_eq!(
            CronSchedule::parse("0 0 * * *", "").unwrap_err().field,
            "timezone"
        );
    }

    #[test]
    fn impossible_dates_return_none_quickly() {
        let started = Instant::now();
        for expr in ["0 0 30 2 *", "* * 30 2 *", "0 0 31 4,6,9,11 *"] {
            assert_eq!(
                sched(expr, "UTC").next_after(utc(2026, 1, 1, 0, 0, 0)),
                None,
                "{expr}"
            );
        }
        // A wildcard job whose only times are always in New York's gap (second Sunday of
        // March, 02:xx) cannot fire either.
        assert_eq!(
            sched("*/5 2 * 3 0#2", "America/New_York").next_after(utc(2026, 1, 1, 0, 0, 0)),
            None
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        // Feb 29 is rare but within the horizon.
        assert_eq!(
            sched("0 0 29 2 *", "UTC").next_after(utc(2026, 1, 1, 0, 0, 0)),
            Some(utc(2028, 2, 29, 0, 0, 0))
        );
    }

    #[test]
    fn never_firing_expressions_are_refused_with_a_reason_and_found_quickly() {
        let from = utc(2026, 1, 1, 0, 0, 0);
        let late = utc(2097, 3, 1, 0, 0, 0);
        let started = Instant::now();
        for (expr, tz) in [
            ("0 0 30 2 *", "UTC"),
            ("0 0 0 31 4 *", "UTC"),
            ("* * * 30 2 *", "Australia/Lord_Howe"),
            ("* * * 31 4,6,9,11 *", "America/New_York"),
            ("0 0 0 31W 2 *", "UTC"),
            ("* * * ? 2 1#5", "America/New_York"),
        ] {
            for base in [from, late] {
                let err = sched(expr, tz).first_fire_after(base).unwrap_err();
                assert_eq!(err.field, "expr");
                assert!(
                    err.message.contains("no fire time within 5 years"),
                    "{expr}: {err}"
                );
            }
        }
        // Every second of New York's spring gap, which never exists on the wall clock: the
        // costliest walk (each second of the hour is tried and refused, every year).
        assert!(
            sched("* * 2 * 3 0#2", "America/New_York")
                .first_fire_after(from)
                .is_err()
        );
        // Debug builds included: the bounded search costs milliseconds, never seconds.
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        // Feb 29 fires from 2026, but not from 2097 (2100 is no leap year).
        assert_eq!(
            sched("0 0 29 2 *", "UTC").first_fire_after(from),
            Ok(utc(2028, 2, 29, 0, 0, 0))
        );
        assert!(sched("0 0 29 2 *", "UTC").first_fire_after(late).is_err());
    }

    #[test]
    fn bases_at_the_ends_of_time_return_none_without_panicking() {
        for zone in ["Asia/Shanghai", "America/New_York"] {
            let s = sched("0 0 * * *", zone);
            assert_eq!(s.next_after(DateTime::<Utc>::MAX_UTC), None);
            assert_eq!(s.next_after(DateTime::<Utc>::MIN_UTC), None);
            assert_eq!(s.next_after(utc(5000, 1, 1, 0, 0, 0)), None);
        }
        assert_eq!(
            sched("0 0 * * *", "UTC").next_after(utc(4998, 6, 1, 0, 0, 0)),
            Some(utc(4998, 6, 2, 0, 0, 0))
        );
    }

    #[test]
    fn fire_instants_strictly_increase_over_a_year_in_many_zones() {
        let exprs = [
            "30 1,2,3 * * *",
            "0 0-59/30 1,2 * * *",
            "*/20 1-3 * * *",
            "0 */4 * * *",
            "@hourly",
            "@daily",
            "15 45 2 * * 0",
        ];
        let zones = [
            "America/New_York",
            "Europe/London",
            "Australia/Lord_Howe",
            "America/Santiago",
            "Asia/Shanghai",
            "UTC",
        ];
        let from = utc(2026, 1, 1, 0, 0, 0);
        let until = utc(2027, 1, 1, 0, 0, 0);
        for expr in exprs {
            for zone in zones {
                let s = sched(expr, zone);
                let tz = s.timezone();
                let got = fires_until(expr, zone, from, until);
                assert!(
                    got.len() >= 52,
                    "{expr} in {zone}: only {} fires",
                    got.len()
                );
                for pair in got.windows(2) {
                    assert!(
                        pair[0] < pair[1],
                        "{expr} in {zone}: {} then {}",
                        pair[0],
                        pair[1]
                    );
                }
                for t in &got {
                    assert_eq!(t.timestamp_subsec_nanos(), 0);
                    let local = t.with_timezone(&tz);
                    let matches = s.cron.is_time_matching(&local).unwrap();
                    if s.is_wildcard() {
                        // A wildcard job only ever fires at a wall-clock time it names.
                        assert!(matches, "{expr} in {zone}: {local}");
                    } else if !matches {
                        // A fixed job fires elsewhere only at the end of a gap: an instant
                        // whose offset differs from the second before.
                        let before = (*t - TimeDelta::seconds(1)).with_timezone(&tz);
                        assert_ne!(
                            chrono::Offset::fix(before.offset()),
                            chrono::Offset::fix(local.offset()),
                            "{expr} in {zone}: {local}"
                        );
                    }
                }
            }
        }
    }
}
