//! The JSON walker behind task validation: [`FieldError`], the collector that gathers every
//! problem with its dotted field path, its typed readers (integers in a range, enum names,
//! objects without unknown keys, timestamps), and the value checks other modules share (names,
//! outbound URLs, JSON integers, timestamps). It knows no task field by name.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::domain::text::at_most_chars;

/// Longest `agent_id`, `paused_reason` and similar free-text identifiers.
pub const MAX_NAME_LEN: usize = 128;

/// One validation failure: the dotted path of the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Agent ids, worker ids and similar: printable, no spaces, bounded.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':'))
}

/// Every problem the walk has met so far, in the order it met them.
#[derive(Default)]
pub(super) struct Errors(pub(super) Vec<FieldError>);

impl Errors {
    pub(super) fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(field, message));
    }

    pub(super) fn unknown_fields(
        &mut self,
        prefix: &str,
        obj: &Map<String, Value>,
        known: &[&str],
    ) {
        for key in obj.keys() {
            if !known.contains(&key.as_str()) {
                self.push(join(prefix, key), "unknown field");
            }
        }
    }

    /// An optional integer in `[min, max]`, `default` when absent.
    pub(super) fn int(
        &mut self,
        obj: &Map<String, Value>,
        prefix: &str,
        key: &str,
        default: i64,
        min: i64,
        max: i64,
    ) -> i64 {
        let field = join(prefix, key);
        match obj.get(key) {
            None | Some(Value::Null) => default,
            Some(Value::Number(n)) => match json_integer(n) {
                Some(v) if (min..=max).contains(&v) => v,
                _ => {
                    self.push(field, format!("must be an integer from {min} to {max}"));
                    default
                }
            },
            Some(_) => {
                self.push(field, format!("must be an integer from {min} to {max}"));
                default
            }
        }
    }

    pub(super) fn enum_value<T: Copy>(
        &mut self,
        obj: &Map<String, Value>,
        prefix: &str,
        key: &str,
        default: T,
        options: &[(&str, T)],
    ) -> T {
        let field = join(prefix, key);
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        match obj.get(key) {
            None | Some(Value::Null) => default,
            Some(Value::String(s)) => match options.iter().find(|(n, _)| n == s) {
                Some((_, v)) => *v,
                None => {
                    self.push(field, format!("must be one of {}", names.join(", ")));
                    default
                }
            },
            Some(_) => {
                self.push(field, format!("must be one of {}", names.join(", ")));
                default
            }
        }
    }

    pub(super) fn object<'a>(
        &mut self,
        value: Option<&'a Value>,
        field: &str,
        known: &[&str],
    ) -> Option<&'a Map<String, Value>> {
        match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => {
                self.unknown_fields(field, m, known);
                Some(m)
            }
            Some(_) => {
                self.push(field, "must be an object");
                None
            }
        }
    }

    pub(super) fn timestamp(
        &mut self,
        value: Option<&Value>,
        field: &str,
    ) -> Option<DateTime<Utc>> {
        match value {
            Some(Value::String(s)) => match parse_timestamp(s) {
                Some(t) => Some(t),
                None => {
                    self.push(
                        field,
                        "must be an RFC 3339 timestamp, e.g. 2026-11-29T08:30:00Z",
                    );
                    None
                }
            },
            None | Some(Value::Null) => None,
            Some(_) => {
                self.push(field, "must be an RFC 3339 timestamp string");
                None
            }
        }
    }
}

/// A JSON number as an integer, as JSON Schema counts integers: `10` and `10.0` are 10, `10.5`
/// and numbers outside `i64` are not integers.
pub fn json_integer(n: &serde_json::Number) -> Option<i64> {
    if let Some(v) = n.as_i64() {
        return Some(v);
    }
    let f = n.as_f64()?;
    // `i64::MAX as f64` rounds up to 2^63, which is already out of range.
    (f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
}

/// RFC 3339 with an offset, truncated to whole seconds (window keys have second resolution).
pub fn parse_timestamp(s: &str) -> Option<DateTime<Utc>> {
    let t = DateTime::parse_from_rfc3339(s).ok()?.with_timezone(&Utc);
    DateTime::<Utc>::from_timestamp(t.timestamp(), 0)
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Outbound URLs: http or https, a host, no credentials, bounded length.
pub fn check_url(url: &str) -> Result<(), String> {
    if !at_most_chars(url, 2048) {
        return Err("must be at most 2048 characters".to_owned());
    }
    let rest = if let Some(r) = url.strip_prefix("https://") {
        r
    } else if let Some(r) = url.strip_prefix("http://") {
        r
    } else {
        return Err("must be an http:// or https:// URL".to_owned());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err("must not carry credentials (user:password@)".to_owned());
    }
    if authority.is_empty()
        || authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("must name a host".to_owned());
    }
    // The outbound client's own parser: what it cannot send to is refused now, not at the
    // first push (an IPv6 zone id, a port out of range, a malformed host).
    let parsed =
        url::Url::parse(url).map_err(|e| format!("is not a URL kairos can send to: {e}"))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".to_owned());
    }
    if parsed.port() == Some(0) {
        return Err("port 0 cannot be connected to".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_the_outbound_client_cannot_send_to_are_refused_at_registration() {
        for ok in [
            "http://127.0.0.1:18129/hook",
            "https://hooks.example.com/a?b=c",
            "http://[::1]:8080/",
        ] {
            assert_eq!(super::check_url(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("http://[fe80::1%25eth0]/", "kairos can send to"),
            ("http://example.com:99999/", "kairos can send to"),
            ("http://example.com:0/", "port 0"),
            ("ftp://example.com/", "http:// or https://"),
            ("http://u:p@example.com/", "credentials"),
        ] {
            let err = super::check_url(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn integral_numbers_are_integers_as_json_schema_counts_them() {
        let n = |s: &str| serde_json::from_str::<serde_json::Number>(s).expect("number");
        assert_eq!(super::json_integer(&n("63")), Some(63));
        assert_eq!(super::json_integer(&n("63.0")), Some(63));
        assert_eq!(super::json_integer(&n("-2.0e1")), Some(-20));
        assert_eq!(super::json_integer(&n("63.5")), None);
        assert_eq!(super::json_integer(&n("1e300")), None);
    }
    #[test]
    fn timestamps_are_truncated_to_seconds() {
        let t = parse_timestamp("2026-11-29T08:30:00.750+08:00").expect("valid");
        assert_eq!(t.to_rfc3339(), "2026-11-29T00:30:00+00:00");
        assert!(parse_timestamp("2026-11-29 08:30").is_none());
    }
}
