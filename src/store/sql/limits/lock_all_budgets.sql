-- Lock every budget of one limit, in key order (the order claims lock budgets in). $1 name.
select 1
from limit_state
where limit_name = $1
order by key
for update
