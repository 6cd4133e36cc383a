"""Each REST call once, as data: method, path, query, body and how to read the answer. The
sync and async clients only send these, so both speak the same API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union
from urllib.parse import quote

import httpx

from .errors import KairosError, TransportError, error_for
from .models import (
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
    format_timestamp,
)

T = TypeVar("T")

#: Longest the client waits for an answer, except a long-poll claim, which adds its wait.
DEFAULT_TIMEOUT = 30.0
#: Most instances one claim may take (the server's bound).
MAX_CLAIM = 100
#: Most items one ``POST /v1/completions`` may carry (the server's bound).
MAX_COMPLETIONS = 500


class _NoBody:
    pass


NO_BODY: Any = _NoBody()


@dataclass
class Call(Generic[T]):
    """One request and the parser of its (2xx) answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Optional[Dict[str, str]] = None
    json: Any = NO_BODY
    content: Optional[bytes] = None
    headers: Dict[str, str] = field(default_factory=dict)
    timeout: Optional[float] = None


def _seg(value: str) -> str:
    return quote(value, safe="")


def _body(resp: httpx.Response) -> Any:
    return resp.json()


def _task(resp: httpx.Response) -> Task:
    return Task.from_json(resp.json())


def _instance(resp: httpx.Response) -> Instance:
    return Instance.from_json(resp.json())


def _none(resp: httpx.Response) -> None:
    return None


def _params(**kw: Any) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for k, v in kw.items():
        if v is None:
            continue
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, datetime):
            out[k] = format_timestamp(v)
        else:
            out[k] = str(v)
    return out


def put_task(spec: TaskSpec, if_match: Optional[Union[int, str]] = None) -> Call[Tuple[bool, Task]]:
    headers = {} if if_match is None else {"If-Match": f'"{if_match}"' if isinstance(if_match, int) else if_match}
    return Call(
        "PUT",
        f"/v1/tasks/{_seg(spec.id)}",
        lambda r: (r.status_code == 201, Task.from_json(r.json())),
        json=spec.body(),
        headers=headers,
    )


def get_task(task_id: str) -> Call[Task]:
    return Call("GET", f"/v1/tasks/{_seg(task_id)}", _task)


