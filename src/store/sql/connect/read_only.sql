-- Whether the session's server refuses writes ('on' on a standby, or with
-- default_transaction_read_only set). Sent as a simple query (no prepared statement), so it
-- also works through a pooler that keeps none.
-- No parameters.
select current_setting('transaction_read_only')
