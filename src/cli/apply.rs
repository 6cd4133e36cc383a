//! `kairos task apply`: task files (YAML or JSON) made true on the daemon, like `kubectl apply`.
//! Each task in a file is a `PUT /v1/tasks/{id}` body plus its `id`. A dry run compares the
//! fields a file sets with what is registered; pruning deletes one agent's tasks no file names.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use clap::Args;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::client::{Client, Error};
use super::{Output, print_json, task_path};
use crate::domain::task::{READ_ONLY_FIELDS, parse_timestamp};

#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// A task file (.yaml, .yml, .json) or a directory of them (read in name order).
    #[arg(short = 'f', long = "filename", required = true)]
    pub paths: Vec<PathBuf>,
    /// Register nothing; print what would change.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete the tasks of `--agent` that no file names.
    #[arg(long, requires = "agent")]
    pub prune: bool,
    /// The agent whose tasks `--prune` may delete.
    #[arg(long, requires = "prune")]
    pub agent: Option<String>,
}

/// A task read from a file, with where it came from for messages.
#[derive(Debug)]
pub struct TaskFile {
    pub id: String,
    pub body: Value,
    pub source: PathBuf,
}

/// One changed field: its dotted path, the registered value and the file's.
#[derive(Debug, PartialEq)]
pub struct Change {
    pub path: String,
    pub old: Value,
    pub new: Value,
}

