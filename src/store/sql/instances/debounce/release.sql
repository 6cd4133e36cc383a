-- Take a debounce key off its instance once that instance no longer waits (PENDING, never
-- claimed, not yet available), so the next insert makes a new one. A row that waits again by
-- now (another trigger made it meanwhile) keeps it.
-- $1 task id, $2 debounce key.
update task_instance
set debounce_key = null
where task_id = $1
  and debounce_key = $2
  and not (status = 'PENDING' and started_at is null and available_at > clock_timestamp())
