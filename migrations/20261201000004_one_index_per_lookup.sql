-- Planner-proof hot lookups. In a burst the statistics still describe the table as it was
-- before it (next to no PENDING or RUNNING rows), so the planner believes every partial index
-- over those statuses is tiny and will scan any of them whose predicate a query implies. Two
-- such choices were measured:
-- * counting one task's RUNNING instances (claims, completions) walked the whole expiry index
--   (every RUNNING row of every task) instead of the task's entries in the run-slot index:
--   10,800 buffers and 47 ms for one claim of 300 rows;
-- * looking for one task's PENDING rows could likewise walk the agent-ordered claim index.
-- Each index below now carries a predicate those task-keyed queries do not imply, so the only
-- partial index left to them is the one keyed by task. The columns are NOT NULL whenever the
-- status holds (table checks), so the indexes cover the same rows as before.
drop index task_instance_expiry_idx;
create index task_instance_expiry_idx on task_instance (least(lease_expires_at, deadline_at))
    where status = 'RUNNING' and lease_expires_at is not null;

drop index task_instance_claim_idx;
create index task_instance_claim_idx on task_instance (agent_id, available_at, scheduled_at, id)
    where status = 'PENDING' and agent_id is not null;
