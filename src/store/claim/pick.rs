//! Step 1 of a claim: lock candidate rows and choose fairly among them (see the module above).

use std::collections::HashSet;

use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::*;
use crate::store::statements::sql;
/// Step 1: lock candidates and choose fairly among them. Returns the chosen rows in claim order,
/// and what the pick found on the way ([`PickNotes`]).
pub(super) async fn pick(
    conn: &mut PgConnection,
    scope: ClaimScope<'_>,
    max: usize,
    head_read: HeadRead,
    beside: Option<&RoundSeat>,
) -> Result<(Vec<Chosen>, PickNotes)> {
    let mut notes = PickNotes::default();
    if let (ClaimScope::Agent { agent_id, .. }, HeadRead::Try) = (scope, head_read) {
        // The head: exactly as many rows as the claim takes. Every row read is locked until
        // the claim commits, so a row read and not taken is hidden from every other claimer:
        // a head of eight for a claim of one left a concurrent claim empty-handed while seven
        // instances waited. When the head cannot settle the pick (its task has no room, or the
        // claim would take a task's second row), the per-task look below takes over.
        let scan = max;
        match read_head(conn, agent_id, scan, beside).await? {
            Some(head) => {
                let p = pick_within_limits(conn, &head, max, &mut notes).await?;
                if p.settled_by_head(max, head.len() >= scan) {
                    return Ok((chosen_of(&head, &p), notes));
                }
            }
            None => notes.limited = true,
        }
        notes.head_unsettled = true;
    }
    // Per task: first a fair share of each task's oldest rows; if some task may have had more
    // to give and the claim is not full, once more with the whole claim as the share.
    let rows = read_per_task(conn, scope, max, None, beside).await?;
    let p = pick_within_limits(conn, &rows, max, &mut notes).await?;
    if p.tasks_at_cap.is_empty() || (p.chosen.len() >= max && !outranked(&rows, &p)) {
        return Ok((chosen_of(&rows, &p), notes));
    }
    let rows = read_per_task(conn, scope, max, Some(max), beside).await?;
    let p = pick_within_limits(conn, &rows, max, &mut notes).await?;
    Ok((chosen_of(&rows, &p), notes))
}

/// What a pick found besides the rows it chose.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PickNotes {
    /// The head was read and could not settle the pick.
    pub(super) head_unsettled: bool,
    /// Some of the agent's work was passed over because a shared limit it draws on had no
    /// room (the head was not read for it, or a candidate row was left).
    pub(super) limited: bool,
    /// Some limit a candidate row draws on has a rate (its starts are admitted one by one, at
    /// the instant the rate is tested).
    pub(super) rated: bool,
}

/// Whether a task the share cut short may have rows that outrank a chosen row: its last row
/// read is of a more urgent priority than the least urgent chosen row (its next rows, of that
/// priority or later, would rank before it). Within one priority a full claim is settled: the
/// cut-short tasks' next rows come in a later round than every chosen row's.
fn outranked(rows: &[CandidateRow], p: &Pick<Uuid>) -> bool {
    let chosen: HashSet<Uuid> = p.chosen.iter().copied().collect();
    let worst = rows
        .iter()
        .filter(|r| chosen.contains(&r.id))
        .map(|r| r.priority)
        .max()
        .unwrap_or(0);
    p.tasks_at_cap.iter().any(|task| {
        rows.iter()
            .filter(|r| &r.task_id == task)
            .map(|r| r.priority)
            .max()
            .is_some_and(|last| last < worst)
    })
}

/// The fair pick over `rows`, passing over rows whose shared limits have no room now (as read
/// without locks: [`admit_within_limits`] decides for real; a row passed over is noted in
/// `notes`). Rows that draw on no limit cost nothing here.
async fn pick_within_limits(
    conn: &mut PgConnection,
    rows: &[CandidateRow],
    max: usize,
    notes: &mut PickNotes,
) -> Result<Pick<Uuid>> {
    let cands: Vec<Candidate<Uuid>> = rows.iter().map(CandidateRow::candidate).collect();
    let drawn: Vec<(String, String)> = rows
        .iter()
        .filter_map(|r| r.draws.as_ref())
        .flat_map(|d| d.0.iter().map(|d| (d.name.clone(), d.key.clone())))
        .collect();
    if drawn.is_empty() {
        return Ok(fair_pick(&cands, max));
    }
    let mut budgets = crate::store::limits::read_budgets(conn, &drawn, false).await?;
    notes.rated |= budgets.list.iter().any(|b| b.spec.rate.is_some());
    Ok(fair_pick_with(&cands, max, |pos| {
        let Some(draws) = rows.get(pos).and_then(|r| r.draws.as_ref()) else {
            return true;
        };
        let idx = budgets.indexes(&draws.0);
        let fits = admit_all(&mut budgets.list, &idx);
        notes.limited |= !fits;
        fits
    }))
}

/// A row chosen by the pick, with its task and the task's limit.
pub(super) struct Chosen {
    pub(super) id: Uuid,
    pub(super) task_id: String,
    pub(super) lim: i32,
    pub(super) draws: Option<Vec<RenderedDraw>>,
}

fn chosen_of(rows: &[CandidateRow], p: &Pick<Uuid>) -> Vec<Chosen> {
    // By id once: a claim round chooses up to 1,000 rows out of as many.
    let by_id: std::collections::HashMap<Uuid, &CandidateRow> =
        rows.iter().map(|r| (r.id, r)).collect();
    p.chosen
        .iter()
        .filter_map(|id| by_id.get(id).copied())
        .map(|r| Chosen {
            id: r.id,
            task_id: r.task_id.clone(),
            lim: r.lim.unwrap_or(0),
            draws: r.draws.as_ref().map(|d| d.0.clone()),
        })
        .collect()
}

