-- Announce claimable work: one NOTIFY on the work channel per payload (sent at commit).
-- $1 the work channel, $2 payloads.
select pg_notify($1, p)
from unnest($2::text[]) as p
