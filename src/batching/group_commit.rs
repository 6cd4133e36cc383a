//! Group commit for single `complete`, `fail` and `heartbeat` calls and the items of batch
//! completions (openapi.yaml).
//!
//! Each call is queued; a few committer tasks each take everything queued (up to a batch
//! size) and write it in one transaction: one statement per kind, each item still its own
//! compare-and-swap on (id, RUNNING, lease token). Every caller is answered after the commit,
//! with its own instance or its own fence error, exactly as if it had run alone. So a burst of
//! N concurrent single calls costs a handful of commits instead of N.
//!
//! If a shared transaction fails (a database error, or one item PostgreSQL refuses), each of
//! its items is retried in a transaction of its own, so one bad item fails only itself.

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;

use crate::domain::instance::Instance;
use crate::store::instances::{
    Completion, FailureReport, LeaseExtension, Report, Written, answer_each, complete_in, fail_in,
    heartbeat_in, lock_lease_rows,
};
use crate::store::{self, Error, Result};

/// Most calls one shared transaction takes (a batch completion's items count one each).
pub const DEFAULT_MAX_BATCH: usize = 1000;
/// Committer tasks: while one commits, the next gathers the calls that arrived meanwhile.
pub const DEFAULT_COMMITTERS: usize = 3;

type Reply = oneshot::Sender<Result<Instance>>;

enum Op {
    Heartbeat(LeaseExtension, Reply),
    Complete(Completion, Reply),
    Fail(FailureReport, Reply),
}

impl Op {
    /// The call's (instance id, lease token): what its answer is matched by.
    fn call(&self) -> (Uuid, Uuid) {
        match self {
            Op::Heartbeat(h, _) => (h.id, h.lease_token),
            Op::Complete(c, _) => (c.id, c.lease_token),
            Op::Fail(f, _) => (f.id, f.lease_token),
        }
    }
}

/// The queue single calls go through; cheap to clone.
#[derive(Clone)]
pub struct GroupCommit {
    tx: mpsc::Sender<Op>,
}

impl GroupCommit {
    /// Start `committers` committer tasks on the current runtime. They stop when every handle
    /// is dropped and the queue is empty.
    pub fn start(pool: PgPool, committers: usize, max_batch: usize) -> Self {
        let (tx, rx) = mpsc::channel::<Op>(max_batch.max(1) * committers.max(1) * 4);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..committers.max(1) {
            let (pool, rx) = (pool.clone(), rx.clone());
            tokio::spawn(async move {
                while let Some(batch) = next_batch(&rx, max_batch.max(1)).await {
                    run_batch(&pool, batch).await;
                }
            });
        }
        Self { tx }
    }

    /// Extend a lease (fenced: 409 when the token is not the current RUNNING lease).
    pub async fn heartbeat(&self, item: LeaseExtension) -> Result<Instance> {
        self.call(|reply| Op::Heartbeat(item, reply)).await
    }

    /// RUNNING → SUCCESS under the lease token.
    pub async fn complete(&self, item: Completion) -> Result<Instance> {
        self.call(|reply| Op::Complete(item, reply)).await
    }

    /// RUNNING → FAILED or DEAD under the lease token.
    pub async fn fail(&self, item: FailureReport) -> Result<Instance> {
        self.call(|reply| Op::Fail(item, reply)).await
    }

    /// Completions queued in one go, so that a committer free at the time takes them into one
    /// transaction; each is answered on its own, as if called alone (a database failure of one
    /// is that item's answer only), in item order.
    pub async fn complete_each(&self, items: Vec<Completion>) -> Vec<Result<Instance>> {
        let gone = || Error::Db(sqlx::Error::PoolClosed);
        let mut answers = Vec::with_capacity(items.len());
        let mut items = items.into_iter();
        while items.len() > 0 {
            // Room for the items first, then all of them queued back to back: a committer
            // woken by the first finds the rest already queued.
            let room = items.len().min(self.tx.max_capacity());
            let Ok(permits) = self.tx.reserve_many(room).await else {
                break;
            };
            for (permit, item) in permits.zip(items.by_ref()) {
                let (reply, answer) = oneshot::channel();
                permit.send(Op::Complete(item, reply));
                answers.push(answer);
            }
        }
        let mut out = Vec::with_capacity(answers.len() + items.len());
        for answer in answers {
            out.push(answer.await.unwrap_or_else(|_| Err(gone())));
        }
        out.extend(items.map(|_| Err(gone())));
        out
    }

