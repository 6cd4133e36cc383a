//! Scheduling decisions, pure: which due windows run, which are recorded as skipped and why
//! (catch-up and overlap, as openapi.yaml's "Scheduling policies" states them). The trigger
//! loop feeds in the task, the database clock and the task's unfinished instances, and writes
//! out exactly what the [`Plan`] says.

use std::collections::{HashSet, VecDeque};

use chrono::{DateTime, Duration, Utc};

use super::instance::Source;
use super::schedule::{Schedule, window_key};
use super::task::{Catchup, Execution, FieldError, Overlap};

/// At most this many rows are written for one catch-up; the rest are counted.
pub const MAX_CATCHUP_ROWS: usize = 1000;
/// At most this many on-time windows (inside the misfire grace) are planned in one pass for one
/// task. The rest stay due: `next_fire_at` stops at the first of them, and the trigger loop runs
/// its next pass at once, so a second-by-second schedule with a day of grace is materialised in
/// bounded slices instead of one unbounded transaction.
pub const MAX_ON_TIME_ROWS: usize = 1000;
/// How late the trigger loop itself may reach a window, which no `misfire_grace_seconds` takes
/// away: the pass at an instant runs a little after it (its wake-up and its queries), so without
/// this a grace of 0 would record every window it writes as missed. A grace below this counts
/// as this; a window is missed only when reached later than both.
pub const LOOP_LATENESS_SECONDS: i64 = 1;
/// At most this many due windows are enumerated in one pass for one task. Past it the schedule
/// jumps to the present and the remainder is reported as "at least" that many.
pub const MAX_ENUMERATED_WINDOWS: usize = 100_000;

/// Why a window was recorded without running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// Missed by more than `misfire_grace_seconds`, and more than [`LOOP_LATENESS_SECONDS`]
    /// (daemon down or far behind).
    Missed,
    /// `concurrency_limit` unfinished instances already exist; names the oldest blocking window.
    Overlap { blocking_window: String },
    /// Overlap `replace`: a newer window in the same pass took its place before it was written.
    Replaced { by_window: String },
}

impl SkipReason {
    /// The `skip_reason` column: `missed`, or `overlap: window <key> still unfinished`.
    pub fn as_text(&self) -> String {
        match self {
            SkipReason::Missed => "missed".to_owned(),
            SkipReason::Overlap { blocking_window } => {
                format!("overlap: window {blocking_window} still unfinished")
            }
            SkipReason::Replaced { by_window } => {
                format!("overlap: replaced by window {by_window}")
            }
        }
    }

    /// The label of `kairos_skipped_total{reason}`.
    pub fn label(&self) -> &'static str {
        match self {
            SkipReason::Missed => "missed",
            SkipReason::Overlap { .. } | SkipReason::Replaced { .. } => "overlap",
        }
    }
}

/// One window to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWindow {
    pub scheduled_at: DateTime<Utc>,
    pub source: Source,
    /// `None`: insert PENDING. `Some`: insert SKIPPED with this reason.
    pub skip: Option<SkipReason>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub windows: Vec<PlannedWindow>,
    /// Window keys of unfinished instances the `replace` policy cancels, oldest first.
    pub cancel: Vec<String>,
    /// The next window after everything planned here; `None` when the schedule has ended.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// Missed windows neither run nor recorded (beyond [`MAX_CATCHUP_ROWS`]).
    pub not_recorded: u64,
    /// True when enumeration stopped at [`MAX_ENUMERATED_WINDOWS`]; `not_recorded` is then a
    /// lower bound.
    pub truncated: bool,
    /// Keys of due windows left out because a row for them already exists.
    pub existing: Vec<String>,
}

impl Plan {
    /// Every planned window runs (none skipped) and nothing is cancelled: a decision that
    /// instances finishing later cannot change.
    pub fn runs_all(&self) -> bool {
        self.cancel.is_empty() && self.windows.iter().all(|w| w.skip.is_none())
    }
}

