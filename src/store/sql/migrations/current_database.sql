-- The name of the database the connection is on (it keys the migrations' advisory lock).
-- No parameters.
select current_database()
