"""The push side against a real kairos: signatures of real pushes, and WebhookReceiver
answering inline, with 202 and callbacks, and refusing bad signatures."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Tuple

import uvicorn

from conftest import Kairos, eventually, free_port
from kairos_agent import ClaimedInstance, Fatal, TaskSpec, Throttled, WebhookReceiver, manual, sign, verify_signature
from kairos_agent.webhook import ASGIReceive, ASGIScope, ASGISend

SECRET = "push-signing-key-0001"


class Served:
    """An ASGI app served by uvicorn on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="asgi", daemon=True)

    def __enter__(self) -> "Served":
        self.thread.start()
        eventually(lambda: self.server.started, "the receiver listening", timeout=10)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(30)


class Recorder:
    """Records every request (headers and the raw body) and answers 200 success."""

    def __init__(self) -> None:
        self.requests: List[Tuple[Dict[str, str], bytes]] = []

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].replace("lifespan.", "")
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.requests.append((headers, body))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"status": "success", "result": {"recorded": true}}'})


def _webhook_task(k: Kairos, task_id: str, url: str, secret: str = SECRET, **execution: Any) -> None:
    with k.client() as c:
        c.put_task(TaskSpec(
            id=task_id, agent_id="hook_agent", trigger=manual(),
            execution={"concurrency_limit": 10, **execution},
            dispatch={"mode": "webhook", "url": url, "secret": secret, "timeout_seconds": 10},
            circuit_breaker={"failure_threshold": 1000},
        ))


def test_verify_signature_matches_the_daemons_real_pushes(kairos: Kairos) -> None:
    recorder = Recorder()
    with Served(recorder) as served:
        _webhook_task(kairos, "signed", f"{served.url}/kairos/push")
        with kairos.client() as c:
            inst = c.trigger("signed", window_key="w1", context={"q": "é ✓"})
            eventually(lambda: c.get_instance(inst.id).status == "SUCCESS", "the push recorded", timeout=20)
            assert c.get_instance(inst.id).result == {"recorded": True}
    assert len(recorder.requests) == 1
    headers, body = recorder.requests[0]
    header = headers["kairos-signature"]
    assert headers["idempotency-key"] == "signed:w1"

    assert verify_signature(SECRET, header, body)
    assert verify_signature(SECRET.encode(), header, body)
    stamp = int(header.split(",")[0].removeprefix("t="))
    assert abs(stamp - time.time()) < 60
    assert sign(SECRET, body, stamp) == header  # the same bytes as the daemon signs

    assert not verify_signature("another-secret", header, body)
    assert not verify_signature(SECRET, header, body + b" ")
    assert not verify_signature(SECRET, header, body.replace(b"signed:w1", b"signed:w2"))
    assert not verify_signature(SECRET, header, body, now=stamp + 301)
    assert verify_signature(SECRET, header, body, now=stamp + 299)
    assert verify_signature(SECRET, header, body, tolerance=None, now=stamp + 10_000)
    assert not verify_signature(SECRET, None, body)
    assert not verify_signature(SECRET, "v1=" + header.split("v1=")[1], body)
    assert not verify_signature(SECRET, "garbage", body)
    # Hostile headers are refused, never an exception (a receiver must not answer 500).
    assert not verify_signature(SECRET, f"t=\u00b2,v1={header.split('v1=')[1]}", body)
    assert not verify_signature(SECRET, f"t={stamp},v1=\u00e9\u00e9", body)
    assert not verify_signature(SECRET, f"t={stamp},v1=", body)
    # A rotated secret: the old and the new signature side by side.
    rotated = sign("old-secret", body, stamp) + "," + header.split(",")[1]
    assert verify_signature(SECRET, rotated, body)


def test_receiver_answers_inline_or_202_with_callbacks_and_fails_fatal_for_good(kairos: Kairos) -> None:
    seen: Dict[str, ClaimedInstance] = {}

    async def handler(instance: ClaimedInstance) -> Any:
        seen[instance.window_key] = instance
        if instance.window_key == "quick":
            return {"answer": 42, "region": instance.context.get("region")}
        if instance.window_key == "slow":
            await asyncio.sleep(1.5)
            return {"slow": True}
        if instance.window_key == "retry":
            raise RuntimeError("model API timed out")
        raise Fatal("the prompt template is missing")

    receiver = WebhookReceiver(handler, SECRET, token=kairos.agent_token, respond_within=0.5)
    with Served(receiver) as served:
        _webhook_task(kairos, "pushed", f"{served.url}/", max_retries=0)
        with kairos.client() as c:
            ids = {k: c.trigger("pushed", window_key=k, context={"region": "eu"}).id
                   for k in ("quick", "slow", "retry", "fatal")}
            eventually(lambda: all(c.get_instance(i).status in ("SUCCESS", "DEAD") for i in ids.values()),
                       "all four pushes settled", timeout=30)
            got = {k: c.get_instance(i) for k, i in ids.items()}
        assert asyncio.run_coroutine_threadsafe(receiver.wait_idle(5), _loop_of(served)).result(10)

    assert got["quick"].status == "SUCCESS" and got["quick"].result == {"answer": 42, "region": "eu"}
    assert got["slow"].status == "SUCCESS" and got["slow"].result == {"slow": True}
    # The slow one was reported by the receiver's callback, under the push's lease.
    assert got["slow"].events[-1].actor == "agent:sdk-test"
    assert got["quick"].events[-1].actor == "webhook:sdk-test"
    retry = got["retry"]
    assert retry.status == "DEAD" and retry.error_kind == "dispatch" and "model API timed out" in (retry.error or "")
    fatal = got["fatal"]
    assert (fatal.status, fatal.error_kind, fatal.error) == ("DEAD", "agent", "the prompt template is missing")
    assert seen["quick"].idempotency_key == "pushed:quick" and seen["quick"].lease_token
    s = receiver.stats
    assert (s.received, s.answered_success, s.answered_failure, s.accepted) == (4, 1, 1, 2)
    assert s.callbacks_recorded == 2 and s.lease_lost == 0 and s.bad_signature == 0