/// Decide what to write for a task whose next window `next_fire_at` is due at `now`.
///
/// `unfinished` holds the window keys of the task's PENDING/RUNNING/FAILED instances, oldest
/// first. `existing` holds keys of due windows that already have a row (a manual trigger or a
/// backfill made them): they are counted, not planned, so they never take a concurrency slot
/// in the plan. Windows later than `now` are left for a later pass.
pub fn plan_due_windows(
    schedule: &Schedule,
    exec: &Execution,
    next_fire_at: DateTime<Utc>,
    now: DateTime<Utc>,
    unfinished: &[String],
    existing: &HashSet<String>,
) -> Plan {
    let grace = exec.misfire_grace_seconds.max(LOOP_LATENESS_SECONDS);
    let grace_floor = now - Duration::seconds(grace);
    let catchup_floor = now - Duration::seconds(exec.catchup_window_seconds);

    // 1. Enumerate due windows, split into missed (older than the grace) and on time. Missed
    //    windows are kept in a bounded ring: only the newest MAX_CATCHUP_ROWS are ever written.
    let mut missed: VecDeque<DateTime<Utc>> = VecDeque::new();
    let mut on_time: Vec<DateTime<Utc>> = Vec::new();
    let mut plan = Plan::default();
    let mut cursor = Some(next_fire_at);
    let mut last_due = None;
    let mut enumerated = 0usize;
    while let Some(w) = cursor {
        if w > now {
            break;
        }
        if enumerated >= MAX_ENUMERATED_WINDOWS {
            // Jump: count nothing more, resume from the first window within the grace.
            plan.truncated = true;
            cursor = match last_due {
                Some(l) if l >= grace_floor => schedule.next_after(l),
                _ => schedule.next_at_or_after(grace_floor),
            };
            while let Some(w) = cursor {
                if w > now || on_time.len() >= MAX_ON_TIME_ROWS {
                    break;
                }
                on_time.push(w);
                cursor = schedule.next_after(w);
            }
            break;
        }
        enumerated += 1;
        last_due = Some(w);
        if w < grace_floor {
            missed.push_back(w);
            if missed.len() > MAX_CATCHUP_ROWS {
                missed.pop_front();
                plan.not_recorded += 1;
            }
        } else {
            if on_time.len() >= MAX_ON_TIME_ROWS {
                // `w` is due but left, with everything after it, for the next pass.
                break;
            }
            on_time.push(w);
        }
        cursor = schedule.next_after(w);
    }
    // The loop stops at the first window after `now`, at the first on-time window beyond
    // MAX_ON_TIME_ROWS, or when the schedule has ended.
    plan.next_fire_at = cursor;

    // 2. Catch-up policy decides which missed windows run.
    let newest_missed = missed.back().copied();
    let mut candidates: Vec<(DateTime<Utc>, Source, bool)> = Vec::new();
    for w in missed {
        let runs = match exec.catchup {
            Catchup::Skip => false,
            Catchup::Latest => Some(w) == newest_missed,
            Catchup::All => w >= catchup_floor,
        };
        candidates.push((w, Source::Catchup, runs));
    }
    candidates.extend(on_time.into_iter().map(|w| (w, Source::Schedule, true)));
    if !existing.is_empty() {
        candidates.retain(|(w, _, _)| {
            let key = window_key(*w);
            let exists = existing.contains(&key);
            if exists {
                plan.existing.push(key);
            }
            !exists
        });
    }

    // 3. Overlap policy decides whether each running window may start next to the unfinished ones.
    let (windows, cancel) = apply_overlap(exec, candidates, unfinished);
    plan.windows = windows;
    plan.cancel = cancel;
    plan
}

/// A window that is unfinished while the overlap policy runs: one already in the database, or
/// one planned earlier in the same call (by its index in the output).
enum Live {
    Stored(String),
    Planned(usize, String),
}

