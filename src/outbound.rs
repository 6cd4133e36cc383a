//! Outbound HTTP: the one client kairos uses to push webhooks and deliver notifications, and
//! the rules every outbound request follows: http/https only, an optional host allow-list,
//! destination addresses checked (link-local, unspecified, multicast and broadcast always
//! refused; loopback and private ranges too with `outbound_deny_private`), no redirects
//! followed, no proxy, a connect timeout, a per-request timeout, a bounded response body, and
//! an HMAC signature (`Kairos-Signature: t=<unix>,v1=<hex hmac-sha256(secret, "<t>.<body>")>`).
//!
//! Names are resolved by `CheckedResolver`, which checks every address a name resolves to and
//! hands only checked addresses to the connector: the connection goes to the address that was
//! checked, so a DNS answer that changes between check and connect (rebinding) cannot slip
//! through. URLs holding a literal address are checked before the request is made (the
//! connector does not resolve those). There is no fallback client: if the configured one cannot
//! be built, nothing is sent.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Once};
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use sha2::Sha256;

/// Largest response body read from a webhook or notification receiver: an answer that carries
/// a `result` of the largest size kept.
pub const MAX_RESPONSE_BYTES: usize = crate::domain::task::MAX_RESULT_BYTES;

/// The reason of a request that got no answer within its timeout.
pub const NO_ANSWER: &str = "no answer within the timeout";

/// Longest wait for a receiver's TCP (and TLS) connection to be established.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

static CRYPTO: Once = Once::new();

/// Install the TLS crypto provider (ring) once per process, before any client is built.
pub fn install_crypto_provider() {
    CRYPTO.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Why a destination address is refused, or `None` when it may be reached. Link-local,
/// unspecified (all of 0.0.0.0/8), multicast and broadcast addresses are always refused;
/// with `deny_private` also loopback, private (10/8, 172.16/12, 192.168/16), shared
/// (100.64/10) and unique-local (fc00::/7) ones. IPv6 forms that carry an IPv4 address
/// (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`) are judged by that address.
pub fn refusal(ip: IpAddr, deny_private: bool) -> Option<&'static str> {
    match embedded_v4(ip) {
        IpAddr::V4(a) => {
            let [first, second, ..] = a.octets();
            if first == 0 {
                Some("unspecified")
            } else if a.is_link_local() {
                Some("link-local")
            } else if a.is_multicast() {
                Some("multicast")
            } else if a.is_broadcast() {
                Some("broadcast")
            } else if !deny_private {
                None
            } else if a.is_loopback() {
                Some("loopback")
            } else if a.is_private() {
                Some("private")
            } else if first == 100 && (64..128).contains(&second) {
                Some("private (shared address space)")
            } else {
                None
            }
        }
        IpAddr::V6(a) => {
            let head = a.segments()[0];
            if a.is_unspecified() {
                Some("unspecified")
            } else if head & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if a.is_multicast() {
                Some("multicast")
            } else if !deny_private {
                None
            } else if a.is_loopback() {
                Some("loopback")
            } else if head & 0xfe00 == 0xfc00 {
                Some("private (unique local)")
            } else {
                None
            }
        }
    }
}

/// The IPv4 address an IPv6 address stands for (IPv4-mapped `::ffff:a.b.c.d`, the deprecated
/// IPv4-compatible `::a.b.c.d`, NAT64 well-known prefix), else the address itself. `::` and
/// `::1` stay IPv6 (unspecified and loopback).
fn embedded_v4(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let compatible = s[..6] == [0; 6] && !v6.is_unspecified() && !v6.is_loopback();
    if compatible || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., a, b, c, d] = v6.octets();
        return IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    }
    ip
}

fn refused_message(ip: IpAddr, why: &str) -> String {
    format!("destination {ip} refused: {why}")
}

/// Where outbound requests may go.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Hosts URLs may name (`outbound_allowed_hosts`); empty allows any. A listed host's
    /// addresses are still checked.
    pub allow_list: AllowList,
    /// Refuse loopback and private destinations as well (`outbound_deny_private`).
    pub deny_private: bool,
    /// Fixed addresses for host names, used instead of the system resolver for those names
    /// (like curl's `--resolve`); they are checked like resolved ones.
    pub pinned: HashMap<String, Vec<IpAddr>>,
}

impl Policy {
    /// Why `url` may not be sent to, judged without resolving anything: the allow-list and, for
    /// a URL holding a literal address, that address. `None` when it may be tried.
    pub fn refuse_url(&self, url: &str) -> Option<String> {
        if !self.allow_list.allows(url) {
            return Some("host not in outbound_allowed_hosts".to_owned());
        }
        let ip = literal_address(url)?;
        refusal(ip, self.deny_private).map(|why| refused_message(ip, why))
    }
}

