//! Claim rounds: the concurrent claims of one agent on this replica share one claim
//! transaction (openapi.yaml).
//!
//! At the top of the minute every worker of an agent claims at once. Run side by side, their
//! claims read the same head of the agent's work and skip each other's locked rows, and each
//! pays the whole per-claim cost (the fair pick's per-task look, the permit reservations) for
//! its own 100 rows. So a claim is queued per agent instead: when fewer than
//! [`ROUNDS_IN_FLIGHT`] rounds of that agent run, it starts one at once (an idle agent waits
//! for nothing); requests that arrive meanwhile form the next round, up to
//! [`DEFAULT_MAX_ROUND`] instances. A round is one [`claim_many`]: one fair pick over the
//! round's total, dealt out in arrival order, so each request gets what it would have got
//! claiming alone at its turn, under its own
//! worker, lease and actor. Replicas still claim side by side through `SKIP LOCKED`.
//!
//! Two rounds of one agent in flight take from the same work: each reads past the rows the
//! other has locked, and each reserves permits the other cannot have until it commits. So a
//! round that ran beside another can come back short although claimable work remains: what
//! the other locked and did not take, or room under a task's limit that the other reserved and
//! gave back. A request such a round left empty-handed is not answered `[]` (its long poll
//! would sleep until its relook although the agent's work is claimable, since nothing new will
//! announce it): it gets in line again, at the front, for a round that runs alone
//! (`AgentQueue::solo`). That round's answer is final: a request it leaves empty-handed found
//! nothing claimable at the time, and its long poll waits for a notification as before
//! (`tests/one_agent_workers.rs`). When the round found the agent's work held back by a shared
//! limit with no room, the request gets in line again as well, but for the agent's next round
//! whatever runs beside it: while a limit binds, its rounds keep coming back short, and waiting
//! each time for the agent's rounds to drain before one runs alone would leave the units the
//! finishing instances give back unclaimed meanwhile.
//!
//! A round that read the head of its agent's work in vain (the head could not settle the fair
//! pick, see [`HeadRead`]) makes the agent's rounds go straight to the per-task read for
//! [`HEAD_RETRY`]; then the head is tried again, by one round of the agent at a time (the
//! others go on with the per-task read meanwhile). Both reads pick the same rows: the hint only
//! saves the wasted read and the rows it locked until the commit. One round at a time tries it
//! again because, while one task's backlog drains fast, a head read in vain costs many per-task
//! rounds, and two at once would hold both of the agent's rounds in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::oneshot;

use crate::store::claim::{
    ClaimRequest, Claimed, HeadRead, RoundSeat, RoundsInFlight, agent_limited, claim_many,
    claim_round,
};
use crate::store::claim_answers;
use crate::store::instances::give_back;
use crate::store::{self, Error, Result};

/// Most instances one round claims (the sum of its requests' `max_instances`).
pub const DEFAULT_MAX_ROUND: usize = 1000;
/// Rounds of one agent that run at once on a replica: while one waits for its commit, the next
/// reads.
pub const ROUNDS_IN_FLIGHT: usize = 2;
/// How long an agent's rounds skip the head after reading it in vain.
pub const HEAD_RETRY: Duration = Duration::from_secs(1);
/// How long after a head read in vain an agent's rounds read the head one at a time.
pub const HEAD_CAREFUL: Duration = Duration::from_secs(10);
/// Agents whose head hint is kept before expired hints are dropped.
const HEAD_HINTS_PRUNE_AT: usize = 1024;

type Reply = oneshot::Sender<Result<Vec<Claimed>>>;

struct Waiting {
    req: ClaimRequest,
    actor: String,
    reply: Reply,
    /// A round beside another left it empty-handed, and it got in line again: the next round
    /// that takes it answers it, whatever that round finds.
    again: bool,
}

