//! Fair claims: which of the claimable instances one claim takes.
//!
//! The rule ("claims are fair", openapi.yaml `POST /v1/claims`):
//! - a task contributes at most its *room* (`concurrency_limit` minus its RUNNING instances), so a
//!   task at its limit contributes nothing and never hides another task's work;
//! - within a task the oldest available instance goes first;
//! - across tasks the claim goes round by round: every task's oldest instance (oldest first),
//!   then every task's second oldest, and so on. One backlogged task therefore takes one slot a
//!   round, never the whole batch while other tasks wait;
//! - priorities are strict: every claimable instance of priority 0 goes before any of priority
//!   1, and so on; the rounds above run within each priority. Lower priorities wait while more
//!   urgent work is claimable (`waiting_on: priority` says so), by design: an operator who wants
//!   them to move lowers the urgent work's priority or raises its capacity.
//!
//! Candidates arrive in availability order (`available_at`, `scheduled_at`, `id`), the order the
//! claim index yields them. The store reads only the head of that order when it can: the head is
//! enough exactly when [`Pick::settled_by_head`] says so; otherwise it reads every eligible task's
//! oldest rows and picks again.

use std::collections::HashMap;

/// One claimable instance, as the store found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<Id> {
    pub id: Id,
    pub task_id: String,
    /// How many more instances of this task may run now (`limit - running`); ≤ 0 means none.
    pub room: i64,
    /// 0 (most urgent) to 9: every claimable candidate of a more urgent priority goes first.
    pub priority: i16,
}

/// What one pick chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick<Id> {
    /// The chosen instances, in claim order (round, then availability).
    pub chosen: Vec<Id>,
    /// The highest round (1 = each task's oldest) among the chosen.
    pub max_round: usize,
    /// Tasks that contributed as many candidates as they were given room for in the input (the
    /// store may have cut them short: they might have more).
    pub tasks_at_cap: Vec<String>,
}

impl<Id> Pick<Id> {
    /// Whether a pick from the head of the availability order (the `head_len` oldest rows,
    /// `truncated` when more exist) equals the pick over all rows. Rows past the head are newer
    /// than every head row, so they can only win a slot with a lower round: a task absent from
    /// the head would enter at round 1. The head is therefore enough when it was complete, or
    /// when the claim filled up with round-1 instances only.
    pub fn settled_by_head(&self, max: usize, truncated: bool) -> bool {
        !truncated || (self.chosen.len() >= max && self.max_round <= 1)
    }
}

/// Choose up to `max` candidates fairly (see the module doc). `candidates` must be in
/// availability order; candidates of a task beyond its room are never chosen.
pub fn fair_pick<Id: Clone>(candidates: &[Candidate<Id>], max: usize) -> Pick<Id> {
    fair_pick_with(candidates, max, |_| true)
}