    /// The items of a batch completion (`POST /v1/completions`), each queued as its own call:
    /// concurrent batches share transactions, and the per-task work of a statement is paid
    /// once for all of them. Answers come in item order. A database failure of any item fails
    /// the whole batch (the request is answered 503, as before), never an item status.
    pub async fn complete_all(&self, items: Vec<Completion>) -> Result<Vec<Result<Instance>>> {
        let mut answers = Vec::with_capacity(items.len());
        for item in items {
            let (reply, answer) = oneshot::channel();
            self.tx
                .send(Op::Complete(item, reply))
                .await
                .map_err(|_| Error::Db(sqlx::Error::PoolClosed))?;
            answers.push(answer);
        }
        let mut out = Vec::with_capacity(answers.len());
        for answer in answers {
            match answer
                .await
                .map_err(|_| Error::Db(sqlx::Error::PoolClosed))?
            {
                Err(e @ Error::Db(_)) => return Err(e),
                other => out.push(other),
            }
        }
        Ok(out)
    }

    async fn call(&self, op: impl FnOnce(Reply) -> Op) -> Result<Instance> {
        let (reply, answer) = oneshot::channel();
        // A stopped committer (shutdown) is the database being unavailable to this call: 503,
        // never a 409 that would tell an agent its lease is gone.
        self.tx
            .send(op(reply))
            .await
            .map_err(|_| Error::Db(sqlx::Error::PoolClosed))?;
        answer
            .await
            .map_err(|_| Error::Db(sqlx::Error::PoolClosed))?
    }
}

/// Wait for one call, then take whatever else is queued, up to `max`.
async fn next_batch(rx: &Mutex<mpsc::Receiver<Op>>, max: usize) -> Option<Vec<Op>> {
    let mut rx = rx.lock().await;
    let first = rx.recv().await?;
    let mut batch = vec![first];
    while batch.len() < max {
        match rx.try_recv() {
            Ok(op) => batch.push(op),
            Err(_) => break,
        }
    }
    Some(batch)
}

/// What one transaction wrote, per kind.
#[derive(Default)]
struct BatchWritten {
    heartbeats: Vec<Written>,
    completes: Vec<Written>,
    fails: Vec<Written>,
}

/// Write `ops` in one transaction.
///
/// A batch with failures first locks the calls' rows and their tasks in the store's lock order
/// ([`lock_lease_rows`]): a failure updates task rows in a statement of its own, after the
/// completions' statement, and without the lock step it could hold a task row while it waits
/// for an instance row the reaper holds. In a batch of several calls, rows another transaction
/// holds are skipped there, and those calls are returned (by position) to be written alone.
///
/// A batch of heartbeats and completions only needs no lock step (it costs an extra locking
/// pass over every row of a drain): each statement locks instance rows before task rows, and
/// waits for an instance row holding no task row. A row another transaction holds is waited
/// for at most [`SHARED_LOCK_WAIT_MS`](store::SHARED_LOCK_WAIT_MS) ms when the batch is shared; then
/// the batch fails and each call is written alone, so one blocked call never holds up a batch
/// of unrelated ones for long.
async fn write(pool: &PgPool, ops: &[Op]) -> Result<(BatchWritten, Vec<bool>)> {
    let failing: Vec<Uuid> = ops
        .iter()
        .filter(|op| op.kind() == Report::Fail)
        .map(|op| op.call().0)
        .collect();
    let shared = ops.len() > 1;
    let mut tx = if shared && failing.is_empty() {
        store::begin_hot_shared(pool).await?
    } else {
        store::begin_hot(pool).await?
    };
    let calls: Vec<(Uuid, Uuid)> = ops.iter().map(Op::call).collect();
    let busy = if failing.is_empty() {
        std::collections::HashSet::new()
    } else {
        lock_lease_rows(&mut tx, &calls, &failing, shared).await?
    };
    // A call whose row another transaction holds is answered by a write of its own.
    let deferred: Vec<bool> = ops.iter().map(|op| busy.contains(&op.call().0)).collect();
    let mut heartbeats = Vec::new();
    let mut completes = Vec::new();
    let mut fails = Vec::new();
    for (op, _) in ops.iter().zip(&deferred).filter(|(_, d)| !**d) {
        match op {
            Op::Heartbeat(h, _) => heartbeats.push(h.clone()),
            Op::Complete(c, _) => completes.push(c.clone()),
            Op::Fail(f, _) => fails.push(f.clone()),
        }
    }
    let mut w = BatchWritten::default();
    if !heartbeats.is_empty() {
        w.heartbeats = heartbeat_in(&mut tx, &heartbeats).await?;
    }
    if !completes.is_empty() {
        w.completes = complete_in(&mut tx, &completes).await?;
    }
    if !fails.is_empty() {
        w.fails = fail_in(&mut tx, &fails).await?;
    }
    tx.commit().await?;
    Ok((w, deferred))
}

