//! Steps 2 and 3 of a claim: reserve permits, recheck in a fresh snapshot, admit under shared
//! limits and move the granted rows to RUNNING (see the module above).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::pick::Chosen;
use super::*;
use crate::store::statements::sql;
/// Step 2: reserve, per chosen task, up to as many permits as rows were chosen of it, among
/// the permits no committed RUNNING row holds and no other claimer has reserved. Returns
/// `(task_id, permit)` pairs; the reservations last until the transaction ends.
pub(super) async fn reserve_permits(
    conn: &mut PgConnection,
    chosen: &[Chosen],
) -> Result<Vec<(String, i32)>> {
    // Per task in first-chosen order: (task, rows chosen, limit). A round of 1,000 rows may
    // name 1,000 tasks, so each task's entry is found by a map, not a scan.
    let mut want: Vec<(&str, i32, i32)> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for c in chosen {
        let k = *at.entry(c.task_id.as_str()).or_insert_with(|| {
            want.push((c.task_id.as_str(), 0, c.lim));
            want.len() - 1
        });
        if let Some(w) = want.get_mut(k) {
            w.1 += 1;
        }
    }
    let tasks: Vec<&str> = want.iter().map(|w| w.0).collect();
    let counts: Vec<i32> = want.iter().map(|w| w.1).collect();
    let lims: Vec<i32> = want.iter().map(|w| w.2.max(0)).collect();
    // A random first permit per claim spreads concurrent claimers over the permit space. The
    // permits are generated in the select list, so they are produced one at a time and the
    // LIMIT stops them (`generate_series` in FROM would materialise all `lim` of them per task).
    let offsets: Vec<i32> = want
        .iter()
        .map(|w| i32::try_from(rand::random::<u32>() % w.2.max(1).unsigned_abs()).unwrap_or(0))
        .collect();
    let ids: Vec<Uuid> = chosen.iter().map(|c| c.id).collect();
    // How many rows of each task may be taken (window order for queue tasks, in this fresh
    // snapshot), then that many free permits each. CASE fixes the order of the checks: a
    // permit held by a committed row is never locked in passing.
    sqlx::query_as(sql!("claim/take/reserve_permits"))
        .bind(&ids)
        .bind(&tasks)
        .bind(&counts)
        .bind(&lims)
        .bind(&offsets)
        .fetch_all(&mut *conn)
        .await
        .map_err(crate::store::Error::from)
}

/// Step 3a, in a fresh snapshot (it sees every claim committed before the permits were
/// reserved): per chosen task, whether it may still be claimed from (not paused, not deleted,
/// the scope's dispatch mode), its limit, its RUNNING count where permits alone cannot bound
/// the claim, and which of the reserved permits no committed RUNNING row holds. Each task is
/// one primary-key lookup and its own permits, so the cost grows with the claim, never with
/// the table, whatever the statistics say.
#[derive(sqlx::FromRow)]
struct Recheck {
    task_id: String,
    claimable: bool,
    lim: i32,
    /// The task's RUNNING count when some RUNNING row holds a permit at or past `lim` (the
    /// limit was lowered, or another replica caps pushes higher); otherwise 0. Below the
    /// limit the free permits bound a claim by themselves: the permits are 0..lim-1, each
    /// held by at most one RUNNING row, so the free ones number at most `lim - running`.
    /// Not counted on every claim: during a drain a task's run-slot entries are mostly those
    /// of just-finished rows, each read in the heap.
    running: i64,
    /// Reserved permits still free and below `lim` (it may have been lowered since the
    /// permits were reserved), ascending.
    free: Vec<i32>,
    timeout: i64,
    push_lease: i64,
}

impl Recheck {
    /// The task's view for [`grant`].
    fn room(&self) -> TaskRoom<'_> {
        TaskRoom {
            claimable: self.claimable,
            room: i64::from(self.lim) - self.running,
            free: &self.free,
        }
    }
}

async fn recheck(
    conn: &mut PgConnection,
    scope: ClaimScope<'_>,
    permits: &[(String, i32)],
) -> Result<Vec<Recheck>> {
    let tasks: Vec<&str> = permits.iter().map(|p| p.0.as_str()).collect();
    let slots: Vec<i32> = permits.iter().map(|p| p.1).collect();
    sqlx::query_as(sql!("claim/take/recheck"))
        .bind(&tasks)
        .bind(&slots)
        .bind(scope.mode())
        .bind(scope.cap())
        .fetch_all(&mut *conn)
        .await
        .map_err(crate::store::Error::from)
}

/// What [`grant`] needs of a chosen task, read in the fresh snapshot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskRoom<'a> {
    /// Not paused, not deleted, of the claim's dispatch mode.
    pub claimable: bool,
    /// `limit - running`.
    pub room: i64,
    /// Reserved permits no committed RUNNING row holds, ascending.
    pub free: &'a [i32],
}

/// One row to claim: chosen row `id` of `task` under permit `slot` for taker `taker`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant<'a, Id> {
    pub id: Id,
    pub task: &'a str,
    pub slot: i32,
    pub taker: usize,
}