def test_receiver_reports_throttled_through_the_fail_callback_and_is_pushed_again(kairos: Kairos) -> None:
    pushes: List[Tuple[str, int]] = []

    async def handler(instance: ClaimedInstance) -> Any:
        pushes.append((instance.window_key, instance.attempt))
        if [k for k, _ in pushes].count(instance.window_key) == 1:
            if instance.window_key == "slow":
                await asyncio.sleep(1.0)  # past respond_within: reported by the later callback
            raise Throttled(after=1, reason=f"HTTP 429 ({instance.window_key})")
        return {"window": instance.window_key}

    receiver = WebhookReceiver(handler, SECRET, token=kairos.agent_token, respond_within=0.5)
    with Served(receiver) as served:
        # No retries: a throttle that spent the attempt would leave the instance DEAD.
        _webhook_task(kairos, "pushed_quota", f"{served.url}/", max_retries=0)
        with kairos.client() as c:
            ids = {k: c.trigger("pushed_quota", window_key=k).id for k in ("quick", "slow")}
            eventually(lambda: all(c.get_instance(i).status in ("SUCCESS", "DEAD") for i in ids.values()),
                       "both pushes settled", timeout=30)
            got = {k: c.get_instance(i) for k, i in ids.items()}
        assert asyncio.run_coroutine_threadsafe(receiver.wait_idle(5), _loop_of(served)).result(10)

    for k, inst in got.items():
        assert (inst.status, inst.attempt, inst.result) == ("SUCCESS", 1, {"window": k}), inst
        throttles = [e for e in inst.events if e.from_ == "RUNNING" and e.to == "PENDING"]
        assert [(e.attempt, e.reason) for e in throttles] == [(1, f"throttled: HTTP 429 ({k})")]
    assert sorted(pushes) == [("quick", 1), ("quick", 1), ("slow", 1), ("slow", 1)]
    s = receiver.stats
    # Both throttles went through the fail callback (answered 202); both second pushes inline.
    assert (s.received, s.throttled, s.accepted, s.callbacks_recorded, s.answered_success) == (4, 2, 2, 2, 2)
    assert s.answered_failure == 0 and s.lease_lost == 0 and s.callback_errors == 0


def test_receiver_reports_a_throttle_s_hold_limit_and_drops_one_the_server_refuses(kairos: Kairos) -> None:
    pushes: List[Tuple[str, int]] = []

    async def handler(instance: ClaimedInstance) -> Any:
        pushes.append((instance.window_key, instance.attempt))
        if [k for k, _ in pushes].count(instance.window_key) == 1:
            limit = "push-api" if instance.window_key == "held" else "no-such-limit"
            raise Throttled(after=1, reason=f"HTTP 429 ({instance.window_key})", hold_limit=limit)
        return {"window": instance.window_key}

    receiver = WebhookReceiver(handler, SECRET, token=kairos.agent_token, respond_within=0.5)
    with Served(receiver) as served:
        with kairos.client() as c:
            c.put_limit("push-api", concurrency=5)
        _webhook_task(kairos, "pushed_held", f"{served.url}/", max_retries=0, limits=[{"name": "push-api"}])
        with kairos.client() as c:
            ids = {k: c.trigger("pushed_held", window_key=k).id for k in ("held", "unknown")}
            eventually(lambda: all(c.get_instance(i).status in ("SUCCESS", "DEAD") for i in ids.values()),
                       "both pushes settled", timeout=30)
            got = {k: c.get_instance(i) for k, i in ids.items()}
        assert asyncio.run_coroutine_threadsafe(receiver.wait_idle(5), _loop_of(served)).result(10)

    for k, inst in got.items():
        assert (inst.status, inst.attempt, inst.result) == ("SUCCESS", 1, {"window": k}), inst
    # The hold is kept in the limit's state (it has lifted by now): set by the held window's
    # report, with its reason.
    reason = kairos.scalar("select held_reason from limit_state where limit_name = 'push-api' and key = ''")
    assert reason is not None and "HTTP 429 (held)" in reason and ids["held"] in reason
    s = receiver.stats
    assert (s.throttled, s.callbacks_recorded, s.answered_success) == (2, 2, 2)
    assert s.callback_errors == 1, "the unknown limit was refused once, then dropped"


def test_receiver_refuses_a_push_with_a_wrong_signature(kairos: Kairos) -> None:
    calls: List[str] = []
    receiver = WebhookReceiver(lambda instance: calls.append(instance.id), "not-the-tasks-secret")
    with Served(receiver) as served:
        _webhook_task(kairos, "mis_keyed", served.url, max_retries=0)
        with kairos.client() as c:
            inst = c.trigger("mis_keyed")
            eventually(lambda: c.get_instance(inst.id).status == "DEAD", "the push refused", timeout=20)
            dead = c.get_instance(inst.id)
    assert dead.error_kind == "dispatch" and (dead.error or "").startswith("HTTP 401")
    assert calls == [] and receiver.stats.bad_signature == 1


def _loop_of(served: Served) -> asyncio.AbstractEventLoop:
    """The event loop uvicorn serves on (its thread's running loop)."""
    servers = getattr(served.server, "servers", None)
    assert servers, "uvicorn is not serving"
    loop: asyncio.AbstractEventLoop = servers[0].get_loop()
    return loop