impl Live {
    fn key(&self) -> &str {
        match self {
            Live::Stored(k) | Live::Planned(_, k) => k,
        }
    }
}

/// Apply the overlap policy to candidate windows `(scheduled_at, source, runs)` in window order,
/// next to the task's `unfinished` window keys (oldest first). Candidates with `runs == false`
/// are recorded as missed. Returns the windows to write and the stored window keys to cancel
/// (`replace`); a window planned in the same call and then replaced is written SKIPPED instead.
pub fn apply_overlap(
    exec: &Execution,
    candidates: Vec<(DateTime<Utc>, Source, bool)>,
    unfinished: &[String],
) -> (Vec<PlannedWindow>, Vec<String>) {
    let mut out: Vec<PlannedWindow> = Vec::with_capacity(candidates.len());
    let mut cancel = Vec::new();
    let mut live: VecDeque<Live> = unfinished.iter().cloned().map(Live::Stored).collect();
    let limit = usize::try_from(exec.concurrency_limit.max(1)).unwrap_or(1);
    for (w, source, runs) in candidates {
        if !runs {
            out.push(PlannedWindow {
                scheduled_at: w,
                source,
                skip: Some(SkipReason::Missed),
            });
            continue;
        }
        let key = window_key(w);
        let skip = match exec.overlap {
            Overlap::Skip if live.len() >= limit => {
                live.front().map(|blocking| SkipReason::Overlap {
                    blocking_window: blocking.key().to_owned(),
                })
            }
            Overlap::Replace => {
                while live.len() >= limit {
                    match live.pop_front() {
                        Some(Live::Stored(oldest)) => cancel.push(oldest),
                        Some(Live::Planned(i, _)) => {
                            if let Some(p) = out.get_mut(i) {
                                p.skip = Some(SkipReason::Replaced {
                                    by_window: key.clone(),
                                });
                            }
                        }
                        None => break,
                    }
                }
                None
            }
            _ => None,
        };
        if skip.is_none() {
            live.push_back(Live::Planned(out.len(), key));
        }
        out.push(PlannedWindow {
            scheduled_at: w,
            source,
            skip,
        });
    }
    (out, cancel)
}

