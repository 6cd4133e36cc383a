"""OpenTelemetry for the worker, when ``opentelemetry-api`` is importable (the ``otel`` extra).

Each handler runs inside a span named after the instance's task, a child of the claim's span
(the instance's ``traceparent``), with the ``kairos.*`` attributes of the instance; the span's
own ``traceparent`` goes with the completion or failure report, so kairos's completion span is
its child. Without ``opentelemetry-api`` (or without an instance ``traceparent``) handlers run
as they are and reports carry no ``traceparent``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, TypeVar

from .models import ClaimedInstance

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: Optional[TraceContextTextMapPropagator] = TraceContextTextMapPropagator()
except ImportError:  # the otel extra is not installed
    _PROPAGATOR = None

T = TypeVar("T")

#: The instrumentation scope of the handlers' spans.
SCOPE = "kairos_agent"


def available() -> bool:
    """Whether ``opentelemetry-api`` is importable."""
    return _PROPAGATOR is not None


def _attributes(instance: ClaimedInstance) -> Dict[str, Any]:
    return {
        "kairos.task_id": instance.task_id,
        "kairos.instance_id": instance.id,
        "kairos.window_key": instance.window_key,
        "kairos.attempt": instance.attempt,
    }


class HandlerSpan:
    """The span a handler runs in; ``traceparent`` is its own, for the report."""

    __slots__ = ("traceparent",)

    def __init__(self) -> None:
        self.traceparent: Optional[str] = None


def run_in_span(instance: ClaimedInstance, fn: Callable[[], T], into: HandlerSpan) -> T:
    """Run ``fn`` inside the instance's handler span (see the module doc), recording the span's
    ``traceparent`` in ``into``; without OpenTelemetry or a ``traceparent``, just run it."""
    if _PROPAGATOR is None or not instance.traceparent:
        return fn()
    carrier = {"traceparent": instance.traceparent}
    if instance.tracestate:
        carrier["tracestate"] = instance.tracestate
    parent = _PROPAGATOR.extract(carrier)
    tracer = _trace.get_tracer(SCOPE)
    with tracer.start_as_current_span(
        instance.task_id, context=parent, kind=_trace.SpanKind.CONSUMER, attributes=_attributes(instance)
    ):
        out: Dict[str, str] = {}
        _PROPAGATOR.inject(out)
        into.traceparent = out.get("traceparent")
        return fn()


async def run_in_span_async(instance: ClaimedInstance, fn: Callable[[], Any], into: HandlerSpan) -> Any:
    """:func:`run_in_span` for an ``async def`` handler: ``fn()`` returns the awaitable."""
    if _PROPAGATOR is None or not instance.traceparent:
        return await fn()
    carrier = {"traceparent": instance.traceparent}
    if instance.tracestate:
        carrier["tracestate"] = instance.tracestate
    parent = _PROPAGATOR.extract(carrier)
    tracer = _trace.get_tracer(SCOPE)
    with tracer.start_as_current_span(
        instance.task_id, context=parent, kind=_trace.SpanKind.CONSUMER, attributes=_attributes(instance)
    ):
        out: Dict[str, str] = {}
        _PROPAGATOR.inject(out)
        into.traceparent = out.get("traceparent")
        return await fn()
