"""Worker against a real kairos: exactly-once drains, failure kinds, crashes, heartbeats,
lost leases and shutdown."""

from __future__ import annotations

import asyncio
import functools
import json
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import httpx
import pytest

from conftest import Kairos, RunningWorker, agent_process, backlog, eventually, trigger_many
from kairos_agent import (
    ClaimedInstance,
    Fatal,
    Limit,
    Retryable,
    TaskSpec,
    Throttled,
    Unauthorized,
    Worker,
    manual,
)
from kairos_agent.worker import _is_async

FAST_RETRY: Dict[str, Any] = {"retry_backoff": {"base_seconds": 1, "max_seconds": 1, "jitter": 0.0}}


def _worker(k: Kairos, agent_id: str, worker_id: str, **kw: Any) -> Worker:
    kw.setdefault("wait_seconds", 1)
    return Worker(k.url, agent_id, token=k.agent_token, worker_id=worker_id, **kw)


def _task(k: Kairos, task_id: str, agent_id: str, **execution: Any) -> None:
    # A high breaker threshold: the tests fail attempts on purpose, and the default (5
    # consecutive failures) would pause the task.
    with k.client() as c:
        c.put_task(TaskSpec(id=task_id, agent_id=agent_id, trigger=manual(),
                            execution={"concurrency_limit": 1000, **execution},
                            circuit_breaker={"failure_threshold": 1000}))


def test_handlers_are_told_apart_by_how_they_are_declared() -> None:
    async def coroutine_fn(instance: ClaimedInstance) -> None:
        return None

    class AsyncCallable:
        async def __call__(self, instance: ClaimedInstance) -> None:
            return None

    class SyncCallable:
        def __call__(self, instance: ClaimedInstance) -> None:
            return None

    assert _is_async(coroutine_fn) and _is_async(AsyncCallable()) and _is_async(functools.partial(coroutine_fn))
    assert not _is_async(lambda instance: None) and not _is_async(SyncCallable()) and not _is_async(print)


def test_two_workers_with_concurrency_8_drain_2000_instances_exactly_once(kairos: Kairos) -> None:
    for t in range(4):
        _task(kairos, f"drain{t}", "drain_agent", max_retries=0)
        backlog(kairos, f"drain{t}", "drain_agent", 500)
    assert kairos.statuses() == {"PENDING": 2000}

    calls: List[Tuple[str, Optional[str]]] = []
    lock = threading.Lock()

    def handler(instance: ClaimedInstance) -> Dict[str, str]:
        with lock:
            calls.append((instance.id, instance.worker_id))
        return {"window": instance.window_key}

    w1 = _worker(kairos, "drain_agent", "w1", concurrency=8, batch=100)
    w2 = _worker(kairos, "drain_agent", "w2", concurrency=8, batch=100)
    started = time.monotonic()
    with RunningWorker(w1, handler) as r1, RunningWorker(w2, handler) as r2:
        eventually(lambda: kairos.statuses().get("SUCCESS") == 2000, "2,000 instances SUCCESS", timeout=150)
        s1, s2 = r1.stop(), r2.stop()
    elapsed = time.monotonic() - started

    ids = [i for i, _ in calls]
    assert len(ids) == 2000, f"handler ran {len(ids)} times for 2,000 instances"
    assert len(set(ids)) == 2000, "an instance ran twice"
    assert kairos.query(
        "select status, attempt, count(*) from task_instance group by 1, 2"
    ) == [("SUCCESS", 1, 2000)]
    by_worker = dict(kairos.query("select worker_id, count(*) from task_instance group by 1"))
    assert by_worker == dict(Counter(w for _, w in calls))
    assert set(by_worker) == {"w1", "w2"} and by_worker["w1"] > 0 and by_worker["w2"] > 0
    assert s1.succeeded + s2.succeeded == 2000
    assert s1.claimed + s2.claimed == 2000
    assert s1.lease_lost + s2.lease_lost == 0 and s1.failed + s2.failed == 0
    mismatched = kairos.scalar("select count(*) from task_instance where result->>'window' <> window_key")
    assert mismatched == 0
    print(f"2 workers x concurrency 8 drained 2,000 instances in {elapsed:.1f}s")


