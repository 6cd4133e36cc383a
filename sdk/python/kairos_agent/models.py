"""The API's resources as typed Python values, and the typed shapes of a task definition.

Responses become dataclasses (:class:`Task`, :class:`Instance`, :class:`ClaimedInstance`, ...)
with timestamps as timezone-aware :class:`~datetime.datetime` in UTC. Task definitions are
``TypedDict``s that mirror the JSON body of ``PUT /v1/tasks/{id}`` one to one (see
``openapi.yaml``, ``TaskInput``), so a dict literal type-checks as well as the helpers
:func:`cron`, :func:`interval`, :func:`once`, :func:`after` and :func:`manual`.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    List,
    Literal,
    Mapping,
    Optional,
    Tuple,
    TypedDict,
    TypeVar,
    Union,
)

__all__ = [
    "AfterTrigger",
    "ApplyResult",
    "CircuitBreaker",
    "ClaimedInstance",
    "Completion",
    "CompletionResult",
    "CronTrigger",
    "Dispatch",
    "Execution",
    "Instance",
    "InstanceDetail",
    "InstanceEvent",
    "IntervalTrigger",
    "LeaseLost",
    "Limit",
    "LimitDraw",
    "LimitKey",
    "ManualTrigger",
    "Notify",
    "OnceTrigger",
    "Page",
    "PollDispatch",
    "Rate",
    "RetryBackoff",
    "Task",
    "TaskSpec",
    "Trigger",
    "WaitingReason",
    "WebhookDispatch",
    "after",
    "cron",
    "format_timestamp",
    "interval",
    "manual",
    "once",
    "parse_timestamp",
]

T = TypeVar("T")

# --- timestamps ------------------------------------------------------------------------------

_FRACTION = re.compile(r"\.(\d+)")


def _parse_before_311(text: str) -> datetime:
    # Before 3.11 fromisoformat takes neither "Z" nor fractions other than 3 or 6 digits.
    s = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    m = _FRACTION.search(s)
    if m:
        digits = (m.group(1) + "000000")[:6]
        s = s[: m.start()] + "." + digits + s[m.end() :]
    return datetime.fromisoformat(s)


_fromisoformat: Callable[[str], datetime] = (
    datetime.fromisoformat if sys.version_info >= (3, 11) else _parse_before_311
)


def parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp as the API writes it (``2026-11-29T00:30:00Z``) as an aware
    datetime in UTC."""
    value = _fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"timestamp without an offset: {text!r}")
    return value.astimezone(timezone.utc)


def _ts(value: Any) -> Optional[datetime]:
    return parse_timestamp(value) if isinstance(value, str) else None


def _ts_required(value: Any, name: str) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be an RFC 3339 timestamp, got {value!r}")
    return parse_timestamp(value)


def format_timestamp(value: Union[datetime, str]) -> str:
    """A datetime as RFC 3339 for requests (naive datetimes are taken as UTC); strings pass."""
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


# --- task definitions ------------------------------------------------------------------------


class _CronRequired(TypedDict):
    type: Literal["cron"]
    expr: str


class CronTrigger(_CronRequired, total=False):
    """Windows at the fire times of a 5- or 6-field cron expression in an IANA zone."""

    timezone: str


class _IntervalRequired(TypedDict):
    type: Literal["interval"]
    every_seconds: int


class IntervalTrigger(_IntervalRequired, total=False):
    """Windows at ``start_at + k * every_seconds`` (epoch-aligned without ``start_at``)."""

    start_at: str


class OnceTrigger(TypedDict):
    """One window at ``at``."""

    type: Literal["once"]
    at: str


class _AfterRequired(TypedDict):
    type: Literal["after"]
    task: str


class AfterTrigger(_AfterRequired, total=False):
    """The same window as the upstream task's, once its instance succeeds."""

    on: Literal["success"]


class ManualTrigger(TypedDict):
    """No schedule: instances only from ``trigger``."""

    type: Literal["manual"]


Trigger = Union[CronTrigger, IntervalTrigger, OnceTrigger, AfterTrigger, ManualTrigger]


class RetryBackoff(TypedDict, total=False):
    base_seconds: int
    max_seconds: int
    jitter: float


class _LimitDrawRequired(TypedDict):
    name: str


