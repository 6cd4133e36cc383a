-- How many budgets of a limit are held now. $1 limit name.
select count(*)
from limit_state
where limit_name = $1 and held_until > now()