def test_fatal_goes_dead_retryable_and_other_exceptions_are_retried(kairos: Kairos) -> None:
    for name in ("fatal", "retry", "boom"):
        _task(kairos, name, "fail_agent", max_retries=3, **FAST_RETRY)
    with kairos.client() as c:
        ids = {name: c.trigger(name).id for name in ("fatal", "retry", "boom")}

    def handler(instance: ClaimedInstance) -> Any:
        if instance.task_id == "fatal":
            raise Fatal("bad input: the report template is missing")
        if instance.attempt == 1:
            if instance.task_id == "retry":
                raise Retryable("upstream answered 503")
            raise ValueError("kaput")
        return {"attempt": instance.attempt}

    w = _worker(kairos, "fail_agent", "fw", concurrency=4)
    with RunningWorker(w, handler) as running:
        with kairos.client() as c:
            eventually(lambda: all(c.get_instance(ids[n]).status in ("SUCCESS", "DEAD") for n in ids),
                       "every instance finished", timeout=30)
            fatal, retry, boom = (c.get_instance(ids[n]) for n in ("fatal", "retry", "boom"))
        stats = running.stop()

    assert (fatal.status, fatal.attempt, fatal.error_kind) == ("DEAD", 1, "agent")
    assert fatal.error == "bad input: the report template is missing"
    assert [(e.from_, e.to) for e in fatal.events][-1] == ("RUNNING", "DEAD")

    assert (retry.status, retry.attempt, retry.result) == ("SUCCESS", 2, {"attempt": 2})
    assert any(e.to == "FAILED" and e.reason == "agent: upstream answered 503" for e in retry.events)

    assert (boom.status, boom.attempt) == ("SUCCESS", 2)
    assert any(e.to == "FAILED" and e.reason == "agent: ValueError: kaput" for e in boom.events)

    assert stats.failed == 3 and stats.succeeded == 2 and stats.lease_lost == 0


def _quota_task(k: Kairos, task_id: str, agent_id: str) -> None:
    # No retries and a breaker that opens on one failure: a throttle that spent the attempt
    # would leave the instance DEAD, and one counted as a failure would pause the task.
    with k.client() as c:
        c.put_task(TaskSpec(id=task_id, agent_id=agent_id, trigger=manual(),
                            execution={"max_retries": 0}, circuit_breaker={"failure_threshold": 1}))


def test_throttled_waits_its_time_with_the_attempt_unspent_and_the_circuit_untouched(kairos: Kairos) -> None:
    _quota_task(kairos, "quota", "quota_agent")
    with kairos.client() as c:
        inst_id = c.trigger("quota").id
    runs: List[Tuple[float, int]] = []  # (monotonic start, attempt)

    def handler(instance: ClaimedInstance) -> Any:
        runs.append((time.monotonic(), instance.attempt))
        if len(runs) == 1:
            raise Throttled(after=2, reason="HTTP 429 from the model API")
        return {"attempt": instance.attempt, "run": len(runs)}

    w = _worker(kairos, "quota_agent", "qw")
    with RunningWorker(w, handler) as running:
        with kairos.client() as c:
            eventually(lambda: c.get_instance(inst_id).status in ("SUCCESS", "DEAD"), "the instance finished",
                       timeout=30)
            done = c.get_instance(inst_id)
            task = c.get_task("quota")
        stats = running.stop()

    assert (done.status, done.attempt, done.result) == ("SUCCESS", 1, {"attempt": 1, "run": 2})
    assert [a for _, a in runs] == [1, 1], "the throttled attempt was not spent"
    gap = runs[1][0] - runs[0][0]
    assert gap >= 1.9, f"run again {gap:.2f}s after the throttle, before its 2 s were up"
    assert (task.consecutive_failures, task.paused) == (0, False), "a quota never opens the circuit"
    assert [(e.from_, e.to, e.attempt) for e in done.events] == [
        (None, "PENDING", 1), ("PENDING", "RUNNING", 1), ("RUNNING", "PENDING", 1),
        ("PENDING", "RUNNING", 1), ("RUNNING", "SUCCESS", 1),
    ]
    throttle = done.events[2]
    assert throttle.reason == "throttled: HTTP 429 from the model API" and throttle.actor == "agent:qw"
    assert stats.throttled == 1 and stats.failed == 0 and stats.succeeded == 1
    assert stats.claimed == 2 and stats.lease_lost == 0 and stats.request_errors == 0


