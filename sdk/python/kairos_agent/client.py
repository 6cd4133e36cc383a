"""``Client`` and ``AsyncClient``: typed calls over kairos' REST API (``openapi.yaml``).

Both send the same requests (built once in ``_api``) and raise the same exceptions
(:mod:`kairos_agent.errors`). Use them as context managers, or call ``close()``.
"""

from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Type,
    TypeVar,
    Union,
)

import httpx

from . import _api
from .errors import NotFound
from .models import (
    ApplyResult,
    ClaimedInstance,
    Completion,
    CompletionResult,
    Instance,
    InstanceDetail,
    Limit,
    Page,
    Rate,
    Task,
    TaskSpec,
)

__all__ = ["AsyncClient", "Client"]

T = TypeVar("T")
_C = TypeVar("_C", bound="Client")
_AC = TypeVar("_AC", bound="AsyncClient")

_USER_AGENT = "kairos-agent-python"


def _headers(token: Optional[str]) -> Dict[str, str]:
    h = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


def _check_unique(specs: Sequence[TaskSpec]) -> None:
    seen: Set[str] = set()
    for s in specs:
        if s.id in seen:
            raise ValueError(f"task {s.id!r} is defined twice; nothing was applied")
        seen.add(s.id)


def _outcome(spec: TaskSpec, before: Optional[Task], created: bool, after: Task) -> ApplyResult:
    if created or before is None:
        return ApplyResult(spec.id, "created", after)
    if before.version == after.version:
        return ApplyResult(spec.id, "unchanged", after)
    return ApplyResult(spec.id, "configured", after)


