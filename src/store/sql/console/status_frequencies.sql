-- The most common instance statuses with their frequencies, from the planner's statistics.
-- No parameters.
select v, f::float8
from pg_stats s,
    unnest(s.most_common_vals::text::text[], s.most_common_freqs) as m(v, f)
where s.schemaname = current_schema()
  and s.tablename = 'task_instance'
  and s.attname = 'status'
