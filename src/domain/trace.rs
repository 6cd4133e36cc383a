//! W3C Trace Context (`traceparent`, `tracestate`) and the span identities of a window.
//!
//! A window's trace is fixed by what kairos already stores, so a scheduled window costs nothing
//! to trace:
//! - **Trace id**: the trace id of the context the window was created under (a `traceparent`
//!   on the manual trigger), else the instance id itself (a UUID is 128 bits, exactly a trace
//!   id): a new trace per window. The context a task was defined under never names a window's
//!   trace (it would make every window of the task one endless trace); the window span links
//!   to it instead.
//! - **Window span id**: the first 8 bytes of `SHA-256("kairos.window" ‖ instance id)`. Its
//!   parent is the trigger context's span, when there is one.
//! - **Claim span id**: the first 8 bytes of `SHA-256("kairos.claim" ‖ lease token)`: a new
//!   span per claim (the token is fresh per claim), derivable again from the token a
//!   completion, a failure or the reaper holds, and revealing nothing of the token. Its parent
//!   is the window span; the `traceparent` a claimed instance carries names it.
//!
//! Nothing here reads a clock or draws randomness.

use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Longest `tracestate` kept (the W3C limit for propagation is 512 characters).
pub const MAX_TRACESTATE_LEN: usize = 512;

/// A parsed trace context: a span of some trace, with its flags and vendor state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
    /// The `tracestate` that came with it, when valid.
    pub state: Option<String>,
}

impl TraceContext {
    /// Parse a `traceparent` (and its `tracestate`): `None` when the `traceparent` is invalid
    /// (the caller ignores it). An invalid `tracestate` is dropped, the `traceparent` kept.
    ///
    /// Version `00` must be exactly `00-<32 hex>-<16 hex>-<2 hex>`; a later version may carry
    /// more fields after a `-` (they are ignored); version `ff` is invalid. Hex is lowercase;
    /// all-zero trace and span ids are invalid.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let t = traceparent.trim_matches([' ', '\t']);
        let b = t.as_bytes();
        if b.len() < 55 {
            return None;
        }
        let version = hex_byte(&b[0..2])?;
        if version == 0xff || (version == 0 && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
            return None;
        }
        if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, out) in trace_id.iter_mut().enumerate() {
            *out = hex_byte(&b[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, out) in span_id.iter_mut().enumerate() {
            *out = hex_byte(&b[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&b[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            flags,
            state: tracestate.and_then(valid_tracestate),
        })
    }

    /// The `traceparent` header naming this span (version 00).
    pub fn traceparent(&self) -> String {
        traceparent(&self.trace_id, &self.span_id, self.flags)
    }

    /// Only the sampled flag is passed on from a foreign context; kairos's own are sampled.
    fn sampled(&self) -> u8 {
        self.flags & 0x01
    }
}

/// `00-<trace id>-<span id>-<flags>`.
pub fn traceparent(trace_id: &[u8; 16], span_id: &[u8; 8], flags: u8) -> String {
    format!("00-{}-{}-{:02x}", hex(trace_id), hex(span_id), flags)
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    s
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    match two {
        [h, l] => Some(hex_digit(*h)? << 4 | hex_digit(*l)?),
        _ => None,
    }
}

/// A `tracestate` kept as given when it is a list of at most 32 `key=value` members of
/// printable ASCII, at most [`MAX_TRACESTATE_LEN`] characters; otherwise `None`.
fn valid_tracestate(s: &str) -> Option<String> {
    let s = s.trim_matches([' ', '\t']);
    if s.is_empty()
        || s.len() > MAX_TRACESTATE_LEN
        || !s.bytes().all(|c| (0x20..=0x7e).contains(&c))
    {
        return None;
    }
    let members: Vec<&str> = s
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .filter(|m| !m.is_empty())
        .collect();
    if members.is_empty() || members.len() > 32 {
        return None;
    }
    for m in &members {
        let (key, value) = m.split_once('=')?;
        let key_ok = !key.is_empty()
            && key.len() <= 256
            && key
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-*/@".contains(&c));
        let value_ok = !value.is_empty()
            && value.len() <= 256
            && !value.ends_with(' ')
            && value.bytes().all(|c| c != b',' && c != b'=');
        if !key_ok || !value_ok {
            return None;
        }
    }
    Some(members.join(","))
}

fn derived_span_id(label: &[u8], id: &Uuid) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(label);
    h.update(id.as_bytes());
    let digest = h.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&digest[..8]);
    if out == [0; 8] {
        out[7] = 1;
    }
    out
}

