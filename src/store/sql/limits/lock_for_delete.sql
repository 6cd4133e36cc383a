-- A limit about to be deleted, locked. $1 name.
select name
from limits
where name = $1
for update
