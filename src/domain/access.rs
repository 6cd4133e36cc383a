//! Access control, pure: bearer tokens with roles, and what each role may do.
//!
//! Tokens come from configuration as `"<token>:<role>[:<agent_id>|<agent_id>…],…"`. Only a
//! SHA-256 digest of each token is kept in memory, and a presented token is compared against
//! every digest in constant time, so neither the comparison nor the position of a match leaks
//! through timing. Tokens never appear in `Debug` output or logs.

use std::fmt;

use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything.
    Admin,
    /// Claims and the lease-holder's instance writes (heartbeat, complete, fail), plus reads;
    /// optionally limited to some agent ids.
    Agent,
    /// GET only.
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Agent => "agent",
            Role::Viewer => "viewer",
        }
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub role: Role,
    /// For `agent` tokens limited to some agents; `None` means any agent.
    pub agents: Option<Vec<String>>,
    /// A name for logs: the role and, for agents, their ids. Never the token.
    pub label: String,
}

impl Principal {
    /// The principal of an unauthenticated deployment (no tokens configured, loopback only).
    pub fn open() -> Self {
        Principal {
            role: Role::Admin,
            agents: None,
            label: "open".to_owned(),
        }
    }

    /// May this principal claim or write instances of every agent? (Then a write needs no
    /// lookup of whose instances it names.)
    pub fn may_act_for_all(&self) -> bool {
        match self.role {
            Role::Admin => true,
            Role::Agent => self.agents.is_none(),
            Role::Viewer => false,
        }
    }

    /// May this principal claim or write instances of `agent_id`?
    pub fn may_act_for(&self, agent_id: &str) -> bool {
        match self.role {
            Role::Admin => true,
            Role::Agent => self
                .agents
                .as_ref()
                .is_none_or(|a| a.iter().any(|x| x == agent_id)),
            Role::Viewer => false,
        }
    }
}

impl Principal {
    /// The agents whose tasks and instances this principal may read: `None` is every agent
    /// (admin, viewer, and agent tokens not limited to some agents).
    pub fn readable_agents(&self) -> Option<&[String]> {
        match self.role {
            Role::Agent => self.agents.as_deref(),
            Role::Admin | Role::Viewer => None,
        }
    }

    /// May this principal read tasks and instances of `agent_id`?
    pub fn may_read(&self, agent_id: &str) -> bool {
        self.readable_agents()
            .is_none_or(|a| a.iter().any(|x| x == agent_id))
    }

    /// Only admins see the path and query of webhook and notification URLs, which often carry
    /// secrets.
    pub fn sees_url_paths(&self) -> bool {
        self.role == Role::Admin
    }
}

/// `scheme://host[:port]/***`: a URL without its user info, path and query, for principals who
/// may not see them. The host is the one the outbound client would connect to: the URL is
/// parsed by the same parser, which reads `\` as `/` in `http` URLs, so no spelling of a path
/// passes for part of the host. Not a URL at all: `***`.
pub fn redact_url(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else {
        return "***".to_owned();
    };
    match (parsed.host_str(), parsed.port()) {
        (Some(host), Some(port)) => format!("{}://{host}:{port}/***", parsed.scheme()),
        (Some(host), None) => format!("{}://{host}/***", parsed.scheme()),
        (None, _) => "***".to_owned(),
    }
}

/// What a request does, as far as access control is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Any GET.
    Read,
    /// `POST /v1/claims`, `POST /v1/completions`, and heartbeat/complete/fail of an instance.
    AgentWrite,
    /// Everything else: task writes, triggers, backfills, operator retry/cancel.
    AdminWrite,
}

/// Classify a request by method and path.
pub fn action_of(method: &str, path: &str) -> Action {
    if method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD") {
        return Action::Read;
    }
    if path == "/v1/claims" || path == "/v1/completions" {
        return Action::AgentWrite;
    }
    if let Some(rest) = path.strip_prefix("/v1/instances/")
        && let Some((_, verb)) = rest.split_once('/')
        && matches!(verb, "heartbeat" | "complete" | "fail")
    {
        return Action::AgentWrite;
    }
    Action::AdminWrite
}

/// May `role` perform `action`? (Agent scoping is checked where the agent id is known.)
pub fn allows(role: Role, action: Action) -> bool {
    matches!(
        (role, action),
        (Role::Admin, _)
            | (Role::Agent, Action::Read | Action::AgentWrite)
            | (Role::Viewer, Action::Read)
    )
}

/// Tokens shorter than this are accepted (the contract's own examples are), but the daemon
/// warns at start: a short token is easy to guess.
pub const RECOMMENDED_TOKEN_CHARS: usize = 16;

struct TokenEntry {
    /// Shorter than [`RECOMMENDED_TOKEN_CHARS`].
    short: bool,
    digest: [u8; 32],
    principal: Principal,
}