def test_throttled_with_hold_limit_holds_the_shared_limit_for_every_task_drawing_on_it(kairos: Kairos) -> None:
    with kairos.client() as c:
        c.put_limit("model-api", concurrency=10)
        for task_id in ("draft", "review"):
            c.put_task(TaskSpec(id=task_id, agent_id="held_agent", trigger=manual(),
                                execution={"max_retries": 0, "limits": [{"name": "model-api"}]},
                                circuit_breaker={"failure_threshold": 1}))
        draft = c.trigger("draft").id
    runs: List[Tuple[float, str, int]] = []  # (monotonic start, task, attempt)

    def handler(instance: ClaimedInstance) -> Any:
        runs.append((time.monotonic(), instance.task_id, instance.attempt))
        if len(runs) == 1:
            raise Throttled(after=3, reason="HTTP 429 from the model API", hold_limit="model-api")
        return {"task": instance.task_id}

    w = _worker(kairos, "held_agent", "hw")
    with RunningWorker(w, handler) as running:
        with kairos.client() as c:

            def held() -> Optional[Limit]:
                lim = c.get_limit("model-api")
                return lim if lim.held_until is not None else None

            limit = eventually(held, "the limit held", timeout=15)
            held_at = time.monotonic()
            # Work of another task on the same limit waits for the hold as well.
            review = c.trigger("review").id
            eventually(lambda: all(c.get_instance(i).status == "SUCCESS" for i in (draft, review)),
                       "both instances succeeded", timeout=30)
            done = c.get_instance(draft)
        stats = running.stop()

    assert limit.held_reason is not None and "HTTP 429 from the model API" in limit.held_reason
    assert [(t, a) for _, t, a in runs][0] == ("draft", 1)
    assert sorted((t, a) for _, t, a in runs[1:]) == [("draft", 1), ("review", 1)], "nothing spent"
    review_start = [at for at, t, _ in runs if t == "review"][0]
    assert review_start - runs[0][0] >= 2.9, "review started while the limit was held"
    assert review_start > held_at
    assert done.result == {"task": "draft"} and done.attempt == 1
    assert stats.throttled == 1 and stats.failed == 0 and stats.succeeded == 2 and stats.request_errors == 0


def test_a_hold_limit_the_server_refuses_is_dropped_and_the_throttle_still_reported(kairos: Kairos) -> None:
    _quota_task(kairos, "quota_nolimit", "qn_agent")
    with kairos.client() as c:
        inst_id = c.trigger("quota_nolimit").id
    attempts: List[int] = []

    async def handler(instance: ClaimedInstance) -> str:
        attempts.append(instance.attempt)
        if len(attempts) == 1:
            raise Throttled(after=1, hold_limit="no-such-limit")
        return "done"

    transport = LosingAnswers(lambda request, status, body: None, "timeout")
    w = _worker(kairos, "qn_agent", "qnw", transport=transport)
    with RunningWorker(w, handler) as running:
        with kairos.client() as c:
            eventually(lambda: c.get_instance(inst_id).status in ("SUCCESS", "DEAD"), "the instance finished",
                       timeout=30)
            done = c.get_instance(inst_id)
        stats = running.stop()

    fails = [body for path, body in transport.sent if path.endswith("/fail")]
    assert [f.get("hold_limit") for f in fails] == ["no-such-limit", None]
    assert all(f["retry_after_seconds"] == 1 for f in fails)
    assert (done.status, done.attempt, done.result) == ("SUCCESS", 1, "done") and attempts == [1, 1]
    assert stats.throttled == 1 and stats.failed == 0 and stats.request_errors == 1


def test_throttled_checks_its_arguments() -> None:
    assert Throttled(after=2).hold_limit is None
    t = Throttled(5, "HTTP 429", hold_limit="openai")
    assert (t.after, t.reason, t.hold_limit, t.retry_after_seconds) == (5.0, "HTTP 429", "openai", 5)
    assert repr(t) == "Throttled(after=5.0, reason='HTTP 429', hold_limit='openai')"
    assert repr(Throttled(0.5)) == "Throttled(after=0.5, reason='rate limited')"
    with pytest.raises(ValueError):
        Throttled(after=1, hold_limit="")
    with pytest.raises(ValueError):
        Throttled(after=float("nan"))


