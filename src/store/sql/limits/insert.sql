-- Create a limit; nothing when a concurrent request created it first. $1 name, $2 spec.
insert into limits (name, spec)
values ($1, $2)
on conflict (name) do nothing
