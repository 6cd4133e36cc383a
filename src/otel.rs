//! OpenTelemetry spans of a window's life (docs/tracing.md): what each span is, the handle
//! request handlers and loops record them through, and their OTLP/HTTP JSON encoding.
//!
//! Recording never blocks and never fails a request: a span goes into a bounded queue that one
//! background task ([`crate::services::span_exporter`]) empties in batches; a full queue drops
//! the span and counts it in `kairos_otel_spans_dropped_total`. With no `otel_endpoint` the
//! handle is off: nothing is built, queued or sent, and no exporter task runs.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::domain::instance::Instance;
use crate::domain::trace::{TraceContext, WindowTrace, hex};

/// OTLP span kinds used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Str(String),
    Int(i64),
}

/// One finished span.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub trace_state: Option<String>,
    pub name: &'static str,
    pub kind: SpanKind,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub attributes: Vec<(&'static str, Attr)>,
    /// Spans of other traces this one is linked to (a window's link to the context its task
    /// was defined under).
    pub links: Vec<TraceContext>,
    /// `Some(message)`: the span ended in error.
    pub error: Option<String>,
}

/// The spans' names, one per step of a window's life.
pub mod names {
    pub const WINDOW: &str = "kairos.window";
    pub const CLAIM: &str = "kairos.claim";
    pub const COMPLETE: &str = "kairos.complete";
    pub const FAIL: &str = "kairos.fail";
    pub const REAP: &str = "kairos.reap";
    pub const PUSH: &str = "kairos.push";
}

/// Where spans are recorded: off (the default), or the sending side of the exporter's queue.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct Spans {
    queue: Option<Arc<mpsc::Sender<Span>>>,
}

impl std::fmt::Debug for Spans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spans").field("on", &self.is_on()).finish()
    }
}

/// The exporter's end of the queue.
pub struct SpanQueue {
    pub(crate) rx: mpsc::Receiver<Span>,
}

impl Spans {
    /// Off: records nothing.
    pub fn off() -> Spans {
        Spans::default()
    }

