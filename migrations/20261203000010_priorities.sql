-- Priorities: `execution.priority` 0-9 (0 most urgent, default 5), stored on each instance
-- (a manual trigger, backfill or operator retry may set its own). Claims take the most urgent
-- claimable work of an agent first, so both claim indexes lead with it.
--
-- The column is added with a constant default (no table rewrite) and its check NOT VALID (no
-- scan under the table's lock): rows written before it hold the default. Replicas of the
-- previous release keep working: they never write the column (so their rows get 5) and their
-- claims, ordered by availability only, use these indexes' prefixes.
alter table task_instance add column priority smallint not null default 5;
alter table task_instance add constraint task_instance_priority_check
    check (priority between 0 and 9) not valid;

create index task_instance_claim_priority_idx
    on task_instance (agent_id, priority, available_at, scheduled_at, id)
    where status = 'PENDING' and agent_id is not null;
create index task_instance_task_pending_priority_idx
    on task_instance (task_id, priority, available_at, scheduled_at, id)
    where status = 'PENDING';
drop index task_instance_claim_idx;
drop index task_instance_task_pending_idx;
