-- Continue the transaction a PgBouncer pool handed the connection out in (its `BEGIN` set
-- this mark): a statement that changes nothing. Sent as a simple query.
-- No parameters.
set local kairos.pooled_transaction = 'on'
