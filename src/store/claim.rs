//! Claims: PENDING → RUNNING under a fresh lease, fairly across tasks, never past a task's
//! `concurrency_limit`.
//!
//! One claim is one transaction of three steps:
//! 1. **Pick.** Read candidate rows with `FOR UPDATE SKIP LOCKED`, so concurrent claimers take
//!    different rows instead of queueing on the same ones, together with each candidate task's
//!    room under its limit. Agents read the head of their claim index (availability order);
//!    when the head cannot settle a fair pick (a backlogged or full task fills it), they read
//!    every eligible task's oldest rows instead. The webhook dispatcher always reads per task.
//!    The choice itself is [`crate::domain::claim::fair_pick`].
//! 2. **Reserve permits.** A task with `concurrency_limit` L has permits 0..L-1, and each
//!    RUNNING instance holds one (`run_slot`, unique per task among RUNNING rows: migration 2).
//!    For each chosen task the claimer try-locks (`pg_try_advisory_xact_lock`, held until the
//!    transaction ends) as many permits as it wants among those no committed RUNNING row holds,
//!    starting at a random permit. A permit another claimer has reserved is skipped, never
//!    waited for: claimers of one task run side by side, and task rows are never locked, so
//!    the trigger loop and task updates never wait for claims either.
//! 3. **Claim with the permits.** A new statement (so a fresh snapshot, which sees every claim
//!    committed before the permits were reserved) drops reserved permits that a committed
//!    RUNNING row took meanwhile, and moves one chosen row per remaining permit to RUNNING, also
//!    never past `limit - running`. Nobody else can commit a reserved permit while it is
//!    reserved, so the unique index is a safety net that never fires.
//!
//! Tasks with `overlap: queue` are claimed in window order (openapi.yaml): a claimer takes a
//! row of such a task only when no older available PENDING row of it is outside the claim,
//! since a concurrent claimer holding the older row might not get a permit for it. Concurrent
//! claimers of one queue task therefore take turns (the later finds the older rows still
//! pending and takes none of that task this time); other tasks' claimers run side by side.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::Result;
use super::instances::{INSTANCE_COLUMNS, InstanceRow};
use crate::domain::claim::{Candidate, Pick, fair_pick, fair_pick_with};
use crate::domain::instance::Instance;
use crate::domain::limit::{RenderedDraw, admit_all};
use crate::domain::task::DEFAULT_DISPATCH_TIMEOUT_SECONDS;
use crate::domain::trace::WindowTrace;

/// What an agent asks for in one claim.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub agent_id: String,
    pub worker_id: String,
    pub max_instances: i64,
    pub lease_seconds: i64,
    /// Client-chosen: a repeat of this claim by the same worker within the lease is answered
    /// with what this one took (`claim_answers`).
    pub claim_id: Option<String>,
}

/// A claimed instance: the instance, its fresh lease token and the context to run with.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub instance: Instance,
    pub lease_token: Uuid,
    pub context: Value,
    /// The task's `dispatch` object (webhook URL and secret for pushed instances).
    pub dispatch: Option<Value>,
    /// The task's `timeout_seconds` when claimed.
    pub timeout_seconds: i64,
}

/// The instance as its lease holder receives it: the instance plus lease token and context,
/// serialised straight from the claim's fields (no intermediate JSON tree per instance).
#[derive(Debug, Clone, serde::Serialize)]
pub struct LeaseView<'a> {
    #[serde(flatten)]
    pub instance: &'a Instance,
    pub lease_token: Uuid,
    pub context: &'a Value,
    /// The claim's span in the window's trace (docs/tracing.md): the agent's work is its child.
    pub traceparent: String,
    /// The `tracestate` of the context the window was created under, when it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<&'a str>,
}

impl Claimed {
    /// What the lease holder receives.
    pub fn view(&self) -> LeaseView<'_> {
        let trace = self.instance.trace.as_ref();
        LeaseView {
            instance: &self.instance,
            lease_token: self.lease_token,
            context: &self.context,
            traceparent: self.traceparent(),
            tracestate: trace.and_then(|t| t.state.as_deref()),
        }
    }

    /// The `traceparent` of this claim: the window's trace, the claim's span.
    pub fn traceparent(&self) -> String {
        WindowTrace::of(self.instance.id, self.instance.trace.as_ref())
            .claim_traceparent(self.lease_token)
    }
}

