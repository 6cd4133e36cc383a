//! The `kairos task` / `kairos instance` / `kairos limit` command line, run as a person would: the real binary
//! against a real daemon and database, asserting on its output, exit code and the state it left.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{TestApp, claim, json};
use kairos::app::Options;
use kairos::domain::access::Tokens;
use serde_json::{Value, json};
use sqlx::PgPool;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `kairos <args>` against `url` without blocking the runtime the daemon runs on.
async fn kairos_at(url: String, token: Option<&str>, args: &[&str]) -> Run {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let token = token.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kairos"));
        cmd.args(&args)
            .env("KAIROS_URL", url)
            .env_remove("KAIROS_TOKEN");
        if let Some(t) = token {
            cmd.env("KAIROS_TOKEN", t);
        }
        let out = cmd.output().expect("run kairos");
        Run {
            code: out.status.code().expect("exit code"),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .expect("join")
}

async fn kairos(app: &TestApp, args: &[&str]) -> Run {
    kairos_at(app.url(""), None, args).await
}

fn ok(r: &Run) -> &str {
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    &r.stdout
}

fn parse(r: &Run) -> Value {
    serde_json::from_str(ok(r)).expect("JSON output")
}

async fn task_json(app: &TestApp, id: &str) -> (u16, Value) {
    json(app.get(&format!("/v1/tasks/{id}")).await).await
}

const A_YAML: &str = "\
- id: a_report
  agent_id: agent_a
  trigger: {type: cron, expr: '0 30 8 * * *', timezone: Asia/Shanghai}
  execution:
    max_retries: 3
- id: a_digest
  agent_id: agent_a
  trigger:
    type: interval
    every_seconds: 3600
";

const B_JSON: &str = r#"{"id": "b_sync", "agent_id": "agent_b",
  "trigger": {"type": "manual"}, "context": {"region": "eu"}}"#;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write task file");
}

