-- The sampled gauges, by name.
-- No parameters.
select name, value, exact, sampled_at
from console_gauges
order by name
