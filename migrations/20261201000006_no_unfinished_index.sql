-- One index fewer on every window and every claim. The overlap check (a task's PENDING,
-- RUNNING and FAILED windows) had an index of its own whose predicate named all three
-- statuses, so every inserted window and every claimed instance wrote an entry to it: one of
-- the seven index entries of each. The check now reads the index each status already has by
-- task (pending claims, run slots) and, for FAILED, a new one that only failures waiting for
-- their retry write.
create index task_instance_failed_task_idx on task_instance (task_id, scheduled_at)
    where status = 'FAILED';
drop index task_instance_unfinished_idx;