#[derive(Default)]
struct AgentQueue {
    waiting: Vec<Waiting>,
    /// Round tasks of this agent running (each takes the next rounds until nobody waits).
    running: usize,
    /// Rounds of this agent in their transaction now.
    in_round: usize,
    /// Rounds of this agent begun so far (tells a round whether another began beside it).
    begun: u64,
    /// Requests are in line again (at the front) after a round beside another left them
    /// empty-handed: the next round waits until no other round of the agent runs, and runs
    /// alone.
    solo: bool,
    /// That round runs now: no other round begins until it ends.
    solo_running: bool,
    /// The rows each round in its transaction has chosen (the others' reads pass over them).
    in_flight: RoundsInFlight,
}

/// What an agent's rounds know about its head after a read of it in vain.
struct HeadHint {
    /// Until when its rounds skip the head.
    until: Instant,
    /// A round of the agent is trying the head again now: the others skip it meanwhile.
    trying: bool,
    /// Until when one round at a time reads the head (the hint is dropped by the first read
    /// that settles the pick after it).
    careful_until: Instant,
}

/// A round taken from an agent's line.
struct Round {
    requests: Vec<Waiting>,
    /// Rounds of the agent in their transaction when it began.
    beside: usize,
    /// The agent's [`AgentQueue::begun`] when it began (itself counted).
    begun: u64,
    /// It runs alone ([`AgentQueue::solo`]).
    solo: bool,
    /// Its place among the agent's rounds in flight.
    seat: RoundSeat,
}

/// Per-agent claim queues of this replica; cheap to clone.
#[derive(Clone)]
pub struct ClaimRounds {
    pool: PgPool,
    /// The event actor of give-backs: `kairos:<node id>`.
    actor: String,
    max_round: usize,
    agents: Arc<Mutex<HashMap<String, AgentQueue>>>,
    /// Per agent: until when its rounds skip the head (kept apart from the queues, which
    /// end whenever nobody waits).
    skip_head_until: Arc<Mutex<HashMap<String, HeadHint>>>,
}

impl ClaimRounds {
    /// Claimed instances whose caller went away before the answer (its request was dropped:
    /// the client disconnected or timed out, the request timed out) go back to PENDING at
    /// once, their attempt not spent, instead of waiting RUNNING for their leases to expire.
    /// When the give-back itself fails (the database went away too), the leases expire and the
    /// reaper's outage rule applies.
    async fn give_back_undelivered(&self, req: &ClaimRequest, unsent: Vec<Claimed>) {
        if unsent.is_empty() {
            return;
        }
        let leases: Vec<(uuid::Uuid, uuid::Uuid)> = unsent
            .iter()
            .map(|c| (c.instance.id, c.lease_token))
            .collect();
        let reason = "the claim's answer could not be delivered";
        match store::health::bounded(
            "claim_give_back",
            give_back(&self.pool, &leases, &self.actor, reason),
        )
        .await
        {
            Ok(back) => {
                metrics::counter!("kairos_claims_given_back_total").increment(back.len() as u64);
                for g in &back {
                    tracing::warn!(task_id = %g.task_id, window_key = %g.window_key, instance_id = %g.id, attempt = g.attempt, agent_id = %req.agent_id, worker_id = %req.worker_id, reason, "claimed instance given back");
                }
            }
            Err(e) => {
                let lost: Vec<String> = unsent
                    .iter()
                    .map(|c| format!("{}@{}", c.instance.task_id, c.instance.window_key))
                    .collect();
                tracing::error!(agent_id = %req.agent_id, worker_id = %req.worker_id, instances = ?lost, error = %e, reason, "claimed instances not delivered and not given back; their leases will expire");
            }
        }
    }

    pub fn new(pool: PgPool, max_round: usize, node_id: &str) -> Self {
        Self {
            pool,
            actor: format!("kairos:{node_id}"),
            max_round: max_round.max(1),
            agents: Arc::default(),
            skip_head_until: Arc::default(),
        }
    }