/// A claimed instance as a claim (or a repeated claim's answer) reads it.
#[derive(sqlx::FromRow)]
pub(super) struct ClaimedRow {
    #[sqlx(flatten)]
    instance: InstanceRow,
    lease_token: Uuid,
    context: Json<Value>,
    dispatch: Option<Json<Value>>,
    timeout_seconds: i64,
}

impl TryFrom<ClaimedRow> for Claimed {
    type Error = super::Error;
    fn try_from(r: ClaimedRow) -> Result<Claimed> {
        Ok(Claimed {
            instance: r.instance.try_into()?,
            lease_token: r.lease_token,
            context: r.context.0,
            dispatch: r.dispatch.map(|d| d.0),
            timeout_seconds: r.timeout_seconds,
        })
    }
}

/// Whose work a claim takes.
#[derive(Debug, Clone, Copy)]
pub enum ClaimScope<'a> {
    /// An agent polling for its poll-mode tasks, with the lease it asked for.
    Agent {
        agent_id: &'a str,
        lease_seconds: i64,
    },
    /// The webhook dispatcher, for webhook-mode tasks of any agent, at most `max_per_task`
    /// RUNNING per task; the lease covers the wait for the answer (the task's
    /// `dispatch.timeout_seconds`, at most its `execution.timeout_seconds`) plus
    /// [`PUSH_LEASE_MARGIN_SECONDS`].
    Webhook { max_per_task: i64 },
}

impl ClaimScope<'_> {
    fn agent(&self) -> Option<&str> {
        match self {
            ClaimScope::Agent { agent_id, .. } => Some(agent_id),
            ClaimScope::Webhook { .. } => None,
        }
    }

    fn mode(&self) -> &'static str {
        match self {
            ClaimScope::Agent { .. } => "poll",
            ClaimScope::Webhook { .. } => "webhook",
        }
    }

    /// The cap on a task's RUNNING instances on top of its `concurrency_limit`.
    fn cap(&self) -> i32 {
        match self {
            ClaimScope::Agent { .. } => i32::MAX,
            ClaimScope::Webhook { max_per_task } => {
                i32::try_from(*max_per_task).unwrap_or(i32::MAX)
            }
        }
    }
}

use super::{PENDING_BY_ID, SourceIs, TASK_LIMIT_SQL, TASK_TIMEOUT_SQL};

/// `i.status = 'PENDING'`: the candidates a claim locks are the sources of a claim.
const CLAIMABLE: SourceIs = SourceIs::new("i.status", crate::domain::instance::Event::Claim);

/// How long a push's lease outlives its wait for the answer: time to record the answer. A
/// replica that dies mid-push leaves the instance to the reaper this soon after the wait.
pub const PUSH_LEASE_MARGIN_SECONDS: i64 = 10;

/// For `overlap: queue` tasks (`t` the tasks alias, `m` a chosen row, `$1` the chosen ids): no
/// older available PENDING row of the task is outside this claim. Such a row may be held by a
/// concurrent claimer; taking a newer one would break window order.
const IN_ORDER_SQL: &str = "(coalesce(t.spec->'execution'->>'overlap', '') <> 'queue' \
     or not exists (select 1 from task_instance o \
         where o.task_id = m.task_id and o.status = 'PENDING' and o.available_at <= now() \
           and (o.available_at, o.scheduled_at, o.id) < (m.available_at, m.scheduled_at, m.id) \
           and o.id <> all($1)))";

/// Several claims of one agent in one transaction (the coalesced claims of
/// [`super::claim_rounds`]): one pick over the sum of their `max_instances`, dealt
/// out in request order, so the first request gets what it would have got alone and the
/// second what a claim right after it would have got. Each row is claimed under its own
/// request's worker, lease and actor. Returns one list per request, in request order.
///
/// All requests must name the same agent (the first one's is used).
pub async fn claim_many(
    pool: &PgPool,
    reqs: &[(ClaimRequest, String)],
) -> Result<Vec<Vec<Claimed>>> {
    Ok(claim_round(pool, reqs, HeadRead::Try).await?.claimed)
}

/// Whether an agent's claim first reads the head of the agent's work (the oldest available
/// rows over all its tasks) or goes straight to the per-task read. Both pick the same rows;
/// the head is the cheap way when it settles the pick (many tasks with a few rows each), and
/// wasted work when it cannot (a claim that needs several rows of each task): then it is read,
/// its rows locked until the claim commits, and the per-task read runs as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadRead {
    Try,
    Skip,
}

/// What [`claim_round`] claimed, and whether it read the head in vain.
#[derive(Debug)]
pub struct Round {
    /// One list per request, in request order.
    pub claimed: Vec<Vec<Claimed>>,
    /// The head was read and could not settle the pick.
    pub head_unsettled: bool,
}

