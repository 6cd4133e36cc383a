//! `notify`: the URLs told of each finished run (on success, on failure), their signing secret,
//! and the reading of the `notify` object.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fields::{Errors, check_url};
use crate::domain::text::at_most_chars;

/// Most URLs in one `notify` list.
pub const MAX_NOTIFY_URLS: usize = 10;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Notify {
    pub on_success: Vec<String>,
    pub on_failure: Vec<String>,
    /// Write-only: never returned by the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

pub(super) fn parse_notify(value: Option<&Value>, errs: &mut Errors) -> Notify {
    let Some(n) = errs.object(value, "notify", &["on_success", "on_failure", "secret"]) else {
        return Notify::default();
    };
    let mut list = |key: &str| -> Vec<String> {
        let field = format!("notify.{key}");
        match n.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                if items.len() > MAX_NOTIFY_URLS {
                    errs.push(field.clone(), format!("at most {MAX_NOTIFY_URLS} URLs"));
                }
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(url) => match check_url(url) {
                            Ok(()) => out.push(url.to_owned()),
                            Err(m) => errs.push(format!("{field}[{i}]"), m),
                        },
                        None => errs.push(format!("{field}[{i}]"), "must be a URL string"),
                    }
                }
                out
            }
            Some(_) => {
                errs.push(field, "must be an array of URLs");
                Vec::new()
            }
        }
    };
    let on_success = list("on_success");
    let on_failure = list("on_failure");
    let secret = match n.get("secret") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && at_most_chars(s, 1024) => Some(s.clone()),
        Some(_) => {
            errs.push("notify.secret", "must be a string of 1-1024 characters");
            None
        }
    };
    Notify {
        on_success,
        on_failure,
        secret,
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::task::parse_submission;
    use serde_json::json;

    #[test]
    fn notify_secret_is_never_shown() {
        let s = parse_submission(
            "t1",
            &json!({"agent_id": "a", "trigger": {"type": "manual"}, "notify": {"secret": "shh"}}),
        )
        .expect("valid");
        assert_eq!(s.spec.notify.secret.as_deref(), Some("shh"));
        assert!(!s.spec.to_public_json().to_string().contains("shh"));
    }
}