    fn head_hints(&self) -> MutexGuard<'_, HashMap<String, HeadHint>> {
        // Nothing panics while the lock is held; a poisoned map is still consistent.
        self.skip_head_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `agent`'s next round reads the head first. An agent whose head has not been
    /// read in vain lately ([`HEAD_CAREFUL`]) reads it in every round, side by side too: a
    /// burst of many tasks is settled by the head, and the per-task read would look at every
    /// task. After a read in vain its rounds skip the head for [`HEAD_RETRY`]; then one round
    /// at a time tries it again, the others going on with the per-task read, until a read
    /// settles the pick after [`HEAD_CAREFUL`]. A round told [`HeadRead::Try`] reports how it
    /// went with [`Self::note_head`].
    fn head_read(&self, agent: &str) -> HeadRead {
        let mut hints = self.head_hints();
        let Some(h) = hints.get_mut(agent) else {
            return HeadRead::Try;
        };
        if h.trying || Instant::now() < h.until {
            return HeadRead::Skip;
        }
        h.trying = true;
        HeadRead::Try
    }

    /// Record how `agent`'s head read went (`None`: the round failed): a read in vain starts
    /// a skip and a careful spell; a read that settles the pick after the spell drops the hint.
    fn note_head(&self, agent: &str, unsettled: Option<bool>) {
        let mut hints = self.head_hints();
        let now = Instant::now();
        match unsettled {
            Some(true) => {
                if hints.len() >= HEAD_HINTS_PRUNE_AT && !hints.contains_key(agent) {
                    hints.retain(|_, h| h.trying || h.careful_until > now);
                }
                hints.insert(
                    agent.to_owned(),
                    HeadHint {
                        until: now + HEAD_RETRY,
                        trying: false,
                        careful_until: now + HEAD_CAREFUL,
                    },
                );
            }
            Some(false) => match hints.get_mut(agent) {
                Some(h) if now >= h.careful_until => {
                    hints.remove(agent);
                }
                Some(h) => h.trying = false,
                None => {}
            },
            None => {
                if let Some(h) = hints.get_mut(agent) {
                    h.trying = false;
                }
            }
        }
    }

    fn agents(&self) -> MutexGuard<'_, HashMap<String, AgentQueue>> {
        // Nothing panics while the lock is held; a poisoned map is still consistent.
        self.agents.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claim for `req` in the next round of its agent; answered when that round commits. A
    /// request with a `claim_id` this worker already used, whose instances it still holds, is
    /// answered with those instances and lease tokens instead (`claim_answers`).
    pub async fn claim(&self, req: ClaimRequest, actor: String) -> Result<Vec<Claimed>> {
        if let Some(claim_id) = req.claim_id.as_deref()
            && let Some(held) = store::health::bounded(
                "claim_replay",
                claim_answers::replay(&self.pool, &req.agent_id, &req.worker_id, claim_id),
            )
            .await?
        {
            metrics::counter!("kairos_claims_replayed_total").increment(1);
            tracing::info!(agent_id = %req.agent_id, worker_id = %req.worker_id, claim_id, instances = held.len(), "claim repeated under its claim_id; answered with the instances it took");
            return Ok(held);
        }
        let (reply, answer) = oneshot::channel();
        let agent = req.agent_id.clone();
        let lead = {
            let mut agents = self.agents();
            let q = agents.entry(agent.clone()).or_default();
            q.waiting.push(Waiting {
                req,
                actor,
                reply,
                again: false,
            });
            let lead = q.running < ROUNDS_IN_FLIGHT;
            if lead {
                q.running += 1;
            }
            lead
        };
        if lead {
            // Its own task: a caller that goes away must not stop the rounds of the others.
            tokio::spawn(self.clone().rounds(agent));
        }
        answer
            .await
            .map_err(|_| Error::Db(sqlx::Error::PoolClosed))?
    }

    /// Run rounds of `agent` until nobody waits (or until the agent's next round must run
    /// alone while another runs: that one's task takes it).
    async fn rounds(self, agent: String) {
        while let Some(round) = self.next_round(&agent) {
            metrics::histogram!("kairos_claim_round_requests").record(round.requests.len() as f64);
            let (again, solo) = self.run(&agent, round).await;
            if !again.is_empty() {
                self.in_line_again(&agent, again, solo);
            }
        }
    }

