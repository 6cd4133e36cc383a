-- kairos schema, version 2: a leaner hot path.
--
-- Measured on version 1 (pg_stat_statements, pg_stat_wal): every claimed instance cost about 12
-- WAL records and 1.2 kB (its update wrote 9 index entries, plus an instance_events row, its
-- index entry and a foreign-key check), every completion about 10 records and 1 kB. Version 2:
--
-- 1. The happy path writes no event rows. Creation, the claim of the current attempt and a
--    success are recorded on the instance row itself (created_*, claimed_by, finished_by);
--    every other transition (fail, reap, retry, cancel, operator actions) still writes an
--    explicit instance_events row, and a failing or cancelled attempt first writes its claim
--    as an explicit row. The view instance_history joins both into the one history an
--    operator reads, in order. Rows written by version 1 keep their explicit events (their new
--    columns stay null), so the history of old instances is unchanged.
-- 2. instance_events loses its foreign key (a per-row trigger and a lock on the instance);
--    the pruner deletes an instance's events with it.
-- 3. Fewer indexes on task_instance: a claim now writes 7 index entries instead of 9, a
--    completion 4 instead of 6, an insert 7 instead of 8.
--    - lease and deadline expiry share one index (the reaper asks for either);
--    - the status/time index becomes a small one over FAILED and DEAD rows (the operators'
--      "what needs attention" lists); other status filters read the time index;
--    - retention walks the time index instead of its own finished_at index.
-- 4. Concurrency permits. A task with concurrency_limit L has permits 0..L-1; a RUNNING instance
--    holds one (run_slot), and a unique index makes two RUNNING instances of one task unable
--    to hold the same permit, so at most L run. Claimers reserve free permits with
--    transaction-scoped advisory try-locks, so claimers of the same task skip each other's
--    permits instead of queueing on one task lock (store/claim.rs). Instances RUNNING at the
--    upgrade get permits 0, 1, ... in start order.

alter table task_instance
    -- Who created the window, its first status and why (the creating event).
    add column created_by     text,
    add column created_status text,
    add column created_reason text,
    -- Who claimed the current attempt (the PENDING → RUNNING event of that attempt), while no
    -- explicit row records it.
    add column claimed_by     text,
    -- Who reported the success (the RUNNING → SUCCESS event).
    add column finished_by    text;

alter table task_instance add column run_slot integer;
update task_instance i set run_slot = r.n - 1
from (select id, row_number() over (partition by task_id order by started_at, id) as n
      from task_instance where status = 'RUNNING') r
where r.id = i.id;
alter table task_instance add constraint task_instance_run_slot_check
    check (status <> 'RUNNING' or run_slot is not null);
drop index if exists task_instance_running_idx;
create unique index task_instance_run_slot_idx on task_instance (task_id, run_slot)
    where status = 'RUNNING';

alter table instance_events drop constraint if exists instance_events_instance_id_fkey;

drop index if exists task_instance_lease_idx;
drop index if exists task_instance_deadline_idx;
create index task_instance_expiry_idx on task_instance (least(lease_expires_at, deadline_at))
    where status = 'RUNNING';

drop index if exists task_instance_status_time_idx;
create index task_instance_attention_idx on task_instance (status, scheduled_at desc, id desc)
    where status in ('FAILED', 'DEAD');

drop index if exists task_instance_finished_idx;

-- Claims read an agent's pending rows in (available_at, scheduled_at, id) order.
drop index if exists task_instance_claim_idx;
create index task_instance_claim_idx on task_instance (agent_id, available_at, scheduled_at, id)
    where status = 'PENDING';

-- The webhook dispatcher looks for pending work through the unpaused webhook tasks, every
-- second: an index keeps that look from reading the whole registry.
create index tasks_webhook_idx on tasks (id) where dispatch_mode = 'webhook' and not paused;

-- Every transition of every instance, oldest first when ordered by (phase, seq).
create view instance_history as
    select i.id as instance_id, 1 as attempt, null::text as from_status,
           i.created_status as to_status, i.created_by as actor, i.created_reason as reason,
           i.created_at as at, 0 as phase, 0::bigint as seq
    from task_instance i where i.created_by is not null
    union all
    select e.instance_id, e.attempt, e.from_status, e.to_status, e.actor, e.reason, e.at,
           1 as phase, e.id as seq
    from instance_events e
    union all
    select i.id, i.attempt, 'PENDING', 'RUNNING', i.claimed_by,
           'claimed by worker ' || coalesce(i.worker_id, 'unknown'), i.started_at, 2, 0
    from task_instance i where i.claimed_by is not null
    union all
    select i.id, i.attempt, 'RUNNING', 'SUCCESS', i.finished_by, null, i.finished_at, 3, 0
    from task_instance i where i.finished_by is not null;