class LimitDraw(_LimitDrawRequired, total=False):
    """One entry of ``execution.limits``: a shared limit the task's instances draw on, the key
    template of a ``per_key`` limit (``"{{params.tenant}}"``; ``{{task_id}}`` and
    ``{{agent_id}}`` too) and the units one instance takes (``cost``, default 1)."""

    key: str
    cost: int


class Execution(TypedDict, total=False):
    limits: List[LimitDraw]
    timeout_seconds: int
    max_retries: int
    retry_backoff: RetryBackoff
    concurrency_limit: int
    overlap: Literal["skip", "queue", "replace"]
    catchup: Literal["skip", "latest", "all"]
    catchup_window_seconds: int
    misfire_grace_seconds: int


class PollDispatch(TypedDict):
    mode: Literal["poll"]


class _WebhookRequired(TypedDict):
    mode: Literal["webhook"]
    url: str
    secret: str


class WebhookDispatch(_WebhookRequired, total=False):
    timeout_seconds: int


Dispatch = Union[PollDispatch, WebhookDispatch]


class Notify(TypedDict, total=False):
    on_success: List[str]
    on_failure: List[str]
    secret: str


class CircuitBreaker(TypedDict, total=False):
    failure_threshold: int
    cooldown_seconds: Optional[int]


class _RateRequired(TypedDict):
    count: int
    per_seconds: int


class Rate(_RateRequired, total=False):
    """A limit's ``rate``: at most ``count + burst`` starts in any ``per_seconds`` seconds
    (``burst`` defaults to 0, at most ``count``)."""

    burst: int


def cron(expr: str, timezone: str = "UTC") -> CronTrigger:
    """A cron trigger: ``cron("0 30 8 * * *", "Asia/Shanghai")``."""
    return {"type": "cron", "expr": expr, "timezone": timezone}


def interval(every_seconds: int, start_at: Optional[Union[datetime, str]] = None) -> IntervalTrigger:
    """An interval trigger, epoch-aligned unless ``start_at`` is given."""
    t: IntervalTrigger = {"type": "interval", "every_seconds": every_seconds}
    if start_at is not None:
        t["start_at"] = format_timestamp(start_at)
    return t


def once(at: Union[datetime, str]) -> OnceTrigger:
    """A one-shot trigger at ``at``."""
    return {"type": "once", "at": format_timestamp(at)}


def after(task: str) -> AfterTrigger:
    """A dependency: run each window of ``task`` once its instance succeeds."""
    return {"type": "after", "task": task}


def manual() -> ManualTrigger:
    """No schedule: only ``trigger`` calls create instances."""
    return {"type": "manual"}


@dataclass
class TaskSpec:
    """A task definition for ``put_task`` and ``apply``: the body of ``PUT /v1/tasks/{id}``.

    Fields left ``None`` are omitted, so the server fills in its defaults (and, for
    ``paused``, leaves the current pause state alone).
    """

    id: str
    agent_id: str
    trigger: Trigger
    execution: Optional[Execution] = None
    dispatch: Optional[Dispatch] = None
    context: Optional[Mapping[str, Any]] = None
    notify: Optional[Notify] = None
    circuit_breaker: Optional[CircuitBreaker] = None
    paused: Optional[bool] = None

    def body(self) -> Dict[str, Any]:
        """The JSON body of the PUT."""
        out: Dict[str, Any] = {"id": self.id, "agent_id": self.agent_id, "trigger": dict(self.trigger)}
        for name in ("execution", "dispatch", "context", "notify", "circuit_breaker", "paused"):
            value = getattr(self, name)
            if value is not None:
                out[name] = dict(value) if isinstance(value, Mapping) else value
        return out


# --- responses -------------------------------------------------------------------------------


def _int(d: Mapping[str, Any], key: str) -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"{key} must be an integer, got {v!r}")
    return v


