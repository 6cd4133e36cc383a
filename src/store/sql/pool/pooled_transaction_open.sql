-- Whether the transaction a PgBouncer pool handed the connection out in is still open: 'on'
-- while it is (its mark is set local), null or '' once it ended. Sent as a simple query.
-- No parameters.
select current_setting('kairos.pooled_transaction', true)
