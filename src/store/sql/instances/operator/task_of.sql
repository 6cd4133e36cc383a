-- The task of an instance, its row share-locked (waiting for a delete or a change of the
-- task).
-- $1 instance id.
select t.id
from tasks t
where t.id = (select i.task_id from task_instance i where i.id = $1)
for key share
