//! `dispatch`: how instances reach the agent (claimed by polling, or pushed to a signed
//! webhook) and the reading of the `dispatch` object.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fields::{Errors, check_url};
use crate::domain::text::at_most_chars;

/// Default `dispatch.timeout_seconds`: how long a webhook push waits for the receiver's answer.
pub const DEFAULT_DISPATCH_TIMEOUT_SECONDS: i64 = 30;
/// Largest `dispatch.timeout_seconds`.
pub const MAX_DISPATCH_TIMEOUT_SECONDS: i64 = 900;

/// How instances reach the agent: agents claim them (`poll`), or kairos pushes each one to
/// `url` signed with `secret` and waits up to `timeout_seconds` for the answer (`webhook`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Dispatch {
    Poll,
    Webhook {
        url: String,
        /// Write-only: never returned by the API.
        secret: String,
        /// The wait for the receiver's answer; separate from `execution.timeout_seconds`,
        /// which bounds the whole run (a `202` answer holds a lease of that).
        #[serde(default = "default_dispatch_timeout")]
        timeout_seconds: i64,
    },
}

fn default_dispatch_timeout() -> i64 {
    DEFAULT_DISPATCH_TIMEOUT_SECONDS
}

impl Dispatch {
    pub fn mode(&self) -> &'static str {
        match self {
            Dispatch::Poll => "poll",
            Dispatch::Webhook { .. } => "webhook",
        }
    }
}

pub(super) fn parse_dispatch(value: Option<&Value>, errs: &mut Errors) -> Dispatch {
    let Some(d) = errs.object(
        value,
        "dispatch",
        &["mode", "url", "secret", "timeout_seconds"],
    ) else {
        return Dispatch::Poll;
    };
    match d.get("mode") {
        None | Some(Value::Null) => Dispatch::Poll,
        Some(Value::String(s)) if s == "poll" => {
            for key in ["url", "secret", "timeout_seconds"] {
                if d.contains_key(key) {
                    errs.push(format!("dispatch.{key}"), "only allowed with mode webhook");
                }
            }
            Dispatch::Poll
        }
        Some(Value::String(s)) if s == "webhook" => {
            let url = match d.get("url") {
                Some(Value::String(u)) => match check_url(u) {
                    Ok(()) => Some(u.clone()),
                    Err(m) => {
                        errs.push("dispatch.url", m);
                        None
                    }
                },
                None | Some(Value::Null) => {
                    errs.push("dispatch.url", "is required for webhook dispatch");
                    None
                }
                Some(_) => {
                    errs.push("dispatch.url", "must be a URL string");
                    None
                }
            };
            let secret = match d.get("secret") {
                Some(Value::String(s)) if !s.is_empty() && at_most_chars(s, 1024) => {
                    Some(s.clone())
                }
                None | Some(Value::Null) => {
                    errs.push(
                        "dispatch.secret",
                        "is required for webhook dispatch: pushes are signed with it",
                    );
                    None
                }
                Some(_) => {
                    errs.push("dispatch.secret", "must be a string of 1-1024 characters");
                    None
                }
            };
            let timeout_seconds = errs.int(
                d,
                "dispatch",
                "timeout_seconds",
                DEFAULT_DISPATCH_TIMEOUT_SECONDS,
                1,
                MAX_DISPATCH_TIMEOUT_SECONDS,
            );
            match (url, secret) {
                (Some(url), Some(secret)) => Dispatch::Webhook {
                    url,
                    secret,
                    timeout_seconds,
                },
                _ => Dispatch::Poll,
            }
        }
        Some(_) => {
            errs.push("dispatch.mode", "must be one of poll, webhook");
            Dispatch::Poll
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::{error_fields as fields, parse_submission};
    use serde_json::json;

    #[test]
    fn webhook_dispatch_needs_a_url_and_a_secret_that_is_never_shown() {
        assert_eq!(
            fields(
                json!({"agent_id": "a", "trigger": {"type": "manual"}, "dispatch": {"mode": "webhook"}})
            ),
            vec!["dispatch.url", "dispatch.secret"]
        );
        let s = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "manual"},
                    "dispatch": {"mode": "webhook", "url": "https://agent.example/run", "secret": "hush-hush"}}),
        )
        .expect("valid");
        assert_eq!(s.spec.dispatch.mode(), "webhook");
        let Dispatch::Webhook {
            timeout_seconds, ..
        } = &s.spec.dispatch
        else {
            panic!("webhook dispatch")
        };
        assert_eq!(*timeout_seconds, DEFAULT_DISPATCH_TIMEOUT_SECONDS);
        let public = s.spec.to_public_json().to_string();
        assert!(!public.contains("hush-hush"), "{public}");
        assert!(public.contains("https://agent.example/run"));
    }

    #[test]
    fn dispatch_timeout_is_bounded_and_only_for_webhooks() {
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "manual"},
                          "dispatch": {"mode": "webhook", "url": "https://a.example/", "secret": "s",
                                       "timeout_seconds": 901}})),
            vec!["dispatch.timeout_seconds"]
        );
        assert_eq!(
            fields(json!({"agent_id": "a", "trigger": {"type": "manual"},
                          "dispatch": {"mode": "poll", "timeout_seconds": 5}})),
            vec!["dispatch.timeout_seconds"]
        );
        let s = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "manual"},
                    "dispatch": {"mode": "webhook", "url": "https://a.example/", "secret": "s",
                                 "timeout_seconds": 900}}),
        )
        .expect("valid");
        assert_eq!(s.spec.to_public_json()["dispatch"]["timeout_seconds"], 900);
        // A spec stored before the field existed reads with the default.
        let old: Dispatch = serde_json::from_value(
            json!({"mode": "webhook", "url": "https://a.example/", "secret": "s"}),
        )
        .expect("old spec");
        assert_eq!(
            old,
            Dispatch::Webhook {
                url: "https://a.example/".to_owned(),
                secret: "s".to_owned(),
                timeout_seconds: DEFAULT_DISPATCH_TIMEOUT_SECONDS,
            }
        );
    }
}
