-- Write one outbox row per (event, URL of the task's notify list), with the event's
-- `occurred_at` by the database clock; tasks without URLs in that list get nothing.
-- $1 event ids, $2 kinds, $3 task ids, $4 instance ids, $5 notify lists, $6 payloads.
insert into outbox (id, event_id, kind, task_id, instance_id, url, secret, payload)
select gen_random_uuid(), e.event_id, e.kind, t.id, e.instance_id, u.url,
    t.spec->'notify'->>'secret',
    e.payload || jsonb_build_object('occurred_at',
        /* fragment: occurred at */ to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || case
               when extract(microseconds from now())::bigint % 1000000 = 0 then ''
               when extract(microseconds from now())::bigint % 1000 = 0
                   then to_char(now() at time zone 'UTC', '.MS')
               else to_char(now() at time zone 'UTC', '.US')
           end || 'Z')
from unnest($1::uuid[], $2::text[], $3::text[], $4::uuid[], $5::text[], $6::jsonb[])
    as e(event_id, kind, task_id, instance_id, list, payload)
join tasks t on t.id = e.task_id
cross join lateral jsonb_array_elements_text(
    coalesce(t.spec->'notify'->e.list, '[]'::jsonb)) as u(url)