/// The windows of `schedule` in `[from, to)` for a backfill, oldest first. A range holding
/// more than `max_windows` is refused (on `to`): it is to be backfilled in parts.
pub fn backfill_windows(
    schedule: &Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    max_windows: usize,
) -> Result<Vec<DateTime<Utc>>, FieldError> {
    let mut windows = Vec::new();
    let mut cursor = schedule.next_at_or_after(from);
    while let Some(w) = cursor {
        if w >= to {
            break;
        }
        if windows.len() >= max_windows {
            return Err(FieldError::new(
                "to",
                format!("the range holds more than {max_windows} windows; backfill it in parts"),
            ));
        }
        windows.push(w);
        cursor = schedule.next_after(w);
    }
    Ok(windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("test timestamp")
            .with_timezone(&Utc)
    }

    fn every_second() -> Schedule {
        Schedule::Interval {
            every_seconds: 1,
            start_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }

    fn exec(overlap: Overlap, catchup: Catchup, limit: i32, grace: i64) -> Execution {
        Execution {
            overlap,
            catchup,
            concurrency_limit: limit,
            misfire_grace_seconds: grace,
            ..Execution::default()
        }
    }

    fn summary(plan: &Plan) -> Vec<(String, &'static str, Option<String>)> {
        plan.windows
            .iter()
            .map(|w| {
                (
                    window_key(w.scheduled_at)[11..19].to_owned(),
                    w.source.as_str(),
                    w.skip.as_ref().map(SkipReason::as_text),
                )
            })
            .collect()
    }

    #[test]
    fn one_due_window_runs_and_the_next_is_scheduled() {
        let now = t("2026-11-29T08:30:00.400Z");
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Queue, Catchup::Skip, 1, 60),
            t("2026-11-29T08:30:00Z"),
            now,
            &[],
            &HashSet::new(),
        );
        assert_eq!(
            summary(&plan),
            vec![("08:30:00".to_owned(), "schedule", None)]
        );
        assert_eq!(plan.next_fire_at, Some(t("2026-11-29T08:30:01Z")));
    }

    #[test]
    fn a_grace_of_zero_still_runs_a_window_the_loop_reaches_within_its_own_lateness() {
        let grace_zero = exec(Overlap::Queue, Catchup::Skip, 1, 0);
        let plan = plan_due_windows(
            &every_second(),
            &grace_zero,
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:00.400Z"),
            &[],
            &HashSet::new(),
        );
        assert_eq!(
            summary(&plan),
            vec![("08:30:00".to_owned(), "schedule", None)]
        );
        // Reached later than the loop's own lateness: missed.
        let plan = plan_due_windows(
            &every_second(),
            &grace_zero,
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:01.400Z"),
            &[],
            &HashSet::new(),
        );
        assert_eq!(
            summary(&plan),
            vec![
                ("08:30:00".to_owned(), "catchup", Some("missed".to_owned())),
                ("08:30:01".to_owned(), "schedule", None),
            ]
        );
    }

    #[test]
    fn catchup_skip_records_missed_windows_and_runs_none_of_them() {
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Queue, Catchup::Skip, 1, 0),
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:03.500Z"),
            &[],
            &HashSet::new(),
        );
        let s = summary(&plan);
        assert_eq!(s.len(), 4);
        // The newest is inside the loop's own lateness, so on time.
        assert!(
            s[..3]
                .iter()
                .all(|(_, src, skip)| *src == "catchup" && skip.as_deref() == Some("missed"))
        );
        assert_eq!(s[3], ("08:30:03".to_owned(), "schedule", None));
        assert_eq!(plan.next_fire_at, Some(t("2026-11-29T08:30:04Z")));
    }

    #[test]
    fn catchup_latest_runs_only_the_newest_missed_window() {
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Queue, Catchup::Latest, 1, 0),
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:03.500Z"),
            &[],
            &HashSet::new(),
        );
        let running: Vec<_> = plan.windows.iter().filter(|w| w.skip.is_none()).collect();
        // The newest missed window, then the on-time one inside the loop's own lateness.
        assert_eq!(running.len(), 2);
        assert_eq!(running[0].scheduled_at, t("2026-11-29T08:30:02Z"));
        assert_eq!(running[0].source, Source::Catchup);
        assert_eq!(running[1].scheduled_at, t("2026-11-29T08:30:03Z"));
        assert_eq!(running[1].source, Source::Schedule);
    }

    #[test]
    fn catchup_all_runs_missed_windows_inside_the_catchup_window_only() {
        let mut e = exec(Overlap::Queue, Catchup::All, 1, 0);
        e.catchup_window_seconds = 2;
        let plan = plan_due_windows(
            &every_second(),
            &e,
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:03.500Z"),
            &[],
            &HashSet::new(),
        );
        assert_eq!(
            summary(&plan),
            vec![
                ("08:30:00".to_owned(), "catchup", Some("missed".to_owned())),
                ("08:30:01".to_owned(), "catchup", Some("missed".to_owned())),
                ("08:30:02".to_owned(), "catchup", None),
                ("08:30:03".to_owned(), "schedule", None),
            ]
        );
    }

    #[test]
    fn overlap_skip_names_the_blocking_window() {
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Skip, Catchup::Skip, 1, 60),
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:01Z"),
            &["2026-11-29T08:29:59Z".to_owned()],
            &HashSet::new(),
        );
        assert_eq!(
            summary(&plan),
            vec![
                (
                    "08:30:00".to_owned(),
                    "schedule",
                    Some("overlap: window 2026-11-29T08:29:59Z still unfinished".to_owned())
                ),
                (
                    "08:30:01".to_owned(),
                    "schedule",
                    Some("overlap: window 2026-11-29T08:29:59Z still unfinished".to_owned())
                ),
            ]
        );
    }

    #[test]
    fn overlap_skip_counts_windows_planned_in_the_same_pass() {
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Skip, Catchup::Skip, 2, 60),
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:02Z"),
            &[],
            &HashSet::new(),
        );
        let skipped: Vec<_> = plan.windows.iter().map(|w| w.skip.is_some()).collect();
        assert_eq!(skipped, vec![false, false, true]);
    }

    #[test]
    fn overlap_replace_cancels_the_oldest_unfinished_window() {
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Replace, Catchup::Skip, 1, 60),
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:00Z"),
            &["2026-11-29T08:29:59Z".to_owned()],
            &HashSet::new(),
        );
        assert_eq!(plan.cancel, vec!["2026-11-29T08:29:59Z".to_owned()]);
        assert!(plan.windows[0].skip.is_none());
    }

    #[test]
    fn overlap_replace_within_one_pass_keeps_only_the_newest_window_running() {
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Replace, Catchup::Skip, 1, 60),
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:02Z"),
            &["2026-11-29T08:29:59Z".to_owned()],
            &HashSet::new(),
        );
        assert_eq!(plan.cancel, vec!["2026-11-29T08:29:59Z".to_owned()]);
        assert_eq!(
            summary(&plan),
            vec![
                (
                    "08:30:00".to_owned(),
                    "schedule",
                    Some("overlap: replaced by window 2026-11-29T08:30:01Z".to_owned())
                ),
                (
                    "08:30:01".to_owned(),
                    "schedule",
                    Some("overlap: replaced by window 2026-11-29T08:30:02Z".to_owned())
                ),
                ("08:30:02".to_owned(), "schedule", None),
            ]
        );
    }

    #[test]
    fn windows_that_already_exist_are_counted_not_planned() {
        let existing: HashSet<String> = ["2026-11-29T08:30:00Z".to_owned()].into_iter().collect();
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Skip, Catchup::Skip, 1, 60),
            t("2026-11-29T08:30:00Z"),
            t("2026-11-29T08:30:01Z"),
            &[],
            &existing,
        );
        assert_eq!(plan.existing, vec!["2026-11-29T08:30:00Z".to_owned()]);
        // The existing window takes no slot: the next one runs.
        assert_eq!(
            summary(&plan),
            vec![("08:30:01".to_owned(), "schedule", None)]
        );
    }

    #[test]
    fn catchup_recording_is_bounded_and_the_rest_counted() {
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Queue, Catchup::Skip, 1, 0),
            t("2026-11-29T08:00:00Z"),
            t("2026-11-29T09:00:00.500Z"),
            &[],
            &HashSet::new(),
        );
        // 3,600 missed windows and 09:00:00, on time (inside the loop's own lateness).
        assert_eq!(plan.windows.len(), MAX_CATCHUP_ROWS + 1);
        assert_eq!(plan.not_recorded, 3600 - MAX_CATCHUP_ROWS as u64);
        // The newest missed windows are the ones kept.
        let missed: Vec<_> = plan.windows.iter().filter(|w| w.skip.is_some()).collect();
        assert_eq!(missed.len(), MAX_CATCHUP_ROWS);
        assert_eq!(
            missed.last().map(|w| w.scheduled_at),
            Some(t("2026-11-29T08:59:59Z"))
        );
        assert!(!plan.truncated);
    }

    #[test]
    fn enumeration_is_bounded_after_a_very_long_outage() {
        let plan = plan_due_windows(
            &every_second(),
            &exec(Overlap::Queue, Catchup::Skip, 1, 0),
            t("2026-01-01T00:00:00Z"),
            t("2026-11-29T09:00:00.500Z"),
            &[],
            &HashSet::new(),
        );
        assert!(plan.truncated);
        assert_eq!(plan.next_fire_at, Some(t("2026-11-29T09:00:01Z")));
        assert!(plan.windows.len() <= MAX_CATCHUP_ROWS + 1);
    }

    #[test]
    fn on_time_windows_are_bounded_per_pass_and_the_rest_stay_due() {
        // One window a second and a day of grace: 86,400 windows are on time.
        let now = t("2026-11-30T00:00:00.500Z");
        let e = exec(Overlap::Queue, Catchup::Skip, 1, 86_400);
        let plan = plan_due_windows(
            &every_second(),
            &e,
            t("2026-11-29T00:00:01Z"),
            now,
            &[],
            &HashSet::new(),
        );
        assert_eq!(plan.windows.len(), MAX_ON_TIME_ROWS);
        assert!(plan.windows.iter().all(|w| w.skip.is_none()));
        assert_eq!(plan.not_recorded, 0);
        let next = t("2026-11-29T00:00:01Z") + Duration::seconds(MAX_ON_TIME_ROWS as i64);
        assert_eq!(plan.next_fire_at, Some(next), "the next pass starts there");
        assert_eq!(
            plan.windows.last().map(|w| w.scheduled_at),
            Some(next - Duration::seconds(1))
        );

        // After a very long outage the jump to the grace is bounded the same way.
        let plan = plan_due_windows(
            &every_second(),
            &e,
            t("2026-01-01T00:00:00Z"),
            now,
            &[],
            &HashSet::new(),
        );
        assert!(plan.truncated);
        let on_time = plan.windows.iter().filter(|w| w.skip.is_none()).count();
        assert_eq!(on_time, MAX_ON_TIME_ROWS);
        assert!(plan.windows.len() <= MAX_CATCHUP_ROWS + MAX_ON_TIME_ROWS);
        assert!(plan.next_fire_at.is_some_and(|n| n <= now));
    }

    #[test]
    fn a_once_schedule_ends_after_its_window() {
        let at = t("2026-11-29T08:30:00Z");
        let plan = plan_due_windows(
            &Schedule::Once { at },
            &Execution::default(),
            at,
            t("2026-11-29T08:30:00.200Z"),
            &[],
            &HashSet::new(),
        );
        assert_eq!(plan.windows.len(), 1);
        assert_eq!(plan.next_fire_at, None);
    }

    #[test]
    fn backfill_windows_cover_the_half_open_range() {
        let every_minute = Schedule::Interval {
            every_seconds: 60,
            start_at: DateTime::<Utc>::UNIX_EPOCH,
        };
        let from = t("2026-01-01T00:00:00Z");
        let to = t("2026-01-01T00:03:00Z");
        assert_eq!(
            backfill_windows(&every_minute, from, to, 3),
            Ok(vec![
                t("2026-01-01T00:00:00Z"),
                t("2026-01-01T00:01:00Z"),
                t("2026-01-01T00:02:00Z"),
            ])
        );
        assert_eq!(
            backfill_windows(&every_minute, t("2026-01-01T00:00:30Z"), to, 3),
            Ok(vec![t("2026-01-01T00:01:00Z"), t("2026-01-01T00:02:00Z")])
        );
        assert_eq!(backfill_windows(&every_minute, to, to, 0), Ok(Vec::new()));
    }

    #[test]
    fn backfill_windows_past_the_limit_are_refused_on_to() {
        let err = backfill_windows(
            &every_second(),
            t("2026-01-01T00:00:00Z"),
            t("2026-01-01T00:00:10Z"),
            9,
        )
        .expect_err("ten windows, nine allowed");
        assert_eq!(err.field, "to");
        assert_eq!(
            err.message,
            "the range holds more than 9 windows; backfill it in parts"
        );
        assert!(
            backfill_windows(
                &Schedule::None,
                t("2026-01-01T00:00:00Z"),
                t("2027-01-01T00:00:00Z"),
                0
            )
            .is_ok()
        );
    }
}