/// The configured tokens. Empty means kairos runs open (and only on loopback).
#[derive(Default)]
pub struct Tokens(Vec<TokenEntry>);

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tokens({} configured, redacted)", self.0.len())
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// HMAC-SHA256 of `session_id` keyed by a token's digest.
fn session_mac(token_digest: &[u8; 32], session_id: &[u8]) -> [u8; 32] {
    use hmac::{KeyInit, Mac};
    let Ok(mut mac) = hmac::Hmac::<Sha256>::new_from_slice(token_digest) else {
        return [0; 32];
    };
    mac.update(session_id);
    mac.finalize().into_bytes().into()
}

fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b.iter()) {
        diff |= x ^ y;
    }
    diff == 0
}

impl Tokens {
    /// Parse `"<token>:<role>[:<agent>|<agent>…],…"`. Errors never echo a token.
    pub fn parse(spec: &str) -> Result<Tokens, String> {
        let mut out = Vec::new();
        for (n, item) in spec.split(',').enumerate() {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let mut parts = item.splitn(3, ':');
            let token = parts.next().unwrap_or("");
            let role = parts.next().unwrap_or("");
            let agents = parts.next();
            if token.is_empty() {
                return Err(format!("entry {}: the token is empty", n + 1));
            }
            let role = match role {
                "admin" => Role::Admin,
                "agent" => Role::Agent,
                "viewer" => Role::Viewer,
                other => {
                    return Err(format!(
                        "entry {}: role {other:?} must be admin, agent or viewer",
                        n + 1
                    ));
                }
            };
            let agents = match agents {
                None => None,
                Some(_) if role != Role::Agent => {
                    return Err(format!(
                        "entry {}: only agent tokens can be limited to agent ids",
                        n + 1
                    ));
                }
                Some(list) => {
                    let ids: Vec<String> = list
                        .split('|')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect();
                    if ids.is_empty() {
                        return Err(format!("entry {}: empty agent id list", n + 1));
                    }
                    Some(ids)
                }
            };
            let label = match &agents {
                Some(a) => format!("agent[{}]", a.join("|")),
                None => role.as_str().to_owned(),
            };
            out.push(TokenEntry {
                short: token.chars().count() < RECOMMENDED_TOKEN_CHARS,
                digest: digest(token),
                principal: Principal {
                    role,
                    agents,
                    label,
                },
            });
        }
        Ok(Tokens(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The labels (role and agent limit, never the token) of tokens shorter than
    /// [`RECOMMENDED_TOKEN_CHARS`], in configuration order.
    pub fn short_ones(&self) -> Vec<&str> {
        self.0
            .iter()
            .filter(|e| e.short)
            .map(|e| e.principal.label.as_str())
            .collect()
    }

    /// A console session's proof of `token` (see [`Tokens::of_session`]): an HMAC-SHA256 of
    /// the session id keyed by the token's SHA-256, with the token's principal. `None` for a
    /// token that is not configured.
    pub fn session_proof(&self, token: &str, session_id: &[u8]) -> Option<(Principal, [u8; 32])> {
        let d = digest(token);
        let principal = self.first(|e| ct_eq(&e.digest, &d))?;
        Some((principal, session_mac(&d, session_id)))
    }

    /// The principal of a console session from its id and stored proof: the configured token
    /// whose proof it is, comparing against every entry. `None` once that token is no longer
    /// configured.
    pub fn of_session(&self, session_id: &[u8], proof: &[u8]) -> Option<Principal> {
        let proof: &[u8; 32] = proof.try_into().ok()?;
        self.first(|e| ct_eq(&session_mac(&e.digest, session_id), proof))
    }

    /// The principal of a presented token, comparing against every entry.
    pub fn authenticate(&self, presented: &str) -> Option<Principal> {
        let d = digest(presented);
        self.first(|e| ct_eq(&e.digest, &d))
    }

    /// The principal of the first entry that `matches`, after testing every entry: the time
    /// taken does not say which entry matched, or whether one did.
    fn first(&self, matches: impl Fn(&TokenEntry) -> bool) -> Option<Principal> {
        let mut found: Option<&Principal> = None;
        for e in &self.0 {
            if matches(e) && found.is_none() {
                found = Some(&e.principal);
            }
        }
        found.cloned()
    }
}

#[cfg(test)]
mod redaction_tests {
    use super::redact_url;

    #[test]
    fn urls_lose_user_info_path_and_query() {
        assert_eq!(
            redact_url("https://user:pw@hooks.example.com:8443/t/s3cr3t?key=abc#x"),
            "https://hooks.example.com:8443/***"
        );
        assert_eq!(redact_url("http://10.0.0.1"), "http://10.0.0.1/***");
        assert_eq!(redact_url("http://h?token=1"), "http://h/***");
        assert_eq!(redact_url("not a url"), "***");
        // The parser that sends the request reads `\` as a path separator: so does this.
        assert_eq!(
            redact_url("http://127.0.0.1:18129\\ok\\SECRET?q=SECRETQ"),
            "http://127.0.0.1:18129/***"
        );
        assert_eq!(redact_url("http://[::1]:80/x"), "http://[::1]/***");
        assert_eq!(
            redact_url("http://[fd00::1]:8080/x"),
            "http://[fd00::1]:8080/***"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_with_roles_and_agent_limits() {
        let t = Tokens::parse(
            "s3cr3tadmin:admin, a9ent-token:agent:report_agent|ops_agent,v1ewer-token:viewer",
        )
        .expect("valid");
        assert_eq!(t.len(), 3);
        let admin = t.authenticate("s3cr3tadmin").expect("admin");
        assert_eq!(admin.role, Role::Admin);
        let agent = t.authenticate("a9ent-token").expect("agent");
        assert!(agent.may_act_for("report_agent"));
        assert!(!agent.may_act_for("other_agent"));
        assert!(!agent.may_act_for_all(), "limited to two agents");
        assert!(admin.may_act_for_all());
        assert_eq!(
            t.authenticate("v1ewer-token").map(|p| p.role),
            Some(Role::Viewer)
        );
        assert!(t.authenticate("nope").is_none());
        assert!(t.authenticate("").is_none());
        let viewer = t.authenticate("v1ewer-token").expect("viewer");
        assert!(!viewer.may_act_for_all() && !viewer.may_act_for("report_agent"));
        // The contract's example list: short tokens work, and are reported (by role, never by
        // token) so the daemon can warn.
        let example = Tokens::parse("s3cr3t:admin,a9ent:agent:report_agent|ops_agent,v1ew:viewer")
            .expect("the contract's example");
        assert_eq!(
            example.authenticate("a9ent").map(|p| p.role),
            Some(Role::Agent)
        );
        assert_eq!(
            example.short_ones(),
            ["admin", "agent[report_agent|ops_agent]", "viewer"]
        );
        let any = Tokens::parse("any-agent-token:agent").expect("valid");
        let any = any.authenticate("any-agent-token").expect("agent");
        assert!(any.may_act_for_all() && any.may_act_for("whoever"));
    }

    #[test]
    fn a_session_proves_its_token_only_while_the_token_is_configured() {
        let tokens =
            Tokens::parse("admin-token-0001:admin,viewer-token-001:viewer").expect("parse");
        let (who, proof) = tokens
            .session_proof("viewer-token-001", b"session-a")
            .expect("configured token");
        assert_eq!(who.role, Role::Viewer);
        let back = tokens
            .of_session(b"session-a", &proof)
            .expect("same session");
        assert_eq!(back.role, Role::Viewer);
        // Another session's id, a truncated proof, an unknown token.
        assert!(tokens.of_session(b"session-b", &proof).is_none());
        assert!(tokens.of_session(b"session-a", &proof[..31]).is_none());
        assert!(tokens.session_proof("nope", b"session-a").is_none());
        // The token left the configuration: its sessions prove nothing any more.
        let without = Tokens::parse("admin-token-0001:admin").expect("parse");
        assert!(without.of_session(b"session-a", &proof).is_none());
    }

    #[test]
    fn bad_token_lists_are_refused_without_echoing_tokens() {
        for bad in [
            ":admin",
            "longenough:root",
            "longenough:viewer:a",
            "longenough:agent:",
        ] {
            let err = Tokens::parse(bad).expect_err(bad);
            assert!(!err.contains("longenough"), "{err}");
        }
        assert!(Tokens::parse("").expect("empty").is_empty());
        assert!(
            !format!("{:?}", Tokens::parse("s3cr3tadmin:admin").expect("ok")).contains("s3cr3t")
        );
    }

    #[test]
    fn roles_map_to_actions() {
        assert_eq!(action_of("GET", "/v1/tasks"), Action::Read);
        assert_eq!(action_of("POST", "/v1/claims"), Action::AgentWrite);
        assert_eq!(action_of("POST", "/v1/completions"), Action::AgentWrite);
        assert_eq!(
            action_of("POST", "/v1/instances/x/complete"),
            Action::AgentWrite
        );
        assert_eq!(
            action_of("POST", "/v1/instances/x/cancel"),
            Action::AdminWrite
        );
        assert_eq!(action_of("PUT", "/v1/tasks/x"), Action::AdminWrite);
        assert!(allows(Role::Viewer, Action::Read));
        assert!(!allows(Role::Viewer, Action::AgentWrite));
        assert!(allows(Role::Agent, Action::AgentWrite));
        assert!(!allows(Role::Agent, Action::AdminWrite));
        assert!(allows(Role::Admin, Action::AdminWrite));
    }
}