/// The trace of one window (module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowTrace {
    pub trace_id: [u8; 16],
    pub window_span_id: [u8; 8],
    /// The span of the context the window was created under, if any.
    pub parent_span_id: Option<[u8; 8]>,
    pub flags: u8,
    /// The `tracestate` of that context, passed on unchanged.
    pub state: Option<String>,
}

impl WindowTrace {
    /// The trace of instance `instance_id`, created under the trigger context `stored` (if any).
    pub fn of(instance_id: Uuid, stored: Option<&TraceContext>) -> WindowTrace {
        let window_span_id = derived_span_id(b"kairos.window", &instance_id);
        match stored {
            Some(c) => WindowTrace {
                trace_id: c.trace_id,
                window_span_id,
                parent_span_id: Some(c.span_id),
                flags: c.sampled(),
                state: c.state.clone(),
            },
            None => {
                let mut trace_id = *instance_id.as_bytes();
                if trace_id == [0; 16] {
                    trace_id[15] = 1;
                }
                WindowTrace {
                    trace_id,
                    window_span_id,
                    parent_span_id: None,
                    flags: 0x01,
                    state: None,
                }
            }
        }
    }

    /// The span id of the claim that took lease `lease_token`.
    pub fn claim_span_id(lease_token: Uuid) -> [u8; 8] {
        derived_span_id(b"kairos.claim", &lease_token)
    }

    /// The `traceparent` a claim under `lease_token` hands to its lease holder: this trace,
    /// the claim's span.
    pub fn claim_traceparent(&self, lease_token: Uuid) -> String {
        traceparent(
            &self.trace_id,
            &Self::claim_span_id(lease_token),
            self.flags,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_parses_and_prints_back_the_same() {
        let c = TraceContext::parse(GOOD, Some("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"))
            .expect("valid");
        assert_eq!(hex(&c.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&c.span_id), "00f067aa0ba902b7");
        assert_eq!(c.flags, 1);
        assert_eq!(
            c.state.as_deref(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        assert_eq!(c.traceparent(), GOOD);
    }

    #[test]
    fn invalid_traceparents_are_none() {
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad, None), None, "{bad:?}");
        }
        // A later version may carry more fields.
        assert!(
            TraceContext::parse(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later",
                None
            )
            .is_some()
        );
    }

    #[test]
    fn an_invalid_tracestate_is_dropped_and_the_traceparent_kept() {
        for bad in ["", "no-equals", "UPPER=1", "a=1,=2", "a=b,c"] {
            let c = TraceContext::parse(GOOD, Some(bad)).expect("traceparent valid");
            assert_eq!(c.state, None, "{bad:?}");
        }
        let long = format!("a={}", "x".repeat(600));
        assert_eq!(
            TraceContext::parse(GOOD, Some(&long)).and_then(|c| c.state),
            None
        );
    }

    #[test]
    fn a_window_without_context_is_its_own_trace_named_by_its_instance_id() {
        let id = Uuid::parse_str("0192f0c1-7b4e-7c3a-9d2e-1f2a3b4c5d6e").expect("uuid");
        let w = WindowTrace::of(id, None);
        assert_eq!(hex(&w.trace_id), "0192f0c17b4e7c3a9d2e1f2a3b4c5d6e");
        assert_eq!(w.parent_span_id, None);
        assert_eq!(w.flags, 1);
        // The window span id is fixed by the instance id; claim span ids by the token.
        assert_eq!(w, WindowTrace::of(id, None));
        let t1 = Uuid::from_u128(1);
        let t2 = Uuid::from_u128(2);
        assert_ne!(
            WindowTrace::claim_span_id(t1),
            WindowTrace::claim_span_id(t2)
        );
        assert_ne!(WindowTrace::claim_span_id(t1), w.window_span_id);
        let tp = w.claim_traceparent(t1);
        let back = TraceContext::parse(&tp, None).expect("valid");
        assert_eq!(back.trace_id, w.trace_id);
        assert_eq!(back.span_id, WindowTrace::claim_span_id(t1));
    }

    #[test]
    fn a_window_created_under_a_context_continues_its_trace() {
        let c = TraceContext::parse(GOOD, Some("k=v")).expect("valid");
        let w = WindowTrace::of(Uuid::from_u128(7), Some(&c));
        assert_eq!(w.trace_id, c.trace_id);
        assert_eq!(w.parent_span_id, Some(c.span_id));
        assert_eq!(w.state.as_deref(), Some("k=v"));
        assert!(
            w.claim_traceparent(Uuid::from_u128(9))
                .starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-")
        );
    }
}