/// A head row; its task's limit and room are read on the task's first row only. The answer
/// always has a row: with no head row, one of nulls, and when the head was not read (a task of
/// the agent is on a full budget without keys), one with `handover`.
#[derive(sqlx::FromRow)]
struct HeadRow {
    id: Option<Uuid>,
    task_id: Option<String>,
    first: Option<bool>,
    room: Option<i64>,
    lim: Option<i32>,
    draws: Option<Json<Vec<RenderedDraw>>>,
    priority: Option<i16>,
    handover: bool,
}

/// The agent's oldest available PENDING rows (locked, skipping rows other claimers hold), each
/// with its task's room; `None` when the head is not read because a task of the agent draws on
/// a budget without keys that has no room (its rows could fill the head: the per-task read
/// passes over the task whole instead).
///
/// Each task's limit and RUNNING count are read once, on its first head row, by a lookup per
/// row: the work grows with the head, whatever the planner thinks of its size (a semi-join
/// on the freshly locked head was planned as a rescan of the head per row).
pub(super) async fn read_head(
    conn: &mut PgConnection,
    agent_id: &str,
    scan: usize,
    beside: Option<&RoundSeat>,
) -> Result<Option<Vec<CandidateRow>>> {
    let rows: Vec<HeadRow> = sqlx::query_as(sql!("claim/pick/read_head"))
        .bind(agent_id)
        .bind(i64::try_from(scan).unwrap_or(i64::MAX))
        .bind(beside.map(RoundSeat::others).unwrap_or_default())
        .fetch_all(&mut *conn)
        .await?;
    if rows.iter().any(|r| r.handover) {
        return Ok(None);
    }
    Ok(Some(head_candidates(rows)))
}

/// Every head row with its task's limit and room, as read on the task's first row.
fn head_candidates(rows: Vec<HeadRow>) -> Vec<CandidateRow> {
    let of_task: std::collections::HashMap<String, (Option<i64>, Option<i32>)> = rows
        .iter()
        .filter(|r| r.first == Some(true))
        .filter_map(|r| Some((r.task_id.clone()?, (r.room, r.lim))))
        .collect();
    rows.into_iter()
        .filter_map(|r| {
            let (id, task_id, priority) = (r.id?, r.task_id?, r.priority?);
            let (room, lim) = of_task.get(&task_id).copied().unwrap_or((None, None));
            Some(CandidateRow {
                id,
                task_id,
                room,
                lim,
                draws: r.draws,
                priority,
            })
        })
        .collect()
}

/// Every eligible task's oldest available PENDING rows (locked, skipping rows other claimers
/// hold): at most its room, and at most `share` rows (by default the claim divided evenly
/// over the tasks that have work, rounded up). The eligible tasks (one agent's, or the webhook
/// tasks) drive the look, whatever the planner thinks of the instance table's size.
async fn read_per_task(
    conn: &mut PgConnection,
    scope: ClaimScope<'_>,
    max: usize,
    share: Option<usize>,
    beside: Option<&RoundSeat>,
) -> Result<Vec<CandidateRow>> {
    let statement = match scope {
        ClaimScope::Agent { .. } => sql!("claim/pick/read_per_task_agent"),
        ClaimScope::Webhook { .. } => sql!("claim/pick/read_per_task_webhook"),
    };
    let query = sqlx::query_as(statement)
        .bind(scope.agent())
        .bind(scope.cap())
        .bind(i64::try_from(max).unwrap_or(i64::MAX))
        .bind(share.map(|s| i64::try_from(s).unwrap_or(i64::MAX)));
    let query = match scope {
        ClaimScope::Agent { .. } => query.bind(beside.map(RoundSeat::others).unwrap_or_default()),
        ClaimScope::Webhook { .. } => query,
    };
    query
        .fetch_all(&mut *conn)
        .await
        .map_err(crate::store::Error::from)
}

#[cfg(test)]
mod tests {
    #[test]
    fn head_rows_take_their_tasks_room_from_the_tasks_first_row() {
        let row = |n: u128, task: &str, first: bool, room: Option<i64>, lim: Option<i32>| {
            super::HeadRow {
                id: Some(uuid::Uuid::from_u128(n)),
                task_id: Some(task.to_owned()),
                first: Some(first),
                room,
                lim,
                draws: None,
                priority: Some(5),
                handover: false,
            }
        };
        // a: room 2 of 5; p: paused (no room on its first row); b: room 0 of 1.
        let rows = vec![
            row(1, "a", false, None, None),
            row(2, "p", true, None, None),
            row(3, "a", true, Some(2), Some(5)),
            row(4, "b", true, Some(0), Some(1)),
            row(5, "p", false, None, None),
        ];
        let got: Vec<(u128, Option<i64>, Option<i32>)> = super::head_candidates(rows)
            .into_iter()
            .map(|c| (c.id.as_u128(), c.room, c.lim))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, Some(2), Some(5)),
                (2, None, None),
                (3, Some(2), Some(5)),
                (4, Some(0), Some(1)),
                (5, None, None),
            ]
        );
        // No head row: the answer's one row of nulls is no candidate.
        let none = super::HeadRow {
            id: None,
            task_id: None,
            first: None,
            room: None,
            lim: None,
            draws: None,
            priority: None,
            handover: false,
        };
        assert!(super::head_candidates(vec![none]).is_empty());
    }
}