/// [`claim_many`], reading the head first or not as `head` says, and reporting whether a head
/// read was in vain (the caller's hint for the agent's next round).
pub async fn claim_round(
    pool: &PgPool,
    reqs: &[(ClaimRequest, String)],
    head: HeadRead,
) -> Result<Round> {
    let Some((first, _)) = reqs.first() else {
        return Ok(Round {
            claimed: Vec::new(),
            head_unsettled: false,
        });
    };
    let scope = ClaimScope::Agent {
        agent_id: &first.agent_id,
        lease_seconds: first.lease_seconds,
    };
    let wants: Vec<Taker<'_>> = reqs
        .iter()
        .map(|(r, actor)| Taker {
            worker_id: &r.worker_id,
            actor,
            lease_seconds: Some(r.lease_seconds as f64),
            max: usize::try_from(r.max_instances.max(1)).unwrap_or(1),
            claim_id: r.claim_id.as_deref(),
        })
        .collect();
    let (claimed, head_unsettled) = claim_dealt(pool, scope, &wants, head).await?;
    let mut out: Vec<Vec<Claimed>> = reqs.iter().map(|_| Vec::new()).collect();
    for (k, c) in claimed {
        if let Some(list) = out.get_mut(k) {
            list.push(c);
        }
    }
    Ok(Round {
        claimed: out,
        head_unsettled,
    })
}

/// Claim up to `max_instances` PENDING instances in `scope` whose `available_at` has come, of
/// unpaused tasks, never exceeding a task's `concurrency_limit` RUNNING, fairly across tasks
/// (module doc). Each claimed instance gets a fresh lease token.
pub async fn claim_scoped(
    pool: &PgPool,
    scope: ClaimScope<'_>,
    worker_id: &str,
    max_instances: i64,
    actor: &str,
) -> Result<Vec<Claimed>> {
    let lease_seconds = match scope {
        ClaimScope::Agent { lease_seconds, .. } => Some(lease_seconds as f64),
        ClaimScope::Webhook { .. } => None,
    };
    let taker = Taker {
        worker_id,
        actor,
        lease_seconds,
        max: usize::try_from(max_instances.max(1)).unwrap_or(1),
        claim_id: None,
    };
    let (claimed, _) = claim_dealt(pool, scope, &[taker], HeadRead::Try).await?;
    Ok(claimed.into_iter().map(|(_, c)| c).collect())
}

/// One claimant of a (possibly shared) claim: who the rows are claimed for, and how many.
struct Taker<'a> {
    worker_id: &'a str,
    actor: &'a str,
    /// The lease asked for; `None` for pushes (the task's dispatch timeout decides).
    lease_seconds: Option<f64>,
    max: usize,
    /// The request's `claim_id`: what it takes is recorded in the claim's transaction.
    claim_id: Option<&'a str>,
}

