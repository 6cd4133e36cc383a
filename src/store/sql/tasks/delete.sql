-- Remove a task.
-- $1 task id.
delete from tasks
where id = $1
