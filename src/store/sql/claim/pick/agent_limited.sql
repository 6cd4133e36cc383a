-- Whether a poll task of an agent that may be claimed from draws on a budget without keys that
-- has no room now: the per-task read passes over such a task whole. Asked when a claim round
-- beside another left a request empty-handed. The agent's tasks that draw on limits
-- (tasks_agent_limited_idx) drive the look: an agent without any never reads the budgets.
-- $1 agent id.
with blocked as materialized (
    /* fragment: blocked budgets */ select l.name,
        case when (l.spec->>'per_key')::boolean then b.key end as key
    from limits l
    cross join lateral (
        select s.key
        from limit_state s
        where s.limit_name = l.name
          and (s.held_until > now()
               or (l.spec ? 'rate' and s.tat > now() + make_interval(secs =>
                   (l.spec->'rate'->>'burst')::float8 * (l.spec->'rate'->>'per_seconds')::float8
                   / (l.spec->'rate'->>'count')::float8)))
        union
        select u.key
        from limit_units u
        where u.limit_name = l.name and l.spec ? 'concurrency'
        group by u.key
        having sum(u.cost) >= (l.spec->>'concurrency')::bigint
    ) b
)
select exists (
    select 1 from tasks t
    where t.agent_id = $1 and t.spec->'execution'->'limits' <> '[]'::jsonb
      and t.dispatch_mode = 'poll' and not t.paused
      and not /* fragment: not blocked t */ (coalesce(t.spec->'execution'->'limits', '[]'::jsonb) = '[]'::jsonb
       or not exists (select 1 from blocked b
                      where b.key is null
                        and t.spec->'execution'->'limits'
                            @> jsonb_build_array(jsonb_build_object('name', b.name))))
)