/// The address a URL's host spells literally, in any form the URL standard accepts
/// (`169.254.169.254`, `[::ffff:a9fe:a9fe]`, `2852039166`, `0xa9.0xfe.0xa9.0xfe`).
pub fn literal_address(url: &str) -> Option<IpAddr> {
    let parsed = reqwest::Url::parse(url).ok()?;
    // The serialized host is normalised: numeric IPv4 forms become dotted quads, IPv6 is
    // bracketed; a domain never parses as an address.
    let host = parsed.host_str()?;
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

/// A refused destination, as the resolver reports it to the connector.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The resolver of the outbound client: pinned addresses or the system resolver, then every
/// address checked. A name with any refused address is refused as a whole, so which of its
/// addresses the connector would try first does not matter.
#[derive(Debug, Clone)]
pub struct CheckedResolver {
    deny_private: bool,
    pinned: Arc<HashMap<String, Vec<IpAddr>>>,
}

impl CheckedResolver {
    pub fn new(policy: &Policy) -> Self {
        Self {
            deny_private: policy.deny_private,
            pinned: Arc::new(
                policy
                    .pinned
                    .iter()
                    .map(|(k, v)| (k.trim_end_matches('.').to_ascii_lowercase(), v.clone()))
                    .collect(),
            ),
        }
    }

    /// The checked addresses of `host` (port 0), or why it is refused.
    pub async fn lookup(&self, host: &str) -> Result<Vec<SocketAddr>, String> {
        let key = host.trim_end_matches('.').to_ascii_lowercase();
        let addrs: Vec<SocketAddr> = match self.pinned.get(&key) {
            Some(ips) => ips.iter().map(|ip| SocketAddr::new(*ip, 0)).collect(),
            None => tokio::net::lookup_host((host, 0))
                .await
                .map_err(|e| format!("cannot resolve {host}: {e}"))?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(format!("cannot resolve {host}: no addresses"));
        }
        for a in &addrs {
            if let Some(why) = refusal(a.ip(), self.deny_private) {
                return Err(format!("{} ({host})", refused_message(a.ip(), why)));
            }
        }
        Ok(addrs)
    }
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let me = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match me.lookup(&host).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                Err(reason) => Err(Box::new(Refused(reason)) as Box<_>),
            }
        })
    }
}

/// The outbound client failed to build; kairos sends nothing rather than fall back to a
/// client without these rules.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the outbound HTTP client: {0}")]
pub struct BuildError(String);

/// The outbound client with its policy; cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    policy: Arc<Policy>,
}

