-- Move a task's instances in the given states to another agent.
-- $1 task id, $2 agent id, $3 states.
update task_instance
set agent_id = $2, updated_at = now()
where task_id = $1
  and status = any($3)
  and agent_id <> $2