def test_a_killed_worker_loses_nothing_its_leases_expire_and_another_finishes(kairos: Kairos, tmp_path: Path) -> None:
    _task(kairos, "crashy", "crash_agent", max_retries=3, **FAST_RETRY)
    trigger_many(kairos, "crashy", 40)
    victim = agent_process(kairos, tmp_path, "crash_agent", "victim", concurrency=8, lease_seconds=2, sleep=120)
    def victim_holds_8() -> Optional[List[str]]:
        rows = kairos.query("select id::text from task_instance where status = 'RUNNING' and worker_id = 'victim'")
        return [r[0] for r in rows] if len(rows) == 8 else None

    try:
        held = eventually(victim_holds_8, "the victim holding 8 instances", timeout=30)
    except BaseException:
        victim.kill()
        raise

    handled: List[str] = []
    lock = threading.Lock()

    def handler(instance: ClaimedInstance) -> str:
        with lock:
            handled.append(instance.id)
        return "ok"

    survivor = _worker(kairos, "crash_agent", "survivor", concurrency=8, lease_seconds=30)
    with RunningWorker(survivor, handler) as running:
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        eventually(lambda: kairos.statuses().get("SUCCESS") == 40, "all 40 instances SUCCESS", timeout=60)
        stats = running.stop()

    assert sorted(handled) == sorted(set(handled)) and len(handled) == 40
    assert kairos.query("select distinct worker_id from task_instance") == [("survivor",)]
    rows = kairos.query("select id::text, attempt from task_instance")
    assert {i for i, a in rows if a == 2} == set(held), "exactly the victim's instances ran a second attempt"
    assert {a for i, a in rows if i not in held} == {1}
    with kairos.client() as c:
        for instance_id in held:
            events = c.get_instance(instance_id).events
            assert any(e.to == "FAILED" and e.actor.startswith("reaper:") and "lease_expired" in (e.reason or "")
                       for e in events), events
    assert stats.succeeded == 40


def test_heartbeats_keep_a_3s_lease_alive_through_a_10s_handler(kairos: Kairos) -> None:
    _task(kairos, "slow_sync", "hb_sync", max_retries=0)
    _task(kairos, "slow_async", "hb_async", max_retries=0)
    _task(kairos, "unbeaten", "hb_none", max_retries=0)
    with kairos.client() as c:
        sync_id = c.trigger("slow_sync").id
        async_id = c.trigger("slow_async").id
        control_id = c.trigger("unbeaten").id

    def sync_handler(instance: ClaimedInstance) -> Dict[str, Any]:
        time.sleep(10)
        return {"slept": 10, "lost": instance.lease_lost.is_set()}

    async def async_handler(instance: ClaimedInstance) -> Dict[str, Any]:
        await asyncio.sleep(10)
        return {"slept": 10, "lost": instance.lease_lost.is_set()}

    ws = _worker(kairos, "hb_sync", "hs", lease_seconds=3)
    wa = _worker(kairos, "hb_async", "ha", lease_seconds=3)
    with RunningWorker(ws, sync_handler) as rs, RunningWorker(wa, async_handler) as ra:
        with kairos.client(kairos.agent_token) as agent, kairos.client() as admin:
            # The control: the same 3 s lease without heartbeats is reaped well within 10 s.
            [control] = agent.claim("hb_none", "nobody", lease_seconds=3, wait_seconds=5)
            assert control.id == control_id
            reaped = eventually(lambda: admin.get_instance(control_id) if admin.get_instance(control_id).status == "DEAD"
                                else None, "the unbeaten lease reaped", timeout=15)
            assert reaped.error_kind == "lease_expired"
            eventually(lambda: admin.get_instance(sync_id).status == "SUCCESS"
                       and admin.get_instance(async_id).status == "SUCCESS", "both slow handlers done", timeout=30)
            done = [admin.get_instance(i) for i in (sync_id, async_id)]
        s_stats, a_stats = rs.stop(), ra.stop()

    for inst in done:
        assert inst.attempt == 1 and inst.result == {"slept": 10, "lost": False}
        assert [e.to for e in inst.events] == ["PENDING", "RUNNING", "SUCCESS"]
    for stats in (s_stats, a_stats):
        assert stats.heartbeats >= 6, stats
        assert stats.lease_lost == 0 and stats.succeeded == 1


