-- Lists filtered by SKIPPED or CANCELLED (the console's and `GET /v1/instances?status=`) read
-- this index newest first. Without it a status that is rare in a large table made the list scan
-- the whole time index looking for a page of matches. RUNNING, PENDING, FAILED and DEAD already
-- have partial indexes of their own; SUCCESS is the common case the time index serves.
create index task_instance_closed_idx on task_instance (status, scheduled_at desc, id desc)
    where status in ('SKIPPED', 'CANCELLED');
