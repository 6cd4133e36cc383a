-- Record that a delivery reached its receiver.
-- $1 outbox id.
update outbox
set delivered_at = now(), last_error = null
where id = $1
