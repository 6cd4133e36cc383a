//! The console at scale: a seeded history of tasks and instances, then every page kind timed.

use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::args::Args;
use crate::db::{BenchDb, count, insert_tasks};
use crate::measure::percentile;
use crate::output::{Row, row};
use crate::server::start_server;

/// The console at scale: `--console-tasks` cron tasks over several agents and
/// `--console-instances` windows of history (mostly SUCCESS, with SKIPPED, DEAD, FAILED and
/// PENDING ones), then `--console-requests` sequential GETs of every page kind, timed from
/// request to the last byte. Also times one stats-sampler pass, which feeds the overview.
pub async fn console_pages(base: &str, args: &Args) -> Result<Vec<Row>> {
    let tasks = args.console_tasks.max(1);
    let n = args.console_instances.max(1);
    let db = match &args.console_keep_db {
        Some(name) => BenchDb::open_or_create(base, name).await?,
        None => BenchDb::create(base, "console").await?,
    };
    let have: i64 = count(&db.pool, "select count(*) from task_instance").await?;
    let seeded_in = if have < n {
        let started = Instant::now();
        sqlx::query(
            "truncate tasks, task_cursor, task_instance, instance_events, console_gauges, \
             console_minutes",
        )
        .execute(&db.pool)
        .await?;
        insert_tasks(
            &db.pool,
            tasks,
            "c",
            json!({"type": "cron", "expr": "30 8 * * *", "timezone": "Asia/Shanghai"}),
            json!({"max_retries": 2}),
            "now() + interval '1 hour'",
        )
        .await?;
        // Agents a0..a99 (the task list and claims filter by agent).
        sqlx::query("update tasks set agent_id = 'a' || (substr(id, 2)::int % 100), \
                     spec = jsonb_set(spec, '{agent_id}', to_jsonb('a' || (substr(id, 2)::int % 100)))")
            .execute(&db.pool)
            .await?;
        let per_task = (n + tasks - 1) / tasks;
        let base_at: chrono::DateTime<chrono::Utc> =
            sqlx::query_scalar("select date_trunc('minute', now())")
                .fetch_one(&db.pool)
                .await?;
        let chunk = 1_000_000;
        let mut start = 0;
        while start < n {
            let end = (start + chunk).min(n);
            // Window k of task t is k minutes before now (k = g / tasks); 1 in 50 is SKIPPED,
            // 1 in 500 DEAD, 1 in 1000 FAILED, the newest of each task PENDING, the rest SUCCESS.
            sqlx::query(
                "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, \
                     agent_id, attempt, max_attempts, available_at, started_at, finished_at, \
                     error, error_kind, skip_reason, result, created_at, updated_at, \
                     created_by, created_status, claimed_by, finished_by) \
                 select gen_random_uuid(), 'c' || (g % $3), \
                     to_char(at, 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), at, st, 'schedule', \
                     'a' || ((g % $3) % 100), 1, 3, at, \
                     case when st in ('SUCCESS', 'DEAD', 'FAILED') then at + interval '2 seconds' end, \
                     case when st in ('SUCCESS', 'DEAD', 'SKIPPED') then at + interval '5 seconds' end, \
                     case when st in ('DEAD', 'FAILED') then 'model API returned 503' end, \
                     case when st in ('DEAD', 'FAILED') then 'agent' end, \
                     case when st = 'SKIPPED' then 'overlap: previous window still running' end, \
                     case when st = 'SUCCESS' then '{\"ok\": true}'::jsonb end, \
                     at + interval '20 milliseconds', at + interval '5 seconds', \
                     'trigger', case when st = 'SKIPPED' then 'SKIPPED' else 'PENDING' end, \
                     case when st in ('SUCCESS', 'DEAD', 'FAILED') then 'worker-1' end, \
                     case when st = 'SUCCESS' then 'worker-1' end \
                 from (select g, $4::timestamptz - make_interval(mins => (g / $3)::int + 1) as at, \
                              case when g / $3 = 0 then 'PENDING' \
                                   when g % 500 = 7 then 'DEAD' \
                                   when g % 1000 = 3 then 'FAILED' \
                                   when g % 50 = 1 then 'SKIPPED' \
                                   else 'SUCCESS' end as st \
                       from generate_series($1::bigint, $2::bigint - 1) g) s",
            )
            .bind(start)
            .bind(end)
            .bind(tasks)
            .bind(base_at)
            .execute(&db.pool)
            .await?;
            start = end;
            eprintln!("console: seeded {end} of {n} instances ({per_task} per task)");
        }
        sqlx::query("analyze tasks").execute(&db.pool).await?;
        sqlx::query("analyze task_instance")
            .execute(&db.pool)
            .await?;
        Some(started.elapsed().as_secs_f64())
    } else {
        None
    };
    let sample_started = Instant::now();
    kairos::store::console::sample(&db.pool).await?;
    let sample_secs = sample_started.elapsed().as_secs_f64();

    let server = start_server(&db, &[]).await?;
    let client = reqwest::Client::new();
    let dead_id: String = sqlx::query_scalar(
        "select id::text from task_instance where status = 'DEAD' order by scheduled_at desc limit 1",
    )
    .fetch_one(&db.pool)
    .await?;
    // The second page of the instance list: follow the first page's cursor.
    let first = client
        .get(format!("{}/v1/instances?limit=50", server.base))
        .send()
        .await?
        .json::<Value>()
        .await?;
    let cursor = first["next_cursor"].as_str().unwrap_or("").to_owned();
    let some_task = format!("c{}", tasks / 2);
    let pages: Vec<(String, String)> = vec![
        ("overview".into(), "/ui/".into()),
        ("tasks".into(), "/ui/tasks".into()),
        (
            "tasks, a later page".into(),
            format!("/ui/tasks?after={some_task}"),
        ),
        (
            "tasks, agent a7, cron".into(),
            "/ui/tasks?agent=a7&type=cron".into(),
        ),
        ("task detail".into(), format!("/ui/tasks/{some_task}")),
        ("instances".into(), "/ui/instances".into()),
        (
            "instances, next page".into(),
            format!("/ui/instances?cursor={cursor}"),
        ),
        (
            "instances of a task".into(),
            format!("/ui/instances?task_id={some_task}"),
        ),
        (
            "instances, status DEAD".into(),
            "/ui/instances?status=DEAD".into(),
        ),
        (
            "instances, status RUNNING (none)".into(),
            "/ui/instances?status=RUNNING".into(),
        ),
        (
            "instances, status CANCELLED (none)".into(),
            "/ui/instances?status=CANCELLED".into(),
        ),
        (
            "instances, status SKIPPED".into(),
            "/ui/instances?status=SKIPPED".into(),
        ),
        (
            "instances, scheduled in one minute".into(),
            "/ui/instances?from=2026-12-01T12:00:00Z&to=2026-12-01T12:01:00Z".into(),
        ),
        ("instance detail".into(), format!("/ui/instances/{dead_id}")),
        ("DEAD queue".into(), "/ui/dead".into()),
        (
            "cron playground".into(),
            "/ui/playground?expr=30+2+*+*+*&tz=America/New_York".into(),
        ),
    ];
    let mut rows = Vec::new();
    let seed_note = match seeded_in {
        Some(s) => format!("seeded in {s:.0} s"),
        None => "reused seeded database".to_owned(),
    };
    rows.push(row(
        &format!("console data: {tasks} tasks, {n} instances"),
        format!("sampler pass {:.0} ms", sample_secs * 1000.0),
        seed_note,
        "one stats-sampler pass (counts + minute rollups) at this size",
    ));
    for (name, path) in pages {
        let url = format!("{}{}", server.base, path);
        let mut times = Vec::with_capacity(args.console_requests);
        for _ in 0..args.console_requests.max(1) {
            let t = Instant::now();
            let resp = client.get(&url).send().await?;
            let status = resp.status();
            let body = resp.bytes().await?;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            if !status.is_success() {
                bail!("{path}: {status}: {}", String::from_utf8_lossy(&body));
            }
        }
        times.sort_by(f64::total_cmp);
        rows.push(row(
            &format!("console page: {name}"),
            format!("p50 {:.0} ms", percentile(&times, 0.5)),
            format!(
                "p99 {:.0} ms, max {:.0} ms",
                percentile(&times, 0.99),
                times[times.len() - 1]
            ),
            &format!(
                "`GET {}`",
                path.split('?')
                    .next()
                    .unwrap_or("")
                    .replace(&dead_id, "{id}")
            ),
        ));
    }
    drop(server);
    if args.console_keep_db.is_none() {
        db.drop_db().await?;
    }
    Ok(rows)
}
