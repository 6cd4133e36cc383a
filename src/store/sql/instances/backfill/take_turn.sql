-- Wait for the task's other backfills (an advisory lock held until the transaction ends).
-- $1 task id.
select pg_advisory_xact_lock(hashtext('kairos:backfill:' || $1))
