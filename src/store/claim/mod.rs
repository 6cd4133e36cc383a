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
//!    RUNNING instance holds one (`run_slot`, unique per task among RUNNING rows:
//!    `task_instance_run_slot_idx`).
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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use sqlx::types::Json;
use uuid::Uuid;

use super::Result;
use super::instances::InstanceRow;
use super::statements::sql;
use crate::domain::claim::{Candidate, Pick, fair_pick, fair_pick_with};
use crate::domain::instance::Instance;
use crate::domain::limit::{RenderedDraw, Wait, admit_all, wait_all};
use crate::domain::trace::WindowTrace;

mod pick;
mod take;

use pick::{PickNotes, pick};
#[cfg(test)]
use take::{Grant, TaskRoom, grant};
use take::{reserve_permits, take};

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
    /// An earlier claim's answer, repeated under its `claim_id`: nothing was claimed now.
    pub replayed: bool,
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
            replayed: false,
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

/// How long a push's lease outlives its wait for the answer: time to record the answer. A
/// replica that dies mid-push leaves the instance to the reaper this soon after the wait.
pub const PUSH_LEASE_MARGIN_SECONDS: i64 = 10;

/// Several claims of one agent in one transaction (the coalesced claims of
/// the batching layer's claim rounds): one pick over the sum of their `max_instances`, dealt
/// out in request order, so the first request gets what it would have got alone and the
/// second what a claim right after it would have got. Each row is claimed under its own
/// request's worker, lease and actor. Returns one list per request, in request order.
///
/// All requests must name the same agent (the first one's is used).
pub async fn claim_many(
    pool: &PgPool,
    reqs: &[(ClaimRequest, String)],
) -> Result<Vec<Vec<Claimed>>> {
    Ok(claim_round(pool, reqs, HeadRead::Try, None).await?.claimed)
}

/// The claim rounds of one agent in flight on this replica, each with the rows it has chosen
/// and not yet committed; cheap to clone. A round's reads pass over the rows the others chose.
/// PostgreSQL's row lock follows a row that another claim updated after the read's snapshot
/// was taken: the read locks the row's new version, finds it no longer PENDING and leaves it
/// out, but the lock stays until the reading claim commits. Two rounds of an agent overlap by
/// design (one reads while the other commits), so without this the second round locked many
/// of the rows the first had just made RUNNING, and their completions, reported meanwhile,
/// waited for its commit.
#[derive(Clone, Default)]
pub struct RoundsInFlight(Arc<Mutex<HashMap<u64, Vec<Uuid>>>>);

