-- The unpaused webhook tasks that draw on shared limits, found without reading the others: the
-- webhook dispatcher, after a pass that found nothing to push, asks when a hold or a rate that
-- alone keeps their work back ends. Expand only: an index, which replicas of the previous
-- release ignore.
create index tasks_webhook_limited_idx on tasks (id)
    where dispatch_mode = 'webhook' and not paused
      and spec->'execution'->'limits' <> '[]'::jsonb;
