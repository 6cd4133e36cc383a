-- One page of limits, by name. $1 the last name of the page before (null: from the first),
-- $2 how many.
select /* fragment: limit columns */ name, spec, version, created_at, updated_at
from limits
where $1::text is null or name > $1
order by name
limit $2