#[sqlx::test]
async fn apply_creates_reports_unchanged_diffs_configures_and_prunes_one_agent(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    // Registered before: one task of agent_a and one of agent_b that no file names.
    for (id, agent) in [("a_stale", "agent_a"), ("b_other", "agent_b")] {
        let (s, _) = json(
            app.put(
                &format!("/v1/tasks/{id}"),
                common::cron_task(agent, "0 0 * * *"),
            )
            .await,
        )
        .await;
        assert_eq!(s, 201);
    }
    let dir = tempdir();
    write(dir.path(), "a.yaml", A_YAML);
    write(dir.path(), "b.json", B_JSON);
    write(dir.path(), "notes.txt", "not a task file");
    let d = dir.path().to_str().expect("utf-8 path");

    let first = kairos(&app, &["task", "apply", "-f", d]).await;
    assert_eq!(
        ok(&first),
        "task a_report created\ntask a_digest created\ntask b_sync created\n",
        "files sorted by name, tasks in file order"
    );
    let (_, t) = task_json(&app, "a_report").await;
    assert_eq!(t["execution"]["max_retries"], 3);
    assert_eq!(t["trigger"]["timezone"], "Asia/Shanghai");
    assert_eq!(t["version"], 1);
    let (_, b) = task_json(&app, "b_sync").await;
    assert_eq!(b["context"], json!({"region": "eu"}));

    let again = kairos(&app, &["task", "apply", "-f", d]).await;
    assert_eq!(
        ok(&again),
        "task a_report unchanged\ntask a_digest unchanged\ntask b_sync unchanged\n"
    );
    assert_eq!(task_json(&app, "a_report").await.1["version"], 1);

    // Change one field: the dry run names it and writes nothing.
    write(
        dir.path(),
        "a.yaml",
        &A_YAML.replace("max_retries: 3", "max_retries: 5"),
    );
    let dry = kairos(&app, &["task", "apply", "-f", d, "--dry-run"]).await;
    let out = ok(&dry);
    assert!(
        out.contains("task a_report configured (dry run)\n  execution.max_retries: 3 -> 5\n"),
        "{out}"
    );
    assert!(out.contains("task a_digest unchanged (dry run)"), "{out}");
    assert!(out.contains("task b_sync unchanged (dry run)"), "{out}");
    let (_, t) = task_json(&app, "a_report").await;
    assert_eq!(t["execution"]["max_retries"], 3, "a dry run writes nothing");
    assert_eq!(t["version"], 1);

    // The same dry run for scripts.
    let dry_json =
        parse(&kairos(&app, &["task", "apply", "-f", d, "--dry-run", "-o", "json"]).await);
    let report = dry_json["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["id"] == "a_report")
        .cloned()
        .expect("a_report in report");
    assert_eq!(report["action"], "configured");
    assert_eq!(
        report["changes"],
        json!([{"path": "execution.max_retries", "old": 3, "new": 5}])
    );

    let applied = kairos(&app, &["task", "apply", "-f", d]).await;
    assert!(
        ok(&applied).contains("task a_report configured\n"),
        "{}",
        applied.stdout
    );
    let (_, t) = task_json(&app, "a_report").await;
    assert_eq!(t["execution"]["max_retries"], 5);
    assert_eq!(t["version"], 2);

    // Pruning: a dry run only names a_stale; the real one deletes it and nothing of agent_b.
    let prune_dry = kairos(
        &app,
        &[
            "task",
            "apply",
            "-f",
            d,
            "--prune",
            "--agent",
            "agent_a",
            "--dry-run",
        ],
    )
    .await;
    assert!(
        ok(&prune_dry).contains("task a_stale pruned (dry run)"),
        "{}",
        prune_dry.stdout
    );
    assert_eq!(task_json(&app, "a_stale").await.0, 200);

    let prune = kairos(
        &app,
        &["task", "apply", "-f", d, "--prune", "--agent", "agent_a"],
    )
    .await;
    let out = ok(&prune);
    assert!(out.contains("task a_stale pruned\n"), "{out}");
    assert!(!out.contains("b_other"), "{out}");
    assert_eq!(task_json(&app, "a_stale").await.0, 404);
    assert_eq!(task_json(&app, "b_other").await.0, 200);
    let remaining: Vec<String> = sqlx::query_scalar("select id from tasks order by id")
        .fetch_all(&pool)
        .await
        .expect("tasks");
    assert_eq!(remaining, ["a_digest", "a_report", "b_other", "b_sync"]);
}

#[sqlx::test]
async fn apply_refuses_duplicate_ids_and_bad_files_before_sending_anything(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let dir = tempdir();
    write(dir.path(), "a.yaml", A_YAML);
    write(
        dir.path(),
        "b.yml",
        "id: a_digest\nagent_id: agent_x\ntrigger: {type: manual}\n",
    );
    let d = dir.path().to_str().expect("utf-8 path");
    let dup = kairos(&app, &["task", "apply", "-f", d]).await;
    assert_eq!(dup.code, 2, "{}", dup.stderr);
    assert!(
        dup.stderr.contains("a_digest is defined twice"),
        "{}",
        dup.stderr
    );
    let count: i64 = sqlx::query_scalar("select count(*) from tasks")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(count, 0, "nothing was registered");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "agent_id: x\n").expect("write");
    let r = kairos(&app, &["task", "apply", "-f", bad.to_str().expect("path")]).await;
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("has no string `id`"), "{}", r.stderr);

    // A definition the API refuses: exit 1 with every field error on stderr.
    let invalid = dir.path().join("invalid.json");
    std::fs::write(
        &invalid,
        r#"{"id": "inv", "agent_id": "a", "trigger": {"type": "cron", "expr": "0 9 * * *", "timezone": "Mars/Base"}}"#,
    )
    .expect("write");
    let r = kairos(
        &app,
        &["task", "apply", "-f", invalid.to_str().expect("path")],
    )
    .await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("trigger.timezone"), "{}", r.stderr);
    // A dry run refuses what the apply would: a cron that never fires, an unknown field.
    for (text, field) in [
        (
            r#"{"id": "feb", "agent_id": "a", "trigger": {"type": "cron", "expr": "0 0 30 2 *", "timezone": "UTC"}}"#,
            "trigger.expr",
        ),
        (
            r#"{"id": "odd", "agent_id": "a", "trigger": {"type": "manual"}, "bogus": 1}"#,
            "bogus",
        ),
    ] {
        std::fs::write(&invalid, text).expect("write");
        let r = kairos(
            &app,
            &[
                "task",
                "apply",
                "-f",
                invalid.to_str().expect("path"),
                "--dry-run",
            ],
        )
        .await;
        assert_eq!(r.code, 1, "{text}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(field), "{}", r.stderr);
        assert!(!r.stdout.contains("created"), "{}", r.stdout);
    }
}

