"""The webhook side: check a push's ``Kairos-Signature``, and an ASGI app that turns a push
into a handler call.

kairos pushes each instance of a ``dispatch: {mode: webhook}`` task as
``POST <url>`` with the body ``{"instance": {...}, "callbacks": {"heartbeat", "complete",
"fail"}}`` and the header ``Kairos-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret,
"<t>.<body>")>`` (``openapi.yaml``, "Webhook push"). The receiver's answer decides the attempt:
a 2xx with ``{"status": "success", "result": ...}`` completes it; ``202`` means the receiver
reports later through the callbacks with the instance's lease token; anything else is a failed
attempt (retryable, ``error_kind: dispatch``).

:class:`WebhookReceiver` answers inline when the handler finishes within ``respond_within``
seconds, else ``202`` and reports through the callbacks when it does finish (heartbeating
meanwhile). Raising :class:`~kairos_agent.Fatal` needs the callback too (an answer can only
fail an attempt retryably), so a fatal failure is answered ``202`` and reported with
``retryable: false``; so is :class:`~kairos_agent.Throttled`, reported with
``retry_after_seconds`` (the instance waits as PENDING, its attempt unspent, and is pushed
again after the wait) and its ``hold_limit``, if any.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Set, Tuple, Union, cast

import httpx

from . import _api
from .errors import Invalid, KairosError, NotFound, Stale
from .models import ClaimedInstance
from .worker import MAX_RESULT_BYTES, Fatal, Handler, Throttled, _error_text, _is_async

__all__ = ["WebhookReceiver", "WebhookStats", "sign", "verify_signature"]

log = logging.getLogger("kairos_agent.webhook")

_STAMP = re.compile(r"[0-9]{1,20}")

#: Largest push body the receiver reads (a claimed instance with a 64 KiB context fits).
MAX_PUSH_BYTES = 1 << 20

ASGIScope = Mapping[str, Any]
ASGIReceive = Callable[[], Awaitable[Mapping[str, Any]]]
ASGISend = Callable[[Mapping[str, Any]], Awaitable[None]]


def sign(secret: Union[str, bytes], body: bytes, timestamp: Optional[int] = None) -> str:
    """The ``Kairos-Signature`` header kairos would send for ``body`` at ``timestamp``."""
    t = str(int(time.time()) if timestamp is None else timestamp)
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    mac = hmac.new(key, t.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify_signature(
    secret: Union[str, bytes],
    header: Optional[str],
    body: bytes,
    tolerance: Optional[float] = 300,
    *,
    now: Optional[float] = None,
) -> bool:
    """Whether ``header`` (``Kairos-Signature``) signs ``body`` (the raw bytes as received)
    with ``secret``, at a time within ``tolerance`` seconds of ``now`` (default: this
    machine's clock; ``tolerance=None`` skips the check). Compared in constant time; a
    missing or malformed header is ``False``. Several ``v1=`` values (a secret being rotated)
    pass when any matches."""
    if not header:
        return False
    stamp: Optional[str] = None
    candidates: List[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            stamp = value
        elif key == "v1":
            candidates.append(value)
    if stamp is None or not _STAMP.fullmatch(stamp) or not candidates:
        return False
    if tolerance is not None:
        clock = time.time() if now is None else now
        if abs(clock - int(stamp)) > tolerance:
            return False
    key_bytes = secret.encode("utf-8") if isinstance(secret, str) else secret
    expected = hmac.new(key_bytes, stamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest().encode("ascii")
    # Compared as bytes: compare_digest refuses str with non-ASCII characters, and a header
    # is whatever the sender put there.
    return any(hmac.compare_digest(expected, c.encode("utf-8", "replace")) for c in candidates)


@dataclass
class WebhookStats:
    """What a receiver did (updated on its event loop)."""

    #: Pushes whose signature checked out.
    received: int = 0
    #: Pushes refused with 401 (missing, wrong or stale signature).
    bad_signature: int = 0
    #: Answered 200 with the result.
    answered_success: int = 0
    #: Answered 500: the handler failed retryably within ``respond_within``.
    answered_failure: int = 0
    #: Answered 202 (long work, or a fatal or throttled outcome to report).
    accepted: int = 0
    #: Handlers that raised :class:`~kairos_agent.Throttled`: reported through the fail
    #: callback with ``retry_after_seconds``.
    throttled: int = 0
    #: Reports made through the callbacks that kairos recorded.
    callbacks_recorded: int = 0
    #: Callback reports refused with 409: the lease was lost.
    lease_lost: int = 0
    #: Callback reports that got no usable answer.
    callback_errors: int = 0


_JSON = [(b"content-type", b"application/json")]


class WebhookReceiver:
    """An ASGI app for pushes: ``app = WebhookReceiver(handler, secret, token=...)``, then
    serve it with any ASGI server (``uvicorn module:app``) at the task's ``dispatch.url``.

    :param handler: called with the pushed :class:`~kairos_agent.ClaimedInstance`; plain
        functions run in a thread, ``async def`` on the event loop. Return the result; raise
        :class:`~kairos_agent.Retryable` (or anything) to fail the attempt retryably,
        :class:`~kairos_agent.Fatal` to fail it for good, :class:`~kairos_agent.Throttled` to
        have it pushed again after a wait with its attempt unspent.
    :param secret: the task's ``dispatch.secret``.
    :param token: a bearer token allowed for the instance's agent, sent with callbacks.
    :param respond_within: seconds to wait for the handler before answering ``202`` and
        reporting through the callbacks instead. Keep it well below the task's
        ``dispatch.timeout_seconds`` (default 30).
    :param lease_seconds: after a ``202``, the lease asked for on each heartbeat (sent every
        third of it) while the handler runs.
    :param tolerance: largest accepted age of a signature's timestamp (seconds).
    """

    def __init__(
        self,
        handler: Handler,
        secret: Union[str, bytes],
        *,
        token: Optional[str] = None,
        respond_within: float = 10.0,
        lease_seconds: int = 60,
        tolerance: Optional[float] = 300,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        if respond_within < 0:
            raise ValueError("respond_within must not be negative")
        if lease_seconds < 1:
            raise ValueError("lease_seconds must be at least 1")
        self.handler = handler
        self.secret = secret
        self.respond_within = respond_within
        self.lease_seconds = lease_seconds
        self.tolerance = tolerance
        self.stats = WebhookStats()
        self._is_async = _is_async(handler)
        self._headers = {"User-Agent": "kairos-agent-python"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._transport = transport
        self._http: Optional[httpx.AsyncClient] = None
        self._background: Set["asyncio.Future[None]"] = set()

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope.get("method") != "POST":
            await _respond(send, 405, {"error": "pushes are POST requests"})
            return
        body = await _read_body(receive)
        if body is None:
            await _respond(send, 413, {"error": f"a push body is at most {MAX_PUSH_BYTES} bytes"})
            return
        header = _header(scope, b"kairos-signature")
        if not verify_signature(self.secret, header, body, self.tolerance):
            self.stats.bad_signature += 1
            log.warning("push refused: missing, wrong or stale Kairos-Signature (idempotency key %s)",
                        _header(scope, b"idempotency-key") or "none")
            await _respond(send, 401, {"error": "bad signature"})
            return
        try:
            push = json.loads(body)
            instance = ClaimedInstance.from_json(push["instance"])
            callbacks = {k: str(v) for k, v in dict(push["callbacks"]).items()}
        except (ValueError, KeyError, TypeError) as e:
            log.warning("push refused: not a kairos push body (%s)", e)
            await _respond(send, 400, {"error": f"not a kairos push: {e}"})
            return
        self.stats.received += 1
        status, answer = await self._run(instance, callbacks)
        await _respond(send, status, answer)

    async def _run(self, instance: ClaimedInstance, callbacks: Dict[str, str]) -> Tuple[int, Any]:
        what = _describe(instance)
        fut: "asyncio.Future[Any]"
        if self._is_async:
            fut = asyncio.ensure_future(cast(Awaitable[Any], self.handler(instance)))
        else:
            fut = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(None, self.handler, instance))
        done, _ = await asyncio.wait({fut}, timeout=self.respond_within)
        if not done:
            self.stats.accepted += 1
            log.info("%s: still running after %.1fs; answering 202, reporting through the callbacks",
                     what, self.respond_within)
            self._detach(self._finish_later(instance, callbacks, fut))
            return 202, {"status": "accepted"}
        outcome = _outcome(fut)
        if outcome.ok:
            self.stats.answered_success += 1
            return 200, {"status": "success", "result": outcome.result}
        error = outcome.error
        if outcome.retry_after is not None:
            # Only a callback can report a throttled attempt (an answer fails it, spending it).
            self.stats.accepted += 1
            self.stats.throttled += 1
            log.info("%s throttled, to be pushed again in %ds: %s; answering 202 and reporting it through the "
                     "fail callback", what, outcome.retry_after, error)
            self._detach(self._report(instance, callbacks, "fail", _throttle_body(instance, outcome)))
            return 202, {"status": "accepted"}
        if outcome.retryable:
            self.stats.answered_failure += 1
            log.warning("%s failed (retryable): %s", what, error)
            return 500, {"status": "failed", "error": error}
        # Only a callback can fail an attempt for good.
        self.stats.accepted += 1
        log.warning("%s failed (fatal): %s; answering 202 and reporting it through the fail callback", what, error)
        self._detach(self._report(instance, callbacks, "fail",
                                  {"lease_token": instance.lease_token, "error": error, "retryable": False}))
        return 202, {"status": "accepted"}

    def _detach(self, coro: Awaitable[None]) -> None:
        t = asyncio.ensure_future(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    async def _finish_later(self, instance: ClaimedInstance, callbacks: Dict[str, str], fut: "asyncio.Future[Any]") -> None:
        beats = asyncio.ensure_future(self._heartbeats(instance, callbacks))
        try:
            await asyncio.wait({fut})
        finally:
            beats.cancel()
        if instance.lease_lost.is_set():
            log.info("result of %s dropped: lease lost (%s)", _describe(instance), instance.lease_lost.reason)
            return
        outcome = _outcome(fut)
        if outcome.ok:
            await self._report(instance, callbacks, "complete",
                               {"lease_token": instance.lease_token, "result": outcome.result})
        elif outcome.retry_after is not None:
            self.stats.throttled += 1
            log.info("%s throttled, to be pushed again in %ds: %s", _describe(instance), outcome.retry_after,
                     outcome.error)
            await self._report(instance, callbacks, "fail", _throttle_body(instance, outcome))
        else:
            log.warning("%s failed (%s): %s", _describe(instance), "retryable" if outcome.retryable else "fatal",
                        outcome.error)
            await self._report(instance, callbacks, "fail", {
                "lease_token": instance.lease_token, "error": outcome.error, "retryable": outcome.retryable,
            })

    async def _heartbeats(self, instance: ClaimedInstance, callbacks: Dict[str, str]) -> None:
        every = self.lease_seconds / 3.0
        while True:
            await asyncio.sleep(every)
            try:
                await self._post(callbacks["heartbeat"], {"lease_token": instance.lease_token,
                                                          "lease_seconds": self.lease_seconds})
            except (Stale, NotFound) as e:
                self.stats.lease_lost += 1
                instance.lease_lost.set(f"heartbeat answered {e.status}: {e.detail}")
                log.warning("lease of %s lost (heartbeat answered %d: %s)", _describe(instance), e.status, e.detail)
                return
            except KairosError as e:
                self.stats.callback_errors += 1
                log.warning("heartbeat of %s failed: %s", _describe(instance), e)

    async def _report(self, instance: ClaimedInstance, callbacks: Dict[str, str], kind: str, body: Dict[str, Any]) -> None:
        what = _describe(instance)
        for attempt in range(1, 7):
            try:
                await self._post(callbacks[kind], body)
                self.stats.callbacks_recorded += 1
                log.info("%s: %s recorded through the callback", what, kind)
                return
            except Stale as e:
                self.stats.lease_lost += 1
                instance.lease_lost.set(f"{kind} answered 409: {e.detail}")
                log.warning("%s of %s not recorded: lease lost (%s)", kind, what, e.detail)
                return
            except Invalid as e:
                self.stats.callback_errors += 1
                if "hold_limit" in body and any(f.field == "hold_limit" for f in e.errors):
                    # Checked before anything is written: the throttle itself can still be reported.
                    log.error("%s of %s: limit %r not held (%s); reporting the throttle without it",
                              kind, what, body["hold_limit"], e.detail)
                    body = {k: v for k, v in body.items() if k != "hold_limit"}
                    continue
                log.error("%s of %s refused: %s", kind, what, e)
                return
            except KairosError as e:
                self.stats.callback_errors += 1
                if e.status and e.status < 500 and e.status != 429:
                    log.error("%s of %s refused: %s", kind, what, e)
                    return
                log.warning("%s of %s failed (try %d): %s", kind, what, attempt, e)
                await asyncio.sleep(min(5.0, 0.2 * 2**attempt))
        log.error("%s of %s not recorded; the lease will expire and the instance be retried", kind, what)

    async def _post(self, url: str, body: Dict[str, Any]) -> None:
        if self._http is None:
            self._http = httpx.AsyncClient(headers=self._headers, timeout=_api.DEFAULT_TIMEOUT, transport=self._transport)
        call: _api.Call[None] = _api.Call("POST", url, lambda r: None, json=body)
        try:
            resp = await self._http.send(_api.build(self._http, call))
        except httpx.TransportError as e:
            raise _api.transport_error(call, e) from e
        _api.finish(call, resp)

    async def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """Wait for the callbacks of long work in flight; True when none is left."""
        pending = list(self._background)
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        return not self._background

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _lifespan(self, receive: ASGIReceive, send: ASGISend) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if not await self.wait_idle(timeout=30.0):
                    log.error("%d long run(s) still unreported at shutdown; their leases will expire",
                              len(self._background))
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


@dataclass
class _Outcome:
    ok: bool
    result: Any = None
    error: str = ""
    retryable: bool = True
    #: Set when the handler raised Throttled: the ``retry_after_seconds`` to report.
    retry_after: Optional[int] = None
    #: The limit to hold as long (``Throttled(hold_limit=...)``).
    hold_limit: Optional[str] = None


def _throttle_body(instance: ClaimedInstance, outcome: _Outcome) -> Dict[str, Any]:
    body: Dict[str, Any] = {
        "lease_token": instance.lease_token, "error": outcome.error, "retry_after_seconds": outcome.retry_after,
    }
    if outcome.hold_limit is not None:
        body["hold_limit"] = outcome.hold_limit
    return body


def _outcome(fut: "asyncio.Future[Any]") -> _Outcome:
    if fut.cancelled():
        return _Outcome(False, error="the handler was cancelled")
    exc = fut.exception()
    if isinstance(exc, Throttled):
        return _Outcome(False, error=_error_text(exc), retry_after=exc.retry_after_seconds,
                        hold_limit=exc.hold_limit)
    if exc is not None:
        return _Outcome(False, error=_error_text(exc), retryable=not isinstance(exc, Fatal))
    result = fut.result()
    try:
        size = len(json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as e:
        return _Outcome(False, error=f"the handler's result is not JSON: {e}", retryable=False)
    if size > MAX_RESULT_BYTES:
        return _Outcome(
            False,
            error=f"the handler's result is {size} bytes serialized; at most {MAX_RESULT_BYTES} are kept",
            retryable=False,
        )
    return _Outcome(True, result=result)


def _describe(i: ClaimedInstance) -> str:
    return f"instance {i.id} (task {i.task_id}, window {i.window_key}, attempt {i.attempt})"


def _header(scope: ASGIScope, name: bytes) -> Optional[str]:
    for k, v in scope.get("headers", []):
        if k.lower() == name:
            return bytes(v).decode("latin-1")
    return None


async def _read_body(receive: ASGIReceive) -> Optional[bytes]:
    chunks: List[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_PUSH_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _respond(send: ASGISend, status: int, body: Any) -> None:
    data = json.dumps(body, separators=(",", ":")).encode("utf-8")
    await send({"type": "http.response.start", "status": status, "headers": _JSON})
    await send({"type": "http.response.body", "body": data})
