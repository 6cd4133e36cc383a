"""Exceptions: the API's problem+json answers mapped to one class per status family.

Every error the client raises is a :class:`KairosError`. The status decides the class:

==========  =======================================================================
status      exception
==========  =======================================================================
400, 422    :class:`Invalid` (``errors`` lists ``{field, message}`` for 422)
401         :class:`Unauthorized`
403         :class:`Forbidden` (a subclass of :class:`Unauthorized`)
404         :class:`NotFound`
409         :class:`Stale` (a stale lease, an illegal transition, a concurrent create)
412         :class:`VersionMismatch`
413         :class:`TooLarge` (a subclass of :class:`Invalid`)
429, 503    :class:`Unavailable` (``retry_after`` from the ``Retry-After`` header)
other       :class:`KairosError`
==========  =======================================================================

A request that got no answer at all (connection refused, timeout) is :class:`TransportError`.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional

__all__ = [
    "FieldError",
    "Forbidden",
    "Invalid",
    "KairosError",
    "NotFound",
    "Stale",
    "TooLarge",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "VersionMismatch",
    "error_for",
]


class FieldError:
    """One validation problem: the dotted path of the field and what is wrong with it."""

    __slots__ = ("field", "message")

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message

    def __repr__(self) -> str:
        return f"FieldError(field={self.field!r}, message={self.message!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FieldError)
            and other.field == self.field
            and other.message == self.message
        )

    def __hash__(self) -> int:
        return hash((self.field, self.message))


class KairosError(Exception):
    """An answer the API refused with, or a request that got no answer.

    ``status`` is the HTTP status (0 when there was no answer), ``detail`` the problem's detail
    (or the transport error's text), ``problem`` the whole problem+json body when there was one.
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        method: str = "",
        path: str = "",
        problem: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.status = status
        self.detail = detail
        self.method = method
        self.path = path
        self.problem: Mapping[str, Any] = problem or {}
        where = f"{method} {path}: " if method else ""
        code = f"HTTP {status}: " if status else ""
        super().__init__(f"{where}{code}{detail}")

    @property
    def type(self) -> str:
        """The problem type URI (``https://kairos.dev/problems/<slug>``), or ``""``."""
        value = self.problem.get("type")
        return value if isinstance(value, str) else ""


class TransportError(KairosError):
    """No answer: the connection failed, was cut, or the request timed out."""


class Invalid(KairosError):
    """400 (not JSON) or 422 (values that parse but are not allowed)."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        method: str = "",
        path: str = "",
        problem: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(status, detail, method=method, path=path, problem=problem)
        self.errors: List[FieldError] = []
        raw = self.problem.get("errors")
        if isinstance(raw, list):
            for e in raw:
                if isinstance(e, Mapping):
                    self.errors.append(FieldError(str(e.get("field", "")), str(e.get("message", ""))))


class TooLarge(Invalid):
    """413: a result over 64 KiB, or a body over the server's ``max_body_bytes``."""


class Unauthorized(KairosError):
    """401: no token, or an unknown one."""


class Forbidden(Unauthorized):
    """403: the token's role or agent list does not allow this call."""


class NotFound(KairosError):
    """404: no such task or instance (or another agent's, for a token limited to agents)."""


class Stale(KairosError):
    """409: the lease token no longer holds the instance (reaped, cancelled, finished, or a
    newer attempt holds it), or the transition is not allowed from the instance's status."""


class VersionMismatch(KairosError):
    """412: ``If-Match`` named another version than the task's current one."""


class Unavailable(KairosError):
    """429 (too many waiting claims) or 503 (shutting down, database unavailable).

    ``retry_after`` is the server's ``Retry-After`` in seconds, when it sent one.
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        method: str = "",
        path: str = "",
        problem: Optional[Mapping[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(status, detail, method=method, path=path, problem=problem)
        self.retry_after = retry_after


def error_for(
    status: int,
    problem: Optional[Mapping[str, Any]],
    text: str,
    *,
    method: str,
    path: str,
    retry_after: Optional[float] = None,
) -> KairosError:
    """The exception for an answer with ``status`` (>= 400) and its parsed body, if any."""
    detail = text
    if problem is not None:
        d = problem.get("detail")
        if isinstance(d, str) and d:
            detail = d
        else:
            t = problem.get("title")
            if isinstance(t, str) and t:
                detail = t
    if not detail:
        detail = "no detail given"
    kw: Any = {"method": method, "path": path, "problem": problem}
    if status in (400, 422):
        return Invalid(status, detail, **kw)
    if status == 413:
        return TooLarge(status, detail, **kw)
    if status == 401:
        return Unauthorized(status, detail, **kw)
    if status == 403:
        return Forbidden(status, detail, **kw)
    if status == 404:
        return NotFound(status, detail, **kw)
    if status == 409:
        return Stale(status, detail, **kw)
    if status == 412:
        return VersionMismatch(status, detail, **kw)
    if status in (429, 503):
        return Unavailable(status, detail, retry_after=retry_after, **kw)
    return KairosError(status, detail, **kw)
