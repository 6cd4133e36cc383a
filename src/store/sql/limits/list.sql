-- Every limit, by name.
select /* fragment: limit columns */ name, spec, version, created_at, updated_at
from limits
order by name
