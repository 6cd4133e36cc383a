-- Delete the minute rollups older than they are kept (24 hours).
-- No parameters.
delete from console_minutes
where minute < now() - interval '24 hours'
