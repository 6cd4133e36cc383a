-- The attempt that still holds its lease: the instance RUNNING under this lease token, locked
-- (shared) until the caller's transaction ends, so that no reaper, cancel or other report moves
-- it meanwhile. No row: the lease is not (or no longer) this token's.
-- $1 instance id, $2 lease token.
select id
from task_instance
where id = $1 and status = 'RUNNING' and lease_token = $2
for share