async fn run_batch(pool: &PgPool, ops: Vec<Op>) {
    let (written, deferred) = match store::health::bounded("group_commit", write(pool, &ops)).await
    {
        Ok(w) => w,
        Err(e) if ops.len() == 1 => {
            if let Some(op) = ops.into_iter().next() {
                reply(op, Err(e));
            }
            return;
        }
        Err(e) => {
            // Each alone and side by side: a call that waits for its row (the shared batch gave
            // up on a lock) holds up neither the others nor this committer.
            tracing::warn!(error = %e, calls = ops.len(), "a shared commit failed; retrying its calls one by one");
            for op in ops {
                tokio::spawn(run_alone(pool.clone(), op));
            }
            return;
        }
    };
    // Per kind, the written instance of each call, or its own fence or not-found answer.
    let mut answers: Vec<Option<Result<Instance>>> = ops.iter().map(|_| None).collect();
    for (kind, list) in [
        (Report::Heartbeat, written.heartbeats),
        (Report::Complete, written.completes),
        (Report::Fail, written.fails),
    ] {
        let positions: Vec<usize> = (0..ops.len())
            .filter(|&k| ops[k].kind() == kind && !deferred[k])
            .collect();
        if positions.is_empty() {
            continue;
        }
        let calls = positions.iter().map(|&k| ops[k].call());
        match store::health::bounded("group_commit", answer_each(pool, calls, kind, list)).await {
            Ok(each) => {
                for (k, a) in positions.into_iter().zip(each) {
                    answers[k] = Some(a);
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not explain missed compare-and-swaps"),
        }
    }
    let mut alone = Vec::new();
    for ((op, answer), deferred) in ops.into_iter().zip(answers).zip(deferred) {
        if deferred {
            alone.push(op);
            continue;
        }
        // Written, but why a compare-and-swap missed could not be read back: unavailable.
        let answer = answer.unwrap_or_else(|| Err(Error::Db(sqlx::Error::PoolClosed)));
        reply(op, answer);
    }
    // Each waits for its row without holding up this committer.
    for op in alone {
        tokio::spawn(run_alone(pool.clone(), op));
    }
}

/// One call in a transaction of its own (its type named, since it is spawned from the batch
/// it left).
fn run_alone(pool: PgPool, op: Op) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move { run_batch(&pool, vec![op]).await })
}

impl Op {
    fn kind(&self) -> Report {
        match self {
            Op::Heartbeat(..) => Report::Heartbeat,
            Op::Complete(..) => Report::Complete,
            Op::Fail(..) => Report::Fail,
        }
    }
}

/// Answer one call. The caller may have gone (client disconnected); the write stands.
fn reply(op: Op, answer: Result<Instance>) {
    let r = match op {
        Op::Heartbeat(_, r) | Op::Complete(_, r) | Op::Fail(_, r) => r,
    };
    let _ = r.send(answer);
}
