-- The agent of each existing instance among the ids.
-- $1 instance ids.
select id, agent_id
from task_instance
where id = any($1)
