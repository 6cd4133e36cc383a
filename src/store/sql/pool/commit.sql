-- End the transaction a PgBouncer pool handed the connection out in. Sent as a simple query.
-- No parameters.
commit
