-- Whether the database has a migration history at all.
-- No parameters.
select to_regclass('_sqlx_migrations') is not null
