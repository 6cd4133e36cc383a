-- Replace a limit's spec, counting a new version. $1 name, $2 spec.
update limits
set spec = $2, version = version + 1, updated_at = now()
where name = $1
