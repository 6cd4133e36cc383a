-- The transaction's time.
-- No parameters.
select now()
