"""``Worker``: the agent loop done once, correctly.

``Worker(url, agent_id).run(handler)`` claims instances of ``agent_id`` with long polls, at
most ``concurrency`` in flight; runs ``handler(instance)`` for each (a plain function in a
thread, an ``async def`` on the event loop); extends each lease at a third of its length;
reports successes in batches (one ``POST /v1/completions`` per batch, after a short linger)
and failures one by one; and stops on SIGTERM/SIGINT or :meth:`Worker.stop`.

The rules it keeps:

* A handler's return value is the instance's ``result`` (any JSON value, at most 64 KiB).
* Raising :class:`Fatal` fails the attempt with ``retryable: false`` (the instance goes DEAD);
  raising :class:`Retryable`, or any other exception, fails it with ``retryable: true`` (FAILED,
  retried after the task's backoff while attempts remain).
* Raising :class:`Throttled` (a quota refused the work: an HTTP 429 from a model API) reports
  the attempt throttled, ``retry_after_seconds = ceil(after)`` (1 to 86400): the instance waits
  as PENDING that long with its attempt unspent, and the task's circuit breaker counts nothing.
  With ``hold_limit``, the shared limit of that name is held until then too, so nothing else
  that draws on it starts meanwhile.
* A lost lease (``409`` on a heartbeat, the completion or the failure report: the lease was
  reaped, the instance cancelled, or another attempt holds it) sets ``instance.lease_lost``,
  drops the handler's result, and is logged and counted in :attr:`Worker.stats`; it is never
  raised. The fence on the server already refused the stale report; the worker just stops
  trying.
* A request that got no answer (a timeout, a cut or refused connection) or a 503/429 may have
  been done all the same, and is sent again unchanged: a claim with its ``claim_id`` (a fresh
  UUID per claim; sent again it is answered with the instances it took, under the same lease
  tokens), a report under the same lease token (answered as the first was), after the
  server's ``Retry-After`` or a backoff; reports until their lease would have expired.
* Tracing: with ``opentelemetry-api`` importable (the ``otel`` extra), each handler runs in a
  span named after the task, a child of the instance's ``traceparent``, and its report carries
  that span's ``traceparent``.
* Shutdown: stop claiming at once, let running handlers finish for up to ``shutdown_grace``
  seconds (their results are still reported), then give the rest up: each is failed with
  ``retryable: true, retry_at_once: true`` so another worker can take it at once instead of
  waiting for its lease to expire or the task's backoff. A second signal ends the grace at once.
  The outcomes held are then reported for up to ``REPORT_TIMEOUT``; ending the claim in flight,
  the background tasks and closing the connections get ``CLOSE_TIMEOUT`` each.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import os
import queue
import random
import re
import secrets
import signal
import socket
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any, Awaitable, Callable, Deque, Dict, List, Optional, Set, Tuple, Union, cast

import httpx

from . import _api, _otel
from .client import AsyncClient
from .errors import (
    Invalid,
    KairosError,
    NotFound,
    Stale,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from .models import ClaimedInstance, CompletionResult

__all__ = ["Fatal", "Handler", "Retryable", "Throttled", "Worker", "WorkerStats"]

log = logging.getLogger("kairos_agent.worker")

#: A handler: takes the claimed instance, returns its result (JSON), or raises.
Handler = Union[Callable[[ClaimedInstance], Any], Callable[[ClaimedInstance], Awaitable[Any]]]

#: The server keeps results up to this many bytes serialized.
MAX_RESULT_BYTES = 65536
#: Largest completion request body the worker builds (the server's default limit is 262144).
MAX_BATCH_BODY_BYTES = 200_000
#: The server stores errors cut to 4096 bytes; longer text is not sent.
MAX_ERROR_CHARS = 4000
#: Bounds of a throttled attempt's wait (the server's ``retry_after_seconds``).
MIN_THROTTLE_SECONDS = 1
MAX_THROTTLE_SECONDS = 86400
#: How long the worker keeps trying to report the outcomes it holds once shutdown is under way.
REPORT_TIMEOUT = 10.0
#: How long each last step of a shutdown (ending the claim in flight and the background tasks,
#: closing the connections) may take before the worker goes on without it.
CLOSE_TIMEOUT = 5.0
#: How long a claim waits for more handlers to finish once one has (seconds).
CLAIM_GATHER_SECONDS = 0.005
#: Batch completions sent at once.
MAX_FLUSHES_IN_FLIGHT = 2

_WORKER_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class Retryable(Exception):
    """Fail this attempt; the instance is retried after its task's backoff while attempts
    remain (any other exception does the same)."""


class Fatal(Exception):
    """Fail this attempt for good: ``retryable: false``, the instance goes DEAD at once."""


class Throttled(Exception):
    """This attempt was throttled, not failed: a quota refused it (an HTTP 429 from a model
    API, say), and it may be tried again in ``after`` seconds (its ``Retry-After``).

    The worker reports it with ``retry_after_seconds = ceil(after)``, kept within 1 to 86400:
    the instance goes back to PENDING until then with the same ``attempt`` (not spent),
    ``error_kind: "throttled"`` and ``reason`` as its error, and the task's circuit breaker
    counts nothing. Counted in :attr:`WorkerStats.throttled`, not ``failed``.

    ``after`` is a number of seconds: 0 or less waits the least (1 s), ``inf`` the most
    (a day); NaN is refused with :class:`ValueError`.

    ``hold_limit`` names a shared limit the instance draws on (``execution.limits``) whose quota
    this was: the worker sends it with the report, and the server holds that limit (for the
    instance's key, if it is ``per_key``) until the same instant, so no instance of any task
    drawing on it starts meanwhile. Should the server refuse it (the instance draws on no limit
    of that name), the error is logged and the attempt is reported throttled without it.
    """

    def __init__(self, after: float, reason: str = "rate limited", *, hold_limit: Optional[str] = None) -> None:
        after = float(after)
        if math.isnan(after):
            raise ValueError("Throttled(after=...) must be a number of seconds, not NaN")
        if hold_limit is not None and (not isinstance(hold_limit, str) or not hold_limit):
            raise ValueError(f"Throttled(hold_limit=...) must be a limit's name, not {hold_limit!r}")
        super().__init__(reason)
        self.after = after
        self.reason = reason
        self.hold_limit = hold_limit

    @property
    def retry_after_seconds(self) -> int:
        """The whole seconds reported: ``ceil(after)``, kept within 1 to 86400."""
        if self.after <= MIN_THROTTLE_SECONDS:
            return MIN_THROTTLE_SECONDS
        if self.after >= MAX_THROTTLE_SECONDS:
            return MAX_THROTTLE_SECONDS
        return min(MAX_THROTTLE_SECONDS, math.ceil(self.after))

    def __repr__(self) -> str:
        held = "" if self.hold_limit is None else f", hold_limit={self.hold_limit!r}"
        return f"Throttled(after={self.after!r}, reason={self.reason!r}{held})"


@dataclass
class WorkerStats:
    """What a worker did. Updated on the worker's event loop; safe to read from any thread."""

    #: Claim requests answered (with or without instances).
    claims: int = 0
    #: Instances claimed.
    claimed: int = 0
    #: Successes the server accepted.
    succeeded: int = 0
    #: Failure reports the server accepted (the instance went FAILED or DEAD).
    failed: int = 0
    #: Throttled attempts the server accepted (:class:`Throttled`: the instance waits as
    #: PENDING, its attempt unspent); not counted in ``failed``.
    throttled: int = 0
    #: Attempts whose lease was found lost (a 409 on a heartbeat, completion or failure).
    lease_lost: int = 0
    #: 409 answers to completions (each also counted in ``lease_lost``).
    complete_conflicts: int = 0
    #: 409 answers to heartbeats (each also counted in ``lease_lost``).
    heartbeat_conflicts: int = 0
    #: 409 answers to failure reports (each also counted in ``lease_lost``).
    fail_conflicts: int = 0
    #: Handler results not reported because the lease was lost first.
    dropped_results: int = 0
    #: Leases extended.
    heartbeats: int = 0
    #: Attempts failed (retryable) because the handler was still running after the grace.
    given_up_at_shutdown: int = 0
    #: Requests that got no usable answer (retried, or given up and logged).
    request_errors: int = 0


class _Job:
    """One claimed instance from claim to acknowledged report."""

    __slots__ = ("instance", "next_beat", "lease_until", "beating", "beats_ended", "future", "given_up",
                 "reporting", "reported", "span")

    def __init__(self, instance: ClaimedInstance, next_beat: float, lease_until: float) -> None:
        self.instance = instance
        self.next_beat = next_beat
        #: When the lease would expire (loop time) unless extended: from the claim's answer,
        #: then from each heartbeat the server accepted. Reports are retried until then.
        self.lease_until = lease_until
        self.beating = False
        #: A heartbeat answered 409 while the report was under way: the report may have been
        #: recorded already (its answer lost); the report's own answer says which.
        self.beats_ended = False
        self.future: Optional["asyncio.Future[Any]"] = None
        self.given_up = False
        #: A report (completion or failure) has been sent at least once.
        self.reporting = False
        self.reported = False
        #: The handler's span (OpenTelemetry): its ``traceparent`` goes with the report.
        self.span = _otel.HandlerSpan()

    def describe(self) -> str:
        i = self.instance
        return f"instance {i.id} (task {i.task_id}, window {i.window_key}, attempt {i.attempt})"


class _Completed:
    """A success waiting for its batch: the item's JSON text, encoded once."""

    __slots__ = ("job", "result", "encoded")

    def __init__(self, job: _Job, result: Any, encoded: bytes) -> None:
        self.job = job
        self.result = result
        self.encoded = encoded


class _ThreadPool:
    """Daemon threads for sync handlers: a handler stuck past shutdown cannot keep the
    process alive (the attempt is given up and failed; the thread's late result is dropped).

    Outcomes go back to the event loop through one inbox, and only the first outcome of a
    burst wakes the loop: a batch of short handlers costs one wake-up, not one per handler."""

    def __init__(self, size: int, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: "queue.SimpleQueue[Optional[Tuple[asyncio.Future[Any], Callable[[ClaimedInstance], Any], ClaimedInstance]]]" = queue.SimpleQueue()
        self._inbox: Deque[Tuple["asyncio.Future[Any]", bool, Any]] = deque()
        self._inbox_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{n}", daemon=True) for n in range(size)
        ]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[[ClaimedInstance], Any], arg: ClaimedInstance) -> "asyncio.Future[Any]":
        fut: "asyncio.Future[Any]" = self._loop.create_future()
        self._queue.put((fut, fn, arg))
        return fut

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fut, fn, arg = item
            try:
                outcome: Any = fn(arg)
                ok = True
            except Exception as e:  # the handler's failure is reported, not lost
                outcome, ok = e, False
            except BaseException as e:  # SystemExit and the like in a handler thread
                outcome, ok = RuntimeError(f"handler raised {type(e).__name__}: {e}"), False
            with self._inbox_lock:
                wake = not self._inbox
                self._inbox.append((fut, ok, outcome))
            if wake:
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:
                    # The worker's loop has closed: the attempt was given up at shutdown.
                    log.debug("handler of instance %s finished after the worker stopped", arg.id)

    def _deliver(self) -> None:
        with self._inbox_lock:
            outcomes, self._inbox = self._inbox, deque()
        for fut, ok, outcome in outcomes:
            _settle(fut, ok, outcome)