pub async fn run(client: &Client, out: Output, args: ApplyArgs) -> Result<(), Error> {
    let tasks = load(&args.paths)?;
    let mut report = Vec::new();
    let mut failed = None;
    for t in &tasks {
        match apply_one(client, t, args.dry_run).await {
            Ok((action, changes)) => {
                if out == Output::Table {
                    print_outcome(&t.id, action, &changes, args.dry_run);
                }
                report.push(outcome_json(&t.id, action, &changes));
            }
            Err(e) => {
                eprintln!("kairos: task {} ({}): {e}", t.id, t.source.display());
                report.push(json!({"id": t.id, "action": "failed", "error": e.to_string()}));
                failed.get_or_insert(e);
            }
        }
    }
    if let (true, Some(agent), None) = (args.prune, &args.agent, &failed) {
        let named: BTreeSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        let registered = client
            .get_all("/v1/tasks", &[("agent_id", agent.clone())])
            .await?;
        let ids = registered["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["id"].as_str())
            .filter(|id| !named.contains(id))
            .map(str::to_owned)
            .collect::<Vec<_>>();
        for id in ids {
            if !args.dry_run {
                client
                    .send(Method::DELETE, &task_path(&id), &[], None)
                    .await?;
            }
            if out == Output::Table {
                let suffix = if args.dry_run { " (dry run)" } else { "" };
                println!("task {id} pruned{suffix}");
            }
            report.push(json!({"id": id, "action": "pruned"}));
        }
    } else if args.prune && failed.is_some() {
        eprintln!("kairos: not pruning: some tasks were not applied");
    }
    if out == Output::Json {
        print_json(&json!({"dry_run": args.dry_run, "tasks": report}));
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Action {
    Created,
    Configured,
    Unchanged,
}

impl Action {
    fn word(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
        }
    }
}

async fn apply_one(
    client: &Client,
    t: &TaskFile,
    dry_run: bool,
) -> Result<(Action, Vec<Change>), Error> {
    if dry_run {
        // The server's own validation, run here: a dry run reports what the apply would refuse
        // (unknown fields, a cron that never fires, bounds). What only the server knows (an
        // upstream task that does not exist, its outbound policy) is checked by the apply.
        refuse_as_the_server_would(t)?;
    }
    let path = task_path(&t.id);
    let registered = match client.get(&path, &[]).await {
        Ok(v) => Some(v),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    if dry_run {
        return Ok(match registered {
            None => (Action::Created, Vec::new()),
            Some(current) => {
                let changes = diff(&t.body, &current);
                let action = if changes.is_empty() {
                    Action::Unchanged
                } else {
                    Action::Configured
                };
                (action, changes)
            }
        });
    }
    let answer = client.send(Method::PUT, &path, &[], Some(&t.body)).await?;
    if answer.status == StatusCode::CREATED || registered.is_none() {
        return Ok((Action::Created, Vec::new()));
    }
    let before = registered.as_ref().map(|r| r["version"].clone());
    let changes = registered
        .as_ref()
        .map(|r| diff(&t.body, r))
        .unwrap_or_default();
    if before.as_ref() == Some(&answer.body["version"]) {
        Ok((Action::Unchanged, Vec::new()))
    } else {
        Ok((Action::Configured, changes))
    }
}

fn refuse_as_the_server_would(t: &TaskFile) -> Result<(), Error> {
    let errors = match crate::domain::task::parse_submission(&t.id, &t.body) {
        Err(errors) => errors,
        // As registration does: a schedule with no first window is refused.
        Ok(sub) => match sub.spec.trigger.first_window(chrono::Utc::now()) {
            Ok(_) => return Ok(()),
            Err(e) => vec![e],
        },
    };
    let errors: Vec<Value> = errors
        .iter()
        .map(|e| json!({"field": e.field, "message": e.message}))
        .collect();
    Err(Error::Api {
        status: reqwest::StatusCode::UNPROCESSABLE_ENTITY,
        problem: Some(json!({
            "title": "Invalid request values",
            "status": 422,
            "detail": "the task would be refused (checked locally by the dry run)",
            "errors": errors,
        })),
        text: String::new(),
    })
}

fn print_outcome(id: &str, action: Action, changes: &[Change], dry_run: bool) {
    let suffix = if dry_run { " (dry run)" } else { "" };
    println!("task {id} {}{suffix}", action.word());
    for c in changes {
        println!("  {}: {} -> {}", c.path, c.old, c.new);
    }
}

fn outcome_json(id: &str, action: Action, changes: &[Change]) -> Value {
    let changes: Vec<Value> = changes
        .iter()
        .map(|c| json!({"path": c.path, "old": c.old, "new": c.new}))
        .collect();
    json!({"id": id, "action": action.word(), "changes": changes})
}

/// The fields `file` sets that differ from `registered`, depth first, keys sorted.
/// Fields the file leaves out (or sets to `null`) get server defaults and are not compared, nor
/// are write-only secrets, which the API never shows, nor read-only fields (a file saved from
/// `task get -o json` carries them; the server ignores them).
pub fn diff(file: &Value, registered: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    if let Value::Object(fields) = file {
        for (k, v) in fields {
            if k == "id" || READ_ONLY_FIELDS.contains(&k.as_str()) {
                continue;
            }
            walk(k, v, registered.get(k).unwrap_or(&Value::Null), &mut out);
        }
    }
    out
}

fn walk(path: &str, new: &Value, old: &Value, out: &mut Vec<Change>) {
    match (new, old) {
        (Value::Null, _) => {}
        (Value::Object(n), Value::Object(o)) => {
            for (k, v) in n {
                if k == "secret" {
                    continue;
                }
                let p = format!("{path}.{k}");
                walk(&p, v, o.get(k).unwrap_or(&Value::Null), out);
            }
        }
        (Value::Array(n), Value::Array(o)) if n.len() == o.len() => {
            for (i, (nv, ov)) in n.iter().zip(o).enumerate() {
                walk(&format!("{path}[{i}]"), nv, ov, out);
            }
        }
        (Value::Number(n), Value::Number(o)) if n.as_f64() == o.as_f64() => {}
        (Value::String(n), Value::String(o)) if n.trim() == o.trim() || same_instant(n, o) => {}
        _ if new == old => {}
        _ => out.push(Change {
            path: path.to_owned(),
            old: old.clone(),
            new: new.clone(),
        }),
    }
}

/// Two RFC 3339 strings naming the same second (the API stores `once.at` in UTC, truncated).
fn same_instant(a: &str, b: &str) -> bool {
    match (parse_timestamp(a.trim()), parse_timestamp(b.trim())) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Every task of the given files and directories, in order; duplicate ids are refused before
/// anything is sent.
pub fn load(paths: &[PathBuf]) -> Result<Vec<TaskFile>, Error> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p)
                .map_err(|e| Error::Usage(format!("cannot read {}: {e}", p.display())))?;
            let mut found = Vec::new();
            for entry in entries {
                let entry =
                    entry.map_err(|e| Error::Usage(format!("cannot read {}: {e}", p.display())))?;
                let path = entry.path();
                if path.is_file() && kind(&path).is_some() {
                    found.push(path);
                }
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    let mut tasks = Vec::new();
    for f in &files {
        tasks.extend(read_file(f)?);
    }
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    for t in &tasks {
        if let Some(first) = seen.insert(&t.id, &t.source) {
            return Err(Error::Usage(format!(
                "task {} is defined twice: in {} and in {}",
                t.id,
                first.display(),
                t.source.display()
            )));
        }
    }
    if tasks.is_empty() {
        return Err(Error::Usage("no tasks found in the given files".into()));
    }
    Ok(tasks)
}

#[derive(Clone, Copy)]
enum Kind {
    Yaml,
    Json,
}

fn kind(path: &Path) -> Option<Kind> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml") => Some(Kind::Yaml),
        Some("json") => Some(Kind::Json),
        _ => None,
    }
}

fn read_file(path: &Path) -> Result<Vec<TaskFile>, Error> {
    let at = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Usage(format!("cannot read {at}: {e}")))?;
    let docs: Vec<Value> = match kind(path) {
        Some(Kind::Json) => vec![
            serde_json::from_str(&text)
                .map_err(|e| Error::Usage(format!("{at} is not valid JSON: {e}")))?,
        ],
        // YAML is the default: JSON is YAML too, and `---` separates documents.
        _ => {
            let mut docs = Vec::new();
            for doc in serde_yaml_ng::Deserializer::from_str(&text) {
                let v = Value::deserialize(doc)
                    .map_err(|e| Error::Usage(format!("{at} is not valid YAML: {e}")))?;
                docs.push(v);
            }
            docs
        }
    };
    let mut tasks = Vec::new();
    for doc in docs {
        let list = match doc {
            Value::Null => Vec::new(),
            Value::Array(items) => items,
            other => vec![other],
        };
        for (i, body) in list.into_iter().enumerate() {
            let id = match body.get("id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => id.to_owned(),
                _ => {
                    return Err(Error::Usage(format!(
                        "{at}: task #{} has no string `id`",
                        i + 1
                    )));
                }
            };
            if !body.is_object() {
                return Err(Error::Usage(format!("{at}: task #{} is not a map", i + 1)));
            }
            tasks.push(TaskFile {
                id,
                body,
                source: path.to_owned(),
            });
        }
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_only_fields_the_file_sets_with_dotted_paths() {
        let file = json!({
            "id": "t", "agent_id": "a",
            "trigger": {"type": "cron", "expr": "0 9 * * *"},
            "execution": {"max_retries": 5, "retry_backoff": {"jitter": 0}},
            "dispatch": {"mode": "webhook", "secret": "s"},
            "notify": {"on_failure": ["https://x/1"]},
            "context": null,
            "version": 1, "updated_at": "2026-01-01T00:00:00Z",
        });
        let registered = json!({
            "id": "t", "agent_id": "a",
            "trigger": {"type": "cron", "expr": "0 8 * * *", "timezone": "UTC"},
            "execution": {"max_retries": 3, "timeout_seconds": 600,
                          "retry_backoff": {"jitter": 0.0, "base_seconds": 10}},
            "dispatch": {"mode": "webhook"},
            "notify": {"on_failure": ["https://x/2"], "on_success": []},
            "context": {"k": 1},
            "version": 4, "updated_at": "2026-02-01T00:00:00Z",
        });
        let changes = diff(&file, &registered);
        let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "execution.max_retries",
                "notify.on_failure[0]",
                "trigger.expr"
            ]
        );
        assert_eq!(changes[0].old, json!(3));
        assert_eq!(changes[0].new, json!(5));
    }

    #[test]
    fn the_same_instant_in_another_offset_is_no_change() {
        let file = json!({"trigger": {"type": "once", "at": "2026-12-01T08:00:00+08:00"}});
        let registered = json!({"trigger": {"type": "once", "at": "2026-12-01T00:00:00Z"}});
        assert!(diff(&file, &registered).is_empty());
        let later = json!({"trigger": {"type": "once", "at": "2026-12-01T09:00:00+08:00"}});
        assert_eq!(diff(&later, &registered).len(), 1);
    }

    #[test]
    fn a_field_the_server_lacks_is_a_change_from_null() {
        let changes = diff(&json!({"paused": true}), &json!({}));
        assert_eq!(
            changes,
            [Change {
                path: "paused".into(),
                old: Value::Null,
                new: json!(true)
            }]
        );
    }
}
