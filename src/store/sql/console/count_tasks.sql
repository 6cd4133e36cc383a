-- The tasks, the paused tasks, and those paused by an open circuit.
-- No parameters.
select count(*),
    count(*) filter (where paused),
    count(*) filter (where paused and paused_reason like 'circuit open%')
from tasks