def test_a_409_on_complete_is_swallowed_counted_and_the_worker_goes_on(kairos: Kairos) -> None:
    _task(kairos, "cancelled_midway", "c409_agent")
    with kairos.client() as c:
        victim_id = c.trigger("cancelled_midway", window_key="victim").id
    fences_before = kairos.metric("kairos_fence_rejections_total")

    def handler(instance: ClaimedInstance) -> Dict[str, str]:
        if instance.window_key == "victim":
            # An operator cancels the run while the handler works: the lease is fenced out.
            with kairos.client() as admin:
                admin.cancel_instance(instance.id, reason="operator changed their mind")
        return {"window": instance.window_key}

    w = _worker(kairos, "c409_agent", "cw", lease_seconds=60)
    with RunningWorker(w, handler) as running:
        eventually(lambda: w.stats.complete_conflicts == 1, "the 409 on complete counted", timeout=20)
        with kairos.client() as c:
            after_id = c.trigger("cancelled_midway", window_key="after").id
            eventually(lambda: c.get_instance(after_id).status == "SUCCESS", "the next instance done", timeout=20)
            victim = c.get_instance(victim_id)
        stats = running.stop()

    assert victim.status == "CANCELLED" and victim.result is None
    assert stats.complete_conflicts == 1 and stats.lease_lost == 1
    assert stats.succeeded == 1 and stats.failed == 0
    assert kairos.metric("kairos_fence_rejections_total") >= fences_before + 1


def test_a_409_on_heartbeat_sets_lease_lost_and_drops_the_result(kairos: Kairos) -> None:
    _task(kairos, "fenced", "hb409_agent")
    with kairos.client() as c:
        inst_id = c.trigger("fenced").id
    seen: Dict[str, Any] = {}

    def handler(instance: ClaimedInstance) -> str:
        with kairos.client() as admin:
            admin.cancel_instance(instance.id)
        seen["lost"] = instance.lease_lost.wait(timeout=15)
        seen["reason"] = instance.lease_lost.reason
        return "too late"

    w = _worker(kairos, "hb409_agent", "hw", lease_seconds=3)
    with RunningWorker(w, handler) as running:
        eventually(lambda: w.stats.dropped_results == 1, "the result dropped", timeout=20)
        stats = running.stop()

    assert seen["lost"] is True and "409" in seen["reason"]
    assert stats.heartbeat_conflicts == 1 and stats.lease_lost == 1
    assert stats.succeeded == 0 and stats.complete_conflicts == 0
    with kairos.client() as c:
        assert c.get_instance(inst_id).status == "CANCELLED"


def test_shutdown_gives_up_handlers_past_the_grace_as_retryable_failures(kairos: Kairos) -> None:
    # A 10-minute backoff: the retry below happens within seconds only because a given-up
    # attempt is failed with retry_at_once.
    _task(kairos, "stuck", "sd_agent", max_retries=2,
          retry_backoff={"base_seconds": 600, "max_seconds": 600, "jitter": 0})
    with kairos.client() as c:
        inst_id = c.trigger("stuck").id
    seen: Dict[str, Any] = {}

    async def handler(instance: ClaimedInstance) -> str:
        if instance.attempt == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                seen["lost"] = instance.lease_lost.reason
                raise
        return f"done on attempt {instance.attempt}"

    w = _worker(kairos, "sd_agent", "sd1", shutdown_grace=0.5)
    with RunningWorker(w, handler) as running:
        with kairos.client() as c:
            eventually(lambda: c.get_instance(inst_id).status == "RUNNING", "the instance running", timeout=20)
        started = time.monotonic()
        stats = running.stop()
        assert time.monotonic() - started < 5
    assert stats.given_up_at_shutdown == 1 and stats.failed == 1
    assert "shut down" in seen["lost"]
    with kairos.client() as c:
        # FAILED, or already PENDING again: retry_at_once makes it due at once, so the
        # retry scanner may have moved it before this read. The failure is in its events.
        failed = c.get_instance(inst_id)
        assert failed.status in ("FAILED", "PENDING")
        assert failed.error == "worker sd1 shut down before the handler finished"
        assert [(e.from_, e.to, e.attempt) for e in failed.events if e.to == "FAILED"] == [("RUNNING", "FAILED", 1)]

        w2 = _worker(kairos, "sd_agent", "sd2")
        with RunningWorker(w2, handler) as running2:
            eventually(lambda: c.get_instance(inst_id).status == "SUCCESS", "the retry done elsewhere", timeout=20)
            running2.stop()
        assert c.get_instance(inst_id).result == "done on attempt 2"


