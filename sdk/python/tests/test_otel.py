"""OpenTelemetry in the worker (the ``otel`` extra): each handler runs in a span that is a child
of the instance's ``traceparent`` (the claim's span), and its report carries the handler span's
own ``traceparent``, so kairos's completion span (exported to a real local OTLP/HTTP receiver)
is the handler span's child."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conftest import Kairos, RunningWorker, eventually, free_port
from kairos_agent import ClaimedInstance, Retryable, TaskSpec, Worker, manual

# One provider for the process (OpenTelemetry's global can be set once).
EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP JSON receiver: keeps every span kairos exports."""

    spans: List[Dict[str, Any]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        doc = json.loads(body or b"{}")
        got = [
            s
            for rs in doc.get("resourceSpans", [])
            for ss in rs.get("scopeSpans", [])
            for s in ss.get("spans", [])
        ]
        with self.lock:
            self.spans.extend(got)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def collector() -> Iterator[Tuple[str, List[Dict[str, Any]]]]:
    _Collector.spans = []
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Collector)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Collector.spans
    server.shutdown()
    server.server_close()


def _trigger(k: Kairos, task_id: str) -> str:
    r = httpx.post(
        f"{k.url}/v1/tasks/{task_id}/trigger",
        headers={"Authorization": f"Bearer {k.admin_token}", "traceparent": CALLER, "tracestate": "vendor=x"},
        json={},
    )
    assert r.status_code == 201, r.text
    instance_id: str = r.json()["id"]
    return instance_id


def _parts(traceparent: str) -> Tuple[str, str]:
    version, trace_id, span_id, flags = traceparent.split("-")
    return trace_id, span_id


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_handler_runs_in_a_child_span_of_the_instances_traceparent_and_reports_under_it(
    kairos_factory: Callable[..., Kairos], collector: Tuple[str, List[Dict[str, Any]]], kind: str
) -> None:
    endpoint, exported = collector
    k = kairos_factory(KAIROS_OTEL_ENDPOINT=endpoint)
    task_id = f"traced_{kind}"
    with k.client() as c:
        c.put_task(TaskSpec(id=task_id, agent_id="otel_agent", trigger=manual(),
                            execution={"max_retries": 0}))
    EXPORTER.clear()
    ok_id = _trigger(k, task_id)
    failing_id = _trigger(k, task_id)
    seen: Dict[str, Tuple[ClaimedInstance, Any]] = {}
    lock = threading.Lock()

    def work(instance: ClaimedInstance) -> Dict[str, bool]:
        with lock:
            seen[instance.id] = (instance, trace.get_current_span().get_span_context())
        if instance.id == failing_id:
            raise Retryable("not this time")
        return {"traced": True}

    async def async_work(instance: ClaimedInstance) -> Dict[str, bool]:
        return work(instance)

    worker = Worker(k.url, "otel_agent", token=k.agent_token, worker_id="w-otel", wait_seconds=1)
    with RunningWorker(worker, work if kind == "sync" else async_work) as running:
        eventually(lambda: len(seen) >= 2 or None, "both instances handled")
        eventually(lambda: k.statuses(f"task_id = '{task_id}'") == {"SUCCESS": 1, "DEAD": 1} or None,
                   "the completion and the failure recorded")
        eventually(lambda: len(EXPORTER.get_finished_spans()) >= 2 or None, "both handler spans ended")
        running.stop()

    handler_spans = {s.attributes["kairos.instance_id"]: s for s in EXPORTER.get_finished_spans()
                     if s.attributes is not None and "kairos.instance_id" in s.attributes}
    for instance_id in (ok_id, failing_id):
        instance, current = seen[instance_id]
        assert instance.traceparent is not None
        assert instance.tracestate == "vendor=x"
        trace_id, claim_span = _parts(instance.traceparent)
        assert trace_id == CALLER_TRACE, "the trigger's trace"
        span = handler_spans[instance_id]
        assert span.name == task_id
        assert span.parent is not None
        assert format(span.parent.span_id, "016x") == claim_span, "a child of the claim's span"
        assert format(span.context.trace_id, "032x") == CALLER_TRACE
        assert current.span_id == span.context.span_id, "the handler ran inside its span"
        assert span.attributes is not None and span.attributes["kairos.window_key"] == instance.window_key

    # kairos's completion and failure spans are children of the handler spans: the worker sent
    # each handler span's traceparent with its report.
    def reported() -> Optional[Dict[str, Dict[str, Any]]]:
        with _Collector.lock:
            by_name = {s["name"]: s for s in exported if s["traceId"] == CALLER_TRACE
                       and s["name"] in ("kairos.complete", "kairos.fail")}
        return by_name if len(by_name) == 2 else None

    spans = eventually(reported, "kairos's completion and failure spans")
    assert spans["kairos.complete"]["parentSpanId"] == format(handler_spans[ok_id].context.span_id, "016x")
    assert spans["kairos.fail"]["parentSpanId"] == format(handler_spans[failing_id].context.span_id, "016x")
