-- The agents with unpaused webhook tasks (read through tasks_webhook_idx).
select distinct agent_id
from tasks
where dispatch_mode = 'webhook' and not paused