    /// The next round's requests, oldest first, up to `max_round` instances (at least one
    /// request). Requests whose caller went away are dropped: nothing is claimed for them.
    /// `None` (and this round task ended) when nobody waits, or when the next round must run
    /// alone and another round runs (its task takes the next round when it ends).
    fn next_round(&self, agent: &str) -> Option<Round> {
        let mut agents = self.agents();
        let q = agents.get_mut(agent)?;
        q.waiting.retain(|w| !w.reply.is_closed());
        if q.waiting.is_empty() || q.solo_running || (q.solo && q.in_round > 0) {
            q.running = q.running.saturating_sub(1);
            if q.running == 0 && q.in_round == 0 {
                // Nobody waits (a solo round is only ever awaited while a round runs).
                agents.remove(agent);
            }
            return None;
        }
        let mut total = 0usize;
        let mut n = 0;
        for w in &q.waiting {
            let want = usize::try_from(w.req.max_instances.max(1)).unwrap_or(1);
            if n > 0 && total + want > self.max_round {
                break;
            }
            total += want;
            n += 1;
        }
        let solo = std::mem::take(&mut q.solo);
        let requests: Vec<Waiting> = q.waiting.drain(..n).collect();
        q.solo_running = solo;
        let beside = q.in_round;
        q.in_round += 1;
        q.begun += 1;
        Some(Round {
            requests,
            beside,
            begun: q.begun,
            solo,
            seat: q.in_flight.seat(q.begun),
        })
    }

    /// The end of `round`'s transaction: whether another round of the agent ran beside it.
    fn round_ended(&self, agent: &str, round: &Round) -> bool {
        let mut agents = self.agents();
        let Some(q) = agents.get_mut(agent) else {
            return false;
        };
        q.in_round = q.in_round.saturating_sub(1);
        if round.solo {
            q.solo_running = false;
        }
        round.beside > 0 || q.begun > round.begun
    }

    /// Requests a round beside another left empty-handed get in line again, at the front, for
    /// a round that runs alone (`solo`) or for the next round.
    fn in_line_again(&self, agent: &str, again: Vec<Waiting>, solo: bool) {
        metrics::counter!("kairos_claims_in_line_again_total").increment(again.len() as u64);
        let mut agents = self.agents();
        let q = agents.entry(agent.to_owned()).or_default();
        q.waiting.splice(0..0, again);
        q.solo |= solo;
    }

