-- End the transaction a PgBouncer pool handed the connection out in, which a failed statement
-- aborted. Sent as a simple query.
-- No parameters.
rollback
