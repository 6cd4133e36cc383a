//! The `task_instance` table: idempotent window inserts, compare-and-swap transitions, and the
//! operators' queries. Every transition records itself in the same statement or transaction:
//! happy-path ones on the row (`created_*`, `claimed_by`, `finished_by`), the others as
//! `instance_events` rows (see `events.rs` and `migrations/20261201000001_hot_path.sql`).
//!
//! By concern: `read` (the row type and the reads), `windows` (inserting windows: scheduled
//! and dependent), `manual` (manual triggers), `cancel` (cancelling windows, the one
//! statement every cancellation uses), `lease` (what a lease holder does: heartbeats,
//! completions, reported failures), `failures` (the reaper's lock, recording failed attempts,
//! the retry scan), `operator` (operator retry and cancel), `backfill`, `retention` (pruning),
//! `debounce` (debounced manual runs).
//! The claim is `store::claim`. Every compare-and-swap's source states come from the domain's
//! transition table (`crate::domain::instance::legal_sources`); the decisions (what a failure
//! becomes, which windows a backfill covers) are pure and live in `crate::domain`. Nothing here
//! depends on `store::tasks`.
//!
//! # Lock order
//!
//! A transaction that locks both takes instance rows first, in id order, then task rows, in
//! id order (then, through `tasks`, the task's cursor row). Two transactions that take them
//! in opposite orders across statements deadlock (SQLSTATE 40P01, found only after
//! `deadlock_timeout`, and one of them is aborted). So:
//! - a group commit locks every lease holder's row of its batch, and then the task rows its
//!   writes update, in one first step (`locks`); in a batch it skips rows another transaction
//!   holds and writes those calls alone, so a blocked call holds up only itself;
//! - the reaper locks expired rows (`skip locked`: it never waits for an instance row) before
//!   `record_failures` updates their tasks;
//! - a statement that updates task rows (failure counts) locks them first, in id order, with
//!   the lock the update takes itself (`for no key update`): it adds no conflict, only an order,
//!   so two batches (or a batch and the reaper) over overlapping tasks never deadlock on them;
//! - a backfill, which may cancel RUNNING rows (overlap `replace`), never locks its task row
//!   for update: it reads it `for key share` (waiting for a delete or a change of the task,
//!   not for the failure counts) and takes turns with other backfills of the task on an
//!   advisory lock;
//! - a dependent window reads its downstream task rows `for key share` after the completion
//!   locked its own rows; deletes and definition changes lock the task row before its
//!   instances, but only its waiting (PENDING, FAILED) ones, which no lease holder locks.

use sqlx::PgPool;
use uuid::Uuid;

use super::Error;
use crate::domain::instance::InstanceStatus;

mod backfill;
mod cancel;
mod debounce;
pub(in crate::store) mod failures;
mod give_back;
pub(in crate::store) mod lease;
mod locks;
mod manual;
mod operator;
pub(in crate::store) mod read;
mod retention;
mod windows;

pub use backfill::{Backfill, BackfillReport, Reprocess, backfill};
pub use cancel::{
    CANCEL_BATCH, cancel_unfinished_between, cancel_unstarted_of_task, cancel_windows,
    move_unstarted_to_agent,
};
pub use failures::{
    ReportedBy, Retried, RunningAttempt, lock_expired, record_failures, renew_after_outage,
    retry_due,
};
pub(in crate::store) use give_back::record_throttled;
pub use give_back::{GivenBack, Throttled, give_back};
pub use lease::{Completion, FailureReport, LeaseExtension, queued_work_sql};
pub(crate) use lease::{Report, Written, answer_each, complete_in, fail_in, heartbeat_in};
pub(crate) use locks::lock_lease_rows;
pub use manual::{ManualTrigger, Triggered, trigger_instance, trigger_run};
pub use operator::{operator_cancel, operator_retry};
pub(in crate::store) use read::InstanceRow;
pub use read::{InstanceFilter, agents_of, get_instance, get_instance_by_window, list_instances};
pub use retention::prune_finished;
pub use windows::{
    Created, InsertReport, NewInstance, Unfinished, existing_windows, insert_windows,
    insert_windows_at, unfinished_windows,
};

fn status_names(statuses: &[InstanceStatus]) -> Vec<&'static str> {
    statuses.iter().map(|s| s.as_str()).collect()
}

/// The fence rejection of a compare-and-swap on (id, RUNNING, token) that matched nothing,
/// describing where the instance stands.
fn fence_error_of(i: crate::domain::instance::Instance) -> Error {
    Error::Fenced {
        instance_id: i.id,
        task_id: i.task_id,
        window_key: i.window_key,
        attempt: i.attempt,
        status: i.status.as_str().to_owned(),
    }
}

async fn illegal_error(pool: &PgPool, id: Uuid) -> Error {
    match get_instance(pool, id).await {
        Ok(i) => Error::Illegal {
            instance_id: i.id,
            status: i.status.as_str().to_owned(),
        },
        Err(e) => e,
    }
}
