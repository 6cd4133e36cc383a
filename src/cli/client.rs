//! The REST client behind the command line: one bearer token, JSON in and out, and the three
//! ways a command ends (refused by the API, unusable input, unreachable daemon). It knows the
//! API's paths and nothing about how answers are printed.

use std::fmt;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Why a command did not succeed; decides the exit code.
#[derive(Debug)]
pub enum Error {
    /// The API answered 4xx/5xx (exit 1); the problem+json body when there was one.
    Api {
        status: StatusCode,
        problem: Option<Value>,
        text: String,
    },
    /// Bad input on our side: files, flags, JSON arguments (exit 2).
    Usage(String),
    /// The daemon could not be reached or did not answer HTTP/JSON (exit 2).
    Connection(String),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Api { .. } => 1,
            Error::Usage(_) | Error::Connection(_) => 2,
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Api { status, .. } if *status == StatusCode::NOT_FOUND)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) => write!(f, "{m}"),
            Error::Connection(m) => write!(f, "{m}"),
            Error::Api {
                status,
                problem,
                text,
            } => {
                let detail = problem
                    .as_ref()
                    .and_then(|p| p.get("detail").and_then(Value::as_str))
                    .map(str::to_owned)
                    .unwrap_or_else(|| text.trim().to_owned());
                write!(f, "{status}: {detail}")?;
                let errors = problem
                    .as_ref()
                    .and_then(|p| p.get("errors"))
                    .and_then(Value::as_array);
                for e in errors.into_iter().flatten() {
                    let field = e.get("field").and_then(Value::as_str).unwrap_or("");
                    let message = e.get("message").and_then(Value::as_str).unwrap_or("");
                    let field = if field.is_empty() { "(body)" } else { field };
                    write!(f, "\n  {field}: {message}")?;
                }
                Ok(())
            }
        }
    }
}

/// An answer the API accepted: its status and JSON body (`Null` for an empty body).
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(url: &str, token: Option<String>) -> Result<Client, Error> {
        let base = url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Usage(format!(
                "--url must start with http:// or https://, got {url:?}"
            )));
        }
        crate::outbound::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Error::Connection(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            base,
            token: token.filter(|t| !t.is_empty()),
            http,
        })
    }

    /// Sends one request; 2xx gives the body, anything else `Error::Api`.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Answer, Error> {
        let mut url = reqwest::Url::parse(&format!("{}{}", self.base, path))
            .map_err(|e| Error::Usage(format!("--url {}: {e}", self.base)))?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut req = self.http.request(method, url.clone());
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| Error::Connection(format!("cannot reach {}: {}", self.base, chain(&e))))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| {
            Error::Connection(format!("reading the answer of {url}: {}", chain(&e)))
        })?;
        let parsed = if text.trim().is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str::<Value>(&text)
        };
        if !status.is_success() {
            return Err(Error::Api {
                status,
                problem: parsed.ok().filter(Value::is_object),
                text,
            });
        }
        match parsed {
            Ok(body) => Ok(Answer { status, body }),
            Err(e) => Err(Error::Connection(format!(
                "{url} answered {status} with a body that is not JSON: {e}"
            ))),
        }
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Error> {
        Ok(self.send(Method::GET, path, query, None).await?.body)
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Answer, Error> {
        self.send(Method::POST, path, &[], Some(body)).await
    }

    /// Every page of a cursor-paged list (`items` + `next_cursor`), concatenated.
    pub async fn get_all(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Error> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut q = query.to_vec();
            if let Some(c) = &cursor {
                q.retain(|(k, _)| *k != "cursor");
                q.push(("cursor", c.clone()));
            }
            let page = self.get(path, &q).await?;
            if let Some(list) = page.get("items").and_then(Value::as_array) {
                items.extend(list.iter().cloned());
            }
            match page.get("next_cursor").and_then(Value::as_str) {
                Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
                _ => break,
            }
        }
        Ok(serde_json::json!({"items": items, "next_cursor": null}))
    }
}

/// A path segment with the characters that would change the path's meaning escaped.
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}
