-- The versions of the migrations applied successfully.
-- No parameters.
select version
from _sqlx_migrations
where success
