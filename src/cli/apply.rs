//! `kairos task apply` and `kairos limit apply`: task and limit files (YAML or JSON) made true on
//! the daemon, like `kubectl apply`. Each task in a file is a `PUT /v1/tasks/{id}` body plus its
//! `id`; each limit is a map with `kind: limit`, its `name` and a `PUT /v1/limits/{name}` body
//! (`concurrency`, `rate`, `per_key`). Both may share a file or a directory: `task apply` applies
//! the limits first, so tasks whose `execution.limits` name them validate, and tries a limit the
//! server refused with 409 (a task still draws more than it would allow) once more after the
//! tasks, so lowering a task's cost and its limit together works in one run. A dry run compares
//! the fields a file sets with what is registered; pruning deletes one agent's tasks no file
//! names (never limits).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use clap::Args;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::client::{Client, Error};
use super::limits::limit_path;
use super::output::{Output, print_json};
use super::tasks::task_path;
use crate::domain::task::{READ_ONLY_FIELDS, parse_timestamp};

#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// A task or limit file (.yaml, .yml, .json) or a directory of them (read in name order).
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

/// `kairos limit apply`: only the limits of the files.
#[derive(Args, Debug)]
pub struct LimitApplyArgs {
    /// A limit file (.yaml, .yml, .json) or a directory of them (read in name order); task
    /// definitions in them are skipped (`kairos task apply` applies both).
    #[arg(short = 'f', long = "filename", required = true)]
    pub paths: Vec<PathBuf>,
    /// Register nothing; print what would change.
    #[arg(long)]
    pub dry_run: bool,
}

/// A task read from a file, with where it came from for messages.
#[derive(Debug)]
pub struct TaskFile {
    pub id: String,
    pub body: Value,
    pub source: PathBuf,
}

/// A limit read from a file (`kind: limit`): its name, the PUT body (without `kind`) and where
/// it came from.
#[derive(Debug)]
pub struct LimitFile {
    pub name: String,
    pub body: Value,
    pub source: PathBuf,
}

/// What the files define.
#[derive(Debug, Default)]
pub struct Loaded {
    pub limits: Vec<LimitFile>,
    pub tasks: Vec<TaskFile>,
}

/// One changed field: its dotted path, the registered value and the file's.
#[derive(Debug, PartialEq)]
pub struct Change {
    pub path: String,
    pub old: Value,
    pub new: Value,
}