class NeverCloses(httpx.AsyncBaseTransport):
    """Passes every request on to kairos, but closing it never ends (as a connection pool stuck
    on a connection the network cut)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.close_started = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        self.close_started = True
        await self._inner.aclose()
        await asyncio.Event().wait()


def test_a_worker_stops_although_closing_its_connections_never_ends(kairos: Kairos) -> None:
    _task(kairos, "never_closes", "nc_agent")
    backlog(kairos, "never_closes", "nc_agent", 3)
    transport = NeverCloses()
    w = _worker(kairos, "nc_agent", "ncw", transport=transport)
    with RunningWorker(w, lambda instance: "ok") as running:
        eventually(lambda: kairos.statuses() == {"SUCCESS": 3}, "all 3 SUCCESS", timeout=30)
        started = time.monotonic()
        stats = running.stop(timeout=20)
        assert time.monotonic() - started < 15
    assert transport.close_started
    assert stats.succeeded == 3


def test_sigterm_stops_claiming_and_lets_running_handlers_finish(kairos: Kairos, tmp_path: Path) -> None:
    _task(kairos, "graceful", "sig_agent")
    with kairos.client() as c:
        first = c.trigger("graceful").id
    proc = agent_process(kairos, tmp_path, "sig_agent", "sigw", concurrency=1, sleep=2, grace=20)
    try:
        with kairos.client() as c:
            eventually(lambda: c.get_instance(first).status == "RUNNING", "the first instance running", timeout=30)
            proc.send_signal(signal.SIGTERM)
            second = c.trigger("graceful").id
            assert proc.wait(timeout=20) == 0
            done = c.get_instance(first)
            assert (done.status, done.attempt, done.result) == ("SUCCESS", 1, {"worker": "sigw"})
            assert c.get_instance(second).status == "PENDING", "a stopping worker claimed new work"
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "sigw.log").read_text()
    assert "received SIGTERM" in log


def test_a_refused_token_stops_the_worker_with_the_error(kairos: Kairos) -> None:
    w = Worker(kairos.url, "any_agent", token="wrong-token", worker_id="nw", wait_seconds=1)
    started = time.monotonic()
    with pytest.raises(Unauthorized):
        w.run(lambda instance: None)
    assert time.monotonic() - started < 5


def test_results_that_cannot_be_stored_fail_the_attempt_for_good(kairos: Kairos) -> None:
    _task(kairos, "odd", "odd_agent", max_retries=3)
    with kairos.client() as c:
        ids = {k: c.trigger("odd", window_key=k).id for k in ("huge", "nan", "nul", "fine")}

    def handler(instance: ClaimedInstance) -> Any:
        return {
            "huge": lambda: "x" * 70_000,
            "nan": lambda: float("nan"),
            "nul": lambda: {"text": "a\x00b"},
            "fine": lambda: {"ok": True},
        }[instance.window_key]()

    w = _worker(kairos, "odd_agent", "ow", concurrency=4)
    with RunningWorker(w, handler) as running:
        with kairos.client() as c:
            eventually(lambda: all(c.get_instance(i).status in ("SUCCESS", "DEAD") for i in ids.values()),
                       "all four settled", timeout=30)
            got = {k: c.get_instance(i) for k, i in ids.items()}
        stats = running.stop()
    assert got["fine"].status == "SUCCESS" and got["fine"].result == {"ok": True}
    for k in ("huge", "nan", "nul"):
        assert got[k].status == "DEAD" and got[k].attempt == 1, (k, got[k])
    assert "70002 bytes" in (got["huge"].error or "")
    assert "not JSON" in (got["nan"].error or "")
    assert "refused" in (got["nul"].error or "")
    assert stats.succeeded == 1 and stats.failed == 3


class LosingAnswers(httpx.AsyncBaseTransport):
    """Sends every request on to kairos, then loses the answer of the first request of each kind
    ``kind_of`` names: the server has done the work and answered, and the worker sees a timeout,
    a reset connection, or a 503 in its place (as when a proxy or the network cuts it)."""

    def __init__(self, kind_of: Callable[[httpx.Request, int, bytes], Optional[str]], lost_as: str) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._kind_of = kind_of
        self._lost_as = lost_as
        self.lost: Dict[str, Tuple[Any, Any]] = {}  # kind -> (request body, lost answer body)
        self.sent: List[Tuple[str, Any]] = []  # (path, request body), in order

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        sent = json.loads(request.content) if request.content else None
        self.sent.append((request.url.path, sent))
        kind = self._kind_of(request, response.status_code, body)
        if kind is not None and kind not in self.lost:
            self.lost[kind] = (sent, json.loads(body))
            if self._lost_as == "timeout":
                raise httpx.ReadTimeout("the answer was lost", request=request)
            if self._lost_as == "reset":
                raise httpx.ReadError("connection reset by peer", request=request)
            return httpx.Response(503, headers={"Retry-After": "0"}, request=request,
                                  json={"title": "Service Unavailable", "status": 503, "detail": "answer lost"})
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx.Response(response.status_code, headers=headers, content=body, request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _lose_first_claim_with_instances(request: httpx.Request, status: int, body: bytes) -> Optional[str]:
    if request.url.path == "/v1/claims" and status == 200 and json.loads(body)["instances"]:
        return "claim"
    return None


@pytest.mark.parametrize("lost_as", ["timeout", "reset", "503"])
def test_a_claim_whose_answer_is_lost_is_sent_again_with_its_claim_id_and_gets_those_instances(
    kairos: Kairos, lost_as: str
) -> None:
    _task(kairos, "lost_claim", "lc_agent", max_retries=0)
    backlog(kairos, "lost_claim", "lc_agent", 5)
    transport = LosingAnswers(_lose_first_claim_with_instances, lost_as)
    calls: Counter[Tuple[str, str]] = Counter()
    lock = threading.Lock()

    def handler(instance: ClaimedInstance) -> str:
        with lock:
            calls[(instance.id, instance.lease_token)] += 1
        return "ok"

    w = _worker(kairos, "lc_agent", "lcw", concurrency=8, transport=transport)
    with RunningWorker(w, handler) as running:
        eventually(lambda: kairos.statuses() == {"SUCCESS": 5}, "all 5 SUCCESS", timeout=30)
        stats = running.stop()

    lost_request, lost_answer = transport.lost["claim"]
    lost = {(i["id"], i["lease_token"]) for i in lost_answer["instances"]}
    assert len(lost) == 5
    # The worker received exactly the instances of the lost answer, under its lease tokens, once each.
    assert set(calls) == lost and set(calls.values()) == {1}
    claims = [body for path, body in transport.sent if path == "/v1/claims"]
    first = claims.index(lost_request)
    assert claims[first + 1] == lost_request, "the claim was sent again unchanged"
    assert str(uuid.UUID(lost_request["claim_id"], version=4)) == lost_request["claim_id"]
    # Every other claim had its own claim_id.
    ids = [c["claim_id"] for c in claims]
    assert len(set(ids)) == len(ids) - 1
    # Nothing was reaped, given back or run twice.
    assert kairos.query("select status, attempt, worker_id, count(*) from task_instance group by 1, 2, 3") == [
        ("SUCCESS", 1, "lcw", 5)
    ]
    with kairos.client() as c:
        for instance_id, _ in lost:
            # (backlog() inserts the rows, so no creating event.)
            assert [e.to for e in c.get_instance(instance_id).events] == ["RUNNING", "SUCCESS"]
    assert stats.claimed == 5 and stats.succeeded == 5 and stats.request_errors == 1
    assert stats.lease_lost == 0 and stats.heartbeat_conflicts == 0


def _lose_first_reports(request: httpx.Request, status: int, body: bytes) -> Optional[str]:
    if status != 200:
        return None
    if request.url.path == "/v1/completions":
        return "completions"
    if request.url.path.endswith("/fail"):
        return "fail"
    if request.url.path.endswith("/complete"):
        return "complete"
    return None


@pytest.mark.parametrize("lost_as", ["timeout", "503"])
def test_reports_whose_answers_are_lost_are_sent_again_under_the_same_lease(kairos: Kairos, lost_as: str) -> None:
    _task(kairos, "lost_reports", "lr_agent", max_retries=0)
    with kairos.client() as c:
        ids = {k: c.trigger("lost_reports", window_key=k).id for k in ("bad", "nul", "ok1", "ok2", "ok3")}

    def handler(instance: ClaimedInstance) -> Any:
        if instance.window_key == "bad":
            raise Fatal("bad input")  # one failure report
        if instance.window_key in ("ok1", "ok2"):
            return {"window": instance.window_key}  # one batch of two
        time.sleep(0.5)
        if instance.window_key == "nul":
            # The second batch, with ok3, is refused (PostgreSQL text cannot hold U+0000): it
            # is then sent one completion at a time, and this one fails the attempt.
            return {"text": "a\x00b"}
        return {"window": instance.window_key}

    transport = LosingAnswers(_lose_first_reports, lost_as)
    w = _worker(kairos, "lr_agent", "lrw", concurrency=8, batch=2, linger=5, transport=transport)
    with RunningWorker(w, handler) as running:
        with kairos.client() as c:
            eventually(lambda: all(c.get_instance(i).status in ("SUCCESS", "DEAD") for i in ids.values()),
                       "all five settled", timeout=30)
            got = {k: c.get_instance(i) for k, i in ids.items()}
        stats = running.stop()

    assert set(transport.lost) == {"completions", "complete", "fail"}
    for kind, (lost_request, _) in transport.lost.items():
        again = [body for path, body in transport.sent if body == lost_request]
        assert len(again) >= 2, f"the {kind} report was not sent again"
    assert got["bad"].status == "DEAD" and got["bad"].error == "bad input"
    assert got["nul"].status == "DEAD" and "refused" in (got["nul"].error or "")
    for k in ("ok1", "ok2", "ok3"):
        assert got[k].status == "SUCCESS" and got[k].result == {"window": k}
    for inst in got.values():
        assert inst.attempt == 1 and [e.to for e in inst.events][-1] in ("SUCCESS", "DEAD")
        assert len([e for e in inst.events if e.from_ == "RUNNING"]) == 1, inst.events
    assert stats.succeeded == 3 and stats.failed == 2
    assert stats.lease_lost == 0 and stats.complete_conflicts == 0 and stats.fail_conflicts == 0
    assert stats.request_errors == len(transport.lost)


def _lose_first_throttle_report(request: httpx.Request, status: int, body: bytes) -> Optional[str]:
    if status == 200 and request.url.path.endswith("/fail"):
        return "throttle"
    return None


def test_a_throttle_report_whose_answer_is_lost_is_sent_again_under_the_same_lease(kairos: Kairos) -> None:
    _quota_task(kairos, "quota_lost", "ql_agent")
    with kairos.client() as c:
        inst_id = c.trigger("quota_lost").id
    attempts: List[int] = []

    async def handler(instance: ClaimedInstance) -> str:
        attempts.append(instance.attempt)
        if len(attempts) == 1:
            raise Throttled(after=0.2)  # waits the least the server takes: 1 s
        return "done"

    transport = LosingAnswers(_lose_first_throttle_report, "timeout")
    w = _worker(kairos, "ql_agent", "qlw", transport=transport)
    with RunningWorker(w, handler) as running:
        with kairos.client() as c:
            eventually(lambda: c.get_instance(inst_id).status in ("SUCCESS", "DEAD"), "the instance finished",
                       timeout=30)
            done = c.get_instance(inst_id)
        stats = running.stop()

    lost_request, lost_answer = transport.lost["throttle"]
    assert lost_request["retry_after_seconds"] == 1 and lost_request["error"] == "rate limited"
    assert "hold_limit" not in lost_request
    assert lost_answer["status"] == "PENDING" and lost_answer["error_kind"] == "throttled"
    fails = [body for path, body in transport.sent if path.endswith("/fail")]
    assert fails == [lost_request, lost_request], "sent again unchanged, under the same lease token"
    assert (done.status, done.attempt, done.result) == ("SUCCESS", 1, "done") and attempts == [1, 1]
    assert [e.to for e in done.events].count("PENDING") == 2  # created, then throttled once
    assert stats.throttled == 1 and stats.failed == 0 and stats.request_errors == 1
    assert stats.lease_lost == 0 and stats.fail_conflicts == 0
