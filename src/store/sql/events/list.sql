-- An instance's history, oldest first.
-- $1 instance id.
select from_status, to_status, attempt, at, actor, reason
from instance_history
where instance_id = $1
order by phase, seq