    /// Run `round` and answer its requests, but for those to get in line again (returned, with
    /// whether they wait for a round that runs alone: not when a shared limit held the agent's
    /// work back).
    async fn run(&self, agent: &str, round: Round) -> (Vec<Waiting>, bool) {
        let reqs: Vec<(ClaimRequest, String)> = round
            .requests
            .iter()
            .map(|w| (w.req.clone(), w.actor.clone()))
            .collect();
        let head = self.head_read(agent);
        let result = store::health::bounded(
            "claim_round",
            claim_round(&self.pool, &reqs, head, Some(&round.seat)),
        )
        .await;
        let beside = self.round_ended(agent, &round);
        if head == HeadRead::Try {
            self.note_head(agent, result.as_ref().ok().map(|r| r.head_unsettled));
        }
        let mut again = Vec::new();
        let mut solo = true;
        match result {
            Ok(r) => {
                // Asked only when a request would get in line again: whether a full limit, not
                // the other round, kept the agent's work back.
                let again_due = beside
                    && round
                        .requests
                        .iter()
                        .zip(&r.claimed)
                        .any(|(w, list)| list.is_empty() && !w.again);
                if again_due {
                    let limited = r.limited
                        || store::health::bounded("claim_round", agent_limited(&self.pool, agent))
                            .await
                            .unwrap_or(false);
                    solo = !limited;
                }
                let outcome = match (head, r.head_unsettled) {
                    (HeadRead::Skip, _) => "skipped",
                    (HeadRead::Try, true) => "unsettled",
                    (HeadRead::Try, false) => "settled",
                };
                metrics::counter!("kairos_claim_head_total", "outcome" => outcome).increment(1);
                for (mut w, list) in round.requests.into_iter().zip(r.claimed) {
                    if list.is_empty() && beside && !w.again {
                        w.again = true;
                        again.push(w);
                        continue;
                    }
                    if let Err(Ok(unsent)) = w.reply.send(Ok(list)) {
                        self.give_back_undelivered(&w.req, unsent).await;
                    }
                }
            }
            Err(e) if round.requests.len() == 1 => {
                if let Some(w) = round.requests.into_iter().next() {
                    let _ = w.reply.send(Err(e));
                }
            }
            Err(e) => {
                // Each request alone, so one request's error is its own.
                tracing::warn!(error = %e, requests = round.requests.len(), "a shared claim failed; claiming for each request alone");
                for w in round.requests {
                    let one = [(w.req.clone(), w.actor.clone())];
                    let answer =
                        store::health::bounded("claim_round", claim_many(&self.pool, &one))
                            .await
                            .map(|mut l| l.pop().unwrap_or_default());
                    if let Err(Ok(unsent)) = w.reply.send(answer) {
                        self.give_back_undelivered(&w.req, unsent).await;
                    }
                }
            }
        }
        (again, solo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds() -> ClaimRounds {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://unused@127.0.0.1:1/unused")
            .expect("a lazy pool");
        ClaimRounds::new(pool, DEFAULT_MAX_ROUND, "test")
    }

    #[tokio::test]
    async fn rounds_side_by_side_read_the_head_until_a_read_is_in_vain() {
        let r = rounds();
        let spell_over = |r: &ClaimRounds| {
            if let Some(h) = r.head_hints().get_mut("a") {
                h.until = Instant::now();
                h.careful_until = Instant::now();
            }
        };
        // Two rounds of an agent at once both read the head (a burst of many tasks).
        assert_eq!(r.head_read("a"), HeadRead::Try);
        assert_eq!(r.head_read("a"), HeadRead::Try);
        r.note_head("a", Some(false));
        r.note_head("a", Some(false));
        assert_eq!(r.head_read("a"), HeadRead::Try);
        // A read in vain: the agent's rounds skip the head, other agents do not.
        r.note_head("a", Some(true));
        assert_eq!(r.head_read("a"), HeadRead::Skip);
        assert_eq!(r.head_read("b"), HeadRead::Try);
        // Once the skip ends, one round at a time tries the head again, also after a read
        // that settled the pick, while the careful spell lasts.
        if let Some(h) = r.head_hints().get_mut("a") {
            h.until = Instant::now();
        }
        assert_eq!(r.head_read("a"), HeadRead::Try);
        assert_eq!(r.head_read("a"), HeadRead::Skip);
        r.note_head("a", Some(false));
        assert_eq!(r.head_read("a"), HeadRead::Try);
        assert_eq!(r.head_read("a"), HeadRead::Skip);
        // A failed try (the round errored) lets the next round try.
        r.note_head("a", None);
        assert_eq!(r.head_read("a"), HeadRead::Try);
        // A read that settles after the spell: every round reads the head again.
        spell_over(&r);
        r.note_head("a", Some(false));
        assert_eq!(r.head_read("a"), HeadRead::Try);
        assert_eq!(r.head_read("a"), HeadRead::Try);
    }

    fn waiting(worker: &str) -> Waiting {
        let (reply, _answer) = oneshot::channel();
        Waiting {
            req: ClaimRequest {
                agent_id: "a".to_owned(),
                worker_id: worker.to_owned(),
                max_instances: 10,
                lease_seconds: 60,
                claim_id: None,
            },
            actor: format!("agent:{worker}"),
            reply,
            again: true,
        }
    }

    #[tokio::test]
    async fn requests_a_full_limit_left_empty_handed_wait_for_the_next_round_not_a_solo_one() {
        let r = rounds();
        r.in_line_again("a", vec![waiting("w1")], false);
        {
            let agents = r.agents();
            let q = agents.get("a").expect("the agent's line");
            assert!(!q.solo, "a limit held the work back: no round alone");
            assert_eq!(q.waiting.len(), 1);
        }
        // Left empty-handed beside another round with no limit in the way: the next round runs
        // alone, and the request is first in line for it.
        r.in_line_again("a", vec![waiting("w2")], true);
        let agents = r.agents();
        let q = agents.get("a").expect("the agent's line");
        assert!(q.solo);
        let first: Vec<&str> = q.waiting.iter().map(|w| w.req.worker_id.as_str()).collect();
        assert_eq!(first, ["w2", "w1"]);
    }
}