def _settle(fut: "asyncio.Future[Any]", ok: bool, outcome: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(outcome)
    else:
        fut.set_exception(outcome)


def _is_async(handler: Handler) -> bool:
    """Whether the handler is an ``async def`` function, or an object whose class defines an
    ``async def __call__``."""
    if inspect.iscoroutinefunction(handler):
        return True
    return inspect.iscoroutinefunction(type(handler).__call__)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, (Retryable, Fatal, Throttled)) and str(exc):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    # PostgreSQL text cannot hold U+0000; the server refuses it.
    return text.replace("\x00", "")[:MAX_ERROR_CHARS]


def _default_worker_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_.:-]", "-", socket.gethostname())[:80] or "worker"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    """Claims and runs the instances of one agent until stopped.

    :param url: the kairos API, e.g. ``http://127.0.0.1:8080``.
    :param agent_id: whose instances to claim.
    :param token: a bearer token with the ``agent`` (or ``admin``) role, if the server has tokens.
    :param concurrency: most handlers running at once; a claim takes at most the free slots,
        so no instance waits under a lease for a handler to start.
    :param batch: most successes in one ``POST /v1/completions`` (1-500).
    :param lease_seconds: the lease asked for on each claim and heartbeat; heartbeats go out
        every third of it.
    :param worker_id: this worker's name in the instances and their history (default
        ``<host>-<pid>-<random>``).
    :param wait_seconds: how long one claim long-polls for work (at most the server's
        ``claim_max_wait_seconds``, 30 by default).
    :param linger: how long a success waits for others to share its batch (seconds).
    :param shutdown_grace: how long running handlers may finish after a stop (seconds).
    :param handle_signals: install SIGTERM/SIGINT handlers while running (only possible, and
        only done, in the main thread).
    :param transport: an ``httpx`` transport for the worker's requests (proxies, tests).
    """

    def __init__(
        self,
        url: str,
        agent_id: str,
        token: Optional[str] = None,
        concurrency: int = 8,
        batch: int = 100,
        lease_seconds: int = 60,
        *,
        worker_id: Optional[str] = None,
        wait_seconds: int = 20,
        linger: float = 0.02,
        shutdown_grace: float = 30.0,
        handle_signals: bool = True,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 1 <= batch <= _api.MAX_COMPLETIONS:
            raise ValueError(f"batch must be 1 to {_api.MAX_COMPLETIONS}")
        if lease_seconds < 1:
            raise ValueError("lease_seconds must be at least 1")
        if wait_seconds < 0:
            raise ValueError("wait_seconds must not be negative")
        if linger < 0 or shutdown_grace < 0:
            raise ValueError("linger and shutdown_grace must not be negative")
        self.url = url
        self.agent_id = agent_id
        self.worker_id = worker_id or _default_worker_id()
        if not _WORKER_ID.match(self.worker_id):
            raise ValueError("worker_id must be 1-128 characters of letters, digits, '_', '.', '-', ':'")
        self.concurrency = concurrency
        self.batch = batch
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self.linger = linger
        self.shutdown_grace = shutdown_grace
        self.handle_signals = handle_signals
        self.stats = WorkerStats()
        self._token = token
        self._transport = transport
        self._beat_every = lease_seconds / 3.0
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop_early = False
        self._started = False

    # --- control ---------------------------------------------------------------------------------

    def run(self, handler: Handler) -> WorkerStats:
        """Run until SIGTERM/SIGINT or :meth:`stop`, then shut down (see the module doc).
        Returns the stats; raises :class:`~kairos_agent.errors.Unauthorized` or
        :class:`~kairos_agent.errors.Invalid` when the server refuses the claims themselves
        (a wrong token or agent id), after shutting down."""
        return asyncio.run(self.run_async(handler))

    def stop(self) -> None:
        """Begin the shutdown; callable from any thread, also from a handler."""
        with self._lock:
            loop = self._loop
            if loop is None:
                self._stop_early = True
                return
        try:
            loop.call_soon_threadsafe(self._request_stop, "stop() called")
        except RuntimeError:
            pass  # the loop has already closed: the worker has stopped

    async def run_async(self, handler: Handler) -> WorkerStats:
        """:meth:`run` on the caller's event loop."""
        with self._lock:
            if self._started:
                raise RuntimeError("a Worker runs once; create another")
            self._started = True
            self._loop = asyncio.get_running_loop()
            stop_early = self._stop_early
        loop = self._loop
        self._is_async = _is_async(handler)
        self._handler = handler
        self._stopping = asyncio.Event()
        self._force = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._queued = asyncio.Event()
        self._more = asyncio.Event()
        self._beat_wake = asyncio.Event()
        self._flush_slots = asyncio.Semaphore(MAX_FLUSHES_IN_FLIGHT)
        # By lease token: an instance whose lease this worker lost may be claimed by it again
        # (a new attempt) while the old attempt's report is still being tried.
        self._jobs: Dict[str, _Job] = {}
        self._running = 0
        self._queue: Deque[_Completed] = deque()
        self._flush_now = False
        self._reports: Set["asyncio.Future[None]"] = set()
        self._beats: Set["asyncio.Future[None]"] = set()
        self._fatal: Optional[KairosError] = None
        self._pool = None if self._is_async else _ThreadPool(self.concurrency, f"kairos-{self.agent_id}", loop)
        self._client = AsyncClient(
            self.url,
            self._token,
            transport=self._transport,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=min(self.concurrency + 4, 100)),
        )
        signals = self._install_signals(loop)
        if stop_early:
            self._request_stop("stop() called before run")
        log.info(
            "worker %s started: agent %s, concurrency %d, lease %ds",
            self.worker_id,
            self.agent_id,
            self.concurrency,
            self.lease_seconds,
        )
        background = [
            asyncio.ensure_future(self._heartbeat_loop()),
            asyncio.ensure_future(self._completion_loop()),
        ]
        claimer = asyncio.ensure_future(self._claim_loop())
        try:
            await self._stopping.wait()
            claimer.cancel()
            await self._within(asyncio.gather(claimer, return_exceptions=True), "the claim in flight")
            await self._drain()
        finally:
            claimer.cancel()
            for t in background:
                t.cancel()
            for f in [*self._reports, *self._beats]:
                f.cancel()
            await self._within(asyncio.gather(*background, *self._reports, *self._beats, return_exceptions=True),
                               "the background tasks")
            self._remove_signals(loop, signals)
            if self._pool is not None:
                self._pool.shutdown()
            await self._within(self._client.aclose(), "closing the connections")
            with self._lock:
                self._loop = None
        log.info("worker %s stopped: %s", self.worker_id, self.stats)
        if self._fatal is not None:
            raise self._fatal
        return self.stats

    async def _within(self, step: Awaitable[Any], what: str) -> None:
        """Await one step of the shutdown for at most ``CLOSE_TIMEOUT``, then go on without it
        (cancelled): a connection that never closes must not keep the worker from stopping."""
        task = asyncio.ensure_future(step)
        done, _ = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)
        if not done:
            log.warning("worker %s: %s did not end within %.0fs of the shutdown; going on without it",
                        self.worker_id, what, CLOSE_TIMEOUT)
            task.cancel()

    def _request_stop(self, why: str) -> None:
        if self._stopping.is_set():
            if not self._force.is_set():
                log.warning("worker %s: %s again; giving running handlers up now", self.worker_id, why)
                self._force.set()
            return
        log.info("worker %s stopping (%s): no new claims; waiting up to %.0fs for %d running handler(s)",
                 self.worker_id, why, self.shutdown_grace, self._running)
        self._stopping.set()

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> List[Tuple[signal.Signals, Any]]:
        installed: List[Tuple[signal.Signals, Any]] = []
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return installed
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)
            try:
                loop.add_signal_handler(sig, self._request_stop, f"received {sig.name}")
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # no signal support on this loop or platform: stop() still works
            installed.append((sig, previous))
        return installed

    def _remove_signals(self, loop: asyncio.AbstractEventLoop, installed: List[Tuple[signal.Signals, Any]]) -> None:
        for sig, previous in installed:
            loop.remove_signal_handler(sig)
            if previous is not None:
                signal.signal(sig, previous)

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    # --- claiming --------------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        failures = 0
        # The claim being retried: a claim that got no usable answer (a timeout, a cut
        # connection, a 503/429) may have taken instances on the server all the same. It is
        # sent again unchanged, with the same claim_id, so those instances come back in the
        # answer (same lease tokens) instead of waiting under leases no one holds.
        pending: Optional[Dict[str, Any]] = None
        while not self._stopping.is_set():
            if pending is not None:
                try:
                    claimed = await self._client.claim(self.agent_id, self.worker_id, **pending)
                except (Unauthorized, Invalid, NotFound) as e:
                    self._claims_refused(e)
                    return
                except KairosError as e:
                    failures += 1
                    self.stats.request_errors += 1
                    await self._claim_pause(e, failures, pending["claim_id"])
                    continue
                failures = 0
                pending = None
                self.stats.claims += 1
                # Their leases may be older than this answer: extend them at once.
                for instance in claimed:
                    self._start(instance, beat_now=True)
                continue
            free = self.concurrency - self._running
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            # Short handlers free their slots in bursts: take the burst in one claim rather
            # than one claim per slot. Long handlers cost at most this wait per claim.
            while 0 < self._running and free < self.concurrency and not self._stopping.is_set():
                self._slot_freed.clear()
                try:
                    await asyncio.wait_for(self._slot_freed.wait(), timeout=CLAIM_GATHER_SECONDS)
                except asyncio.TimeoutError:
                    break
                free = self.concurrency - self._running
            if self._stopping.is_set():
                break
            request: Dict[str, Any] = {
                "max_instances": min(free, _api.MAX_CLAIM),
                "lease_seconds": self.lease_seconds,
                "wait_seconds": self.wait_seconds,
                "claim_id": str(uuid.uuid4()),
            }
            try:
                claimed = await self._client.claim(self.agent_id, self.worker_id, **request)
            except (Unauthorized, Invalid, NotFound) as e:
                self._claims_refused(e)
                return
            except KairosError as e:
                failures += 1
                self.stats.request_errors += 1
                pending = request
                await self._claim_pause(e, failures, request["claim_id"])
                continue
            failures = 0
            self.stats.claims += 1
            for instance in claimed:
                self._start(instance)

    def _claims_refused(self, e: KairosError) -> None:
        # The claims themselves are refused (token, agent id, lease bounds): retrying cannot
        # help, so the worker stops and run() raises this.
        log.error("worker %s: claims for agent %s refused: %s; stopping", self.worker_id, self.agent_id, e)
        self._fatal = e
        self._request_stop("claims refused")

    async def _claim_pause(self, e: KairosError, failures: int, claim_id: str) -> None:
        pause = _retry_pause(e, failures)
        if isinstance(e, Unavailable):
            log.warning("worker %s: claim %s answered %d (%s); sending it again in %.1fs",
                        self.worker_id, claim_id, e.status, e.detail, pause)
        else:
            log.warning("worker %s: claim %s failed: %s; sending it again in %.1fs", self.worker_id, claim_id, e, pause)
        await self._sleep_unless_stopping(pause)

    def _start(self, instance: ClaimedInstance, beat_now: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if instance.lease_token in self._jobs:
            log.error("%s was answered twice; the second is ignored", self._jobs[instance.lease_token].describe())
            return
        now = loop.time()
        job = _Job(instance, now if beat_now else now + self._beat_every, now + self.lease_seconds)
        self._jobs[instance.lease_token] = job
        self._running += 1
        self.stats.claimed += 1
        if len(self._jobs) == 1 or beat_now:
            self._beat_wake.set()
        handler = self._handler
        if self._pool is not None:
            if _otel.available():
                sync = cast(Callable[[ClaimedInstance], Any], handler)
                fut = self._pool.submit(lambda i: _otel.run_in_span(i, lambda: sync(i), job.span), instance)
            else:
                fut = self._pool.submit(cast(Callable[[ClaimedInstance], Any], handler), instance)
        elif _otel.available():
            fut = asyncio.ensure_future(
                _otel.run_in_span_async(instance, lambda: cast(Awaitable[Any], handler(instance)), job.span)
            )
        else:
            fut = asyncio.ensure_future(cast(Awaitable[Any], handler(instance)))
        job.future = fut
        fut.add_done_callback(partial(self._handler_done, job))

    # --- outcomes --------------------------------------------------------------------------------

    def _handler_done(self, job: _Job, fut: "asyncio.Future[Any]") -> None:
        self._running -= 1
        self._slot_freed.set()
        self._more.set()  # the completion batch may be as full as it gets now
        instance = job.instance
        if job.given_up:
            log.info("handler of %s finished after the attempt was given up at shutdown; its outcome is dropped",
                     job.describe())
            return
        if fut.cancelled():
            # Only the shutdown cancels handlers, and it marks them given up first.
            self._report_failure(job, "the handler was cancelled", retryable=True)
            return
        exc = fut.exception()
        if instance.lease_lost.is_set():
            self.stats.dropped_results += 1
            log.info("result of %s dropped: lease lost (%s)", job.describe(), instance.lease_lost.reason)
            self._finish(job)
            return
        if exc is None:
            result = fut.result()
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                self._report_failure(
                    job, "the handler returned an awaitable from a plain function; declare it 'async def'",
                    retryable=False,
                )
                return
            self._queue_success(job, result)
        elif isinstance(exc, Throttled):
            held = "" if exc.hold_limit is None else f" (holding limit {exc.hold_limit!r} as long)"
            log.info("%s throttled, to be tried again in %ds%s: %s", job.describe(), exc.retry_after_seconds,
                     held, _error_text(exc))
            self._report_failure(job, _error_text(exc), retryable=True, retry_after=exc.retry_after_seconds,
                                 hold_limit=exc.hold_limit)
        elif isinstance(exc, Fatal):
            log.warning("%s failed (fatal, will not be retried): %s", job.describe(), _error_text(exc))
            self._report_failure(job, _error_text(exc), retryable=False)
        elif isinstance(exc, Retryable):
            log.warning("%s failed (retryable): %s", job.describe(), _error_text(exc))
            self._report_failure(job, _error_text(exc), retryable=True)
        else:
            log.warning("%s failed (retryable): handler raised", job.describe(), exc_info=exc)
            self._report_failure(job, _error_text(exc), retryable=True)

    def _queue_success(self, job: _Job, result: Any) -> None:
        try:
            text = json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            self._report_failure(job, f"the handler's result is not JSON: {e}", retryable=False)
            return
        encoded_result = text.encode("utf-8")
        if len(encoded_result) > MAX_RESULT_BYTES:
            self._report_failure(
                job,
                f"the handler's result is {len(encoded_result)} bytes serialized; at most {MAX_RESULT_BYTES} "
                "are kept (store large outputs elsewhere and return a reference)",
                retryable=False,
            )
            return
        i = job.instance
        traced = b"" if job.span.traceparent is None else b',"traceparent":%s' % json.dumps(
            job.span.traceparent).encode()
        encoded = b'{"id":"%s","lease_token":"%s","result":%s%s}' % (
            i.id.encode(), i.lease_token.encode(), encoded_result, traced,
        )
        self._queue.append(_Completed(job, result, encoded))
        self._queued.set()
        self._more.set()

    def _lease_lost(self, job: _Job, reason: str) -> None:
        if not job.instance.lease_lost.is_set():
            self.stats.lease_lost += 1
        job.instance.lease_lost.set(reason)

    def _finish(self, job: _Job) -> None:
        job.reported = True
        self._jobs.pop(job.instance.lease_token, None)

    def _spawn(self, coro: Awaitable[None], into: Optional[Set["asyncio.Future[None]"]] = None) -> None:
        tasks = self._reports if into is None else into
        t = asyncio.ensure_future(coro)
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    def _report_failure(self, job: _Job, error: str, *, retryable: bool, at_once: bool = False,
                        retry_after: Optional[int] = None, hold_limit: Optional[str] = None) -> None:
        self._spawn(self._send_failure(job, error, retryable, at_once, retry_after, hold_limit))

    async def _send_failure(self, job: _Job, error: str, retryable: bool, at_once: bool = False,
                            retry_after: Optional[int] = None, hold_limit: Optional[str] = None) -> None:
        """Report a failed attempt, or with ``retry_after`` a throttled one (holding
        ``hold_limit`` as long); sent again under the same lease token while it gets no answer
        (see :meth:`_report_pause`). A ``hold_limit`` the server refuses is dropped and the
        throttle reported without it: the server checks it before writing anything."""
        i = job.instance
        kind = "failure" if retry_after is None else "throttle report"
        failures = 0
        job.reporting = True
        try:
            while True:
                try:
                    after = await self._client.fail(i.id, i.lease_token, error, retryable=retryable,
                                                    retry_at_once=at_once, retry_after_seconds=retry_after,
                                                    hold_limit=hold_limit, traceparent=job.span.traceparent)
                except Stale as e:
                    self.stats.fail_conflicts += 1
                    self._lease_lost(job, f"{kind} answered 409: {e.detail}")
                    log.warning("%s of %s not recorded: lease lost (%s)", kind, job.describe(), e.detail)
                    return
                except NotFound as e:
                    self.stats.request_errors += 1
                    log.error("%s of %s not recorded: the instance no longer exists (%s)", kind, job.describe(), e.detail)
                    return
                except Invalid as e:
                    self.stats.request_errors += 1
                    if hold_limit is not None and any(f.field == "hold_limit" for f in e.errors):
                        log.error("%s of %s: limit %r not held (%s); reporting the throttle without it",
                                  kind, job.describe(), hold_limit, e.detail)
                        hold_limit = None
                        continue
                    log.error("%s of %s refused: %s; its lease will expire and the reaper retries it",
                              kind, job.describe(), e)
                    return
                except Unauthorized as e:
                    self.stats.request_errors += 1
                    log.error("%s of %s refused: %s; its lease will expire and the reaper retries it",
                              kind, job.describe(), e)
                    return
                except KairosError as e:
                    # No answer, or 503/429: the failure may have been recorded all the same;
                    # sent again under the same lease token it is answered as the first was.
                    failures += 1
                    self.stats.request_errors += 1
                    pause = self._report_pause(e, failures, job.lease_until)
                    if pause is None:
                        log.error("%s of %s not recorded after %d tries: %s; its lease will expire",
                                  kind, job.describe(), failures, e)
                        return
                    log.warning("%s of %s failed: %s; retrying in %.1fs", kind, job.describe(), e, pause)
                    await asyncio.sleep(pause)
                    continue
                if retry_after is not None:
                    self.stats.throttled += 1
                    held = "" if hold_limit is None else f", limit {hold_limit!r} held as long"
                    log.info("%s recorded as throttled: %s again at %s, attempt %d unspent%s: %s",
                             job.describe(), after.status, after.available_at.isoformat(), after.attempt, held,
                             error)
                    return
                self.stats.failed += 1
                log.info("%s recorded as %s (retryable %s, available at %s): %s",
                         job.describe(), after.status, retryable, after.available_at.isoformat(), error)
                return
        finally:
            self._finish(job)

    # --- completions -----------------------------------------------------------------------------

    async def _completion_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._queued.wait()
            deadline = loop.time() + self.linger
            # Linger only while handlers still run: nothing else can join this batch.
            while len(self._queue) < self.batch and not self._flush_now and self._running > 0:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._more.clear()
                try:
                    await asyncio.wait_for(self._more.wait(), timeout=remaining)
                except asyncio.TimeoutError:
                    break
            items = self._take_batch()
            if not self._queue:
                self._queued.clear()
            if not items:
                continue
            await self._flush_slots.acquire()
            self._spawn(self._flush(items))

    def _take_batch(self) -> List[_Completed]:
        items: List[_Completed] = []
        size = 0
        while self._queue and len(items) < self.batch:
            c = self._queue[0]
            if items and size + len(c.encoded) + 1 > MAX_BATCH_BODY_BYTES:
                break
            self._queue.popleft()
            if c.job.instance.lease_lost.is_set():
                self.stats.dropped_results += 1
                log.info("result of %s dropped: lease lost (%s)", c.job.describe(), c.job.instance.lease_lost.reason)
                self._finish(c.job)
                continue
            items.append(c)
            size += len(c.encoded) + 1
        return items

    async def _flush(self, items: List[_Completed]) -> None:
        for c in items:
            c.job.reporting = True
        try:
            body = b'{"completions":[' + b",".join(c.encoded for c in items) + b"]}"
            results = await self._send_batch(items, body)
            if results is None:
                return
            if len(results) != len(items):
                log.error("batch completion answered %d results for %d items; leases of the rest will expire",
                          len(results), len(items))
            for c, r in zip(items, results):
                self._completion_outcome(c.job, r)
        finally:
            for c in items:
                if not c.job.reported:
                    self._finish(c.job)
            self._flush_slots.release()

    async def _send_batch(self, items: List[_Completed], body: bytes) -> Optional[List[CompletionResult]]:
        failures = 0
        while True:
            try:
                return await self._client._complete_many_encoded(body)
            except (Invalid, TooLarge) as e:
                # One item the server cannot take (a result it measures over 64 KiB, text it
                # cannot store) refuses the whole batch: report them one by one instead.
                if len(items) > 1:
                    log.warning("batch completion of %d refused (%s); reporting them one by one", len(items), e)
                for c in items:
                    await self._complete_single(c)
                return None
            except (Unauthorized, NotFound) as e:
                self.stats.request_errors += 1
                log.error("batch completion of %d refused: %s; their leases will expire and the reaper retries them",
                          len(items), e)
                return None
            except KairosError as e:
                # No answer, or 503/429: the batch may have been recorded all the same; sent
                # again unchanged, each item already completed under its token is answered 200.
                failures += 1
                self.stats.request_errors += 1
                pause = self._report_pause(e, failures, max(c.job.lease_until for c in items))
                if pause is None:
                    log.error("batch completion of %d not recorded after %d tries: %s; their leases will expire",
                              len(items), failures, e)
                    return None
                log.warning("batch completion of %d failed: %s; retrying in %.1fs", len(items), e, pause)
                await asyncio.sleep(pause)

    async def _complete_single(self, c: _Completed) -> None:
        i = c.job.instance
        c.job.reporting = True
        failures = 0
        while True:
            try:
                inst = await self._client.complete(i.id, i.lease_token, c.result,
                                                   traceparent=c.job.span.traceparent)
            except Stale as e:
                self._completion_outcome(c.job, CompletionResult(i.id, 409, None, e.detail))
            except NotFound as e:
                self._completion_outcome(c.job, CompletionResult(i.id, 404, None, e.detail))
            except (Invalid, TooLarge) as e:
                log.warning("result of %s refused (%s); failing the attempt for good", c.job.describe(), e.detail)
                c.job.reported = True
                await self._send_failure(c.job, f"the result was refused: {e.detail}", retryable=False)
            except Unauthorized as e:
                self.stats.request_errors += 1
                log.error("completion of %s refused: %s; its lease will expire and the reaper retries it",
                          c.job.describe(), e)
            except KairosError as e:
                failures += 1
                self.stats.request_errors += 1
                pause = self._report_pause(e, failures, c.job.lease_until)
                if pause is None:
                    log.error("completion of %s not recorded after %d tries: %s; its lease will expire",
                              c.job.describe(), failures, e)
                    return
                log.warning("completion of %s failed: %s; retrying in %.1fs", c.job.describe(), e, pause)
                await asyncio.sleep(pause)
                continue
            else:
                self._completion_outcome(c.job, CompletionResult(i.id, 200, inst))
            return

    def _report_pause(self, e: KairosError, failures: int, lease_until: float) -> Optional[float]:
        """How long to wait before sending a report again after ``e`` (no answer, 503, 429,
        another unexpected status), or None to give up: the lease would have expired by now
        (heartbeats extend ``lease_until`` while they get through), or the shutdown's grace
        is over and it failed a few times."""
        now = asyncio.get_running_loop().time()
        if now >= lease_until or (self._force.is_set() and failures > 3):
            return None
        # Not past the lease: the last try goes out as it would expire.
        return min(_retry_pause(e, failures), max(0.01, lease_until - now))

    def _completion_outcome(self, job: _Job, r: CompletionResult) -> None:
        if r.status == 200:
            self.stats.succeeded += 1
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s succeeded", job.describe())
        elif r.status == 409:
            self.stats.complete_conflicts += 1
            self._lease_lost(job, f"completion answered 409: {r.detail}")
            log.warning("result of %s dropped: lease lost (completion answered 409: %s)", job.describe(), r.detail)
        elif r.status == 404:
            self.stats.request_errors += 1
            log.error("result of %s not recorded: the instance no longer exists (%s)", job.describe(), r.detail)
        else:
            self.stats.request_errors += 1
            log.error("result of %s not recorded: HTTP %d (%s); its lease will expire", job.describe(), r.status, r.detail)
        self._finish(job)

    # --- heartbeats ------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            nearest: Optional[float] = None
            for job in list(self._jobs.values()):
                if job.beating or job.beats_ended or job.instance.lease_lost.is_set() or job.given_up:
                    continue
                if job.next_beat <= now:
                    job.beating = True
                    self._spawn(self._beat(job), self._beats)
                elif nearest is None or job.next_beat < nearest:
                    nearest = job.next_beat
            self._beat_wake.clear()
            timeout = None if nearest is None else max(0.0, nearest - loop.time())
            if timeout is None and not self._jobs:
                await self._beat_wake.wait()
                continue
            try:
                await asyncio.wait_for(self._beat_wake.wait(), timeout=timeout if timeout is not None else 0.5)
            except asyncio.TimeoutError:
                pass

    async def _beat(self, job: _Job) -> None:
        loop = asyncio.get_running_loop()
        i = job.instance
        try:
            if job.reported:
                return
            sent = loop.time()
            after = await self._client.heartbeat(i.id, i.lease_token, lease_seconds=self.lease_seconds)
            self.stats.heartbeats += 1
            i.lease_expires_at = after.lease_expires_at
            job.lease_until = max(job.lease_until, sent + self.lease_seconds)
            job.next_beat = loop.time() + self._beat_every
        except Stale as e:
            if job.reported:
                return  # the report landed first: the lease ended normally
            if job.reporting:
                # The report may have landed and its answer been lost; its retry tells.
                job.beats_ended = True
                log.debug("heartbeat of %s answered 409 while its report is under way", job.describe())
                return
            self.stats.heartbeat_conflicts += 1
            self._lease_lost(job, f"heartbeat answered 409: {e.detail}")
            log.warning("lease of %s lost (heartbeat answered 409: %s); its result will be dropped",
                        job.describe(), e.detail)
        except NotFound as e:
            self._lease_lost(job, f"heartbeat answered 404: {e.detail}")
            log.warning("lease of %s lost: the instance no longer exists (%s)", job.describe(), e.detail)
        except KairosError as e:
            self.stats.request_errors += 1
            job.next_beat = loop.time() + min(1.0, self._beat_every / 3.0)
            log.warning("heartbeat of %s failed: %s; retrying", job.describe(), e)
        finally:
            job.beating = False
            self._beat_wake.set()

    # --- shutdown --------------------------------------------------------------------------------

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        running = [j.future for j in self._jobs.values() if j.future is not None and not j.future.done()]
        if running:
            deadline = loop.time() + self.shutdown_grace
            force = asyncio.ensure_future(self._force.wait())
            try:
                while not self._force.is_set():
                    pending = [f for f in running if not f.done()]
                    remaining = deadline - loop.time()
                    if not pending or remaining <= 0:
                        break
                    await asyncio.wait([*pending, force], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                force.cancel()
        for job in list(self._jobs.values()):
            if job.future is None or job.future.done() or job.given_up:
                continue
            job.given_up = True
            self.stats.given_up_at_shutdown += 1
            self._lease_lost(job, "the worker shut down before the handler finished")
            log.warning("%s given up at shutdown: the handler still runs after %.0fs; failing it retryable",
                        job.describe(), self.shutdown_grace)
            if self._is_async:
                job.future.cancel()
            # Given back, not failed on its merits: retryable at once, so another worker takes it
            # without waiting out the task's backoff.
            self._report_failure(job, f"worker {self.worker_id} shut down before the handler finished",
                                 retryable=True, at_once=True)
        # Report what is held: the queued successes at once, then every report in flight.
        self._flush_now = True
        self._more.set()
        deadline = loop.time() + REPORT_TIMEOUT
        while (self._queue or self._reports) and loop.time() < deadline:
            pending = list(self._reports)
            if pending:
                await asyncio.wait(pending, timeout=max(0.0, min(0.1, deadline - loop.time())))
            else:
                await asyncio.sleep(0.01)
        left = len(self._queue) + len(self._reports)
        if left:
            log.error("worker %s: %d outcome(s) not reported within %.0fs; their leases will expire and the reaper "
                      "retries them", self.worker_id, left, REPORT_TIMEOUT)


def _retry_pause(e: KairosError, failures: int) -> float:
    """The server's ``Retry-After`` on a 503/429, else the backoff."""
    if isinstance(e, Unavailable) and e.retry_after is not None:
        return e.retry_after
    return _backoff(failures)


def _backoff(failures: int) -> float:
    """0.1 s doubling to 5 s, with +-25% jitter."""
    base = min(5.0, 0.1 * 2.0 ** min(failures, 10))
    return base * random.uniform(0.75, 1.25)