class Client:
    """A blocking client: ``Client("http://127.0.0.1:8080", token="...")``.

    Every method raises a :class:`~kairos_agent.errors.KairosError` subclass when the API
    refuses the call (``Stale`` for 409, ``NotFound``, ``Unauthorized``, ``Invalid`` with
    ``errors``, ...) and :class:`~kairos_agent.errors.TransportError` when no answer came.
    """

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        *,
        timeout: float = _api.DEFAULT_TIMEOUT,
        transport: Optional[httpx.BaseTransport] = None,
        limits: Optional[httpx.Limits] = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers=_headers(token),
            timeout=timeout,
            transport=transport,
            limits=limits or httpx.Limits(max_connections=100, max_keepalive_connections=20),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def _do(self, call: _api.Call[T]) -> T:
        request = _api.build(self._http, call)
        try:
            resp = self._http.send(request)
        except httpx.TransportError as e:
            raise _api.transport_error(call, e) from e
        return _api.finish(call, resp)

    # --- tasks -------------------------------------------------------------------------------

    def put_task(self, spec: TaskSpec, *, if_match: Optional[Union[int, str]] = None) -> Task:
        """Create or replace a task (``PUT /v1/tasks/{id}``); the same definition again is a
        no-op. ``if_match`` makes the write conditional on the task's version (412 otherwise:
        :class:`~kairos_agent.errors.VersionMismatch`)."""
        return self._do(_api.put_task(spec, if_match))[1]

    def get_task(self, task_id: str) -> Task:
        return self._do(_api.get_task(task_id))

    def delete_task(self, task_id: str) -> None:
        self._do(_api.delete_task(task_id))

    def list_tasks(
        self,
        *,
        agent_id: Optional[str] = None,
        paused: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Page[Task]:
        return self._do(_api.list_tasks(agent_id, paused, limit, cursor))

    def iter_tasks(self, *, agent_id: Optional[str] = None, paused: Optional[bool] = None) -> Iterator[Task]:
        """Every task matching the filters, page after page."""
        cursor: Optional[str] = None
        while True:
            page = self.list_tasks(agent_id=agent_id, paused=paused, limit=500, cursor=cursor)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def pause_task(self, task_id: str, reason: Optional[str] = None) -> Task:
        return self._do(_api.pause_task(task_id, reason))

    def resume_task(self, task_id: str) -> Task:
        return self._do(_api.resume_task(task_id))

    def trigger(
        self,
        task_id: str,
        *,
        window_key: Optional[str] = None,
        delay_seconds: Optional[int] = None,
        run_at: Optional[Union[datetime, str]] = None,
        context: Optional[Mapping[str, Any]] = None,
    ) -> Instance:
        """A manual or delayed run. With a ``window_key`` the task already has, the existing
        instance is returned unchanged (the call is idempotent by key)."""
        return self._do(_api.trigger(task_id, window_key, delay_seconds, run_at, context))[1]

    def apply(self, specs: Sequence[TaskSpec]) -> List[ApplyResult]:
        """Make each spec true on the server with ``PUT``: ``created``, ``configured`` (the
        definition changed: version bumped) or ``unchanged`` (a no-op). Stops at the first spec
        the server refuses, raising its error; the specs before it stay applied."""
        _check_unique(specs)
        out: List[ApplyResult] = []
        for spec in specs:
            try:
                before: Optional[Task] = self.get_task(spec.id)
            except NotFound:
                before = None
            created, after = self._do(_api.put_task(spec, None))
            out.append(_outcome(spec, before, created, after))
        return out

    # --- instances ---------------------------------------------------------------------------

    def get_instance(self, instance_id: str) -> InstanceDetail:
        return self._do(_api.get_instance(instance_id))

    def list_instances(
        self,
        *,
        task_id: Optional[str] = None,
        agent_id: Optional[str] = None,
        status: Optional[Union[str, Sequence[str]]] = None,
        window_key: Optional[str] = None,
        from_: Optional[Union[datetime, str]] = None,
        to: Optional[Union[datetime, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Page[Instance]:
        """Instances newest first (by ``scheduled_at``); every filter given must match."""
        return self._do(_api.list_instances(task_id, agent_id, status, window_key, from_, to, limit, cursor))

    def iter_instances(
        self,
        *,
        task_id: Optional[str] = None,
        agent_id: Optional[str] = None,
        status: Optional[Union[str, Sequence[str]]] = None,
        window_key: Optional[str] = None,
        from_: Optional[Union[datetime, str]] = None,
        to: Optional[Union[datetime, str]] = None,
    ) -> Iterator[Instance]:
        cursor: Optional[str] = None
        while True:
            page = self.list_instances(
                task_id=task_id,
                agent_id=agent_id,
                status=status,
                window_key=window_key,
                from_=from_,
                to=to,
                limit=500,
                cursor=cursor,
            )
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def retry_instance(self, instance_id: str, reason: Optional[str] = None) -> Instance:
        return self._do(_api.retry_instance(instance_id, reason))

    def cancel_instance(self, instance_id: str, reason: Optional[str] = None) -> Instance:
        return self._do(_api.cancel_instance(instance_id, reason))

    # --- the agent's calls -------------------------------------------------------------------

    def claim(
        self,
        agent_id: str,
        worker_id: str,
        *,
        max_instances: int = 1,
        lease_seconds: Optional[int] = None,
        wait_seconds: Optional[int] = None,
        claim_id: Optional[str] = None,
    ) -> List[ClaimedInstance]:
        """Take up to ``max_instances`` (at most 100) PENDING instances of ``agent_id`` under
        fresh leases, waiting up to ``wait_seconds`` for work (long poll); ``[]`` when none.

        ``claim_id`` (1-128 characters without control characters, e.g. a UUID per claim) makes
        the claim safe to send again: repeated unchanged with the same ``claim_id`` and
        ``worker_id`` while this worker still holds some of what it took, it is answered with
        those instances and the same lease tokens instead of taking more. Send a claim that
        got no answer (a timeout, a broken connection, a 503) again with its ``claim_id``; use
        a new one for the next claim."""
        return self._do(_api.claim(agent_id, worker_id, max_instances, lease_seconds, wait_seconds, claim_id))

    def heartbeat(self, instance_id: str, lease_token: str, *, lease_seconds: Optional[int] = None) -> Instance:
        """Extend the lease; :class:`~kairos_agent.errors.Stale` when it is lost."""
        return self._do(_api.heartbeat(instance_id, lease_token, lease_seconds))

    def complete(self, instance_id: str, lease_token: str, result: Any = None, *,
                 traceparent: Optional[str] = None) -> Instance:
        """RUNNING -> SUCCESS with ``result`` (any JSON value, at most 64 KiB serialized).
        ``traceparent`` names the span that did the work: kairos's completion span is its
        child."""
        return self._do(_api.complete(instance_id, lease_token, result, traceparent))

    def complete_many(self, items: Sequence[Completion]) -> List[CompletionResult]:
        """Complete 1-500 instances in one request and one commit; each item is fenced on its
        own lease token and answered in order (200, 409, 404, or 403 for an instance of an agent
        the token may not act for)."""
        return self._do(_api.complete_many(items))

    def fail(self, instance_id: str, lease_token: str, error: str, *, retryable: bool = True,
             retry_at_once: bool = False, retry_after_seconds: Optional[int] = None,
             hold_limit: Optional[str] = None, traceparent: Optional[str] = None) -> Instance:
        """End the attempt: FAILED (retried after the backoff, or at once with
        ``retry_at_once=True``: an attempt given back, e.g. at shutdown) or DEAD
        (``retryable=False`` or no attempts left).

        ``retry_after_seconds`` (1-86400) reports the attempt *throttled* instead: a quota
        refused it (an HTTP 429 from a model API, say). The instance goes back to PENDING,
        due that many seconds from now, with the same ``attempt`` (not spent) and
        ``error_kind: "throttled"``; the task's circuit breaker counts nothing, and
        ``retryable``/``retry_at_once`` do not apply. Out of range:
        :class:`~kairos_agent.errors.Invalid`, and the instance stays RUNNING under its lease.

        ``hold_limit`` (with ``retry_after_seconds``) names a shared limit the instance draws on:
        it is held (for the instance's key, if ``per_key``) until the same instant, so no
        instance of any task that draws on it starts meanwhile: the quota is the limit's, not
        this attempt's. A limit the instance does not draw on, or ``hold_limit`` without
        ``retry_after_seconds``, is :class:`~kairos_agent.errors.Invalid` (field ``hold_limit``)
        and nothing changes."""
        return self._do(
            _api.fail(instance_id, lease_token, error, retryable, retry_at_once, retry_after_seconds, hold_limit,
                      traceparent)
        )

    # --- shared limits -----------------------------------------------------------------------

    def put_limit(
        self,
        name: str,
        *,
        concurrency: Optional[int] = None,
        rate: Optional[Rate] = None,
        per_key: Optional[bool] = None,
        if_match: Optional[Union[int, str]] = None,
    ) -> Limit:
        """Create or replace a shared limit (``PUT /v1/limits/{name}``): ``concurrency`` units
        RUNNING at once, a ``rate`` (``{"count": 500, "per_seconds": 60, "burst": 20}``), or
        both; ``per_key=True`` keeps a budget per rendered key. The same definition again is a
        no-op (the version is kept). A change that would leave a task drawing on it unable to
        start is :class:`~kairos_agent.errors.Stale` (409) naming the task."""
        return self._do(_api.put_limit(name, concurrency, rate, per_key, if_match))[1]

    def get_limit(self, name: str) -> Limit:
        """The limit with its live usage (``running``, ``available_rate``, holds, busiest keys)."""
        return self._do(_api.get_limit(name))

    def list_limits(self) -> List[Limit]:
        """Every limit with its usage, by name (page after page)."""
        out: List[Limit] = []
        cursor: Optional[str] = None
        while True:
            page = self._do(_api.list_limits(500, cursor))
            out.extend(page.items)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    def delete_limit(self, name: str) -> None:
        """Delete a limit; :class:`~kairos_agent.errors.Stale` (409) while a task draws on it."""
        self._do(_api.delete_limit(name))

    def hold_limit(self, name: str, seconds: int, *, key: Optional[str] = None,
                   reason: Optional[str] = None) -> Limit:
        """Start nothing that draws on the limit (on ``key``, required for a ``per_key`` limit)
        for ``seconds`` (1-86400); a later hold is never shortened."""
        return self._do(_api.hold_limit(name, seconds, key, reason))

    def release_limit(self, name: str, *, key: Optional[str] = None) -> Limit:
        """Lift the hold of ``key``, or every hold of the limit without one."""
        return self._do(_api.release_limit(name, key))


class AsyncClient:
    """The asyncio twin of :class:`Client`: the same methods, awaited."""

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        *,
        timeout: float = _api.DEFAULT_TIMEOUT,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        limits: Optional[httpx.Limits] = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=_headers(token),
            timeout=timeout,
            transport=transport,
            limits=limits or httpx.Limits(max_connections=100, max_keepalive_connections=20),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self: _AC) -> _AC:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()

    async def _do(self, call: _api.Call[T]) -> T:
        request = _api.build(self._http, call)
        try:
            resp = await self._http.send(request)
        except httpx.TransportError as e:
            raise _api.transport_error(call, e) from e
        return _api.finish(call, resp)

    # --- tasks -------------------------------------------------------------------------------

    async def put_task(self, spec: TaskSpec, *, if_match: Optional[Union[int, str]] = None) -> Task:
        return (await self._do(_api.put_task(spec, if_match)))[1]

    async def get_task(self, task_id: str) -> Task:
        return await self._do(_api.get_task(task_id))

    async def delete_task(self, task_id: str) -> None:
        await self._do(_api.delete_task(task_id))

    async def list_tasks(
        self,
        *,
        agent_id: Optional[str] = None,
        paused: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Page[Task]:
        return await self._do(_api.list_tasks(agent_id, paused, limit, cursor))

    async def iter_tasks(
        self, *, agent_id: Optional[str] = None, paused: Optional[bool] = None
    ) -> AsyncIterator[Task]:
        cursor: Optional[str] = None
        while True:
            page = await self.list_tasks(agent_id=agent_id, paused=paused, limit=500, cursor=cursor)
            for t in page.items:
                yield t
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def pause_task(self, task_id: str, reason: Optional[str] = None) -> Task:
        return await self._do(_api.pause_task(task_id, reason))

    async def resume_task(self, task_id: str) -> Task:
        return await self._do(_api.resume_task(task_id))

    async def trigger(
        self,
        task_id: str,
        *,
        window_key: Optional[str] = None,
        delay_seconds: Optional[int] = None,
        run_at: Optional[Union[datetime, str]] = None,
        context: Optional[Mapping[str, Any]] = None,
    ) -> Instance:
        return (await self._do(_api.trigger(task_id, window_key, delay_seconds, run_at, context)))[1]

    async def apply(self, specs: Sequence[TaskSpec]) -> List[ApplyResult]:
        _check_unique(specs)
        out: List[ApplyResult] = []
        for spec in specs:
            try:
                before: Optional[Task] = await self.get_task(spec.id)
            except NotFound:
                before = None
            created, after = await self._do(_api.put_task(spec, None))
            out.append(_outcome(spec, before, created, after))
        return out

    # --- instances ---------------------------------------------------------------------------

    async def get_instance(self, instance_id: str) -> InstanceDetail:
        return await self._do(_api.get_instance(instance_id))

    async def list_instances(
        self,
        *,
        task_id: Optional[str] = None,
        agent_id: Optional[str] = None,
        status: Optional[Union[str, Sequence[str]]] = None,
        window_key: Optional[str] = None,
        from_: Optional[Union[datetime, str]] = None,
        to: Optional[Union[datetime, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Page[Instance]:
        return await self._do(_api.list_instances(task_id, agent_id, status, window_key, from_, to, limit, cursor))

    async def iter_instances(
        self,
        *,
        task_id: Optional[str] = None,
        agent_id: Optional[str] = None,
        status: Optional[Union[str, Sequence[str]]] = None,
        window_key: Optional[str] = None,
        from_: Optional[Union[datetime, str]] = None,
        to: Optional[Union[datetime, str]] = None,
    ) -> AsyncIterator[Instance]:
        cursor: Optional[str] = None
        while True:
            page = await self.list_instances(
                task_id=task_id,
                agent_id=agent_id,
                status=status,
                window_key=window_key,
                from_=from_,
                to=to,
                limit=500,
                cursor=cursor,
            )
            for i in page.items:
                yield i
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def retry_instance(self, instance_id: str, reason: Optional[str] = None) -> Instance:
        return await self._do(_api.retry_instance(instance_id, reason))

    async def cancel_instance(self, instance_id: str, reason: Optional[str] = None) -> Instance:
        return await self._do(_api.cancel_instance(instance_id, reason))

    # --- the agent's calls -------------------------------------------------------------------

    async def claim(
        self,
        agent_id: str,
        worker_id: str,
        *,
        max_instances: int = 1,
        lease_seconds: Optional[int] = None,
        wait_seconds: Optional[int] = None,
        claim_id: Optional[str] = None,
    ) -> List[ClaimedInstance]:
        return await self._do(
            _api.claim(agent_id, worker_id, max_instances, lease_seconds, wait_seconds, claim_id)
        )

    async def heartbeat(
        self, instance_id: str, lease_token: str, *, lease_seconds: Optional[int] = None
    ) -> Instance:
        return await self._do(_api.heartbeat(instance_id, lease_token, lease_seconds))

    async def complete(self, instance_id: str, lease_token: str, result: Any = None, *,
                       traceparent: Optional[str] = None) -> Instance:
        return await self._do(_api.complete(instance_id, lease_token, result, traceparent))

    async def complete_many(self, items: Sequence[Completion]) -> List[CompletionResult]:
        return await self._do(_api.complete_many(items))

    async def _complete_many_encoded(self, body: bytes) -> List[CompletionResult]:
        return await self._do(_api.complete_many_encoded(body))

    async def fail(self, instance_id: str, lease_token: str, error: str, *, retryable: bool = True,
                   retry_at_once: bool = False, retry_after_seconds: Optional[int] = None,
                   hold_limit: Optional[str] = None, traceparent: Optional[str] = None) -> Instance:
        return await self._do(
            _api.fail(instance_id, lease_token, error, retryable, retry_at_once, retry_after_seconds, hold_limit,
                      traceparent)
        )

    # --- shared limits -----------------------------------------------------------------------

    async def put_limit(
        self,
        name: str,
        *,
        concurrency: Optional[int] = None,
        rate: Optional[Rate] = None,
        per_key: Optional[bool] = None,
        if_match: Optional[Union[int, str]] = None,
    ) -> Limit:
        return (await self._do(_api.put_limit(name, concurrency, rate, per_key, if_match)))[1]

    async def get_limit(self, name: str) -> Limit:
        return await self._do(_api.get_limit(name))

    async def list_limits(self) -> List[Limit]:
        out: List[Limit] = []
        cursor: Optional[str] = None
        while True:
            page = await self._do(_api.list_limits(500, cursor))
            out.extend(page.items)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    async def delete_limit(self, name: str) -> None:
        await self._do(_api.delete_limit(name))

    async def hold_limit(self, name: str, seconds: int, *, key: Optional[str] = None,
                         reason: Optional[str] = None) -> Limit:
        return await self._do(_api.hold_limit(name, seconds, key, reason))

    async def release_limit(self, name: str, *, key: Optional[str] = None) -> Limit:
        return await self._do(_api.release_limit(name, key))
