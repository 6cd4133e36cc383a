//! The operators' command line (`kairos task …`, `kairos instance …`, `kairos limit …`): a REST
//! client of a running daemon. It parses flags, calls the API and prints tables or the API's JSON; it never opens the
//! database. Exit codes: 0 done, 1 the API refused, 2 bad usage or an unreachable daemon.

mod apply;
mod client;
mod table;

use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

pub use client::Error;
use client::{Client, segment};
use table::{print_table, text};

/// Where the daemon is and how to talk to it; shared by every client command.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// Base URL of the kairos API.
    #[arg(
        long,
        env = "KAIROS_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// Bearer token (not needed when the daemon runs open on loopback).
    #[arg(long, env = "KAIROS_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Output format: aligned tables for people, or the API's JSON for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum TaskCommand {
    /// List tasks in id order.
    List {
        /// Only this agent's tasks.
        #[arg(long)]
        agent: Option<String>,
        /// Only paused (true) or running (false) tasks.
        #[arg(long)]
        paused: Option<bool>,
        /// Page size (1-500).
        #[arg(long)]
        limit: Option<u32>,
        /// Start at this page (a `next_cursor` from an earlier answer).
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Follow `next_cursor` and print every page.
        #[arg(long)]
        all: bool,
    },
    /// Show one task's definition.
    Get { id: String },
    /// Register tasks from YAML or JSON files, like `kubectl apply`.
    Apply(apply::ApplyArgs),
    /// Delete a task (its instances are kept).
    Delete { id: String },
    /// Pause a task: no new windows, nothing claimable.
    Pause {
        id: String,
        /// Stored as the task's `paused_reason`.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Resume a paused task from the next window after now.
    Resume { id: String },
    /// Create a manual run now, later, or under a chosen window key.
    Trigger {
        id: String,
        /// Idempotency key: a key the task already has returns that instance.
        #[arg(long)]
        window_key: Option<String>,
        /// Make the run claimable this many seconds from now.
        #[arg(long, conflicts_with = "run_at")]
        delay_seconds: Option<u64>,
        /// Make the run claimable at this RFC 3339 instant.
        #[arg(long)]
        run_at: Option<String>,
        /// A JSON object merged over the task's context for this run.
        #[arg(long)]
        context: Option<String>,
    },
    /// Materialise the schedule's windows in [from, to).
    Backfill {
        id: String,
        /// First instant, inclusive (RFC 3339).
        #[arg(long)]
        from: String,
        /// End, exclusive (RFC 3339).
        #[arg(long)]
        to: String,
        /// Write nothing; list every window with its outcome.
        #[arg(long)]
        dry_run: bool,
        /// Overlap policy for this backfill only.
        #[arg(long, value_parser = ["skip", "queue", "replace"])]
        overlap: Option<String>,
        /// `failed`: give DEAD, FAILED and CANCELLED windows of the range an operator retry.
        #[arg(long, value_parser = ["none", "failed"])]
        reprocess: Option<String>,
    },
    /// The task's next windows.
    Preview {
        id: String,
        /// How many windows (1-1000).
        #[arg(long, default_value_t = 10)]
        count: u32,
        /// Strictly after this RFC 3339 instant (default: now).
        #[arg(long)]
        from: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum InstanceCommand {
    /// List instances, newest window first.
    List {
        /// Only this task's instances.
        #[arg(long)]
        task: Option<String>,
        /// Only this agent's instances.
        #[arg(long)]
        agent: Option<String>,
        /// Comma-separated statuses, e.g. FAILED,DEAD.
        #[arg(long)]
        status: Option<String>,
        /// Only this window key.
        #[arg(long)]
        window: Option<String>,
        /// Only instances of this priority (0 most urgent, 9 least).
        #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9))]
        priority: Option<u8>,
        /// scheduled_at >= this RFC 3339 instant.
        #[arg(long)]
        from: Option<String>,
        /// scheduled_at < this RFC 3339 instant.
        #[arg(long)]
        to: Option<String>,
        /// Page size (1-500).
        #[arg(long)]
        limit: Option<u32>,
        /// Start at this page (a `next_cursor` from an earlier answer).
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Follow `next_cursor` and print every page.
        #[arg(long)]
        all: bool,
    },
    /// Show one instance with its history.
    Get { id: String },
    /// Show an instance's transitions, oldest first.
    Events { id: String },
    /// Operator retry: DEAD, FAILED, CANCELLED or SKIPPED back to PENDING.
    Retry {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Cancel a PENDING, RUNNING or FAILED instance.
    Cancel {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum LimitCommand {
    /// List shared limits with their usage, by name.
    List,
    /// Show one limit: its definition, usage, hold and (per_key) its busiest keys.
    Get { name: String },
    /// Register limits from YAML or JSON files (maps with `kind: limit` and `name`).
    Apply(apply::LimitApplyArgs),
    /// Delete a limit (refused while a task draws on it).
    Delete { name: String },
    /// Hold a limit: nothing that draws on it starts for that many seconds.
    Hold {
        name: String,
        /// How long, 1-86400 seconds (a later hold is never shortened).
        #[arg(long)]
        seconds: u32,
        /// The key to hold (required by a per_key limit).
        #[arg(long)]
        key: Option<String>,
        /// Stored as the hold's reason (default "held by operator").
        #[arg(long)]
        reason: Option<String>,
    },
    /// Lift a hold: of one key, or of the whole limit (every key) without --key.
    Release {
        name: String,
        #[arg(long)]
        key: Option<String>,
    },
}

/// Runs a `task` command and turns its outcome into the exit code.
pub fn run_task(conn: Conn, cmd: TaskCommand) -> ExitCode {
    run(conn, |c, out| Box::pin(task(c, out, cmd)))
}

/// Runs an `instance` command and turns its outcome into the exit code.
pub fn run_instance(conn: Conn, cmd: InstanceCommand) -> ExitCode {
    run(conn, |c, out| Box::pin(instance(c, out, cmd)))
}

/// Runs a `limit` command and turns its outcome into the exit code.
pub fn run_limit(conn: Conn, cmd: LimitCommand) -> ExitCode {
    run(conn, |c, out| Box::pin(limit(c, out, cmd)))
}

type Fut<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + 'a>>;

fn run<F>(conn: Conn, f: F) -> ExitCode
where
    F: for<'a> FnOnce(&'a Client, Output) -> Fut<'a>,
{
    let result = Client::new(&conn.url, conn.token.clone()).and_then(|client| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Connection(format!("cannot start the async runtime: {e}")))?;
        runtime.block_on(f(&client, conn.output))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kairos: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn print_json(v: &Value) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(_) => println!("{v}"),
    }
}

fn reason_body(reason: Option<String>) -> Value {
    match reason {
        Some(r) => json!({ "reason": r }),
        None => json!({}),
    }
}

fn task_path(id: &str) -> String {
    format!("/v1/tasks/{}", segment(id))
}

fn instance_path(id: &str) -> String {
    format!("/v1/instances/{}", segment(id))
}

fn limit_path(name: &str) -> String {
    format!("/v1/limits/{}", segment(name))
}

fn push(q: &mut Vec<(&'static str, String)>, key: &'static str, v: Option<impl ToString>) {
    if let Some(v) = v {
        q.push((key, v.to_string()));
    }
}

async fn list(
    client: &Client,
    path: &str,
    mut q: Vec<(&'static str, String)>,
    cursor: Option<String>,
    all: bool,
) -> Result<Value, Error> {
    if all {
        client.get_all(path, &q).await
    } else {
        push(&mut q, "cursor", cursor);
        client.get(path, &q).await
    }
}

/// A list page: the API's JSON, or a table of its items and a hint at the next page.
fn show_page(out: Output, page: &Value, print_rows: fn(&[Value])) {
    if out == Output::Json {
        print_json(page);
    } else {
        print_rows(items(page));
        hint_next_page(page);
    }
}

fn hint_next_page(page: &Value) {
    if let Some(c) = page.get("next_cursor").and_then(Value::as_str) {
        eprintln!("(more: --cursor {c}, or --all)");
    }
}

async fn task(client: &Client, out: Output, cmd: TaskCommand) -> Result<(), Error> {
    match cmd {
        TaskCommand::List {
            agent,
            paused,
            limit,
            cursor,
            all,
        } => {
            let mut q = Vec::new();
            push(&mut q, "agent_id", agent);
            push(&mut q, "paused", paused);
            push(&mut q, "limit", limit);
            let page = list(client, "/v1/tasks", q, cursor, all).await?;
            show_page(out, &page, print_tasks);
        }
        TaskCommand::Get { id } => {
            let t = client.get(&task_path(&id), &[]).await?;
            show_task(out, &t);
        }
        TaskCommand::Apply(args) => apply::run(client, out, args).await?,
        TaskCommand::Delete { id } => {
            client
                .send(Method::DELETE, &task_path(&id), &[], None)
                .await?;
            if out == Output::Json {
                print_json(&json!({"id": id, "deleted": true}));
            } else {
                println!("task {id} deleted");
            }
        }
        TaskCommand::Pause { id, reason } => {
            let path = format!("{}/pause", task_path(&id));
            let t = client.post(&path, &reason_body(reason)).await?.body;
            if out == Output::Json {
                print_json(&t);
            } else {
                println!("task {id} paused: {}", text(&t["paused_reason"]));
            }
        }
        TaskCommand::Resume { id } => {
            let path = format!("{}/resume", task_path(&id));
            let t = client.send(Method::POST, &path, &[], None).await?.body;
            if out == Output::Json {
                print_json(&t);
            } else {
                println!("task {id} resumed; next fire {}", text(&t["next_fire_at"]));
            }
        }
        TaskCommand::Trigger {
            id,
            window_key,
            delay_seconds,
            run_at,
            context,
        } => {
            let mut body = serde_json::Map::new();
            if let Some(k) = window_key {
                body.insert("window_key".into(), Value::String(k));
            }
            if let Some(d) = delay_seconds {
                body.insert("delay_seconds".into(), json!(d));
            }
            if let Some(r) = run_at {
                body.insert("run_at".into(), Value::String(r));
            }
            if let Some(c) = context {
                let v: Value = serde_json::from_str(&c)
                    .map_err(|e| Error::Usage(format!("--context is not JSON: {e}")))?;
                if !v.is_object() {
                    return Err(Error::Usage("--context must be a JSON object".into()));
                }
                body.insert("context".into(), v);
            }
            let path = format!("{}/trigger", task_path(&id));
            let answer = client.post(&path, &Value::Object(body)).await?;
            if out == Output::Json {
                print_json(&answer.body);
            } else {
                let what = if answer.status == StatusCode::CREATED {
                    "created"
                } else {
                    "already exists"
                };
                println!(
                    "instance {} {what} (window {}, status {})",
                    text(&answer.body["id"]),
                    text(&answer.body["window_key"]),
                    text(&answer.body["status"])
                );
            }
        }
        TaskCommand::Backfill {
            id,
            from,
            to,
            dry_run,
            overlap,
            reprocess,
        } => {
            let mut body = json!({"from": from, "to": to, "dry_run": dry_run});
            if let Some(o) = overlap {
                body["overlap"] = Value::String(o);
            }
            if let Some(r) = reprocess {
                body["reprocess"] = Value::String(r);
            }
            let path = format!("{}/backfill", task_path(&id));
            let report = client.post(&path, &body).await?.body;
            if out == Output::Json {
                print_json(&report);
            } else {
                if let Some(windows) = report.get("windows").and_then(Value::as_array) {
                    let rows = windows
                        .iter()
                        .map(|w| vec![text(&w["window_key"]), text(&w["outcome"])])
                        .collect();
                    print_table(&["WINDOW", "OUTCOME"], rows);
                }
                let verb = if dry_run { "would create" } else { "created" };
                println!(
                    "{verb} {}, existing {}, skipped {}, cancelled {}, reprocessed {}",
                    text(&report["created"]),
                    text(&report["existing"]),
                    text(&report["skipped"]),
                    text(&report["cancelled"]),
                    text(&report["reprocessed"]),
                );
            }
        }
        TaskCommand::Preview { id, count, from } => {
            let mut q = vec![("count", count.to_string())];
            push(&mut q, "from", from);
            let path = format!("{}/preview", task_path(&id));
            let p = client.get(&path, &q).await?;
            if out == Output::Json {
                print_json(&p);
            } else {
                let rows = items_of(&p, "windows")
                    .iter()
                    .map(|w| {
                        vec![
                            text(&w["scheduled_at"]),
                            text(&w["available_at"]),
                            text(&w["window_key"]),
                        ]
                    })
                    .collect();
                print_table(&["SCHEDULED", "AVAILABLE (JITTERED)", "WINDOW"], rows);
            }
        }
    }
    Ok(())
}

async fn instance(client: &Client, out: Output, cmd: InstanceCommand) -> Result<(), Error> {
    match cmd {
        InstanceCommand::List {
            task,
            agent,
            status,
            window,
            priority,
            from,
            to,
            limit,
            cursor,
            all,
        } => {
            let mut q = Vec::new();
            push(&mut q, "task_id", task);
            push(&mut q, "agent_id", agent);
            push(&mut q, "status", status);
            push(&mut q, "window_key", window);
            push(&mut q, "priority", priority);
            push(&mut q, "from", from);
            push(&mut q, "to", to);
            push(&mut q, "limit", limit);
            let page = list(client, "/v1/instances", q, cursor, all).await?;
            show_page(out, &page, print_instances);
        }
        InstanceCommand::Get { id } => {
            let i = client.get(&instance_path(&id), &[]).await?;
            if out == Output::Json {
                print_json(&i);
            } else {
                let fields = [
                    "id",
                    "task_id",
                    "agent_id",
                    "window_key",
                    "status",
                    "priority",
                    "source",
                    "attempt",
                    "max_attempts",
                    "scheduled_at",
                    "available_at",
                    "started_at",
                    "finished_at",
                    "worker_id",
                    "lease_expires_at",
                    "error_kind",
                    "error",
                    "skip_reason",
                    "result",
                ];
                let rows = fields
                    .iter()
                    .map(|f| vec![format!("{f}:"), text(&i[*f])])
                    .collect();
                print_table(&[], rows);
                let waiting = items_of(&i, "waiting_on");
                if !waiting.is_empty() {
                    println!();
                    print_waiting(waiting);
                }
                println!();
                print_events(items_of(&i, "events"));
            }
        }
        InstanceCommand::Events { id } => {
            let i = client.get(&instance_path(&id), &[]).await?;
            if out == Output::Json {
                print_json(&i["events"]);
            } else {
                print_events(items_of(&i, "events"));
            }
        }
        InstanceCommand::Retry { id, reason } => {
            operator_action(client, out, &id, "retry", reason).await?;
        }
        InstanceCommand::Cancel { id, reason } => {
            operator_action(client, out, &id, "cancel", reason).await?;
        }
    }
    Ok(())
}

async fn limit(client: &Client, out: Output, cmd: LimitCommand) -> Result<(), Error> {
    match cmd {
        LimitCommand::List => {
            let page = client.get("/v1/limits", &[]).await?;
            if out == Output::Json {
                print_json(&page);
            } else {
                print_limits(items(&page));
            }
        }
        LimitCommand::Get { name } => {
            let l = client.get(&limit_path(&name), &[]).await?;
            show_limit(out, &l);
        }
        LimitCommand::Apply(args) => apply::run_limits(client, out, args).await?,
        LimitCommand::Delete { name } => {
            client
                .send(Method::DELETE, &limit_path(&name), &[], None)
                .await?;
            if out == Output::Json {
                print_json(&json!({"name": name, "deleted": true}));
            } else {
                println!("limit {name} deleted");
            }
        }
        LimitCommand::Hold {
            name,
            seconds,
            key,
            reason,
        } => {
            let mut body = json!({ "seconds": seconds });
            if let Some(k) = &key {
                body["key"] = json!(k);
            }
            if let Some(r) = reason {
                body["reason"] = json!(r);
            }
            let path = format!("{}/hold", limit_path(&name));
            let l = client.post(&path, &body).await?.body;
            if out == Output::Json {
                print_json(&l);
            } else {
                let (until, why) = hold_of(&l, key.as_deref());
                let on = key.map(|k| format!(" (key {k})")).unwrap_or_default();
                println!("limit {name}{on} held until {until}: {why}");
            }
        }
        LimitCommand::Release { name, key } => {
            let body = match &key {
                Some(k) => json!({ "key": k }),
                None => json!({}),
            };
            let path = format!("{}/release", limit_path(&name));
            let l = client.post(&path, &body).await?.body;
            if out == Output::Json {
                print_json(&l);
            } else {
                match key {
                    Some(k) => println!("limit {name} (key {k}) released"),
                    None => println!("limit {name} released"),
                }
            }
        }
    }
    Ok(())
}

/// The hold a limit's view shows for `key` (the limit's own for a limit without per_key).
fn hold_of(l: &Value, key: Option<&str>) -> (String, String) {
    let entry = match key {
        Some(k) if l["per_key"] == true => items_of(l, "keys")
            .iter()
            .find(|e| e["key"].as_str() == Some(k))
            .unwrap_or(&Value::Null),
        _ => l,
    };
    (text(&entry["held_until"]), text(&entry["held_reason"]))
}

/// `running/concurrency`; `-` for a limit without a concurrency (units are held, and counted,
/// only against one).
fn in_use(running: &Value, concurrency: &Value) -> String {
    match concurrency {
        Value::Null => "-".to_owned(),
        c => format!("{}/{}", text(running), text(c)),
    }
}

/// `500/60s`, `5/2s burst 1`, or `-`.
fn rate_summary(rate: &Value) -> String {
    if rate.is_null() {
        return "-".to_owned();
    }
    let burst = rate["burst"].as_i64().unwrap_or(0);
    let mut s = format!("{}/{}s", text(&rate["count"]), text(&rate["per_seconds"]));
    if burst > 0 {
        s.push_str(&format!(" burst {burst}"));
    }
    s
}

fn print_limits(limits: &[Value]) {
    let rows = limits
        .iter()
        .map(|l| {
            let per_key = l["per_key"] == true;
            let keys = items_of(l, "keys");
            let held = if per_key {
                let n = keys.iter().filter(|k| !k["held_until"].is_null()).count();
                if n == 0 {
                    "-".to_owned()
                } else {
                    format!("{n} key(s)")
                }
            } else {
                text(&l["held_until"])
            };
            let busiest = keys
                .iter()
                .filter(|k| k["running"].as_i64().unwrap_or(0) > 0)
                .take(3)
                .map(|k| format!("{}={}", text(&k["key"]), text(&k["running"])))
                .collect::<Vec<_>>();
            vec![
                text(&l["name"]),
                if per_key && !l["concurrency"].is_null() {
                    format!("{} ({}/key)", text(&l["running"]), text(&l["concurrency"]))
                } else {
                    in_use(&l["running"], &l["concurrency"])
                },
                rate_summary(&l["rate"]),
                if per_key {
                    "per key".to_owned()
                } else {
                    text(&l["available_rate"])
                },
                held,
                if per_key {
                    if busiest.is_empty() {
                        "-".to_owned()
                    } else {
                        format!("busiest keys: {}", busiest.join(", "))
                    }
                } else {
                    text(&l["held_reason"])
                },
            ]
        })
        .collect();
    print_table(
        &[
            "NAME",
            "IN USE",
            "RATE",
            "AVAILABLE",
            "HELD UNTIL",
            "REASON",
        ],
        rows,
    );
}

/// A limit as a field list, then (per_key) its keys as a table.
fn show_limit(out: Output, l: &Value) {
    if out == Output::Json {
        print_json(l);
        return;
    }
    let per_key = l["per_key"] == true;
    let mut rows = vec![
        vec!["name:".to_owned(), text(&l["name"])],
        vec!["version:".to_owned(), text(&l["version"])],
        vec!["concurrency:".to_owned(), text(&l["concurrency"])],
        vec!["rate:".to_owned(), rate_summary(&l["rate"])],
        vec!["per_key:".to_owned(), text(&l["per_key"])],
        vec!["running:".to_owned(), text(&l["running"])],
    ];
    if !per_key {
        rows.push(vec![
            "available_rate:".to_owned(),
            text(&l["available_rate"]),
        ]);
        rows.push(vec!["held_until:".to_owned(), text(&l["held_until"])]);
        rows.push(vec!["held_reason:".to_owned(), text(&l["held_reason"])]);
    }
    rows.push(vec!["created_at:".to_owned(), text(&l["created_at"])]);
    rows.push(vec!["updated_at:".to_owned(), text(&l["updated_at"])]);
    print_table(&[], rows);
    if per_key {
        println!();
        let keys = items_of(l, "keys");
        let rows = keys
            .iter()
            .map(|k| {
                vec![
                    text(&k["key"]),
                    in_use(&k["running"], &l["concurrency"]),
                    text(&k["available_rate"]),
                    text(&k["held_until"]),
                    text(&k["held_reason"]),
                ]
            })
            .collect();
        print_table(
            &["KEY", "IN USE", "AVAILABLE", "HELD UNTIL", "REASON"],
            rows,
        );
        if keys.is_empty() {
            println!("(no key has run or been held yet)");
        }
    }
}

/// `retry` and `cancel`: the same optional reason body, the instance as the answer.
async fn operator_action(
    client: &Client,
    out: Output,
    id: &str,
    verb: &str,
    reason: Option<String>,
) -> Result<(), Error> {
    let path = format!("{}/{verb}", instance_path(id));
    let i = client.post(&path, &reason_body(reason)).await?.body;
    if out == Output::Json {
        print_json(&i);
    } else {
        println!(
            "instance {id} is {} (attempt {}/{})",
            text(&i["status"]),
            text(&i["attempt"]),
            text(&i["max_attempts"])
        );
    }
    Ok(())
}

fn items(page: &Value) -> &[Value] {
    items_of(page, "items")
}

fn items_of<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// One line for a trigger: its type and what drives it.
fn trigger_summary(t: &Value) -> String {
    match t.get("type").and_then(Value::as_str) {
        Some("cron") => format!("cron {} {}", text(&t["expr"]), text(&t["timezone"])),
        Some("interval") => format!("every {}s", text(&t["every_seconds"])),
        Some("once") => format!("once {}", text(&t["at"])),
        Some("after") => format!("after {}", text(&t["task"])),
        Some(other) => other.to_owned(),
        None => "-".to_owned(),
    }
}

fn print_tasks(tasks: &[Value]) {
    let rows = tasks
        .iter()
        .map(|t| {
            vec![
                text(&t["id"]),
                text(&t["agent_id"]),
                trigger_summary(&t["trigger"]),
                text(&t["next_fire_at"]),
                text(&t["paused"]),
            ]
        })
        .collect();
    print_table(&["ID", "AGENT", "TRIGGER", "NEXT FIRE", "PAUSED"], rows);
}

fn print_instances(list: &[Value]) {
    let rows = list
        .iter()
        .map(|i| {
            vec![
                text(&i["id"]),
                text(&i["task_id"]),
                text(&i["window_key"]),
                text(&i["status"]),
                text(&i["priority"]),
                format!("{}/{}", text(&i["attempt"]), text(&i["max_attempts"])),
                text(&i["scheduled_at"]),
            ]
        })
        .collect();
    print_table(
        &[
            "ID",
            "TASK",
            "WINDOW",
            "STATUS",
            "PRIORITY",
            "ATTEMPT",
            "SCHEDULED",
        ],
        rows,
    );
}

/// Why a PENDING or FAILED instance is not running now (`waiting_on`).
fn print_waiting(waiting: &[Value]) {
    let rows = waiting
        .iter()
        .map(|w| vec![text(&w["reason"]), text(&w["until"]), text(&w["detail"])])
        .collect();
    print_table(&["WAITING ON", "UNTIL", "DETAIL"], rows);
}

fn print_events(events: &[Value]) {
    let rows = events
        .iter()
        .map(|e| {
            vec![
                text(&e["at"]),
                text(&e["from"]),
                text(&e["to"]),
                text(&e["attempt"]),
                text(&e["actor"]),
                text(&e["reason"]),
            ]
        })
        .collect();
    print_table(&["AT", "FROM", "TO", "ATTEMPT", "ACTOR", "REASON"], rows);
}

/// A task as YAML for people (the API's JSON with `-o json`).
fn show_task(out: Output, t: &Value) {
    if out == Output::Json {
        print_json(t);
        return;
    }
    match serde_yaml_ng::to_string(t) {
        Ok(s) => print!("{s}"),
        Err(_) => print_json(t),
    }
}