def delete_task(task_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/tasks/{_seg(task_id)}", _none)


def list_tasks(
    agent_id: Optional[str], paused: Optional[bool], limit: Optional[int], cursor: Optional[str]
) -> Call[Page[Task]]:
    def parse(r: httpx.Response) -> Page[Task]:
        d = r.json()
        return Page([Task.from_json(t) for t in d["items"]], d.get("next_cursor"))

    return Call("GET", "/v1/tasks", parse, params=_params(agent_id=agent_id, paused=paused, limit=limit, cursor=cursor))


def pause_task(task_id: str, reason: Optional[str]) -> Call[Task]:
    return Call("POST", f"/v1/tasks/{_seg(task_id)}/pause", _task, json={} if reason is None else {"reason": reason})


def resume_task(task_id: str) -> Call[Task]:
    return Call("POST", f"/v1/tasks/{_seg(task_id)}/resume", _task)


def trigger(
    task_id: str,
    window_key: Optional[str],
    delay_seconds: Optional[int],
    run_at: Optional[Union[datetime, str]],
    context: Optional[Mapping[str, Any]],
) -> Call[Tuple[bool, Instance]]:
    body: Dict[str, Any] = {}
    if window_key is not None:
        body["window_key"] = window_key
    if delay_seconds is not None:
        body["delay_seconds"] = delay_seconds
    if run_at is not None:
        body["run_at"] = format_timestamp(run_at)
    if context is not None:
        body["context"] = dict(context)
    return Call(
        "POST",
        f"/v1/tasks/{_seg(task_id)}/trigger",
        lambda r: (r.status_code == 201, Instance.from_json(r.json())),
        json=body,
    )


def get_instance(instance_id: str) -> Call[InstanceDetail]:
    return Call("GET", f"/v1/instances/{_seg(instance_id)}", lambda r: InstanceDetail.from_json(r.json()))


def list_instances(
    task_id: Optional[str],
    agent_id: Optional[str],
    status: Optional[Union[str, Sequence[str]]],
    window_key: Optional[str],
    from_: Optional[Union[datetime, str]],
    to: Optional[Union[datetime, str]],
    limit: Optional[int],
    cursor: Optional[str],
) -> Call[Page[Instance]]:
    def parse(r: httpx.Response) -> Page[Instance]:
        d = r.json()
        return Page([Instance.from_json(i) for i in d["items"]], d.get("next_cursor"))

    statuses = status if status is None or isinstance(status, str) else ",".join(status)
    params = _params(
        task_id=task_id,
        agent_id=agent_id,
        status=statuses,
        window_key=window_key,
        to=format_timestamp(to) if to is not None else None,
        limit=limit,
        cursor=cursor,
    )
    if from_ is not None:
        params["from"] = format_timestamp(from_)
    return Call("GET", "/v1/instances", parse, params=params)


def claim(
    agent_id: str,
    worker_id: str,
    max_instances: int,
    lease_seconds: Optional[int],
    wait_seconds: Optional[int],
    claim_id: Optional[str] = None,
) -> Call[List[ClaimedInstance]]:
    body: Dict[str, Any] = {"agent_id": agent_id, "worker_id": worker_id, "max_instances": max_instances}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    if wait_seconds is not None:
        body["wait_seconds"] = wait_seconds
    if claim_id is not None:
        body["claim_id"] = claim_id

    def parse(r: httpx.Response) -> List[ClaimedInstance]:
        return [ClaimedInstance.from_json(i) for i in r.json()["instances"]]

    return Call("POST", "/v1/claims", parse, json=body, timeout=DEFAULT_TIMEOUT + (wait_seconds or 0))


def heartbeat(instance_id: str, lease_token: str, lease_seconds: Optional[int]) -> Call[Instance]:
    body: Dict[str, Any] = {"lease_token": lease_token}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    return Call("POST", f"/v1/instances/{_seg(instance_id)}/heartbeat", _instance, json=body)


def _trace_headers(traceparent: Optional[str]) -> Dict[str, str]:
    return {} if traceparent is None else {"traceparent": traceparent}


def complete(instance_id: str, lease_token: str, result: Any, traceparent: Optional[str] = None) -> Call[Instance]:
    return Call(
        "POST",
        f"/v1/instances/{_seg(instance_id)}/complete",
        _instance,
        json={"lease_token": lease_token, "result": result},
        headers=_trace_headers(traceparent),
    )


def _completion_results(r: httpx.Response) -> List[CompletionResult]:
    return [CompletionResult.from_json(x) for x in r.json()["results"]]


def complete_many(items: Sequence[Completion]) -> Call[List[CompletionResult]]:
    if not 1 <= len(items) <= MAX_COMPLETIONS:
        raise ValueError(f"complete_many takes 1 to {MAX_COMPLETIONS} items, got {len(items)}")
    body = {"completions": [{"id": c.id, "lease_token": c.lease_token, "result": c.result} for c in items]}
    return Call("POST", "/v1/completions", _completion_results, json=body)


def _completion_statuses(r: httpx.Response) -> List[CompletionResult]:
    out: List[CompletionResult] = []
    for x in r.json()["results"]:
        status = x["status"]
        if type(status) is not int:
            raise ValueError(f"status must be an integer, got {status!r}")
        out.append(CompletionResult(str(x["id"]), status, None, x.get("detail")))
    return out


def complete_many_encoded(body: bytes) -> Call[List[CompletionResult]]:
    """``POST /v1/completions`` with a body already encoded (the worker builds it from items it
    serialised one by one, to keep each request under the server's body limit). The answers
    carry no ``instance``: the worker needs only each item's status."""
    return Call(
        "POST",
        "/v1/completions",
        _completion_statuses,
        content=body,
        headers={"Content-Type": "application/json"},
    )


def fail(instance_id: str, lease_token: str, error: str, retryable: bool,
         retry_at_once: bool = False, retry_after_seconds: Optional[int] = None,
         hold_limit: Optional[str] = None, traceparent: Optional[str] = None) -> Call[Instance]:
    body: Dict[str, Any] = {"lease_token": lease_token, "error": error, "retryable": retryable}
    if retry_at_once:
        body["retry_at_once"] = True
    if retry_after_seconds is not None:
        body["retry_after_seconds"] = retry_after_seconds
    if hold_limit is not None:
        body["hold_limit"] = hold_limit
    return Call(
        "POST",
        f"/v1/instances/{_seg(instance_id)}/fail",
        _instance,
        json=body,
        headers=_trace_headers(traceparent),
    )


def _limit(resp: httpx.Response) -> Limit:
    return Limit.from_json(resp.json())


def put_limit(
    name: str,
    concurrency: Optional[int],
    rate: Optional[Rate],
    per_key: Optional[bool],
    if_match: Optional[Union[int, str]] = None,
) -> Call[Tuple[bool, Limit]]:
    body: Dict[str, Any] = {}
    if concurrency is not None:
        body["concurrency"] = concurrency
    if rate is not None:
        body["rate"] = dict(rate)
    if per_key is not None:
        body["per_key"] = per_key
    headers = {} if if_match is None else {"If-Match": f'"{if_match}"' if isinstance(if_match, int) else if_match}
    return Call(
        "PUT",
        f"/v1/limits/{_seg(name)}",
        lambda r: (r.status_code == 201, Limit.from_json(r.json())),
        json=body,
        headers=headers,
    )


def get_limit(name: str) -> Call[Limit]:
    return Call("GET", f"/v1/limits/{_seg(name)}", _limit)


def list_limits(limit: Optional[int], cursor: Optional[str]) -> Call[Page[Limit]]:
    def parse(r: httpx.Response) -> Page[Limit]:
        d = r.json()
        return Page([Limit.from_json(x) for x in d["items"]], d.get("next_cursor"))

    return Call("GET", "/v1/limits", parse, params=_params(limit=limit, cursor=cursor))


def delete_limit(name: str) -> Call[None]:
    return Call("DELETE", f"/v1/limits/{_seg(name)}", _none)


def hold_limit(name: str, seconds: int, key: Optional[str], reason: Optional[str]) -> Call[Limit]:
    body: Dict[str, Any] = {"seconds": seconds}
    if key is not None:
        body["key"] = key
    if reason is not None:
        body["reason"] = reason
    return Call("POST", f"/v1/limits/{_seg(name)}/hold", _limit, json=body)


def release_limit(name: str, key: Optional[str]) -> Call[Limit]:
    return Call("POST", f"/v1/limits/{_seg(name)}/release", _limit, json={} if key is None else {"key": key})


def retry_instance(instance_id: str, reason: Optional[str]) -> Call[Instance]:
    return Call(
        "POST",
        f"/v1/instances/{_seg(instance_id)}/retry",
        _instance,
        json={} if reason is None else {"reason": reason},
    )


def cancel_instance(instance_id: str, reason: Optional[str]) -> Call[Instance]:
    return Call(
        "POST",
        f"/v1/instances/{_seg(instance_id)}/cancel",
        _instance,
        json={} if reason is None else {"reason": reason},
    )


# --- sending ---------------------------------------------------------------------------------


def build(client: Union[httpx.Client, httpx.AsyncClient], call: Call[Any]) -> httpx.Request:
    kw: Dict[str, Any] = {"params": call.params, "headers": call.headers or None}
    if call.content is not None:
        kw["content"] = call.content
    elif call.json is not NO_BODY:
        kw["json"] = call.json
    if call.timeout is not None:
        kw["timeout"] = call.timeout
    return client.build_request(call.method, call.path, **kw)


def transport_error(call: Call[Any], exc: httpx.TransportError) -> TransportError:
    text = str(exc) or type(exc).__name__
    return TransportError(0, f"no answer ({type(exc).__name__}): {text}", method=call.method, path=call.path)


def _retry_after(resp: httpx.Response) -> Optional[float]:
    raw = resp.headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def finish(call: Call[T], resp: httpx.Response) -> T:
    """The parsed answer, or the exception for an error status or an unreadable answer."""
    if resp.status_code >= 400:
        problem: Optional[Mapping[str, Any]] = None
        try:
            parsed = resp.json()
            if isinstance(parsed, Mapping):
                problem = parsed
        except ValueError:
            problem = None
        raise error_for(
            resp.status_code,
            problem,
            resp.text[:500],
            method=call.method,
            path=call.path,
            retry_after=_retry_after(resp),
        )
    try:
        return call.parse(resp)
    except (ValueError, KeyError, TypeError) as e:
        raise KairosError(
            resp.status_code,
            f"unexpected answer: {type(e).__name__}: {e}",
            method=call.method,
            path=call.path,
        ) from e