#[sqlx::test]
async fn task_commands_print_tables_and_json_and_change_the_task(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    for (id, agent) in [("t1", "agent_a"), ("t2", "agent_b")] {
        let (s, _) = json(
            app.put(
                &format!("/v1/tasks/{id}"),
                common::cron_task(agent, "0 9 * * *"),
            )
            .await,
        )
        .await;
        assert_eq!(s, 201);
    }

    let table = kairos(&app, &["task", "list"]).await;
    let lines: Vec<&str> = ok(&table).lines().collect();
    assert_eq!(lines.len(), 3, "{}", table.stdout);
    assert!(lines[0].starts_with("ID  AGENT    TRIGGER"), "{}", lines[0]);
    assert!(
        lines[1].starts_with("t1  agent_a  cron 0 9 * * * UTC"),
        "{}",
        lines[1]
    );
    assert!(lines[1].ends_with("false"), "{}", lines[1]);

    let page = parse(&kairos(&app, &["task", "list", "--agent", "agent_b", "-o", "json"]).await);
    let ids = common::item_strings(&page, "id");
    assert_eq!(ids, ["t2"]);

    // --all follows next_cursor across pages of one.
    let all = parse(
        &kairos(
            &app,
            &["task", "list", "--limit", "1", "--all", "-o", "json"],
        )
        .await,
    );
    assert_eq!(all["items"].as_array().expect("items").len(), 2);
    let one = kairos(&app, &["task", "list", "--limit", "1"]).await;
    assert!(one.stderr.contains("--cursor"), "{}", one.stderr);

    let paused = kairos(&app, &["task", "pause", "t1", "--reason", "maintenance"]).await;
    assert_eq!(ok(&paused), "task t1 paused: maintenance\n");
    let (_, t) = task_json(&app, "t1").await;
    assert_eq!(t["paused"], true);
    assert_eq!(t["paused_reason"], "maintenance");
    let listed = parse(&kairos(&app, &["task", "list", "--paused", "true", "-o", "json"]).await);
    assert_eq!(listed["items"].as_array().expect("items").len(), 1);
    ok(&kairos(&app, &["task", "resume", "t1"]).await);
    assert_eq!(task_json(&app, "t1").await.1["paused"], false);

    let got = parse(&kairos(&app, &["task", "get", "t1", "-o", "json"]).await);
    assert_eq!(got["id"], "t1");
    let yaml = kairos(&app, &["task", "get", "t1"]).await;
    assert!(ok(&yaml).contains("agent_id: agent_a"), "{}", yaml.stdout);

    let preview = parse(
        &kairos(
            &app,
            &[
                "task",
                "preview",
                "t1",
                "--count",
                "3",
                "--from",
                "2026-11-29T00:00:00Z",
                "-o",
                "json",
            ],
        )
        .await,
    );
    assert_eq!(preview["windows"][0]["window_key"], "2026-11-29T09:00:00Z");
    assert_eq!(preview["windows"].as_array().expect("windows").len(), 3);

    let trig = parse(
        &kairos(
            &app,
            &[
                "task",
                "trigger",
                "t1",
                "--window-key",
                "rerun-1",
                "--context",
                r#"{"k": 1}"#,
                "-o",
                "json",
            ],
        )
        .await,
    );
    assert_eq!(trig["window_key"], "rerun-1");
    assert_eq!(trig["status"], "PENDING");
    let again = kairos(&app, &["task", "trigger", "t1", "--window-key", "rerun-1"]).await;
    assert!(ok(&again).contains("already exists"), "{}", again.stdout);
    let bad_ctx = kairos(&app, &["task", "trigger", "t1", "--context", "[1]"]).await;
    assert_eq!(bad_ctx.code, 2);

    let backfill = kairos(
        &app,
        &[
            "task",
            "backfill",
            "t2",
            "--from",
            &recent(3),
            "--to",
            &recent(0),
            "--dry-run",
            "--overlap",
            "queue",
        ],
    )
    .await;
    assert!(
        ok(&backfill).contains("would create"),
        "{}",
        backfill.stdout
    );
    let written: i64 =
        sqlx::query_scalar("select count(*) from task_instance where task_id = 't2'")
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(written, 0, "a dry-run backfill writes nothing");

    let deleted = kairos(&app, &["task", "delete", "t2"]).await;
    assert_eq!(ok(&deleted), "task t2 deleted\n");
    assert_eq!(task_json(&app, "t2").await.0, 404);

    let missing = kairos(&app, &["task", "get", "nope"]).await;
    assert_eq!(missing.code, 1);
    assert!(missing.stdout.is_empty());
    assert!(missing.stderr.contains("404"), "{}", missing.stderr);
    assert!(missing.stderr.contains("nope"), "{}", missing.stderr);
}