pub async fn run(client: &Client, out: Output, args: ApplyArgs) -> Result<(), Error> {
    let Loaded { limits, tasks } = load(&args.paths)?;
    if limits.is_empty() && tasks.is_empty() {
        return Err(Error::Usage(
            "no tasks or limits found in the given files".into(),
        ));
    }
    let mut failed = None;
    // Limits first: a task naming one validates only once it exists. A limit refused with 409
    // (a task draws more than the new definition allows) waits for the tasks and is tried again.
    let mut limit_report = Vec::new();
    let mut deferred = Vec::new();
    for l in &limits {
        match apply_limit(client, l, args.dry_run).await {
            Ok((action, changes)) => {
                if out == Output::Table {
                    print_limit_outcome(&l.name, action, &changes, args.dry_run);
                }
                limit_report.push(limit_outcome_json(&l.name, action, &changes));
            }
            Err(e) if is_conflict(&e) && !tasks.is_empty() => deferred.push(l),
            Err(e) => limit_failed(l, e, &mut limit_report, &mut failed),
        }
    }
    let mut report = Vec::new();
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
    for l in deferred {
        match apply_limit(client, l, args.dry_run).await {
            Ok((action, changes)) => {
                if out == Output::Table {
                    print_limit_outcome(&l.name, action, &changes, args.dry_run);
                }
                limit_report.push(limit_outcome_json(&l.name, action, &changes));
            }
            Err(e) => limit_failed(l, e, &mut limit_report, &mut failed),
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
        eprintln!("kairos: not pruning: some tasks or limits were not applied");
    }
    if out == Output::Json {
        print_json(&json!({"dry_run": args.dry_run, "limits": limit_report, "tasks": report}));
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `kairos limit apply`: the limits of the files, in file order; task definitions are skipped.
pub async fn run_limits(client: &Client, out: Output, args: LimitApplyArgs) -> Result<(), Error> {
    let Loaded { limits, tasks } = load(&args.paths)?;
    if limits.is_empty() {
        return Err(Error::Usage(
            "no limits (maps with `kind: limit`) found in the given files".into(),
        ));
    }
    if !tasks.is_empty() {
        eprintln!(
            "kairos: {} task definition(s) skipped; `kairos task apply` applies tasks and limits",
            tasks.len()
        );
    }
    let mut report = Vec::new();
    let mut failed = None;
    for l in &limits {
        match apply_limit(client, l, args.dry_run).await {
            Ok((action, changes)) => {
                if out == Output::Table {
                    print_limit_outcome(&l.name, action, &changes, args.dry_run);
                }
                report.push(limit_outcome_json(&l.name, action, &changes));
            }
            Err(e) => limit_failed(l, e, &mut report, &mut failed),
        }
    }
    if out == Output::Json {
        print_json(&json!({"dry_run": args.dry_run, "limits": report}));
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::Api { status, .. } if *status == StatusCode::CONFLICT)
}

fn limit_failed(l: &LimitFile, e: Error, report: &mut Vec<Value>, failed: &mut Option<Error>) {
    eprintln!("kairos: limit {} ({}): {e}", l.name, l.source.display());
    report.push(json!({"name": l.name, "action": "failed", "error": e.to_string()}));
    failed.get_or_insert(e);
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

async fn apply_limit(
    client: &Client,
    l: &LimitFile,
    dry_run: bool,
) -> Result<(Action, Vec<Change>), Error> {
    if dry_run {
        refuse_limit_as_the_server_would(l)?;
    }
    let path = limit_path(&l.name);
    let registered = match client.get(&path, &[]).await {
        Ok(v) => Some(v),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    let changes = registered
        .as_ref()
        .map(|r| diff_fields(&l.body, r, "name", &crate::domain::limit::READ_ONLY_FIELDS))
        .unwrap_or_default();
    if dry_run {
        return Ok(match registered {
            None => (Action::Created, Vec::new()),
            Some(_) if changes.is_empty() => (Action::Unchanged, Vec::new()),
            Some(_) => (Action::Configured, changes),
        });
    }
    let answer = client.send(Method::PUT, &path, &[], Some(&l.body)).await?;
    match registered {
        _ if answer.status == StatusCode::CREATED => Ok((Action::Created, Vec::new())),
        None => Ok((Action::Created, Vec::new())),
        Some(r) if r["version"] == answer.body["version"] => Ok((Action::Unchanged, Vec::new())),
        Some(_) => Ok((Action::Configured, changes)),
    }
}

fn refuse_limit_as_the_server_would(l: &LimitFile) -> Result<(), Error> {
    let mut errors = match crate::domain::limit::parse_limit(&l.body) {
        Ok(_) => Vec::new(),
        Err(errors) => errors,
    };
    if let Err(m) = crate::domain::task::TaskId::parse(&l.name) {
        errors.insert(
            0,
            crate::domain::task::FieldError::new("name", m.replace("task id", "limit name")),
        );
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(refused_locally(
        &errors,
        "the limit would be refused (checked locally by the dry run)",
    ))
}

fn refused_locally(errors: &[crate::domain::task::FieldError], detail: &str) -> Error {
    let errors: Vec<Value> = errors
        .iter()
        .map(|e| json!({"field": e.field, "message": e.message}))
        .collect();
    Error::Api {
        status: reqwest::StatusCode::UNPROCESSABLE_ENTITY,
        problem: Some(json!({
            "title": "Invalid request values",
            "status": 422,
            "detail": detail,
            "errors": errors,
        })),
        text: String::new(),
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
    Err(refused_locally(
        &errors,
        "the task would be refused (checked locally by the dry run)",
    ))
}

fn print_outcome(id: &str, action: Action, changes: &[Change], dry_run: bool) {
    let suffix = if dry_run { " (dry run)" } else { "" };
    println!("task {id} {}{suffix}", action.word());
    for c in changes {
        println!("  {}: {} -> {}", c.path, c.old, c.new);
    }
}

fn print_limit_outcome(name: &str, action: Action, changes: &[Change], dry_run: bool) {
    let suffix = if dry_run { " (dry run)" } else { "" };
    println!("limit {name} {}{suffix}", action.word());
    for c in changes {
        println!("  {}: {} -> {}", c.path, c.old, c.new);
    }
}

fn changes_json(changes: &[Change]) -> Vec<Value> {
    changes
        .iter()
        .map(|c| json!({"path": c.path, "old": c.old, "new": c.new}))
        .collect()
}

fn outcome_json(id: &str, action: Action, changes: &[Change]) -> Value {
    json!({"id": id, "action": action.word(), "changes": changes_json(changes)})
}

fn limit_outcome_json(name: &str, action: Action, changes: &[Change]) -> Value {
    json!({"name": name, "action": action.word(), "changes": changes_json(changes)})
}

/// The fields `file` sets that differ from `registered`, depth first, keys sorted.
/// Fields the file leaves out (or sets to `null`) get server defaults and are not compared, nor
/// are write-only secrets, which the API never shows, nor read-only fields (a file saved from
/// `task get -o json` carries them; the server ignores them).
pub fn diff(file: &Value, registered: &Value) -> Vec<Change> {
    diff_fields(file, registered, "id", &READ_ONLY_FIELDS)
}

/// [`diff`] of a resource named by `identity` whose views carry `read_only` fields.
fn diff_fields(
    file: &Value,
    registered: &Value,
    identity: &str,
    read_only: &[&str],
) -> Vec<Change> {
    let mut out = Vec::new();
    if let Value::Object(fields) = file {
        for (k, v) in fields {
            if k == identity || read_only.contains(&k.as_str()) {
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

/// Every task and limit of the given files and directories, in order; a task id or a limit
/// name defined twice is refused before anything is sent.
pub fn load(paths: &[PathBuf]) -> Result<Loaded, Error> {
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
    let mut loaded = Loaded::default();
    for f in &files {
        read_file(f, &mut loaded)?;
    }
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    for t in &loaded.tasks {
        if let Some(first) = seen.insert(&t.id, &t.source) {
            return Err(Error::Usage(format!(
                "task {} is defined twice: in {} and in {}",
                t.id,
                first.display(),
                t.source.display()
            )));
        }
    }
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    for l in &loaded.limits {
        if let Some(first) = seen.insert(&l.name, &l.source) {
            return Err(Error::Usage(format!(
                "limit {} is defined twice: in {} and in {}",
                l.name,
                first.display(),
                l.source.display()
            )));
        }
    }
    Ok(loaded)
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

fn read_file(path: &Path, loaded: &mut Loaded) -> Result<(), Error> {
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
    for doc in docs {
        let list = match doc {
            Value::Null => Vec::new(),
            Value::Array(items) => items,
            other => vec![other],
        };
        for (i, mut body) in list.into_iter().enumerate() {
            let kind = match body.as_object_mut().and_then(|m| m.remove("kind")) {
                None => "task".to_owned(),
                Some(Value::String(k)) => k,
                Some(other) => {
                    return Err(Error::Usage(format!(
                        "{at}: item #{}: `kind` must be \"task\" or \"limit\", not {other}",
                        i + 1
                    )));
                }
            };
            match kind.as_str() {
                "task" => {}
                "limit" => {
                    let name = match body.get("name").and_then(Value::as_str) {
                        Some(n) if !n.is_empty() => n.to_owned(),
                        _ => {
                            return Err(Error::Usage(format!(
                                "{at}: limit #{} has no string `name`",
                                i + 1
                            )));
                        }
                    };
                    loaded.limits.push(LimitFile {
                        name,
                        body,
                        source: path.to_owned(),
                    });
                    continue;
                }
                other => {
                    return Err(Error::Usage(format!(
                        "{at}: item #{}: unknown kind {other:?} (known: task, limit)",
                        i + 1
                    )));
                }
            }
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
            loaded.tasks.push(TaskFile {
                id,
                body,
                source: path.to_owned(),
            });
        }
    }
    Ok(())
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
