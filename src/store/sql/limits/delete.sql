-- Delete a limit with its budgets' state (`limit_state` goes with it) and the units running
-- instances hold on it: a limit created again under the name starts from nothing, and those
-- instances run on, drawing on nothing. $1 name.
with units as (
    delete from limit_units
    where limit_name = $1
)
delete from limits
where name = $1