#[sqlx::test]
async fn a_dead_instance_is_listed_retried_and_its_events_shown(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let mut task = common::cron_task("agent_d", "0 9 * * *");
    task["execution"] = json!({"max_retries": 0});
    let (s, _) = json(app.put("/v1/tasks/once_only", task).await).await;
    assert_eq!(s, 201);
    let (s, inst) = json(app.post("/v1/tasks/once_only/trigger", json!({})).await).await;
    assert_eq!(s, 201);
    let id = inst["id"].as_str().expect("id").to_owned();
    let claimed = claim(&app, "agent_d", "w1", 1, json!({})).await;
    assert_eq!(claimed.len(), 1);
    let lease = claimed[0]["lease_token"]
        .as_str()
        .expect("lease")
        .to_owned();
    let (s, failed) = json(
        app.post(
            &format!("/v1/instances/{id}/fail"),
            json!({"lease_token": lease, "error": "boom", "retryable": false}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(failed["status"], "DEAD");

    let list = kairos(&app, &["instance", "list", "--status", "DEAD"]).await;
    let lines: Vec<&str> = ok(&list).lines().collect();
    assert_eq!(lines.len(), 2, "{}", list.stdout);
    assert!(lines[0].starts_with("ID"), "{}", lines[0]);
    assert!(lines[0].contains("STATUS"), "{}", lines[0]);
    assert!(lines[1].starts_with(&id), "{}", lines[1]);
    assert!(lines[1].contains("once_only"), "{}", lines[1]);
    assert!(lines[1].contains("DEAD"), "{}", lines[1]);
    let listed = parse(
        &kairos(
            &app,
            &["instance", "list", "--task", "once_only", "-o", "json"],
        )
        .await,
    );
    assert_eq!(listed["items"][0]["id"], id.as_str());

    let retried = kairos(
        &app,
        &["instance", "retry", &id, "--reason", "fixed upstream"],
    )
    .await;
    assert!(ok(&retried).contains("PENDING"), "{}", retried.stdout);
    let got = parse(&kairos(&app, &["instance", "get", &id, "-o", "json"]).await);
    assert_eq!(got["status"], "PENDING");
    assert_eq!(got["attempt"], 2);
    let status: String =
        sqlx::query_scalar("select status::text from task_instance where id = $1::uuid")
            .bind(&id)
            .fetch_one(&pool)
            .await
            .expect("status");
    assert_eq!(status, "PENDING");

    let events = kairos(&app, &["instance", "events", &id]).await;
    let out = ok(&events);
    assert!(out.starts_with("AT"), "{out}");
    let last = out.lines().last().expect("a line");
    assert!(last.contains("operator"), "{last}");
    assert!(last.contains("fixed upstream"), "{last}");

    // Retrying a PENDING instance is an illegal transition: exit 1.
    let twice = kairos(&app, &["instance", "retry", &id]).await;
    assert_eq!(twice.code, 1, "{}", twice.stderr);
    assert!(twice.stderr.contains("409"), "{}", twice.stderr);

    let cancelled = parse(&kairos(&app, &["instance", "cancel", &id, "-o", "json"]).await);
    assert_eq!(cancelled["status"], "CANCELLED");
}

/// Tasks that draw on two limits, in a file that sorts before the limits' file.
const LIMITED_TASKS: &str = "\
- id: summarize
  agent_id: agent_a
  trigger: {type: manual}
  execution:
    concurrency_limit: 100
    limits: [{name: openai}, {name: tenant-api, key: '{{params.tenant}}'}]
- id: classify
  agent_id: agent_b
  trigger: {type: manual}
  execution:
    concurrency_limit: 100
    limits: [{name: openai, cost: 2}]
";

const LIMITS: &str = "\
- kind: limit
  name: openai
  concurrency: 2
  rate: {count: 500, per_seconds: 60, burst: 2}
---
kind: limit
name: tenant-api
concurrency: 2
per_key: true
";

async fn limit_json(app: &TestApp, name: &str) -> (u16, Value) {
    json(app.get(&format!("/v1/limits/{name}")).await).await
}

#[sqlx::test]
async fn apply_registers_limits_before_the_tasks_that_name_them_and_orders_a_lowering_after(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    let dir = tempdir();
    write(dir.path(), "a_tasks.yaml", LIMITED_TASKS);
    write(dir.path(), "z_limits.yaml", LIMITS);
    let d = dir.path().to_str().expect("utf-8 path");

    let first = kairos(&app, &["task", "apply", "-f", d]).await;
    assert_eq!(
        ok(&first),
        "limit openai created\nlimit tenant-api created\n\
         task summarize created\ntask classify created\n",
        "limits first, though their file sorts last"
    );
    let (_, l) = limit_json(&app, "openai").await;
    assert_eq!(l["concurrency"], 2);
    assert_eq!(
        l["rate"],
        json!({"count": 500, "per_seconds": 60, "burst": 2})
    );
    assert_eq!(limit_json(&app, "tenant-api").await.1["per_key"], true);
    let (_, t) = task_json(&app, "classify").await;
    assert_eq!(t["execution"]["limits"][0]["cost"], 2);

    let again = kairos(&app, &["task", "apply", "-f", d]).await;
    assert_eq!(
        ok(&again),
        "limit openai unchanged\nlimit tenant-api unchanged\n\
         task summarize unchanged\ntask classify unchanged\n"
    );
    assert_eq!(limit_json(&app, "openai").await.1["version"], 1);

    // `limit apply` takes only the limits; its dry run names the changed field.
    write(
        dir.path(),
        "z_limits.yaml",
        &LIMITS.replace("burst: 2", "burst: 5"),
    );
    let dry = kairos(&app, &["limit", "apply", "-f", d, "--dry-run"]).await;
    assert_eq!(
        ok(&dry),
        "limit openai configured (dry run)\n  rate.burst: 2 -> 5\n\
         limit tenant-api unchanged (dry run)\n"
    );
    assert!(
        dry.stderr.contains("2 task definition(s) skipped"),
        "{}",
        dry.stderr
    );
    assert_eq!(limit_json(&app, "openai").await.1["rate"]["burst"], 2);
    let applied = parse(&kairos(&app, &["limit", "apply", "-f", d, "-o", "json"]).await);
    assert_eq!(
        applied["limits"][0],
        json!({"name": "openai", "action": "configured",
               "changes": [{"path": "rate.burst", "old": 2, "new": 5}]})
    );
    assert_eq!(applied["limits"][1]["action"], "unchanged");
    assert_eq!(limit_json(&app, "openai").await.1["version"], 2);

    // Lowering a task's cost and its limit's concurrency together: the limit alone would be
    // refused (409, the task still draws 2), so it is applied after the task.
    write(
        dir.path(),
        "a_tasks.yaml",
        &LIMITED_TASKS.replace("cost: 2", "cost: 1"),
    );
    write(
        dir.path(),
        "z_limits.yaml",
        &LIMITS
            .replace("burst: 2", "burst: 5")
            .replace("concurrency: 2\n  rate", "concurrency: 1\n  rate"),
    );
    let lowered = kairos(&app, &["task", "apply", "-f", d]).await;
    assert_eq!(
        ok(&lowered),
        "limit tenant-api unchanged\ntask summarize unchanged\n\
         task classify configured\n  execution.limits[0].cost: 2 -> 1\n\
         limit openai configured\n  concurrency: 2 -> 1\n"
    );
    assert_eq!(limit_json(&app, "openai").await.1["concurrency"], 1);
    // `limit apply` alone does not reorder: a lowering below a task's cost is its exit 1, and
    // the other limits are still applied.
    write(dir.path(), "z_limits.yaml", LIMITS);
    ok(&kairos(&app, &["limit", "apply", "-f", d]).await);
    let (s, _) = json(
        app.put(
            "/v1/tasks/classify",
            json!({"agent_id": "agent_b", "trigger": {"type": "manual"},
                   "execution": {"concurrency_limit": 100, "limits": [{"name": "openai", "cost": 2}]}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 200);
    write(
        dir.path(),
        "z_limits.yaml",
        &LIMITS.replace("concurrency: 2\n  rate", "concurrency: 1\n  rate"),
    );
    let refused = kairos(&app, &["limit", "apply", "-f", d]).await;
    assert_eq!(refused.code, 1, "{}{}", refused.stdout, refused.stderr);
    assert!(
        refused.stderr.contains("limit openai"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("409"), "{}", refused.stderr);
    assert!(refused.stderr.contains("classify"), "{}", refused.stderr);
    assert_eq!(refused.stdout, "limit tenant-api unchanged\n");
    assert_eq!(limit_json(&app, "openai").await.1["concurrency"], 2);
}

#[sqlx::test]
async fn limit_files_are_refused_before_anything_is_sent(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let dir = tempdir();
    let file = dir.path().join("l.yaml");
    let path = file.to_str().expect("path");
    for (text, code, says) in [
        ("kind: limit\nconcurrency: 2\n", 2, "has no string `name`"),
        ("kind: quota\nname: x\n", 2, "unknown kind \"quota\""),
        ("kind: 3\nname: x\n", 2, "`kind` must be"),
        (
            "- {kind: limit, name: a, concurrency: 1}\n- {kind: limit, name: a, concurrency: 2}\n",
            2,
            "limit a is defined twice",
        ),
        (
            "id: t\nagent_id: a\ntrigger: {type: manual}\n",
            2,
            "no limits",
        ),
    ] {
        std::fs::write(&file, text).expect("write");
        let r = kairos(&app, &["limit", "apply", "-f", path]).await;
        assert_eq!(r.code, code, "{text}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(says), "{text}: {}", r.stderr);
    }
    // The dry run refuses what the server would, naming the field.
    for (text, field) in [
        ("kind: limit\nname: a\nconcurrency: 0\n", "concurrency"),
        (
            "kind: limit\nname: a\nrate: {count: 5, per_seconds: 60, burst: 6}\n",
            "rate.burst",
        ),
        ("kind: limit\nname: 'Bad Name'\nconcurrency: 1\n", "name"),
        (
            "kind: limit\nname: a\nconcurrency: 1\ncolour: red\n",
            "colour",
        ),
    ] {
        std::fs::write(&file, text).expect("write");
        let r = kairos(&app, &["limit", "apply", "-f", path, "--dry-run"]).await;
        assert_eq!(r.code, 1, "{text}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains(&format!("  {field}: ")),
            "{text}: {}",
            r.stderr
        );
        let r = kairos(&app, &["task", "apply", "-f", path]).await;
        assert_eq!(r.code, 1, "{text}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(field), "{text}: {}", r.stderr);
    }
    let count: i64 = sqlx::query_scalar("select count(*) from limits")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(count, 0, "nothing was registered");
    // A task naming a limit no file defines: the server's refusal, naming the field.
    std::fs::write(
        &file,
        "id: t\nagent_id: a\ntrigger: {type: manual}\nexecution: {limits: [{name: nope}]}\n",
    )
    .expect("write");
    let r = kairos(&app, &["task", "apply", "-f", path]).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("execution.limits[0].name"),
        "{}",
        r.stderr
    );
}

#[sqlx::test]
async fn limit_commands_show_usage_hold_release_and_delete(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let dir = tempdir();
    write(dir.path(), "a_tasks.yaml", LIMITED_TASKS);
    write(dir.path(), "z_limits.yaml", LIMITS);
    let d = dir.path().to_str().expect("utf-8 path");
    ok(&kairos(&app, &["task", "apply", "-f", d]).await);
    for tenant in ["acme", "acme", "acme", "globex"] {
        let ctx = format!(r#"{{"params": {{"tenant": "{tenant}"}}}}"#);
        ok(&kairos(&app, &["task", "trigger", "summarize", "--context", &ctx]).await);
    }
    ok(&kairos(&app, &["task", "trigger", "classify"]).await);
    // openai's concurrency of 2 lets two summaries start (tenant acme's own budget is 2 too).
    let running = claim(&app, "agent_a", "w1", 10, json!({})).await;
    assert_eq!(running.len(), 2, "{running:?}");

    let list = kairos(&app, &["limit", "list"]).await;
    let lines: Vec<&str> = ok(&list).lines().collect();
    assert_eq!(lines.len(), 3, "{}", list.stdout);
    assert!(
        lines[0].starts_with("NAME        IN USE     RATE"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with("openai      2/2        500/60s burst 2  1 "),
        "two of two units in use, one start left of burst + 1: {}",
        lines[1]
    );
    assert!(
        lines[2].starts_with("tenant-api  2 (2/key)"),
        "{}",
        lines[2]
    );
    assert!(lines[2].contains("busiest keys: "), "{}", lines[2]);

    let all = parse(&kairos(&app, &["limit", "list", "-o", "json"]).await);
    assert_eq!(common::item_strings(&all, "name"), ["openai", "tenant-api"]);
    assert_eq!(all["items"][0]["running"], 2);

    // Hold one tenant's budget; the limit's view and table show it.
    let held = kairos(
        &app,
        &[
            "limit",
            "hold",
            "tenant-api",
            "--seconds",
            "600",
            "--key",
            "globex",
            "--reason",
            "429 from the tenant API",
        ],
    )
    .await;
    let out = ok(&held);
    assert!(
        out.starts_with("limit tenant-api (key globex) held until 20"),
        "{out}"
    );
    assert!(out.ends_with(": 429 from the tenant API\n"), "{out}");
    let got = kairos(&app, &["limit", "get", "tenant-api"]).await;
    let out = ok(&got);
    assert!(out.contains("per_key:      true\n"), "{out}");
    let globex = out
        .lines()
        .find(|l| l.starts_with("globex"))
        .unwrap_or_else(|| panic!("a globex row: {out}"));
    assert!(globex.contains("0/2"), "{globex}");
    assert!(globex.ends_with("429 from the tenant API"), "{globex}");
    let acme = out
        .lines()
        .find(|l| l.starts_with("acme "))
        .unwrap_or_else(|| panic!("an acme row: {out}"));
    assert!(acme.contains("2/2"), "{acme}");
    let list = kairos(&app, &["limit", "list"]).await;
    assert!(ok(&list).contains("1 key(s)"), "{}", list.stdout);

    // A per_key limit's hold needs a key; an out-of-range hold is refused naming the field.
    let no_key = kairos(&app, &["limit", "hold", "tenant-api", "--seconds", "5"]).await;
    assert_eq!(no_key.code, 1, "{}", no_key.stderr);
    assert!(
        no_key.stderr.contains("  key: is required"),
        "{}",
        no_key.stderr
    );
    let too_long = kairos(&app, &["limit", "hold", "openai", "--seconds", "86401"]).await;
    assert_eq!(too_long.code, 1, "{}", too_long.stderr);
    assert!(
        too_long.stderr.contains("  seconds: "),
        "{}",
        too_long.stderr
    );

    let whole = parse(
        &kairos(
            &app,
            &["limit", "hold", "openai", "--seconds", "60", "-o", "json"],
        )
        .await,
    );
    assert_eq!(whole["held_reason"], "held by operator");
    assert!(whole["held_until"].is_string(), "{whole}");

    // The classify instance waits: openai is held (and its cost does not fit).
    let pending = parse(
        &kairos(
            &app,
            &["instance", "list", "--task", "classify", "-o", "json"],
        )
        .await,
    );
    let id = pending["items"][0]["id"].as_str().expect("id").to_owned();
    let shown = kairos(&app, &["instance", "get", &id]).await;
    let out = ok(&shown);
    assert!(out.contains("WAITING ON"), "{out}");
    assert!(out.contains("limit_held"), "{out}");
    assert!(out.contains("openai: held until"), "{out}");

    let released = kairos(&app, &["limit", "release", "openai"]).await;
    assert_eq!(ok(&released), "limit openai released\n");
    assert!(limit_json(&app, "openai").await.1["held_until"].is_null());
    let released = kairos(&app, &["limit", "release", "tenant-api", "--key", "globex"]).await;
    assert_eq!(ok(&released), "limit tenant-api (key globex) released\n");
    let (_, v) = limit_json(&app, "tenant-api").await;
    assert!(
        v["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .all(|k| k["held_until"].is_null()),
        "{v}"
    );

    // Deleting a limit a task draws on is refused naming the task; an unused one goes.
    let refused = kairos(&app, &["limit", "delete", "openai"]).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("409"), "{}", refused.stderr);
    assert!(refused.stderr.contains("summarize"), "{}", refused.stderr);
    let (s, _) = json(app.put("/v1/limits/spare", json!({"concurrency": 1})).await).await;
    assert_eq!(s, 201);
    assert_eq!(
        ok(&kairos(&app, &["limit", "delete", "spare"]).await),
        "limit spare deleted\n"
    );
    let missing = kairos(&app, &["limit", "get", "spare"]).await;
    assert_eq!(missing.code, 1);
    assert!(missing.stdout.is_empty());
    assert!(missing.stderr.contains("404"), "{}", missing.stderr);
    assert!(missing.stderr.contains("spare"), "{}", missing.stderr);
}

#[sqlx::test]
async fn a_viewer_token_cannot_apply_and_an_unreachable_daemon_is_exit_2(pool: PgPool) {
    const ADMIN: &str = "admin-token-123";
    const VIEWER: &str = "viewer-token-123";
    let mut opts = Options::api_only("cli");
    opts.tokens =
        Arc::new(Tokens::parse(&format!("{ADMIN}:admin,{VIEWER}:viewer")).expect("tokens"));
    let app = TestApp::spawn_opts(pool.clone(), opts).await;
    let dir = tempdir();
    write(dir.path(), "b.json", B_JSON);
    let d = dir.path().to_str().expect("utf-8 path");

    let viewer = kairos_at(app.url(""), Some(VIEWER), &["task", "apply", "-f", d]).await;
    assert_eq!(viewer.code, 1, "{}", viewer.stderr);
    assert!(viewer.stderr.contains("403"), "{}", viewer.stderr);
    let none = kairos_at(app.url(""), None, &["task", "list"]).await;
    assert_eq!(none.code, 1, "no token: 401");
    assert_eq!(task_json_with(&app, ADMIN, "b_sync").await, 404);

    let admin = kairos_at(app.url(""), Some(ADMIN), &["task", "apply", "-f", d]).await;
    assert_eq!(ok(&admin), "task b_sync created\n");
    let list = kairos_at(app.url(""), Some(VIEWER), &["task", "list", "-o", "json"]).await;
    assert_eq!(parse(&list)["items"][0]["id"], "b_sync");
    // Viewers read limits but may not hold them.
    let (s, _) = json(
        app.client
            .put(app.url("/v1/limits/openai"))
            .bearer_auth(ADMIN)
            .json(&json!({"concurrency": 2}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(s, 201);
    let limits = kairos_at(app.url(""), Some(VIEWER), &["limit", "list"]).await;
    assert!(ok(&limits).contains("openai"), "{}", limits.stdout);
    let hold = kairos_at(
        app.url(""),
        Some(VIEWER),
        &["limit", "hold", "openai", "--seconds", "5"],
    )
    .await;
    assert_eq!(hold.code, 1, "{}", hold.stderr);
    assert!(hold.stderr.contains("403"), "{}", hold.stderr);
    // --token wins over the environment.
    let flag = kairos_at(
        app.url(""),
        None,
        &["task", "get", "b_sync", "--token", VIEWER],
    )
    .await;
    ok(&flag);

    let unreachable = kairos_at("http://127.0.0.1:1".into(), Some(ADMIN), &["task", "list"]).await;
    assert_eq!(unreachable.code, 2);
    assert!(
        unreachable.stderr.contains("cannot reach"),
        "{}",
        unreachable.stderr
    );
    let usage = kairos(&app, &["task", "apply", "-f", d, "--prune"]).await;
    assert_eq!(usage.code, 2, "--prune needs --agent");
}

#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kairos"))
            .args(["completions", shell])
            .output()
            .expect("run kairos");
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("instance"), "{shell}: {text}");
    }
}

async fn task_json_with(app: &TestApp, token: &str, id: &str) -> u16 {
    app.client
        .get(app.url(&format!("/v1/tasks/{id}")))
        .bearer_auth(token)
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

/// RFC 3339 for `days` days before now, at a whole hour.
fn recent(days: i64) -> String {
    let t = chrono::Utc::now() - chrono::Duration::days(days);
    t.format("%Y-%m-%dT%H:00:00Z").to_string()
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> TempDir {
    let p = std::env::temp_dir().join(format!("kairos-cli-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&p).expect("create temp dir");
    TempDir(p)
}

#[sqlx::test]
async fn instances_show_and_filter_by_priority_and_a_task_shows_its_priority(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let mut ids = Vec::new();
    for (task, priority) in [("incident_check", 0), ("nightly_summary", 8)] {
        let (s, body) = json(
            app.put(
                &format!("/v1/tasks/{task}"),
                json!({"agent_id": "agent_a", "trigger": {"type": "manual"},
                       "execution": {"priority": priority}}),
            )
            .await,
        )
        .await;
        assert_eq!(s, 201, "{body}");
        let (s, inst) = json(
            app.post(&format!("/v1/tasks/{task}/trigger"), json!({}))
                .await,
        )
        .await;
        assert_eq!(s, 201, "{inst}");
        ids.push(inst["id"].as_str().expect("id").to_owned());
    }

    let list = kairos(&app, &["instance", "list"]).await;
    let lines: Vec<&str> = ok(&list).lines().collect();
    assert_eq!(lines.len(), 3, "{}", list.stdout);
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID",
            "TASK",
            "WINDOW",
            "STATUS",
            "PRIORITY",
            "ATTEMPT",
            "SCHEDULED"
        ]
    );
    for (id, task, priority) in [
        (&ids[0], "incident_check", "0"),
        (&ids[1], "nightly_summary", "8"),
    ] {
        let line = lines
            .iter()
            .find(|l| l.starts_with(id.as_str()))
            .unwrap_or_else(|| panic!("no line for {id}: {}", list.stdout));
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[1], task, "{line}");
        assert_eq!(cells[3], "PENDING", "{line}");
        assert_eq!(cells[4], priority, "{line}");
    }

    let urgent = kairos(&app, &["instance", "list", "--priority", "0"]).await;
    let lines: Vec<&str> = ok(&urgent).lines().collect();
    assert_eq!(lines.len(), 2, "{}", urgent.stdout);
    assert!(lines[1].starts_with(&ids[0]), "{}", urgent.stdout);
    let batch = parse(&kairos(&app, &["instance", "list", "--priority", "8", "-o", "json"]).await);
    assert_eq!(common::item_strings(&batch, "id"), [ids[1].as_str()]);
    let none = parse(&kairos(&app, &["instance", "list", "--priority", "3", "-o", "json"]).await);
    assert_eq!(none["items"], json!([]));
    // Outside 0-9 is a usage error: nothing is sent.
    for bad in ["10", "-1", "high"] {
        let refused = kairos(&app, &["instance", "list", &format!("--priority={bad}")]).await;
        assert_eq!(refused.code, 2, "--priority {bad}: {}", refused.stderr);
        assert!(refused.stderr.contains("--priority"), "{}", refused.stderr);
    }

    let shown = kairos(&app, &["instance", "get", &ids[1]]).await;
    let line = ok(&shown)
        .lines()
        .find(|l| l.starts_with("priority:"))
        .unwrap_or_else(|| panic!("no priority line: {}", shown.stdout));
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        ["priority:", "8"]
    );

    let yaml = kairos(&app, &["task", "get", "incident_check"]).await;
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(ok(&yaml)).expect("YAML");
    assert_eq!(doc["execution"]["priority"], serde_yaml_ng::Value::from(0));
}

#[sqlx::test]
async fn task_preview_shows_each_windows_jittered_instant_beside_its_nominal_one(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let (status, body) = json(
        app.put(
            "/v1/tasks/hourly",
            json!({"agent_id": "a", "trigger": {"type": "cron", "expr": "0 * * * *",
                   "timezone": "UTC", "jitter_seconds": 1800}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let run = kairos(&app, &["task", "preview", "hourly", "--count", "5"]).await;
    let lines: Vec<&str> = ok(&run).lines().collect();
    assert!(
        lines[0].contains("SCHEDULED") && lines[0].contains("AVAILABLE"),
        "{}",
        run.stdout
    );
    assert_eq!(lines.len(), 6, "{}", run.stdout);
    // Five windows of one task: at least one offset is not zero, and none reaches the jitter.
    let mut moved = 0;
    for line in &lines[1..] {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let nominal = chrono::DateTime::parse_from_rfc3339(cells[0]).expect("scheduled");
        let available = chrono::DateTime::parse_from_rfc3339(cells[1]).expect("available");
        let offset = (available - nominal).num_milliseconds();
        assert!((0..1_800_000).contains(&offset), "{line}");
        moved += usize::from(offset > 0);
    }
    assert!(moved > 0, "{}", run.stdout);
}

#[sqlx::test]
async fn trigger_takes_a_priority_and_a_debounce_key_and_says_when_a_trigger_was_absorbed(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool).await;
    let (s, body) = json(
        app.put(
            "/v1/tasks/on_event",
            json!({"agent_id": "agent_a", "trigger": {"type": "manual"},
                   "execution": {"debounce": {"seconds": 300}}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201, "{body}");

    // The first trigger of a key creates the instance, at the priority asked for.
    let first = parse(
        &kairos(
            &app,
            &[
                "task",
                "trigger",
                "on_event",
                "--priority",
                "1",
                "--debounce-key",
                "doc-7",
                "-o",
                "json",
            ],
        )
        .await,
    );
    assert_eq!(first["priority"], 1, "{first}");
    assert_eq!(first["debounced"], false, "{first}");
    let id = first["id"].as_str().expect("id").to_owned();

    // A second trigger of the same key is absorbed by it; another key gets its own.
    let again = kairos(
        &app,
        &["task", "trigger", "on_event", "--debounce-key", "doc-7"],
    )
    .await;
    assert!(
        ok(&again).starts_with(&format!("instance {id} absorbed the trigger (debounced)")),
        "{}",
        again.stdout
    );
    let other = parse(
        &kairos(
            &app,
            &[
                "task",
                "trigger",
                "on_event",
                "--debounce-key",
                "doc-8",
                "-o",
                "json",
            ],
        )
        .await,
    );
    assert_ne!(other["id"], first["id"], "{other}");
    assert_eq!(other["priority"], 5, "the task's default priority: {other}");

    // Outside 0-9, or beside an explicit window key, is a usage error: nothing is sent.
    for args in [
        &["task", "trigger", "on_event", "--priority", "10"][..],
        &[
            "task",
            "trigger",
            "on_event",
            "--debounce-key",
            "k",
            "--window-key",
            "w",
        ][..],
    ] {
        let refused = kairos(&app, args).await;
        assert_eq!(refused.code, 2, "{args:?}: {}", refused.stderr);
    }
    let (s, list) = json(app.get("/v1/instances?task_id=on_event").await).await;
    assert_eq!(s, 200, "{list}");
    assert_eq!(common::item_strings(&list, "id").len(), 2, "{list}");

    // A backfill's windows take the priority asked for.
    let (s, body) = json(
        app.put(
            "/v1/tasks/hourly",
            json!({"agent_id": "agent_a",
                   "trigger": {"type": "cron", "expr": "0 * * * *", "timezone": "UTC"}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let (from, to) = (recent(2), recent(1));
    ok(&kairos(
        &app,
        &[
            "task",
            "backfill",
            "hourly",
            "--from",
            &from,
            "--to",
            &to,
            "--priority",
            "2",
        ],
    )
    .await);
    let (s, list) = json(app.get("/v1/instances?task_id=hourly").await).await;
    assert_eq!(s, 200, "{list}");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 24, "{list}");
    assert!(items.iter().all(|i| i["priority"] == 2), "{list}");
}

#[test]
fn output_cut_short_by_its_reader_ends_quietly_as_a_broken_pipe() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kairos"))
        .args([
            "cron",
            "next",
            "* * * * * *",
            "--timezone",
            "UTC",
            "--count",
            "1000",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start kairos");
    // The reader is gone before the first line (what `| head` does once it has its lines).
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("kairos ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
