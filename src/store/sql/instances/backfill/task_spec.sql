-- A task's spec, its row share-locked (waiting for a delete or a change of the task).
-- $1 task id.
select spec
from tasks
where id = $1
for key share