/// [`fair_pick`] where some candidates may not fit now (their shared limits have no room):
/// `fits(position)` is asked in claim order for each candidate the rule would take next, and
/// takes the candidate's units when it answers yes; a candidate that does not fit is passed
/// over and the next one in claim order gets its slot, so work that waits on a limit never
/// hides work that can run.
pub fn fair_pick_with<Id: Clone>(
    candidates: &[Candidate<Id>],
    max: usize,
    mut fits: impl FnMut(usize) -> bool,
) -> Pick<Id> {
    // Per task: (room, candidates given).
    let mut seen: HashMap<&str, (i64, i64)> = HashMap::new();
    // Per (task, priority): candidates given, for the rounds within a priority.
    let mut rounds: HashMap<(&str, i16), usize> = HashMap::new();
    // (priority, round within the priority, position in availability order)
    let mut ranked: Vec<(i16, usize, usize)> = Vec::with_capacity(candidates.len());
    for (pos, c) in candidates.iter().enumerate() {
        let (room, n) = seen.entry(c.task_id.as_str()).or_insert((c.room, 0));
        *n += 1;
        if *n <= *room {
            let round = rounds.entry((c.task_id.as_str(), c.priority)).or_insert(0);
            *round += 1;
            ranked.push((c.priority, *round, pos));
        }
    }
    ranked.sort_unstable();
    let mut kept: Vec<(usize, usize)> = Vec::with_capacity(max.min(ranked.len()));
    for (_, round, pos) in ranked {
        if kept.len() >= max {
            break;
        }
        if fits(pos) {
            kept.push((round, pos));
        }
    }
    let ranked = kept;
    let max_round = ranked.iter().map(|r| r.0).max().unwrap_or(0);
    let mut taken: HashMap<&str, i64> = HashMap::new();
    let chosen = ranked
        .iter()
        .map(|&(_, pos)| {
            *taken.entry(candidates[pos].task_id.as_str()).or_insert(0) += 1;
            candidates[pos].id.clone()
        })
        .collect();
    let mut tasks_at_cap: Vec<String> = seen
        .iter()
        .filter(|(task, (room, given))| {
            given <= room && taken.get(**task).copied().unwrap_or(0) == *given
        })
        .map(|(task, _)| (*task).to_owned())
        .collect();
    tasks_at_cap.sort_unstable();
    Pick {
        chosen,
        max_round,
        tasks_at_cap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u32, task: &str, room: i64) -> Candidate<u32> {
        Candidate {
            id,
            task_id: task.to_owned(),
            room,
            priority: 5,
        }
    }

    fn p(id: u32, task: &str, priority: i16) -> Candidate<u32> {
        Candidate {
            priority,
            ..c(id, task, 100)
        }
    }

    #[test]
    fn the_most_urgent_priority_goes_first_and_rounds_run_within_it() {
        // In availability order within each priority (the store's order): priority 0 of a and
        // b, then priority 5 of a, b, c.
        let cands = vec![
            p(1, "a", 0),
            p(2, "a", 0),
            p(3, "a", 0),
            p(4, "b", 0),
            p(10, "a", 5),
            p(11, "c", 5),
            p(12, "b", 5),
        ];
        let pick = fair_pick(&cands, 5);
        // Round 1 of priority 0 (a, b), round 2 and 3 of priority 0 (a), then priority 5.
        assert_eq!(pick.chosen, vec![1, 4, 2, 3, 10]);
    }

    #[test]
    fn a_task_at_its_limit_contributes_nothing_and_hides_nothing() {
        // q is at its limit (room 0) with a backlog older than o's single instance.
        let mut cands: Vec<Candidate<u32>> = (0..20).map(|i| c(i, "q", 0)).collect();
        cands.push(c(100, "o", 1));
        let p = fair_pick(&cands, 5);
        assert_eq!(p.chosen, vec![100]);
        assert_eq!(p.max_round, 1);
    }

    #[test]
    fn a_backlogged_task_takes_one_slot_a_round() {
        // a has 10 old instances and room for all of them; b and c have two newer ones each.
        let mut cands: Vec<Candidate<u32>> = (0..10).map(|i| c(i, "a", 100)).collect();
        cands.extend([
            c(20, "b", 100),
            c(21, "c", 100),
            c(22, "b", 100),
            c(23, "c", 100),
        ]);
        let p = fair_pick(&cands, 6);
        // round 1: a0 b20 c21 (oldest first); round 2: a1 b22 c23.
        assert_eq!(p.chosen, vec![0, 20, 21, 1, 22, 23]);
        assert_eq!(p.max_round, 2);
    }

    #[test]
    fn within_a_task_the_oldest_goes_first_and_room_caps_the_take() {
        let cands: Vec<Candidate<u32>> = (0..10).map(|i| c(i, "a", 3)).collect();
        let p = fair_pick(&cands, 100);
        assert_eq!(p.chosen, vec![0, 1, 2]);
        assert!(
            p.tasks_at_cap.is_empty(),
            "the task gave more than its room"
        );
    }

    #[test]
    fn a_task_that_gave_all_its_candidates_is_reported_at_cap() {
        let cands = vec![c(1, "a", 5), c(2, "a", 5), c(3, "b", 5)];
        let p = fair_pick(&cands, 10);
        assert_eq!(p.chosen, vec![1, 3, 2]);
        assert_eq!(p.tasks_at_cap, vec!["a".to_owned(), "b".to_owned()]);
    }

    #[test]
    fn the_head_is_enough_only_when_complete_or_full_of_first_rounds() {
        let distinct: Vec<Candidate<u32>> = (0..8).map(|i| c(i, &format!("t{i}"), 1)).collect();
        let p = fair_pick(&distinct, 4);
        assert!(p.settled_by_head(4, true));
        let backlog: Vec<Candidate<u32>> = (0..8).map(|i| c(i, "a", 100)).collect();
        let p = fair_pick(&backlog, 4);
        assert!(
            !p.settled_by_head(4, true),
            "a newer task could take round 1"
        );
        assert!(p.settled_by_head(4, false), "nothing else exists");
        let short = vec![c(1, "a", 1)];
        assert!(!fair_pick(&short, 4).settled_by_head(4, true));
    }
}
