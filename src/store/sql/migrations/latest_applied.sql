-- The latest version of the migrations applied successfully (null when none is).
-- No parameters.
select max(version)
from _sqlx_migrations
where success
