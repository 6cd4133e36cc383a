//! The types of the settings that are not plain numbers or strings: the log format and the two
//! values `Debug` must not show whole (a secret, and the
//! database URL with its passwords hidden by [`redact_database_url`]).

use std::str::FromStr;

use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err("must be text or json".to_owned()),
        }
    }
}

/// A secret string: never shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

/// The database URL. `Debug` shows it with its password hidden ([`redact_database_url`]);
/// everywhere a `&str` is wanted it is the URL itself.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(pub String);

impl DatabaseUrl {
    /// The URL with its password hidden, for messages and logs.
    pub fn redacted(&self) -> String {
        redact_database_url(&self.0)
    }
}

impl std::ops::Deref for DatabaseUrl {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.redacted(), f)
    }
}

impl FromStr for DatabaseUrl {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(DatabaseUrl(s.to_owned()))
    }
}

impl PartialEq<&str> for DatabaseUrl {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// A database URL with its passwords hidden, for messages and logs: the password of the user
/// info and the value of every query parameter whose name holds `password` (`password`,
/// `sslpassword`) become `***`; the user, host, port, database and other parameters stay, so a
/// message still says which server it means. A string the URL parser refuses (one naming
/// several hosts, `h1:5432,h2:5432`) has everything between the first `:` after `://` and the
/// last `@` hidden, and every `password…=` value.
///
/// The one redactor of database URLs: the daemon's messages, `Config`'s `Debug` and
/// `kairos-bench` use it. (Webhook and notification URLs shown to non-admins are cut to their
/// origin by `domain::access::redact_url`, a different rule: their path and query are secret.)
pub fn redact_database_url(url: &str) -> String {
    const HIDDEN: &str = "***";
    fn hides(key: &str) -> bool {
        url::form_urlencoded::parse(key.as_bytes())
            .next()
            .is_some_and(|(key, _)| key.to_ascii_lowercase().contains("password"))
    }
    fn redact_query(query: &str) -> String {
        query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if hides(key) => format!("{key}={HIDDEN}"),
                _ => pair.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("&")
    }
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() && parsed.set_password(Some(HIDDEN)).is_err() {
                return HIDDEN.to_owned();
            }
            if let Some(query) = parsed.query().map(redact_query) {
                parsed.set_query(Some(&query));
            }
            parsed.to_string()
        }
        Err(_) => {
            let (mut head, query) = match url.split_once('?') {
                Some((h, q)) => (h.to_owned(), Some(redact_query(q))),
                None => (url.to_owned(), None),
            };
            // The user stays: the password is what follows its `:` (a URL naming several
            // hosts, `h1:5432,h2:5432`, is not one the parser takes).
            if let (Some(s), Some(at)) = (head.find("://"), head.rfind('@'))
                && at > s
                && let Some(colon) = head[s + 3..at].find(':')
            {
                head.replace_range(s + 3 + colon + 1..at, HIDDEN);
            }
            match query {
                Some(q) => format!("{head}?{q}"),
                None => head,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_with as load;

    #[test]
    fn passwords_are_redacted_from_database_urls() {
        let cases = [
            (
                "postgres://kairos:s3cret@db:5432/kairos",
                "postgres://kairos:***@db:5432/kairos",
            ),
            ("postgres://db/kairos", "postgres://db/kairos"),
            ("postgres://kairos@db/kairos", "postgres://kairos@db/kairos"),
            (
                "postgres://kairos@db/kairos?sslmode=require&password=s3cret",
                "postgres://kairos@db/kairos?sslmode=require&password=***",
            ),
            (
                "postgresql://u:p%40ss@[::1]:5433/db?PASSWORD=s3cret&sslpassword=s3cret&application_name=k",
                "postgresql://u:***@[::1]:5433/db?PASSWORD=***&sslpassword=***&application_name=k",
            ),
            // Not a URL the parser takes (a bad port): the password and password values still go.
            (
                "postgres://kairos:s3cret@db:99999/kairos?password=s3cret",
                "postgres://kairos:***@db:99999/kairos?password=***",
            ),
            // Several hosts (libpq style): the parser takes none of them.
            (
                "postgres://kairos:s3:cr@t@h1:5432,h2:5433/kairos?target_session_attrs=read-write",
                "postgres://kairos:***@h1:5432,h2:5433/kairos?target_session_attrs=read-write",
            ),
            (
                "postgres://kairos@h1:1,h2/kairos",
                "postgres://kairos@h1:1,h2/kairos",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_database_url(url), shown, "{url}");
        }
    }

    #[test]
    fn debug_does_not_show_the_database_password() {
        let cfg = load(&[
            ("KAIROS_CONFIG", "config/kairos.toml"),
            (
                "DATABASE_URL",
                "postgres://kairos:s3cret-user@db:5432/kairos?sslmode=require&password=s3cret-query",
            ),
        ])
        .expect("valid");
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("postgres://kairos:***@db:5432/kairos"),
            "{shown}"
        );
    }
}
