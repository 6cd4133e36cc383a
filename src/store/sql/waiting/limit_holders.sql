-- The first five instances (by id) holding units of one limit's key.
-- $1 limit name, $2 key.
select instance_id
from limit_units
where limit_name = $1 and key = $2
order by instance_id
limit 5
