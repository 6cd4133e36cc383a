-- Whether a task exists.
-- $1 task id.
select exists(select 1 from tasks where id = $1)