impl Client {
    /// A client following `policy`: checked resolver, no redirects, no proxy, a connect
    /// timeout; per-request timeouts are set by callers.
    pub fn new(policy: Policy) -> Result<Client, BuildError> {
        install_crypto_provider();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .dns_resolver(CheckedResolver::new(&policy))
            .user_agent(concat!("kairos/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| BuildError(crate::telemetry::error_chain(&e)))?;
        Ok(Client {
            http,
            policy: Arc::new(policy),
        })
    }

    /// POST `body` as JSON to `url`, signed when `secret` is given, with `headers`, within
    /// `timeout`. Errors are the reason as text (refused destination, connection refused,
    /// timeout, ...).
    pub async fn post(
        &self,
        url: &str,
        body: &[u8],
        secret: Option<&str>,
        headers: &[(&str, String)],
        timeout: Duration,
    ) -> Result<Answer, String> {
        if let Some(reason) = self.policy.refuse_url(url) {
            return Err(reason);
        }
        let mut req = self
            .http
            .post(url)
            .timeout(timeout)
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(secret) = secret {
            // The one time kairos takes from its own clock rather than the database's: the
            // receiver checks this timestamp against its own clock (to refuse replays), at the
            // moment the request leaves, so it is the sending host's wall clock at send time
            // that it should see, not the database's time of the transaction that queued it
            // (which may be minutes old after retries).
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
                    let room = MAX_RESPONSE_BYTES - buf.len();
                    if chunk.len() > room {
                        // Its head is kept (a failure quotes it); the rest is never read.
                        buf.extend_from_slice(&chunk[..room]);
                        return Ok(Answer {
                            status,
                            body: buf,
                            truncated: true,
                        });
                    }
                    buf.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return Err(describe(e)),
            }
        }
        Ok(Answer {
            status,
            body: buf,
            truncated: false,
        })
    }
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
    /// The body, or its first [`MAX_RESPONSE_BYTES`] when it was longer (`truncated`).
    pub body: Vec<u8>,
    /// The body was longer than [`MAX_RESPONSE_BYTES`]; the rest was not read.
    pub truncated: bool,
}

/// The reason a request failed; a refused destination is named as such.
fn describe(e: reqwest::Error) -> String {
    // The URL's path and query may hold secrets, and this text is stored where non-admins read
    // it (`error`, event reasons): the host is all it may name.
    let e = e.without_url();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(c) = cur {
        if let Some(r) = c.downcast_ref::<Refused>() {
            return r.0.clone();
        }
        cur = c.source();
    }
    if e.is_connect() {
        format!("connection failed: {}", crate::telemetry::error_chain(&e))
    } else if e.is_timeout() {
        NO_ANSWER.to_owned()
    } else {
        crate::telemetry::error_chain(&e)
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

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn link_local_unspecified_multicast_and_broadcast_are_always_refused() {
        for (addr, why) in [
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("::", "unspecified"),
            ("ff02::1", "multicast"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:0.0.0.0", "unspecified"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("::169.254.169.254", "link-local"),
        ] {
            assert_eq!(refusal(ip(addr), false), Some(why), "{addr}");
            assert_eq!(refusal(ip(addr), true), Some(why), "{addr}");
        }
    }

    #[test]
    fn loopback_and_private_ranges_are_refused_only_when_asked() {
        for addr in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
        ] {
            assert_eq!(refusal(ip(addr), false), None, "{addr}");
            assert!(refusal(ip(addr), true).is_some(), "{addr}");
        }
        for addr in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "2001:db8::1",
            "fec0::1",
        ] {
            assert_eq!(refusal(ip(addr), true), None, "{addr}");
        }
    }

    #[test]
    fn literal_addresses_are_found_in_every_spelling_of_a_url() {
        for url in [
            "http://169.254.169.254/latest/meta-data",
            "http://2852039166/",
            "http://0xa9.0xfe.0xa9.0xfe/",
            "http://[::ffff:a9fe:a9fe]:80/",
            "https://[fe80::1]/",
        ] {
            let refused = Policy::default().refuse_url(url);
            assert!(
                refused.as_deref().is_some_and(|r| r.contains("link-local")),
                "{url}: {refused:?}"
            );
        }
        assert_eq!(
            Policy::default()
                .refuse_url("http://169.254.169.254/")
                .as_deref(),
            Some("destination 169.254.169.254 refused: link-local")
        );
        assert_eq!(literal_address("https://metadata.example/"), None);
        assert_eq!(Policy::default().refuse_url("http://127.0.0.1:9/"), None);
        let strict = Policy {
            deny_private: true,
            ..Policy::default()
        };
        assert_eq!(
            strict.refuse_url("http://127.0.0.1:9/").as_deref(),
            Some("destination 127.0.0.1 refused: loopback")
        );
    }

    #[tokio::test]
    async fn a_failed_send_names_the_host_but_never_the_path_or_query() {
        // A port nothing listens on: the connection is refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let client = Client::new(Policy::default()).expect("client");
        let url = format!("http://127.0.0.1:{port}/hooks/s3cr3t-path?key=s3cr3t-query");
        let err = client
            .post(&url, b"{}", None, &[], std::time::Duration::from_secs(5))
            .await
            .expect_err("nothing listens");
        assert!(err.starts_with("connection failed"), "{err}");
        assert!(!err.contains("s3cr3t"), "{err}");
    }

    #[tokio::test]
    async fn the_resolver_checks_every_address_of_a_name() {
        let mut policy = Policy::default();
        policy.pinned.insert(
            "Metadata.Example".to_owned(),
            vec![ip("203.0.113.7"), ip("169.254.169.254")],
        );
        policy
            .pinned
            .insert("ok.example".to_owned(), vec![ip("203.0.113.7")]);
        let r = CheckedResolver::new(&policy);
        let err = r.lookup("metadata.example.").await.expect_err("refused");
        assert_eq!(
            err,
            "destination 169.254.169.254 refused: link-local (metadata.example.)"
        );
        assert_eq!(
            r.lookup("ok.example").await,
            Ok(vec![SocketAddr::new(ip("203.0.113.7"), 0)])
        );
        // Through the system resolver (/etc/hosts): localhost is loopback.
        assert!(r.lookup("localhost").await.is_ok());
        let strict = CheckedResolver::new(&Policy {
            deny_private: true,
            ..Policy::default()
        });
        let err = strict.lookup("localhost").await.expect_err("loopback");
        assert!(err.contains("refused: loopback"), "{err}");
    }
}
