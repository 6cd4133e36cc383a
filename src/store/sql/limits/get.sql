-- One limit. $1 name.
select /* fragment: limit columns */ name, spec, version, created_at, updated_at
from limits
where name = $1