impl RoundsInFlight {
    fn rounds(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Vec<Uuid>>> {
        // Nothing panics while the lock is held; a poisoned map is still consistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Round `me`'s seat, until the seat is dropped (after its transaction ended).
    pub fn seat(&self, me: u64) -> RoundSeat {
        RoundSeat {
            rounds: self.clone(),
            me,
        }
    }
}

/// One round's place in [`RoundsInFlight`]; leaving it (dropping it) forgets its rows.
pub struct RoundSeat {
    rounds: RoundsInFlight,
    me: u64,
}

impl RoundSeat {
    /// The rows the agent's other rounds in flight have chosen.
    fn others(&self) -> Vec<Uuid> {
        self.rounds
            .rounds()
            .iter()
            .filter(|(k, _)| **k != self.me)
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect()
    }

    /// The rows this round chose (kept until it leaves its seat).
    fn chose(&self, ids: Vec<Uuid>) {
        self.rounds.rounds().insert(self.me, ids);
    }
}

impl Drop for RoundSeat {
    fn drop(&mut self) {
        self.rounds.rounds().remove(&self.me);
    }
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

/// What [`claim_round`] claimed, whether it read the head in vain, and whether it saw shared
/// limits hold some of the agent's work back.
#[derive(Debug)]
pub struct Round {
    /// One list per request, in request order.
    pub claimed: Vec<Vec<Claimed>>,
    /// The head was read and could not settle the pick.
    pub head_unsettled: bool,
    /// Some of the agent's work was passed over, or chosen and not admitted, because a shared
    /// limit it draws on had no room. A task passed over whole by the per-task read is not
    /// seen here: [`agent_limited`] asks for it.
    pub limited: bool,
}

/// Whether a poll task of `agent_id` that may be claimed from draws on a budget without keys
/// that has no room now (the per-task read passes over such a task whole, and a round that
/// chose nothing cannot tell it from having no work). The head read's own rule, asked with a
/// head of no rows: it hands over exactly then.
pub async fn agent_limited(pool: &PgPool, agent_id: &str) -> Result<bool> {
    let mut conn = pool.acquire().await?;
    Ok(pick::read_head(&mut conn, agent_id, 0, None)
        .await?
        .is_none())
}

/// [`claim_many`], reading the head first or not as `head` says, and reporting whether a head
/// read was in vain (the caller's hint for the agent's next round).
pub async fn claim_round(
    pool: &PgPool,
    reqs: &[(ClaimRequest, String)],
    head: HeadRead,
    seat: Option<&RoundSeat>,
) -> Result<Round> {
    let Some((first, _)) = reqs.first() else {
        return Ok(Round {
            claimed: Vec::new(),
            head_unsettled: false,
            limited: false,
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
    let (claimed, notes) = claim_dealt(pool, scope, &wants, head, seat).await?;
    let mut out: Vec<Vec<Claimed>> = reqs.iter().map(|_| Vec::new()).collect();
    for (k, c) in claimed {
        if let Some(list) = out.get_mut(k) {
            list.push(c);
        }
    }
    Ok(Round {
        claimed: out,
        head_unsettled: notes.head_unsettled,
        limited: notes.limited,
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
    let (claimed, _) = claim_dealt(pool, scope, &[taker], HeadRead::Try, None).await?;
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
/// one transaction. A round with a `seat` passes over the rows its agent's other rounds chose,
/// and tells them which rows it chose ([`RoundsInFlight`]). Returns each claimed instance with
/// its taker's position, and what the pick and the admission found on the way.
async fn claim_dealt(
    pool: &PgPool,
    scope: ClaimScope<'_>,
    takers: &[Taker<'_>],
    head: HeadRead,
    seat: Option<&RoundSeat>,
) -> Result<(Vec<(usize, Claimed)>, PickNotes)> {
    let max: usize = takers.iter().map(|t| t.max).sum::<usize>().max(1);
    if let Some(agent_id) = scope.agent() {
        super::waiting::seen_claiming(pool, agent_id);
    }
    let mut tx = super::begin_hot(pool).await?;
    let (chosen, mut notes) = pick(&mut tx, scope, max, head, seat).await?;
    if let Some(seat) = seat {
        seat.chose(chosen.iter().map(|c| c.id).collect());
    }
    if chosen.is_empty() {
        tx.commit().await?;
        return Ok((Vec::new(), notes));
    }
    // Deal the chosen rows (in claim order) to the takers in order.
    let mut dealt: Vec<usize> = Vec::with_capacity(chosen.len());
    for (k, t) in takers.iter().enumerate() {
        dealt.extend(std::iter::repeat_n(k, t.max));
    }
    dealt.truncate(chosen.len());
    let permits = reserve_permits(&mut tx, &chosen).await?;
    let (rows, refused) = take(
        &mut tx,
        scope,
        &chosen,
        &dealt,
        takers,
        &permits,
        notes.rated,
    )
    .await?;
    notes.limited |= refused;
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
    Ok((claimed, notes))
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

/// When the earliest PENDING instance of `agent_id` becomes claimable, and the database's now.
pub async fn next_available_at(
    pool: &PgPool,
    agent_id: &str,
) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>)> {
    // One probe of the claim index per priority: its rows are ordered by priority first.
    sqlx::query_as(sql!("claim/next_available_at"))
        .bind(agent_id)
        .fetch_one(pool)
        .await
        .map_err(crate::store::Error::from)
}

/// When the first of an agent's next waiting rows that a hold or a rate alone keeps back may
/// start (the hold ends, the rate admits it), with the database's now at the read; `None` when
/// none of its next 100 available rows is kept back by time alone (no limits, room, or units in
/// use, which come back when a run ends). A held-back long poll looks again no later than this.
pub async fn budgets_free_at(
    pool: &PgPool,
    agent_id: &str,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>> {
    let rows: Vec<Json<Vec<RenderedDraw>>> = sqlx::query_scalar(sql!("claim/waiting_draws"))
        .bind(agent_id)
        .fetch_all(pool)
        .await?;
    first_free_at(pool, &rows).await
}

/// [`budgets_free_at`] for the webhook dispatcher: the next waiting rows of webhook tasks that
/// draw on limits (each one's first 10, of at most 100 such tasks).
pub async fn webhook_budgets_free_at(
    pool: &PgPool,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>> {
    let rows: Vec<Json<Vec<RenderedDraw>>> =
        sqlx::query_scalar(sql!("claim/waiting_draws_webhook"))
            .fetch_all(pool)
            .await?;
    first_free_at(pool, &rows).await
}

/// The earliest instant one of `rows` (their draws) stops being kept back by time alone, as
/// their budgets are read now, and the database's now.
async fn first_free_at(
    pool: &PgPool,
    rows: &[Json<Vec<RenderedDraw>>],
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>> {
    if rows.is_empty() {
        return Ok(None);
    }
    let pairs: Vec<(String, String)> = rows
        .iter()
        .flat_map(|r| r.0.iter().map(|d| (d.name.clone(), d.key.clone())))
        .collect();
    let mut conn = pool.acquire().await?;
    let budgets = super::limits::read_budgets(&mut conn, &pairs, false).await?;
    let first = rows
        .iter()
        .filter_map(|r| match wait_all(&budgets.list, &budgets.indexes(&r.0)) {
            Wait::Until(at) => Some(at),
            Wait::Nothing | Wait::Units => None,
        })
        .min();
    Ok(first.map(|at| (crate::domain::limit::instant(at), budgets.now)))
}

/// The agents with unpaused webhook tasks: the only agents whose work the webhook dispatcher
/// claims. Read through `tasks_webhook_idx`, so it costs the webhook tasks, not the registry.
pub async fn webhook_agents(pool: &PgPool) -> Result<HashSet<String>> {
    let agents: Vec<String> = sqlx::query_scalar(sql!("claim/webhook_agents"))
        .fetch_all(pool)
        .await?;
    Ok(agents.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    #[test]
    fn a_round_sees_the_rows_its_agents_other_rounds_chose_until_they_leave() {
        let in_flight = super::RoundsInFlight::default();
        let (a, b) = (in_flight.seat(1), in_flight.seat(2));
        let ids: Vec<uuid::Uuid> = (1..=3).map(uuid::Uuid::from_u128).collect();
        a.chose(ids.clone());
        assert!(
            a.others().is_empty(),
            "a round never passes over its own rows"
        );
        assert_eq!(b.others(), ids);
        b.chose(vec![uuid::Uuid::from_u128(9)]);
        assert_eq!(a.others(), [uuid::Uuid::from_u128(9)]);
        drop(a);
        assert!(
            b.others().is_empty(),
            "a round that left holds nothing back"
        );
    }

    use super::{Grant, TaskRoom, grant};

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
