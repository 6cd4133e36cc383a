//! `kairos task …`: list, show, delete, pause, resume, trigger, backfill and preview tasks
//! (`apply` lives in its own module), and the task table.

use clap::Subcommand;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::client::{Client, Error, segment};
use super::output::{Output, items_of, print_json, show_page};
use super::table::{print_table, text};
use super::{apply, list, push, reason_body};

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
        /// Priority of this run, 0 (most urgent) to 9 (default: the task's).
        #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9))]
        priority: Option<u8>,
        /// With `execution.debounce`: triggers with one key coalesce (default: the task).
        #[arg(long, conflicts_with = "window_key")]
        debounce_key: Option<String>,
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
        /// Priority of the backfilled windows, 0 (most urgent) to 9 (default: the task's).
        #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9))]
        priority: Option<u8>,
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

pub(super) fn task_path(id: &str) -> String {
    format!("/v1/tasks/{}", segment(id))
}

pub(super) async fn run(client: &Client, out: Output, cmd: TaskCommand) -> Result<(), Error> {
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
            priority,
            debounce_key,
        } => {
            let mut body = serde_json::Map::new();
            if let Some(p) = priority {
                body.insert("priority".into(), json!(p));
            }
            if let Some(k) = debounce_key {
                body.insert("debounce_key".into(), Value::String(k));
            }
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
                let what = if answer.body["debounced"] == json!(true) {
                    "absorbed the trigger (debounced)"
                } else if answer.status == StatusCode::CREATED {
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
            priority,
        } => {
            let mut body = json!({"from": from, "to": to, "dry_run": dry_run});
            if let Some(p) = priority {
                body["priority"] = json!(p);
            }
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
