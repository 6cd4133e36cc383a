//! Who may address the daemon without tokens: in open mode anyone who can reach the port is an
//! admin, so only requests addressed to loopback, from loopback pages, are answered.

use axum::http::{HeaderMap, header};

use crate::problem::ApiError;

/// The open-mode addressing checks of the API and the console: the `Host` must be a loopback
/// name or address (DNS rebinding: 421) and an `Origin`, when sent, loopback too (cross-site:
/// 403).
pub fn open_mode_addressing(headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or("");
        if !is_loopback_authority(host) {
            return Err(ApiError::MisdirectedRequest(format!(
                "without auth_tokens kairos answers only requests addressed to a loopback name or address, not {host:?}"
            )));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let authority = origin.split_once("://").map_or("", |(_, a)| a);
        if !is_loopback_authority(authority) {
            return Err(ApiError::Forbidden(format!(
                "without auth_tokens kairos refuses cross-site requests (Origin {origin:?})"
            )));
        }
    }
    Ok(())
}

/// `localhost`, `*.localhost`, or a loopback address, with an optional port.
fn is_loopback_authority(authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split_once(']').map_or("", |(h, _)| h)
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::is_loopback_authority;

    #[test]
    fn loopback_authorities() {
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.",
            "api.localhost:1",
            "127.0.0.1",
            "127.1.2.3:80",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.1:8080",
            "[::2]:80",
            "0.0.0.0",
            "",
            "127.0.0.1.nip.io",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }
}
