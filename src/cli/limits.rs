//! `kairos limit …`: list, show, delete, hold and release shared limits (`apply` lives in its
//! own module), and the limit tables with their per-key usage.

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::apply;
use super::client::{Client, Error, segment};
use super::output::{Output, items, items_of, print_json};
use super::table::{print_table, text};

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

pub(super) fn limit_path(name: &str) -> String {
    format!("/v1/limits/{}", segment(name))
}

pub(super) async fn run(client: &Client, out: Output, cmd: LimitCommand) -> Result<(), Error> {
    match cmd {
        LimitCommand::List => {
            let page = client
                .get_all("/v1/limits", &[("limit", "500".to_owned())])
                .await?;
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