    /// On, with a queue of `capacity` spans; the [`SpanQueue`] goes to the exporter.
    pub fn queue(capacity: usize) -> (Spans, SpanQueue) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            Spans {
                queue: Some(Arc::new(tx)),
            },
            SpanQueue { rx },
        )
    }

    pub fn is_on(&self) -> bool {
        self.queue.is_some()
    }

    /// Queue `span`, or drop it (counted) when the queue is full or the exporter is gone.
    pub fn record(&self, span: Span) {
        let Some(q) = &self.queue else {
            return;
        };
        if q.try_send(span).is_err() {
            metrics::counter!("kairos_otel_spans_dropped_total").increment(1);
        }
    }

    /// The window span of a newly materialised instance, created under the trigger context
    /// `trace` (if any), linked to `task_trace`, the context its task was defined under (if
    /// any).
    pub fn window(
        &self,
        instance_id: Uuid,
        task_id: &str,
        window_key: &str,
        trace: Option<&TraceContext>,
        task_trace: Option<&TraceContext>,
        at: DateTime<Utc>,
    ) {
        if !self.is_on() {
            return;
        }
        let w = WindowTrace::of(instance_id, trace);
        self.record(Span {
            trace_id: w.trace_id,
            span_id: w.window_span_id,
            parent_span_id: w.parent_span_id,
            trace_state: w.state,
            name: names::WINDOW,
            kind: SpanKind::Internal,
            start: at,
            end: at,
            attributes: window_attrs(instance_id, task_id, window_key),
            links: task_trace.into_iter().cloned().collect(),
            error: None,
        });
    }

    /// The claim span of `instance`, claimed under `lease_token` by `worker_id`, from the
    /// instance's start to `end`.
    pub fn claim(
        &self,
        instance: &Instance,
        lease_token: Uuid,
        worker_id: &str,
        end: DateTime<Utc>,
    ) {
        if !self.is_on() {
            return;
        }
        let w = WindowTrace::of(instance.id, instance.trace.as_ref());
        let mut attributes = instance_attrs(instance);
        attributes.push(("kairos.worker_id", Attr::Str(worker_id.to_owned())));
        let start = instance.started_at.unwrap_or(end).min(end);
        self.record(Span {
            trace_id: w.trace_id,
            span_id: WindowTrace::claim_span_id(lease_token),
            parent_span_id: Some(w.window_span_id),
            trace_state: w.state,
            name: names::CLAIM,
            kind: SpanKind::Server,
            start,
            end,
            attributes,
            links: Vec::new(),
            error: None,
        });
    }

    /// A span that ends an attempt held under `lease_token` (completed, failed, reaped, or a
    /// push), a child of `parent` when it is a span of the instance's trace (the agent's own
    /// span, from its `traceparent`), else of the claim's span.
    #[allow(clippy::too_many_arguments)]
    pub fn attempt(
        &self,
        name: &'static str,
        kind: SpanKind,
        instance: &Instance,
        lease_token: Uuid,
        parent: Option<&TraceContext>,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        error: Option<String>,
    ) {
        self.attempt_with(
            name,
            kind,
            instance,
            lease_token,
            parent,
            (start, end),
            error,
            Vec::new(),
        );
    }

    /// [`Spans::attempt`] with more attributes.
    #[allow(clippy::too_many_arguments)]
    pub fn attempt_with(
        &self,
        name: &'static str,
        kind: SpanKind,
        instance: &Instance,
        lease_token: Uuid,
        parent: Option<&TraceContext>,
        (start, end): (DateTime<Utc>, DateTime<Utc>),
        error: Option<String>,
        extra: Vec<(&'static str, Attr)>,
    ) {
        if !self.is_on() {
            return;
        }
        let w = WindowTrace::of(instance.id, instance.trace.as_ref());
        let parent_span_id = match parent {
            Some(p) if p.trace_id == w.trace_id => p.span_id,
            _ => WindowTrace::claim_span_id(lease_token),
        };
        let mut attributes = instance_attrs(instance);
        attributes.push((
            "kairos.status",
            Attr::Str(instance.status.as_str().to_owned()),
        ));
        attributes.extend(extra);
        self.record(Span {
            trace_id: w.trace_id,
            span_id: rand::random::<[u8; 8]>(),
            parent_span_id: Some(parent_span_id),
            trace_state: w.state,
            name,
            kind,
            start: start.min(end),
            end,
            attributes,
            links: Vec::new(),
            error,
        });
    }
}

fn window_attrs(id: Uuid, task_id: &str, window_key: &str) -> Vec<(&'static str, Attr)> {
    vec![
        ("kairos.task_id", Attr::Str(task_id.to_owned())),
        ("kairos.instance_id", Attr::Str(id.to_string())),
        ("kairos.window_key", Attr::Str(window_key.to_owned())),
    ]
}

fn instance_attrs(i: &Instance) -> Vec<(&'static str, Attr)> {
    let mut a = window_attrs(i.id, &i.task_id, &i.window_key);
    a.push(("kairos.agent_id", Attr::Str(i.agent_id.clone())));
    a.push(("kairos.attempt", Attr::Int(i64::from(i.attempt))));
    a
}

fn nanos(t: DateTime<Utc>) -> String {
    t.timestamp_nanos_opt().unwrap_or(0).max(0).to_string()
}

fn attr_json(key: &str, v: &Attr) -> Value {
    let value = match v {
        Attr::Str(s) => json!({ "stringValue": s }),
        // OTLP JSON carries 64-bit integers as strings.
        Attr::Int(n) => json!({ "intValue": n.to_string() }),
    };
    json!({ "key": key, "value": value })
}

