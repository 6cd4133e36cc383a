-- Rendered limit keys as an operator can name them: a control character (from a parameter)
-- becomes U+FFFD, as holds and releases take no control characters; and a key longer than 256
-- characters (a long parameter, an object rendered as its JSON text) is kept apart from every
-- other key by its digest: its first 200 characters, '#', and the md5 of the whole key (233
-- characters). Unbounded keys made index rows past btree's limit (2,704 bytes), and every claim
-- that chose such an instance failed. Expand only: the same signature, so replicas of the
-- previous release render keys this way from now on; instances rendered before keep their keys
-- until their task's limits change.
create or replace function kairos_render_limit_draws(lims jsonb, task_id text, agent_id text, ctx jsonb)
returns jsonb
language plpgsql immutable as $$
declare
    draws jsonb := '[]'::jsonb;
    entry jsonb;
    k text;
    m text[];
begin
    if lims is null or jsonb_typeof(lims) <> 'array' or jsonb_array_length(lims) = 0 then
        return null;
    end if;
    for entry in select value from jsonb_array_elements(lims) loop
        k := coalesce(entry->>'key', '');
        k := replace(replace(k, '{{task_id}}', task_id), '{{agent_id}}', agent_id);
        for m in select regexp_matches(k, '\{\{params\.([A-Za-z0-9_.-]+)\}\}', 'g') loop
            k := replace(k, '{{params.' || m[1] || '}}',
                         coalesce(ctx #>> (array['params'] || string_to_array(m[1], '.')), ''));
        end loop;
        k := regexp_replace(k, '[\x01-\x1f\x7f-\x9f]', U&'\FFFD', 'g');
        if char_length(k) > 256 then
            k := left(k, 200) || '#' || md5(k);
        end if;
        draws := draws || jsonb_build_array(jsonb_build_object(
            'name', entry->>'name', 'key', k, 'cost', coalesce((entry->>'cost')::int, 1)));
    end loop;
    return draws;
end
$$;