/// One pick over the takers' total, the chosen rows dealt to the takers in order, claimed in
/// one transaction. Returns each claimed instance with its taker's position, and whether the
/// head was read in vain.
async fn claim_dealt(
    pool: &PgPool,
    scope: ClaimScope<'_>,
    takers: &[Taker<'_>],
    head: HeadRead,
) -> Result<(Vec<(usize, Claimed)>, bool)> {
    let max: usize = takers.iter().map(|t| t.max).sum::<usize>().max(1);
    if let Some(agent_id) = scope.agent() {
        super::waiting::seen_claiming(pool, agent_id);
    }
    let mut tx = super::begin_hot(pool).await?;
    let (chosen, head_unsettled) = pick(&mut tx, scope, max, head).await?;
    if chosen.is_empty() {
        tx.commit().await?;
        return Ok((Vec::new(), head_unsettled));
    }
    // Deal the chosen rows (in claim order) to the takers in order.
    let mut dealt: Vec<usize> = Vec::with_capacity(chosen.len());
    for (k, t) in takers.iter().enumerate() {
        dealt.extend(std::iter::repeat_n(k, t.max));
    }
    dealt.truncate(chosen.len());
    let permits = reserve_permits(&mut tx, &chosen).await?;
    let rows = take(&mut tx, scope, &chosen, &dealt, takers, &permits).await?;
    if let Some(agent_id) = scope.agent() {
        for (k, t) in takers.iter().enumerate() {
            let (Some(claim_id), Some(lease)) = (t.claim_id, t.lease_seconds) else {
                continue;
            };
            let leases: Vec<(Uuid, Uuid)> = rows
                .iter()
                .filter(|(taker, _)| *taker == k)
                .map(|(_, r)| (r.instance.id, r.lease_token))
                .collect();
            if !leases.is_empty() {
                super::claim_answers::record(
                    &mut tx,
                    agent_id,
                    t.worker_id,
                    claim_id,
                    &leases,
                    lease,
                )
                .await?;
            }
        }
    }
    tx.commit().await?;
    for (_, r) in &rows {
        let i = &r.instance;
        if i.attempt == 1
            && let Some(started) = i.started_at
        {
            let lag = (started - i.available_at).num_microseconds().unwrap_or(0);
            metrics::histogram!("kairos_schedule_lag_seconds").record(lag.max(0) as f64 / 1e6);
        }
    }
    let claimed = rows
        .into_iter()
        .map(|(k, r)| Ok((k, Claimed::try_from(r)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok((claimed, head_unsettled))
}

#[derive(Debug, Clone, sqlx::FromRow)]
struct CandidateRow {
    id: Uuid,
    task_id: String,
    /// `concurrency_limit` (capped by the scope) minus RUNNING; null when the task cannot be
    /// claimed from at all (paused, other dispatch mode, deleted).
    room: Option<i64>,
    /// `concurrency_limit` capped by the scope.
    lim: Option<i32>,
    /// The shared-limit budgets the row draws on (`limit_draws`); None for most rows.
    draws: Option<Json<Vec<RenderedDraw>>>,
    priority: i16,
}

impl CandidateRow {
    fn candidate(&self) -> Candidate<Uuid> {
        Candidate {
            id: self.id,
            task_id: self.task_id.clone(),
            room: self.room.unwrap_or(0),
            priority: self.priority,
        }
    }
}

/// Step 1: lock candidates and choose fairly among them. Returns the chosen rows in claim order,
/// and whether the head was read and could not settle the pick.
async fn pick(
    conn: &mut PgConnection,
    scope: ClaimScope<'_>,
    max: usize,
    head_read: HeadRead,
) -> Result<(Vec<Chosen>, bool)> {
    let mut head_unsettled = false;
    if let (ClaimScope::Agent { agent_id, .. }, HeadRead::Try) = (scope, head_read) {
        // The head: exactly as many rows as the claim takes. Every row read is locked until
        // the claim commits, so a row read and not taken is hidden from every other claimer:
        // a head of eight for a claim of one left a concurrent claim empty-handed while seven
        // instances waited. When the head cannot settle the pick (its task has no room, or the
        // claim would take a task's second row), the per-task look below takes over.
        let scan = max;
        let head = read_head(conn, agent_id, scan).await?;
        let p = pick_within_limits(conn, &head, max).await?;
        if p.settled_by_head(max, head.len() >= scan) {
            return Ok((chosen_of(&head, &p), false));
        }
        head_unsettled = true;
    }
    // Per task: first a fair share of each task's oldest rows; if some task may have had more
    // to give and the claim is not full, once more with the whole claim as the share.
    let rows = read_per_task(conn, scope, max, None).await?;
    let p = pick_within_limits(conn, &rows, max).await?;
    if p.tasks_at_cap.is_empty() || (p.chosen.len() >= max && !outranked(&rows, &p)) {
        return Ok((chosen_of(&rows, &p), head_unsettled));
    }
    let rows = read_per_task(conn, scope, max, Some(max)).await?;
    let p = pick_within_limits(conn, &rows, max).await?;
    Ok((chosen_of(&rows, &p), head_unsettled))
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
/// without locks: [`admit_within_limits`] decides for real). Rows that draw on no limit cost
/// nothing here.
async fn pick_within_limits(
    conn: &mut PgConnection,
    rows: &[CandidateRow],
    max: usize,
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
    let mut budgets = super::limits::read_budgets(conn, &drawn, false).await?;
    Ok(fair_pick_with(&cands, max, |pos| {
        let Some(draws) = rows.get(pos).and_then(|r| r.draws.as_ref()) else {
            return true;
        };
        let idx = budgets.indexes(&draws.0);
        admit_all(&mut budgets.list, &idx)
    }))
}

/// A row chosen by the pick, with its task and the task's limit.
struct Chosen {
    id: Uuid,
    task_id: String,
    lim: i32,
    draws: Option<Vec<RenderedDraw>>,
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

/// A head row; its task's limit and room are read on the task's first row only.
#[derive(sqlx::FromRow)]
struct HeadRow {
    id: Uuid,
    task_id: String,
    first: bool,
    room: Option<i64>,
    lim: Option<i32>,
    draws: Option<Json<Vec<RenderedDraw>>>,
    priority: i16,
}

/// The agent's oldest available PENDING rows (locked, skipping rows other claimers hold), each
/// with its task's room.
///
/// Each task's limit and RUNNING count are read once, on its first head row, by a lookup per
/// row: the work grows with the head, whatever the planner thinks of its size. (Joining the
/// tasks on `id in (select task_id from head)` let the planner, which takes the freshly
/// locked head for one row, rescan the head for every head row: 60 of a burst claim's 88 ms
/// for 300 rows.)
async fn read_head(
    conn: &mut PgConnection,
    agent_id: &str,
    scan: usize,
) -> Result<Vec<CandidateRow>> {
    let open = super::limits::not_blocked_sql("i");
    let blocked = super::limits::BLOCKED_BUDGETS_SQL;
    let sql = format!(
        "with blocked as materialized ({blocked}), head as ( \
             select i.id, i.task_id, i.priority, i.available_at, i.scheduled_at, i.limit_draws \
             from task_instance i \
             where {CLAIMABLE} and i.agent_id = $1 and i.available_at <= now() and {open} \
             order by i.priority, i.available_at, i.scheduled_at, i.id \
             limit $2 \
             for update skip locked \
         ), h as ( \
             select head.*, row_number() over (partition by head.task_id) = 1 as first from head \
         ) \
         select h.id, h.task_id, h.first, r.room, r.lim, h.limit_draws as draws, h.priority from h \
         left join lateral ( \
             select l.lim, l.lim - (select count(*) from task_instance r \
                 where r.task_id = h.task_id and r.status = 'RUNNING') as room \
             from (select {TASK_LIMIT_SQL} as lim from tasks t \
                   where t.id = h.task_id and not t.paused and t.dispatch_mode = 'poll' \
                   offset 0) l \
             where h.first \
         ) r on true \
         order by h.priority, h.available_at, h.scheduled_at, h.id"
    );
    let rows: Vec<HeadRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(agent_id)
        .bind(i64::try_from(scan).unwrap_or(i64::MAX))
        .fetch_all(&mut *conn)
        .await?;
    Ok(head_candidates(rows))
}

/// Every head row with its task's limit and room, as read on the task's first row.
fn head_candidates(rows: Vec<HeadRow>) -> Vec<CandidateRow> {
    let of_task: std::collections::HashMap<String, (Option<i64>, Option<i32>)> = rows
        .iter()
        .filter(|r| r.first)
        .map(|r| (r.task_id.clone(), (r.room, r.lim)))
        .collect();
    rows.into_iter()
        .map(|r| {
            let (room, lim) = of_task.get(&r.task_id).copied().unwrap_or((None, None));
            CandidateRow {
                id: r.id,
                task_id: r.task_id,
                room,
                lim,
                draws: r.draws,
                priority: r.priority,
            }
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
) -> Result<Vec<CandidateRow>> {
    let tasks_filter = match scope {
        ClaimScope::Agent { .. } => "t.agent_id = $1 and t.dispatch_mode = 'poll'",
        ClaimScope::Webhook { .. } => "t.dispatch_mode = 'webhook'",
    };
    let busy = super::has_pending_sql(
        "e.id",
        "q.available_at <= now() and ($1::text is null or q.agent_id = $1)",
    );
    let open = super::limits::not_blocked_sql("i");
    let blocked = super::limits::BLOCKED_BUDGETS_SQL;
    let sql = format!(
        "with blocked as materialized ({blocked}), eligible as materialized ( \
             select t.id, least({TASK_LIMIT_SQL}, $2) as lim from tasks t \
             where {tasks_filter} and not t.paused \
         ), busy as ( \
             select e.id, e.lim from eligible e \
             where {busy} \
         ), room as ( \
             select b.id, b.lim, b.lim - (select count(*) from task_instance r \
                 where r.task_id = b.id and r.status = 'RUNNING') as room \
             from busy b \
         ), fair as ( \
             select coalesce($4::bigint, ($3::bigint + greatest(count(*), 1) - 1) / greatest(count(*), 1)) \
                 as share \
             from room where room > 0 \
         ) \
         select c.id, c.task_id, room.room, room.lim, c.limit_draws as draws, c.priority \
         from room cross join fair \
         cross join lateral ( \
             select i.id, i.task_id, i.priority, i.available_at, i.scheduled_at, i.limit_draws \
             from task_instance i \
             where i.task_id = room.id and {CLAIMABLE} and i.available_at <= now() \
               and ($1::text is null or i.agent_id = $1) and {open} \
             order by i.priority, i.available_at, i.scheduled_at, i.id \
             limit least(room.room, fair.share, $3) \
             for update skip locked \
         ) c \
         where room.room > 0 \
         order by c.priority, c.available_at, c.scheduled_at, c.id"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(scope.agent())
        .bind(scope.cap())
        .bind(i64::try_from(max).unwrap_or(i64::MAX))
        .bind(share.map(|s| i64::try_from(s).unwrap_or(i64::MAX)))
        .fetch_all(&mut *conn)
        .await
        .map_err(crate::store::Error::from)
}

/// Step 2: reserve, per chosen task, up to as many permits as rows were chosen of it, among
/// the permits no committed RUNNING row holds and no other claimer has reserved. Returns
/// `(task_id, permit)` pairs; the reservations last until the transaction ends.
async fn reserve_permits(conn: &mut PgConnection, chosen: &[Chosen]) -> Result<Vec<(String, i32)>> {
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
    // LIMIT stops them: `generate_series` in FROM would materialise all `lim` of them per task
    // (a task with limit 1000 cost 80 µs per claim that way).
    let offsets: Vec<i32> = want
        .iter()
        .map(|w| i32::try_from(rand::random::<u32>() % w.2.max(1).unsigned_abs()).unwrap_or(0))
        .collect();
    let ids: Vec<Uuid> = chosen.iter().map(|c| c.id).collect();
    // How many rows of each task may be taken (window order for queue tasks, in this fresh
    // snapshot), then that many free permits each. CASE fixes the order of the checks: a
    // permit held by a committed row is never locked in passing.
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "with m as ( \
             select i.id, i.task_id, i.available_at, i.scheduled_at from task_instance i \
             where i.id = any($1) and {PENDING_BY_ID} \
         ), gated as ( \
             select m.task_id, count(*)::int as n from m join tasks t on t.id = m.task_id \
             where {IN_ORDER_SQL} group by m.task_id \
         ) \
         select c.task_id, p.slot \
         from unnest($2::text[], $3::int[], $4::int[], $5::int[]) as c(task_id, want, lim, off) \
         join gated g on g.task_id = c.task_id \
         cross join lateral ( \
             select (x.n + c.off) % c.lim as slot \
             from (select generate_series(0, c.lim - 1) as n) as x \
             where case when exists (select 1 from task_instance r \
                                     where r.task_id = c.task_id and r.status = 'RUNNING' \
                                       and r.run_slot = (x.n + c.off) % c.lim) \
                        then false \
                        else pg_try_advisory_xact_lock(hashtext(c.task_id), (x.n + c.off) % c.lim) \
                   end \
             limit least(c.want, g.n) \
         ) p"
    )))
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
    /// Counting every claim cost more than the rest of this step: during a drain a task's
    /// run-slot entries are mostly those of just-finished rows, each read in the heap.
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
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select c.task_id, coalesce(t.claimable, false) as claimable, coalesce(t.lim, 0) as lim, \
             coalesce(t.timeout, 0) as timeout, coalesce(t.push_lease, 0) as push_lease, \
             case when exists (select 1 from task_instance r \
                               where r.task_id = c.task_id and r.status = 'RUNNING' \
                                 and r.run_slot >= coalesce(t.lim, 0)) \
                  then (select count(*) from task_instance r \
                        where r.task_id = c.task_id and r.status = 'RUNNING') \
                  else 0 end as running, \
             array(select s from unnest(c.slots) as s \
                   where s < coalesce(t.lim, 0) and not exists (select 1 from task_instance r where r.task_id = c.task_id \
                                     and r.status = 'RUNNING' and r.run_slot = s) \
                   order by s) as free \
         from (select task_id, array_agg(slot) as slots \
               from unnest($1::text[], $2::int[]) as p(task_id, slot) group by task_id) as c \
         left join lateral ( \
             select not t.paused and t.dispatch_mode = $3 as claimable, \
                 least({TASK_LIMIT_SQL}, $4) as lim, {TASK_TIMEOUT_SQL} as timeout, \
                 least(coalesce((t.spec->'dispatch'->>'timeout_seconds')::bigint, \
                     {DEFAULT_DISPATCH_TIMEOUT_SECONDS}), {TASK_TIMEOUT_SQL}) \
                     + {PUSH_LEASE_MARGIN_SECONDS} as push_lease \
             from tasks t where t.id = c.task_id offset 0 \
         ) t on true"
    )))
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
/// actor). The claim event lives on the row (`claimed_by`). Returns the claimed rows with
/// their taker.
async fn take(
    conn: &mut PgConnection,
    scope: ClaimScope<'_>,
    chosen: &[Chosen],
    dealt: &[usize],
    takers: &[Taker<'_>],
    permits: &[(String, i32)],
) -> Result<Vec<(usize, ClaimedRow)>> {
    if permits.is_empty() {
        return Ok(Vec::new());
    }
    let checked = recheck(conn, scope, permits).await?;
    let by_task: std::collections::HashMap<&str, &Recheck> =
        checked.iter().map(|r| (r.task_id.as_str(), r)).collect();
    let rooms = by_task.iter().map(|(t, r)| (*t, r.room())).collect();
    let rows: Vec<(Uuid, &str)> = chosen.iter().map(|c| (c.id, c.task_id.as_str())).collect();
    let grants = grant(&rows, dealt, &rooms);
    let (grants, started_at) = admit_within_limits(conn, chosen, grants).await?;
    let mut ids = Vec::with_capacity(grants.len());
    let mut slots = Vec::with_capacity(grants.len());
    let mut taker_of = Vec::with_capacity(grants.len());
    let mut leases = Vec::with_capacity(grants.len());
    let mut timeouts = Vec::with_capacity(grants.len());
    let mut workers = Vec::with_capacity(grants.len());
    let mut actors = Vec::with_capacity(grants.len());
    for g in &grants {
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
    let sql = format!(
        "with g as ( \
             select * from unnest($1::uuid[], $2::int[], $3::int[], $4::float8[], $5::float8[], \
                 $6::text[], $7::text[]) as g(id, slot, taker, lease, timeout, worker, actor) \
         ), upd as ( \
             update task_instance i set status = 'RUNNING', lease_token = gen_random_uuid(), \
                 lease_expires_at = clock_timestamp() + make_interval(secs => g.lease), \
                 deadline_at = clock_timestamp() + make_interval(secs => g.timeout), \
                 worker_id = g.worker, started_at = coalesce($8, now()), updated_at = now(), \
                 claimed_by = g.actor, run_slot = g.slot \
             from g where i.id = g.id and {PENDING_BY_ID} \
             returning i.*, g.taker, g.timeout \
         ) \
         select {INSTANCE_COLUMNS}, taker, lease_token, \
             t.context || coalesce(context_override, '{{}}'::jsonb) as context, \
             t.dispatch, timeout::bigint as timeout_seconds \
         from upd cross join lateral ( \
             select coalesce(t.spec->'context', '{{}}'::jsonb) as context, \
                 t.spec->'dispatch' as dispatch \
             from tasks t where t.id = upd.task_id offset 0 \
         ) t \
         order by priority, available_at, scheduled_at, id"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(&ids)
        .bind(&slots)
        .bind(&taker_of)
        .bind(&leases)
        .bind(&timeouts)
        .bind(&workers)
        .bind(&actors)
        .bind(started_at)
        .fetch_all(&mut *conn)
        .await
        .map(|rows: Vec<TakenRow>| {
            rows.into_iter()
                .map(|r| (usize::try_from(r.taker).unwrap_or(usize::MAX), r.row))
                .collect()
        })
        .map_err(crate::store::Error::from)
}

/// Step 3b, for granted rows that draw on shared limits: lock their budgets (in one order,
/// waiting: admissions of a budget are serialised across replicas), read them afresh, and admit
/// the rows in claim order while every budget they draw on has room ([`admit_all`]); the rest
/// stay PENDING. The admitted rows' units and the rate budgets' new arrival times are written in
/// this transaction, so they count from the commit that makes the rows RUNNING. Returns the
/// admitted grants and, when limits were checked, the instant the starts are recorded at (the
/// instant the rates were tested at).
async fn admit_within_limits<'a>(
    conn: &mut PgConnection,
    chosen: &[Chosen],
    grants: Vec<Grant<'a, Uuid>>,
) -> Result<(Vec<Grant<'a, Uuid>>, Option<DateTime<Utc>>)> {
    let draws_of: std::collections::HashMap<Uuid, &Vec<RenderedDraw>> = chosen
        .iter()
        .filter_map(|c| c.draws.as_ref().map(|d| (c.id, d)))
        .collect();
    let drawn: Vec<(String, String)> = grants
        .iter()
        .filter_map(|g| draws_of.get(&g.id))
        .flat_map(|d| d.iter().map(|d| (d.name.clone(), d.key.clone())))
        .collect();
    if drawn.is_empty() {
        return Ok((grants, None));
    }
    let mut budgets = super::limits::read_budgets(conn, &drawn, true).await?;
    let mut units: Vec<(Uuid, String, String, i64)> = Vec::new();
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
        for &(b, cost) in &idx {
            touched.insert(b);
            let concurrency = budgets
                .list
                .get(b)
                .is_some_and(|b| b.spec.concurrency.is_some());
            if let (true, Some((name, key))) = (concurrency, budgets.ids.get(b)) {
                units.push((g.id, name.clone(), key.clone(), cost));
            }
        }
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
    super::limits::store_tats(conn, &tats).await?;
    super::limits::insert_units(conn, &units).await?;
    Ok((admitted, Some(budgets.now)))
}

#[derive(sqlx::FromRow)]
struct TakenRow {
    taker: i32,
    #[sqlx(flatten)]
    row: ClaimedRow,
}

/// When the earliest PENDING instance of `agent_id` becomes claimable, and the database's now.
pub async fn next_available_at(
    pool: &PgPool,
    agent_id: &str,
) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>)> {
    // One probe of the claim index per priority: its rows are ordered by priority first.
    sqlx::query_as(
        "select (select min(m.at) from generate_series(0, 9) as p(n) \
                 cross join lateral (select available_at as at from task_instance \
                     where status = 'PENDING' and agent_id = $1 and priority = p.n \
                     order by available_at limit 1) m), now()",
    )
    .bind(agent_id)
    .fetch_one(pool)
    .await
    .map_err(crate::store::Error::from)
}

/// The agents with unpaused webhook tasks: the only agents whose work the webhook dispatcher
/// claims. Read through `tasks_webhook_idx`, so it costs the webhook tasks, not the registry.
pub async fn webhook_agents(pool: &PgPool) -> Result<HashSet<String>> {
    let agents: Vec<String> = sqlx::query_scalar(
        "select distinct agent_id from tasks where dispatch_mode = 'webhook' and not paused",
    )
    .fetch_all(pool)
    .await?;
    Ok(agents.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{Grant, TaskRoom, grant};

    #[test]
    fn head_rows_take_their_tasks_room_from_the_tasks_first_row() {
        let row = |n: u128, task: &str, first: bool, room: Option<i64>, lim: Option<i32>| {
            super::HeadRow {
                id: uuid::Uuid::from_u128(n),
                task_id: task.to_owned(),
                first,
                room,
                lim,
                draws: None,
                priority: 5,
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
    }

    #[test]
    fn claim_candidates_are_the_sources_of_a_claim() {
        assert_eq!(super::CLAIMABLE.to_string(), "i.status = 'PENDING'");
    }

    fn g<'a>(id: u32, task: &'a str, slot: i32, taker: usize) -> Grant<'a, u32> {
        Grant {
            id,
            task,
            slot,
            taker,
        }
    }

    fn room(claimable: bool, room: i64, free: &[i32]) -> TaskRoom<'_> {
        TaskRoom {
            claimable,
            room,
            free,
        }
    }

    #[test]
    fn rows_of_a_task_take_its_free_permits_oldest_first_up_to_its_room() {
        let chosen = [(1, "a"), (2, "b"), (3, "a"), (4, "a"), (5, "b")];
        let dealt = [0, 0, 1, 1, 1];
        let tasks = HashMap::from([
            ("a", room(true, 2, &[4, 9, 11])),
            ("b", room(true, 5, &[0])),
        ]);
        // a: room 2 of three free permits; b: one free permit for two rows.
        assert_eq!(
            grant(&chosen, &dealt, &tasks),
            vec![g(1, "a", 4, 0), g(2, "b", 0, 0), g(3, "a", 9, 1)]
        );
    }

    #[test]
    fn a_task_paused_meanwhile_or_gone_gets_nothing() {
        let chosen = [(1, "a"), (2, "b"), (3, "c")];
        let dealt = [0, 0, 0];
        let tasks = HashMap::from([("a", room(false, 5, &[0])), ("c", room(true, 5, &[2]))]);
        assert_eq!(grant(&chosen, &dealt, &tasks), vec![g(3, "c", 2, 0)]);
    }

    #[test]
    fn no_room_or_no_free_permit_means_no_grant() {
        let chosen = [(1, "a"), (2, "b")];
        let dealt = [0, 1];
        let tasks = HashMap::from([("a", room(true, 0, &[0, 1])), ("b", room(true, 3, &[]))]);
        assert!(grant(&chosen, &dealt, &tasks).is_empty());
    }
}