fn span_json(s: &Span) -> Value {
    let mut v = json!({
        "traceId": hex(&s.trace_id),
        "spanId": hex(&s.span_id),
        "name": s.name,
        "kind": s.kind as i32,
        "startTimeUnixNano": nanos(s.start),
        "endTimeUnixNano": nanos(s.end),
        "attributes": s.attributes.iter().map(|(k, a)| attr_json(k, a)).collect::<Vec<_>>(),
        "status": match &s.error {
            None => json!({ "code": 1 }),
            Some(m) => json!({ "code": 2, "message": m }),
        },
    });
    if let Some(o) = v.as_object_mut() {
        if let Some(p) = &s.parent_span_id {
            o.insert("parentSpanId".into(), json!(hex(p)));
        }
        if let Some(ts) = &s.trace_state {
            o.insert("traceState".into(), json!(ts));
        }
        if !s.links.is_empty() {
            o.insert(
                "links".into(),
                s.links.iter().map(link_json).collect::<Vec<_>>().into(),
            );
        }
    }
    v
}

fn link_json(c: &TraceContext) -> Value {
    let mut v = json!({ "traceId": hex(&c.trace_id), "spanId": hex(&c.span_id) });
    if let (Some(o), Some(ts)) = (v.as_object_mut(), &c.state) {
        o.insert("traceState".into(), json!(ts));
    }
    v
}

/// An OTLP/HTTP JSON export request (`ExportTraceServiceRequest`) of `spans`, from the
/// `kairos` service on node `node_id`.
pub fn export_request(spans: &[Span], node_id: &str) -> Value {
    json!({
        "resourceSpans": [{
            "resource": { "attributes": [
                attr_json("service.name", &Attr::Str("kairos".to_owned())),
                attr_json("service.version", &Attr::Str(env!("CARGO_PKG_VERSION").to_owned())),
                attr_json("service.instance.id", &Attr::Str(node_id.to_owned())),
            ]},
            "scopeSpans": [{
                "scope": { "name": "kairos", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans.iter().map(span_json).collect::<Vec<_>>(),
            }],
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_encode_as_otlp_json_with_hex_ids_and_string_times() {
        let at = DateTime::from_timestamp(1_700_000_000, 5).unwrap_or_default();
        let span = Span {
            trace_id: [0xab; 16],
            span_id: [0x01; 8],
            parent_span_id: Some([0x02; 8]),
            trace_state: None,
            name: names::CLAIM,
            kind: SpanKind::Server,
            start: at,
            end: at,
            attributes: vec![
                ("kairos.task_id", Attr::Str("t".into())),
                ("kairos.attempt", Attr::Int(2)),
            ],
            links: vec![TraceContext {
                trace_id: [0xcd; 16],
                span_id: [0x03; 8],
                flags: 1,
                state: Some("k=v".into()),
            }],
            error: Some("boom".into()),
        };
        let v = export_request(&[span], "n1");
        let rs = &v["resourceSpans"][0];
        assert_eq!(
            rs["resource"]["attributes"][0],
            json!({"key": "service.name", "value": {"stringValue": "kairos"}})
        );
        let s = &rs["scopeSpans"][0]["spans"][0];
        assert_eq!(s["traceId"], json!("ab".repeat(16)));
        assert_eq!(s["spanId"], json!("0101010101010101"));
        assert_eq!(s["parentSpanId"], json!("0202020202020202"));
        assert_eq!(s["startTimeUnixNano"], json!("1700000000000000005"));
        assert_eq!(s["kind"], json!(2));
        assert_eq!(s["attributes"][1]["value"], json!({"intValue": "2"}));
        assert_eq!(s["status"], json!({"code": 2, "message": "boom"}));
        assert_eq!(
            s["links"],
            json!([{"traceId": "cd".repeat(16), "spanId": "0303030303030303", "traceState": "k=v"}])
        );
    }

    #[test]
    fn an_off_handle_records_nothing() {
        let spans = Spans::off();
        assert!(!spans.is_on());
        spans.window(Uuid::from_u128(1), "t", "k", None, None, Utc::now());
    }

    #[test]
    fn a_full_queue_drops_instead_of_waiting() {
        let (spans, mut q) = Spans::queue(1);
        spans.window(Uuid::from_u128(1), "t", "k", None, None, Utc::now());
        spans.window(Uuid::from_u128(2), "t", "k", None, None, Utc::now());
        assert!(q.rx.try_recv().is_ok());
        assert!(q.rx.try_recv().is_err(), "the second span was dropped");
    }
}