/// Pair each task's chosen rows (in claim order, so oldest first within the task) with its
/// free permits (ascending), never past its room: the first rows of a task get the permits,
/// so window order holds for queue tasks. Row `n` goes to taker `dealt[n]`.
pub(crate) fn grant<'a, Id: Clone>(
    chosen: &[(Id, &'a str)],
    dealt: &[usize],
    tasks: &std::collections::HashMap<&str, TaskRoom<'_>>,
) -> Vec<Grant<'a, Id>> {
    let mut used: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for ((id, task), &taker) in chosen.iter().zip(dealt) {
        let Some(t) = tasks.get(task).filter(|t| t.claimable) else {
            continue;
        };
        let n = used.entry(task).or_insert(0);
        if i64::try_from(*n).unwrap_or(i64::MAX) >= t.room {
            continue;
        }
        if let Some(&slot) = t.free.get(*n) {
            *n += 1;
            out.push(Grant {
                id: id.clone(),
                task,
                slot,
                taker,
            });
        }
    }
    out
}

/// Step 3: with the reserved permits, claim the chosen rows of each task (oldest first), one
/// per permit still free in a fresh snapshot, never past `limit - running` ([`grant`]).
/// Window order for queue tasks needs no second look: rows that pass the order check are the
/// oldest of the claim's rows of their task, and step 2 reserved no more permits than there
/// are such rows. Chosen row `n` is claimed for taker `dealt[n]` (its worker, lease and
/// actor). The claim event lives on the row (`claimed_by`). Rows that draw on shared limits
/// are admitted by [`take_then_check`] when no limit the pick read has a rate (`rated`), and
/// otherwise, or when that finds a budget without room for them all, one by one by
/// [`admit_within_limits`]. Returns the claimed rows with their taker, and whether shared
/// limits refused some granted row.
pub(super) async fn take(
    conn: &mut PgConnection,
    scope: ClaimScope<'_>,
    chosen: &[Chosen],
    dealt: &[usize],
    takers: &[Taker<'_>],
    permits: &[(String, i32)],
    rated: bool,
) -> Result<(Vec<(usize, ClaimedRow)>, bool)> {
    if permits.is_empty() {
        return Ok((Vec::new(), false));
    }
    let checked = recheck(conn, scope, permits).await?;
    let by_task: std::collections::HashMap<&str, &Recheck> =
        checked.iter().map(|r| (r.task_id.as_str(), r)).collect();
    let rooms = by_task.iter().map(|(t, r)| (*t, r.room())).collect();
    let rows: Vec<(Uuid, &str)> = chosen.iter().map(|c| (c.id, c.task_id.as_str())).collect();
    let grants = grant(&rows, dealt, &rooms);
    let draws_of: DrawsOf<'_> = chosen
        .iter()
        .filter_map(|c| c.draws.as_ref().map(|d| (c.id, d)))
        .collect();
    if !draws_of.is_empty()
        && !rated
        && let Some(taken) = take_then_check(conn, &draws_of, &grants, &by_task, takers).await?
    {
        return Ok((taken, false));
    }
    let (grants, started_at, refused) = admit_within_limits(conn, &draws_of, grants).await?;
    let taken = write_take(conn, &grants, &by_task, takers, started_at).await?;
    Ok((taken, refused))
}

/// The draws of the chosen rows that draw on shared limits, by row.
type DrawsOf<'c> = std::collections::HashMap<Uuid, &'c Vec<RenderedDraw>>;

/// Move the granted rows to RUNNING for their takers, the start recorded at `started_at` (now
/// when `None`). Returns the claimed rows with their taker.
async fn write_take(
    conn: &mut PgConnection,
    grants: &[Grant<'_, Uuid>],
    by_task: &std::collections::HashMap<&str, &Recheck>,
    takers: &[Taker<'_>],
    started_at: Option<DateTime<Utc>>,
) -> Result<Vec<(usize, ClaimedRow)>> {
    let mut ids = Vec::with_capacity(grants.len());
    let mut slots = Vec::with_capacity(grants.len());
    let mut taker_of = Vec::with_capacity(grants.len());
    let mut leases = Vec::with_capacity(grants.len());
    let mut timeouts = Vec::with_capacity(grants.len());
    let mut workers = Vec::with_capacity(grants.len());
    let mut actors = Vec::with_capacity(grants.len());
    for g in grants {
        let (Some(task), Some(t)) = (by_task.get(g.task), takers.get(g.taker)) else {
            continue;
        };
        ids.push(g.id);
        slots.push(g.slot);
        taker_of.push(i32::try_from(g.taker).unwrap_or(i32::MAX));
        leases.push(t.lease_seconds.unwrap_or(task.push_lease as f64));
        timeouts.push(task.timeout as f64);
        workers.push(t.worker_id);
        actors.push(t.actor);
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<TakenRow> = sqlx::query_as(sql!("claim/take/take"))
        .bind(&ids)
        .bind(&slots)
        .bind(&taker_of)
        .bind(&leases)
        .bind(&timeouts)
        .bind(&workers)
        .bind(&actors)
        .bind(started_at)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| (usize::try_from(r.taker).unwrap_or(usize::MAX), r.row))
        .collect())
}

/// Step 3b, the short way, for granted rows that draw on limits of concurrency (no rate):
/// under a savepoint, move them all to RUNNING and write their units first, then lock their
/// budgets (in one order, waiting) and check that none is held and none is past its
/// concurrency, this claim's units included. A budget's lock is then held for that read and
/// the commit only, not for the claim's writes: admissions of one budget still follow one
/// another across replicas, but the next claim has done its writes by the time it waits, so
/// two claims no longer spend those writes one after the other. `None` (the savepoint rolled
/// back, the rows PENDING and still locked by this claim) when a budget has a rate or no room
/// for them all: [`admit_within_limits`] then admits them one by one.
async fn take_then_check(
    conn: &mut PgConnection,
    draws_of: &DrawsOf<'_>,
    grants: &[Grant<'_, Uuid>],
    by_task: &std::collections::HashMap<&str, &Recheck>,
    takers: &[Taker<'_>],
) -> Result<Option<Vec<(usize, ClaimedRow)>>> {
    let mut savepoint = sqlx::Connection::begin(&mut *conn).await?;
    let taken = write_take(&mut savepoint, grants, by_task, takers, None).await?;
    let drawn: Vec<(Uuid, &RenderedDraw)> = taken
        .iter()
        .filter_map(|(_, r)| Some((r.instance.id, *draws_of.get(&r.instance.id)?)))
        .flat_map(|(id, draws)| draws.iter().map(move |d| (id, d)))
        .collect();
    crate::store::limits::insert_units(&mut savepoint, &drawn).await?;
    let pairs: Vec<(String, String)> = drawn
        .iter()
        .map(|(_, d)| (d.name.clone(), d.key.clone()))
        .collect();
    let budgets = crate::store::limits::read_budgets(&mut savepoint, &pairs, true).await?;
    let fits = budgets
        .list
        .iter()
        .all(|b| b.spec.rate.is_none() && b.refusal(0).is_none());
    if fits {
        savepoint.commit().await?;
        return Ok(Some(taken));
    }
    savepoint.rollback().await?;
    tracing::debug!(
        "claim: a shared limit has no room for every granted row; admitting one by one"
    );
    Ok(None)
}

/// Step 3b, for granted rows that draw on shared limits: lock their budgets (in one order,
/// waiting: admissions of a budget are serialised across replicas), read them afresh, and admit
/// the rows in claim order while every budget they draw on has room ([`admit_all`]); the rest
/// stay PENDING. The admitted rows' units and the rate budgets' new arrival times are written in
/// this transaction, so they count from the commit that makes the rows RUNNING. Returns the
/// admitted grants, when limits were checked the instant the starts are recorded at (the
/// instant the rates were tested at), and whether some grant was refused.
async fn admit_within_limits<'a, 'c>(
    conn: &mut PgConnection,
    draws_of: &DrawsOf<'c>,
    grants: Vec<Grant<'a, Uuid>>,
) -> Result<(Vec<Grant<'a, Uuid>>, Option<DateTime<Utc>>, bool)> {
    let drawn: Vec<(String, String)> = grants
        .iter()
        .filter_map(|g| draws_of.get(&g.id))
        .flat_map(|d| d.iter().map(|d| (d.name.clone(), d.key.clone())))
        .collect();
    if drawn.is_empty() {
        return Ok((grants, None, false));
    }
    let mut budgets = crate::store::limits::read_budgets(conn, &drawn, true).await?;
    let mut units: Vec<(Uuid, &RenderedDraw)> = Vec::new();
    let mut touched: std::collections::BTreeSet<usize> = std::collections::BTreeSet::new();
    let mut admitted = Vec::with_capacity(grants.len());
    let mut refused = 0usize;
    for g in grants {
        let Some(draws) = draws_of.get(&g.id) else {
            admitted.push(g);
            continue;
        };
        let idx = budgets.indexes(draws);
        if !admit_all(&mut budgets.list, &idx) {
            refused += 1;
            continue;
        }
        touched.extend(idx.iter().map(|&(b, _)| b));
        units.extend(draws.iter().map(|d| (g.id, d)));
        admitted.push(g);
    }
    if refused > 0 {
        tracing::debug!(
            refused,
            "claim: rows passed over, their shared limits have no room"
        );
    }
    // The new arrival time of every rate budget a start was admitted on.
    let tats: Vec<(String, String, DateTime<Utc>)> = touched
        .iter()
        .filter_map(|&b| {
            let budget = budgets.list.get(b)?;
            let tat = budget.spec.rate.and(budget.tat)?;
            let (name, key) = budgets.ids.get(b)?;
            Some((
                name.clone(),
                key.clone(),
                crate::domain::limit::instant(tat),
            ))
        })
        .collect();
    crate::store::limits::store_tats(conn, &tats).await?;
    crate::store::limits::insert_units(conn, &units).await?;
    Ok((admitted, Some(budgets.now), refused > 0))
}

#[derive(sqlx::FromRow)]
struct TakenRow {
    taker: i32,
    #[sqlx(flatten)]
    row: ClaimedRow,
}