def _str(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise ValueError(f"{key} must be a string, got {v!r}")
    return v


def _opt_str(d: Mapping[str, Any], key: str) -> Optional[str]:
    v = d.get(key)
    return v if isinstance(v, str) else None


def _obj(d: Mapping[str, Any], key: str) -> Dict[str, Any]:
    v = d.get(key)
    return dict(v) if isinstance(v, Mapping) else {}


@dataclass
class Task:
    """A registered task as the API shows it: the definition with every default filled in
    (secrets removed) and the read-only fields."""

    id: str
    agent_id: str
    trigger: Dict[str, Any]
    execution: Dict[str, Any]
    dispatch: Dict[str, Any]
    context: Dict[str, Any]
    notify: Dict[str, Any]
    circuit_breaker: Dict[str, Any]
    paused: bool
    paused_reason: Optional[str]
    next_fire_at: Optional[datetime]
    consecutive_failures: int
    version: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Task":
        return cls(
            id=_str(d, "id"),
            agent_id=_str(d, "agent_id"),
            trigger=_obj(d, "trigger"),
            execution=_obj(d, "execution"),
            dispatch=_obj(d, "dispatch"),
            context=_obj(d, "context"),
            notify=_obj(d, "notify"),
            circuit_breaker=_obj(d, "circuit_breaker"),
            paused=bool(d.get("paused", False)),
            paused_reason=_opt_str(d, "paused_reason"),
            next_fire_at=_ts(d.get("next_fire_at")),
            consecutive_failures=_int(d, "consecutive_failures"),
            version=_int(d, "version"),
            created_at=_ts_required(d.get("created_at"), "created_at"),
            updated_at=_ts_required(d.get("updated_at"), "updated_at"),
        )


def _instance_fields(d: Mapping[str, Any]) -> Dict[str, Any]:
    # On the worker's hot path (every claimed instance): plain lookups, checked by type.
    try:
        fields: Dict[str, Any] = {
            "id": d["id"],
            "task_id": d["task_id"],
            "agent_id": d["agent_id"],
            "window_key": d["window_key"],
            "scheduled_at": parse_timestamp(d["scheduled_at"]),
            "status": d["status"],
            "source": d["source"],
            "attempt": d["attempt"],
            "max_attempts": d["max_attempts"],
            "available_at": parse_timestamp(d["available_at"]),
            "lease_expires_at": _ts(d.get("lease_expires_at")),
            "worker_id": d.get("worker_id"),
            "started_at": _ts(d.get("started_at")),
            "finished_at": _ts(d.get("finished_at")),
            "result": d.get("result"),
            "error": d.get("error"),
            "error_kind": d.get("error_kind"),
            "skip_reason": d.get("skip_reason"),
            "upstream_instance_id": d.get("upstream_instance_id"),
            "upstream_result_digest": d.get("upstream_result_digest"),
            "idempotency_key": d["idempotency_key"],
            "created_at": parse_timestamp(d["created_at"]),
            "updated_at": parse_timestamp(d["updated_at"]),
        }
    except KeyError as e:
        raise ValueError(f"an instance without {e.args[0]!r}") from e
    except TypeError as e:
        raise ValueError(f"an instance with a malformed timestamp: {e}") from e
    for key in ("id", "task_id", "agent_id", "window_key", "status", "source", "idempotency_key"):
        if type(fields[key]) is not str:
            raise ValueError(f"{key} must be a string, got {fields[key]!r}")
    for key in ("attempt", "max_attempts"):
        if type(fields[key]) is not int:
            raise ValueError(f"{key} must be an integer, got {fields[key]!r}")
    for key in ("worker_id", "error", "error_kind", "skip_reason", "upstream_instance_id", "upstream_result_digest"):
        if fields[key] is not None and type(fields[key]) is not str:
            raise ValueError(f"{key} must be a string or null, got {fields[key]!r}")
    return fields


@dataclass
class Instance:
    """One window of a task and where it stands (``openapi.yaml``, ``Instance``).

    ``status`` is one of PENDING, RUNNING, SUCCESS, FAILED, DEAD, SKIPPED, CANCELLED.
    ``idempotency_key`` (``task_id:window_key``) is the same for every attempt of the window:
    pass it downstream so side effects count once.
    """

    id: str
    task_id: str
    agent_id: str
    window_key: str
    scheduled_at: datetime
    status: str
    source: str
    attempt: int
    max_attempts: int
    available_at: datetime
    lease_expires_at: Optional[datetime]
    worker_id: Optional[str]
    started_at: Optional[datetime]
    finished_at: Optional[datetime]
    result: Any
    error: Optional[str]
    error_kind: Optional[str]
    skip_reason: Optional[str]
    upstream_instance_id: Optional[str]
    upstream_result_digest: Optional[str]
    idempotency_key: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Instance":
        return cls(**_instance_fields(d))


class LeaseLost:
    """Set when the worker learns that this attempt's lease is gone: a heartbeat or the
    completion answered 409 (the lease was reaped, the instance cancelled, or another attempt
    holds it), or the worker gave the attempt up at shutdown. A handler that sees it set
    should stop: its result will be dropped.

    Sync handlers call :meth:`is_set` or :meth:`wait`; async handlers ``await``
    :meth:`wait_async`. ``reason`` says why it was set.
    """

    __slots__ = ("_set", "_lock", "_event", "_waiters", "reason")

    def __init__(self) -> None:
        # The thread event is made only when someone waits: most leases are never lost.
        self._set = False
        self._lock = threading.Lock()
        self._event: Optional[threading.Event] = None
        self._waiters: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]] = []
        self.reason: Optional[str] = None

    def is_set(self) -> bool:
        return self._set

    def __bool__(self) -> bool:
        return self._set

    # A signal shared by every copy of its instance (dataclasses.asdict deep-copies fields).
    def __copy__(self) -> "LeaseLost":
        return self

    def __deepcopy__(self, memo: Dict[int, Any]) -> "LeaseLost":
        return self

    def set(self, reason: str) -> None:
        with self._lock:
            if self._set:
                return
            self.reason = reason
            self._set = True
            if self._event is not None:
                self._event.set()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:
                pass  # that waiter's loop has closed

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the lease is lost or ``timeout`` seconds pass; True when lost."""
        with self._lock:
            if self._set:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    async def wait_async(self) -> None:
        """Return once the lease is lost."""
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[None]" = loop.create_future()
        with self._lock:
            if self._set:
                return
            self._waiters.append((loop, fut))
        await fut


def _resolve(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


@dataclass
class ClaimedInstance(Instance):
    """An instance this caller holds under a lease: every :class:`Instance` field plus the
    ``lease_token`` that fences its reports and the ``context`` to run with (the task's
    context with a manual trigger's merged over it). ``lease_lost`` is set by the
    :class:`~kairos_agent.Worker` when the lease is gone.

    ``traceparent`` (W3C Trace Context) names the claim's span in the window's trace: run the
    work as its child. ``tracestate`` is the vendor state that came with the trace, if any."""

    lease_token: str
    context: Dict[str, Any]
    lease_lost: LeaseLost = field(default_factory=LeaseLost, repr=False, compare=False)
    traceparent: Optional[str] = None
    tracestate: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ClaimedInstance":
        return cls(
            **_instance_fields(d),
            lease_token=_str(d, "lease_token"),
            context=_obj(d, "context"),
            traceparent=_opt_str(d, "traceparent"),
            tracestate=_opt_str(d, "tracestate"),
        )

    @property
    def lease_seconds_left(self) -> Optional[float]:
        """Seconds until the lease as last reported expires (by this machine's clock)."""
        if self.lease_expires_at is None:
            return None
        return (self.lease_expires_at - datetime.now(timezone.utc)) / timedelta(seconds=1)


@dataclass
class InstanceEvent:
    """One transition of an instance: ``from_`` is None on the creating event."""

    from_: Optional[str]
    to: str
    attempt: int
    at: datetime
    actor: str
    reason: Optional[str]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "InstanceEvent":
        return cls(
            from_=_opt_str(d, "from"),
            to=_str(d, "to"),
            attempt=_int(d, "attempt"),
            at=_ts_required(d.get("at"), "at"),
            actor=_str(d, "actor"),
            reason=_opt_str(d, "reason"),
        )


@dataclass
class WaitingReason:
    """One reason a PENDING or FAILED instance is not running now (``waiting_on``).

    ``reason`` is one of ``available_at``, ``retry_backoff``, ``limit_concurrency``,
    ``limit_rate``, ``limit_held``, ``concurrency_limit``, ``task_paused``, ``circuit_open``,
    ``no_agent``; ``detail`` says what to do about it; ``until`` is when it lifts by itself (if
    it does); ``limit`` and ``key`` name the shared limit (and key) it is about."""

    reason: str
    detail: str
    until: Optional[datetime] = None
    limit: Optional[str] = None
    key: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "WaitingReason":
        return cls(
            reason=_str(d, "reason"),
            detail=_str(d, "detail"),
            until=_ts(d.get("until")),
            limit=_opt_str(d, "limit"),
            key=_opt_str(d, "key"),
        )


@dataclass
class InstanceDetail(Instance):
    """An instance with its whole history, oldest transition first, and (PENDING or FAILED)
    why it is not running now (``waiting_on``; empty when nothing holds it back)."""

    events: List[InstanceEvent] = field(default_factory=list)
    waiting_on: List[WaitingReason] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "InstanceDetail":
        raw = d.get("events")
        events = [InstanceEvent.from_json(e) for e in raw] if isinstance(raw, list) else []
        raw = d.get("waiting_on")
        waiting = [WaitingReason.from_json(w) for w in raw] if isinstance(raw, list) else []
        return cls(**_instance_fields(d), events=events, waiting_on=waiting)


def _opt_int(d: Mapping[str, Any], key: str) -> Optional[int]:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"{key} must be an integer or null, got {v!r}")
    return v


@dataclass
class LimitKey:
    """One key's budget of a ``per_key`` limit: units ``running``, the starts its rate allows now
    (``available_rate``, None without a rate), and its hold."""

    key: str
    running: int
    available_rate: Optional[int]
    held_until: Optional[datetime]
    held_reason: Optional[str]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "LimitKey":
        return cls(
            key=_str(d, "key"),
            running=_int(d, "running"),
            available_rate=_opt_int(d, "available_rate"),
            held_until=_ts(d.get("held_until")),
            held_reason=_opt_str(d, "held_reason"),
        )


@dataclass
class Limit:
    """A shared limit as the API shows it (``GET /v1/limits/{name}``): its definition and live
    usage. ``running`` counts the concurrency units RUNNING instances hold (0 for a limit
    without ``concurrency``); ``available_rate`` is how many starts the rate allows now (at
    most ``burst + 1``). For a ``per_key`` limit ``running`` is the sum over its keys,
    ``available_rate`` and the hold are None, and ``keys`` lists the busiest keys (at most 20)
    with their own numbers."""

    name: str
    version: int
    concurrency: Optional[int]
    rate: Optional[Rate]
    per_key: bool
    running: int
    available_rate: Optional[int]
    held_until: Optional[datetime]
    held_reason: Optional[str]
    keys: List[LimitKey]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Limit":
        raw_rate = d.get("rate")
        rate: Optional[Rate] = None
        if isinstance(raw_rate, Mapping):
            rate = {
                "count": _int(raw_rate, "count"),
                "per_seconds": _int(raw_rate, "per_seconds"),
                "burst": _int(raw_rate, "burst"),
            }
        raw_keys = d.get("keys")
        return cls(
            name=_str(d, "name"),
            version=_int(d, "version"),
            concurrency=_opt_int(d, "concurrency"),
            rate=rate,
            per_key=bool(d.get("per_key", False)),
            running=_int(d, "running"),
            available_rate=_opt_int(d, "available_rate"),
            held_until=_ts(d.get("held_until")),
            held_reason=_opt_str(d, "held_reason"),
            keys=[LimitKey.from_json(k) for k in raw_keys] if isinstance(raw_keys, list) else [],
            created_at=_ts_required(d.get("created_at"), "created_at"),
            updated_at=_ts_required(d.get("updated_at"), "updated_at"),
        )


@dataclass
class Page(Generic[T]):
    """One page of a list; pass ``next_cursor`` as ``cursor`` for the next (None: last page)."""

    items: List[T]
    next_cursor: Optional[str]


@dataclass
class Completion:
    """One item of a batch completion: the instance, its lease token and the result."""

    id: str
    lease_token: str
    result: Any = None


@dataclass
class CompletionResult:
    """The answer for one item of ``complete_many``: ``status`` 200 with the instance (now
    SUCCESS), or 409 (stale lease) / 404 (no such instance) / 403 (an instance of an agent the
    token may not act for) with ``detail``."""

    id: str
    status: int
    instance: Optional[Instance] = None
    detail: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CompletionResult":
        inst = d.get("instance")
        return cls(
            id=_str(d, "id"),
            status=_int(d, "status"),
            instance=Instance.from_json(inst) if isinstance(inst, Mapping) else None,
            detail=_opt_str(d, "detail"),
        )


@dataclass
class ApplyResult:
    """What ``apply`` did with one spec: ``created``, ``configured`` (changed, version bumped)
    or ``unchanged`` (the same definition again: a no-op)."""

    id: str
    outcome: Literal["created", "configured", "unchanged"]
    task: Task
