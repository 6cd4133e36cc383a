"""Client and AsyncClient against a real kairos: every call's shape, the error mapping and
declarative apply."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import datetime, timezone
from typing import List, Optional, Tuple

import pytest

from conftest import Kairos, eventually
from kairos_agent import (
    Client,
    Completion,
    Forbidden,
    Invalid,
    Limit,
    NotFound,
    Stale,
    TaskSpec,
    Unauthorized,
    VersionMismatch,
    cron,
    interval,
    manual,
)


def test_task_calls_round_trip_through_the_api(kairos: Kairos) -> None:
    with kairos.client() as c:
        spec = TaskSpec(
            id="daily_report_001",
            agent_id="report_agent",
            trigger=cron("0 30 8 * * *", "Asia/Shanghai"),
            execution={"max_retries": 2, "retry_backoff": {"base_seconds": 5}},
            context={"params": {"region": "cn-north"}},
        )
        task = c.put_task(spec)
        assert task.id == "daily_report_001"
        assert task.trigger == {
            "type": "cron",
            "expr": "0 30 8 * * *",
            "timezone": "Asia/Shanghai",
            "jitter_seconds": 0,  # the server's default, filled in
        }
        assert task.execution["max_retries"] == 2
        assert task.execution["retry_backoff"]["base_seconds"] == 5
        assert task.execution["concurrency_limit"] == 1  # the server's default, filled in
        assert task.version == 1
        assert task.next_fire_at is not None and task.next_fire_at.tzinfo is not None
        # 08:30 in Shanghai is 00:30 UTC.
        assert (task.next_fire_at.hour, task.next_fire_at.minute) == (0, 30)

        assert c.put_task(spec).version == 1  # the same definition: a no-op
        spec.context = {"params": {"region": "eu"}}
        assert c.put_task(spec).version == 2
        with pytest.raises(VersionMismatch):
            c.put_task(spec, if_match=1)
        assert c.put_task(spec, if_match=2).version == 2

        assert c.get_task("daily_report_001").context == {"params": {"region": "eu"}}
        c.put_task(TaskSpec(id="tick", agent_id="other_agent", trigger=interval(3600)))
        assert [t.id for t in c.list_tasks(agent_id="report_agent").items] == ["daily_report_001"]
        first = c.list_tasks(limit=1)
        assert len(first.items) == 1 and first.next_cursor is not None
        second = c.list_tasks(limit=1, cursor=first.next_cursor)
        assert [t.id for t in first.items + second.items] == ["daily_report_001", "tick"]
        assert second.next_cursor is None
        assert sorted(t.id for t in c.iter_tasks()) == ["daily_report_001", "tick"]

        paused = c.pause_task("tick", reason="maintenance")
        assert paused.paused and paused.paused_reason == "maintenance"
        assert [t.id for t in c.list_tasks(paused=True).items] == ["tick"]
        resumed = c.resume_task("tick")
        assert not resumed.paused and resumed.paused_reason is None

        run = c.trigger("daily_report_001", window_key="rerun-1", context={"extra": 1})
        again = c.trigger("daily_report_001", window_key="rerun-1")
        assert run.id == again.id  # idempotent by key
        assert run.status == "PENDING" and run.source == "manual"
        assert run.idempotency_key == "daily_report_001:rerun-1"
        later = c.trigger("daily_report_001", delay_seconds=3600)
        assert later.available_at > run.available_at

        detail = c.get_instance(run.id)
        assert detail.window_key == "rerun-1"
        assert [(e.from_, e.to) for e in detail.events] == [(None, "PENDING")]
        listed = c.list_instances(task_id="daily_report_001", status=["PENDING"])
        assert {i.id for i in listed.items} == {run.id, later.id}
        assert [i.id for i in c.list_instances(window_key="rerun-1").items] == [run.id]
        assert c.list_instances(task_id="daily_report_001", from_=datetime(2100, 1, 1, tzinfo=timezone.utc)).items == []

        cancelled = c.cancel_instance(later.id, reason="not needed")
        assert cancelled.status == "CANCELLED" and cancelled.error == "not needed"
        assert c.retry_instance(later.id).status == "PENDING"

        c.delete_task("tick")
        with pytest.raises(NotFound):
            c.get_task("tick")


def test_agent_calls_claim_heartbeat_complete_fail(kairos: Kairos) -> None:
    with kairos.client() as admin, kairos.client(kairos.agent_token) as agent:
        admin.put_task(TaskSpec(
            id="job", agent_id="agent_a", trigger=manual(),
            execution={"concurrency_limit": 10, "max_retries": 1, "retry_backoff": {"base_seconds": 60}},
        ))
        for _ in range(4):
            admin.trigger("job")
        claimed = agent.claim("agent_a", "w2", max_instances=3, lease_seconds=30)
        assert len(claimed) == 3  # at most max_instances
        assert len(agent.claim("agent_a", "w2", max_instances=3, wait_seconds=1)) == 1
        assert agent.claim("agent_a", "w2", max_instances=3, wait_seconds=0) == []
        a, b, c = claimed
        assert a.lease_token and a.worker_id == "w2" and a.status == "RUNNING"
        assert dataclasses.asdict(a)["lease_token"] == a.lease_token  # plain data for logs
        assert a.context == {}
        assert a.lease_seconds_left is not None and 0 < a.lease_seconds_left <= 31

        beat = agent.heartbeat(a.id, a.lease_token, lease_seconds=120)
        assert beat.lease_expires_at is not None and a.lease_expires_at is not None
        assert beat.lease_expires_at > a.lease_expires_at

        done = agent.complete(a.id, a.lease_token, {"rows": 3})
        assert done.status == "SUCCESS" and done.result == {"rows": 3}
        # Sent again under the same token (its answer lost): answered as the first was,
        # nothing written twice.
        again = agent.complete(a.id, a.lease_token, {"rows": 4})
        assert again.status == "SUCCESS" and again.result == {"rows": 3}
        with pytest.raises(Stale) as stale:
            agent.fail(a.id, a.lease_token, "the other outcome")
        assert stale.value.status == 409
        with pytest.raises(Stale):
            agent.heartbeat(a.id, a.lease_token)

        failed = agent.fail(b.id, b.lease_token, "upstream answered 503")
        assert failed.status == "FAILED" and failed.error == "upstream answered 503"
        assert failed.error_kind == "agent"
        assert agent.fail(b.id, b.lease_token, "upstream answered 503").status == "FAILED"
        dead = agent.fail(c.id, c.lease_token, "bad input", retryable=False)
        assert dead.status == "DEAD" and dead.finished_at is not None


def test_fail_with_retry_after_seconds_throttles_the_attempt_unspent(kairos: Kairos) -> None:
    with kairos.client() as admin, kairos.client(kairos.agent_token) as agent:
        # No retries and a breaker that opens on one failure: a throttle spending the attempt
        # would leave it DEAD, one counted as a failure would pause the task.
        admin.put_task(TaskSpec(id="quota", agent_id="agent_q", trigger=manual(),
                                execution={"concurrency_limit": 10, "max_retries": 0},
                                circuit_breaker={"failure_threshold": 1}))
        first, second = admin.trigger("quota").id, admin.trigger("quota").id
        [a, b] = agent.claim("agent_q", "wq", max_instances=2, lease_seconds=30)
        assert {a.id, b.id} == {first, second} and a.attempt == 1

        # Out of range: refused naming the field, and nothing changes.
        for bad in (0, 86_401):
            with pytest.raises(Invalid) as invalid:
                agent.fail(a.id, a.lease_token, "HTTP 429", retry_after_seconds=bad)
            assert invalid.value.status == 422
            assert [e.field for e in invalid.value.errors] == ["retry_after_seconds"]
            assert admin.get_instance(a.id).status == "RUNNING"

        sent = datetime.now(timezone.utc)
        throttled = agent.fail(a.id, a.lease_token, "HTTP 429 from the model API", retry_after_seconds=30)
        assert throttled.status == "PENDING"
        assert throttled.attempt == a.attempt == 1, "the attempt is not spent"
        assert throttled.error_kind == "throttled" and throttled.error == "HTTP 429 from the model API"
        wait = (throttled.available_at - sent).total_seconds()
        assert 25 <= wait <= 35, f"available in about 30 s, not {wait:.1f}"
        # Sent again under the same token (its answer lost): answered as the first was.
        again = agent.fail(a.id, a.lease_token, "HTTP 429 from the model API", retry_after_seconds=30)
        assert (again.status, again.attempt, again.available_at) == ("PENDING", 1, throttled.available_at)
        with pytest.raises(Stale):
            agent.heartbeat(a.id, a.lease_token)
        # Not claimable before its time.
        assert agent.claim("agent_q", "wq", max_instances=2, wait_seconds=0) == []
        events = admin.get_instance(a.id).events
        assert (events[-1].from_, events[-1].to, events[-1].attempt) == ("RUNNING", "PENDING", 1)
        assert events[-1].reason == "throttled: HTTP 429 from the model API"

        # The async client passes it too.
        async def throttle_b() -> None:
            async with kairos.async_client(kairos.agent_token) as aagent:
                got = await aagent.fail(b.id, b.lease_token, "quota", retry_after_seconds=1)
                assert (got.status, got.attempt, got.error_kind) == ("PENDING", 1, "throttled")

        asyncio.run(throttle_b())
        task = admin.get_task("quota")
        assert task.consecutive_failures == 0 and not task.paused, "a quota never opens the circuit"


def _reasons(client: Client, instance_id: str) -> List[Tuple[str, Optional[str], Optional[str]]]:
    return [(w.reason, w.limit, w.key) for w in client.get_instance(instance_id).waiting_on]


def test_limit_calls_round_trip_through_the_api(kairos: Kairos) -> None:
    with kairos.client() as admin, kairos.client(kairos.agent_token) as agent:
        created = admin.put_limit("openai", concurrency=2, rate={"count": 500, "per_seconds": 60, "burst": 20})
        assert isinstance(created, Limit) and created.version == 1
        assert (created.concurrency, created.rate, created.per_key) == (
            2, {"count": 500, "per_seconds": 60, "burst": 20}, False,
        )
        assert (created.running, created.available_rate, created.held_until, created.keys) == (0, 21, None, [])
        same = admin.put_limit("openai", concurrency=2, rate={"count": 500, "per_seconds": 60, "burst": 20})
        assert same.version == 1, "the same definition again is a no-op"
        changed = admin.put_limit("openai", concurrency=3, rate={"count": 500, "per_seconds": 60, "burst": 20},
                                  if_match=1)
        assert (changed.version, changed.concurrency) == (2, 3)
        with pytest.raises(VersionMismatch):
            admin.put_limit("openai", concurrency=4, if_match=1)
        with pytest.raises(Invalid) as invalid:
            admin.put_limit("broken", concurrency=0)
        assert [e.field for e in invalid.value.errors] == ["concurrency"]
        with pytest.raises(Invalid) as invalid:
            admin.put_limit("broken")
        assert [e.field for e in invalid.value.errors] == ["concurrency"], "concurrency, rate or both"
        admin.put_limit("tenant-crm", concurrency=1, per_key=True)
        assert [lim.name for lim in admin.list_limits()] == ["openai", "tenant-crm"]
        assert [lim.name for lim in agent.list_limits()] == ["openai", "tenant-crm"], "agents read limits"

        # A task draws on both; its instances wait for a busy key and say why.
        admin.put_task(TaskSpec(id="crm_sync", agent_id="agent_l", trigger=manual(), execution={
            "concurrency_limit": 10,
            "limits": [{"name": "openai"}, {"name": "tenant-crm", "key": "{{params.tenant}}"}],
        }))
        first = admin.trigger("crm_sync", context={"params": {"tenant": "acme"}})
        second = admin.trigger("crm_sync", context={"params": {"tenant": "acme"}})
        [running] = agent.claim("agent_l", "wl", max_instances=5)
        waiting = second if running.id == first.id else first
        usage = admin.get_limit("tenant-crm")
        assert usage.running == 1 and usage.available_rate is None
        assert [(k.key, k.running) for k in usage.keys] == [("acme", 1)]
        assert admin.get_limit("openai").running == 1
        # (Polled: the server records the agent's claim off the claim's path, and until it has,
        # `no_agent` is a reason too.)
        expected = [("limit_concurrency", "tenant-crm", "acme")]
        eventually(lambda: _reasons(admin, waiting.id) == expected, "the waiting instance's reasons", timeout=10)
        detail = admin.get_instance(waiting.id)
        assert detail.waiting_on[0].detail.startswith('tenant-crm (key "acme"): 1 of 1 units running')
        assert admin.get_instance(running.id).waiting_on == []

        # Holds: a per_key limit's needs a key; the key's budget shows it until released.
        with pytest.raises(Invalid) as invalid:
            admin.hold_limit("tenant-crm", 60)
        assert [e.field for e in invalid.value.errors] == ["key"]
        with pytest.raises(Invalid) as invalid:
            admin.hold_limit("openai", 86_401)
        assert [e.field for e in invalid.value.errors] == ["seconds"]
        with pytest.raises(Forbidden):
            agent.hold_limit("openai", 60)
        before = datetime.now(timezone.utc)
        held = admin.hold_limit("tenant-crm", 60, key="globex", reason="CRM maintenance")
        [globex] = [k for k in held.keys if k.key == "globex"]
        assert globex.held_reason == "CRM maintenance" and globex.held_until is not None
        assert 55 <= (globex.held_until - before).total_seconds() <= 65
        whole = admin.hold_limit("openai", 30)
        assert whole.held_reason == "held by operator" and whole.held_until is not None
        assert admin.release_limit("openai").held_until is None
        released = admin.release_limit("tenant-crm", key="globex")
        assert all(k.held_until is None for k in released.keys)

        with pytest.raises(Stale):
            admin.delete_limit("openai")  # crm_sync draws on it
        admin.put_limit("spare", concurrency=1)
        admin.delete_limit("spare")
        with pytest.raises(NotFound):
            admin.get_limit("spare")

        async def read_async() -> None:
            async with kairos.async_client() as a:
                assert [lim.name for lim in await a.list_limits()] == ["openai", "tenant-crm"]
                assert (await a.get_limit("openai")).concurrency == 3
                held = await a.hold_limit("openai", 5, reason="async")
                assert held.held_reason == "async"
                assert (await a.release_limit("openai")).held_until is None

        asyncio.run(read_async())


def test_list_limits_follows_the_pages_to_the_last_limit(kairos: Kairos) -> None:
    # More limits than one page of 500 holds: both clients follow next_cursor.
    kairos.query("insert into limits (name, spec) select 'l' || lpad(g::text, 4, '0'), "
                 "'{\"concurrency\": 1, \"per_key\": false}' from generate_series(1, 501) g returning name")
    want = [f"l{n:04d}" for n in range(1, 502)]
    with kairos.client() as c:
        assert [lim.name for lim in c.list_limits()] == want

    async def listed() -> List[str]:
        async with kairos.async_client() as a:
            return [lim.name for lim in await a.list_limits()]

    assert asyncio.run(listed()) == want


def test_fail_with_hold_limit_holds_the_shared_limit_until_the_retry(kairos: Kairos) -> None:
    with kairos.client() as admin, kairos.client(kairos.agent_token) as agent:
        admin.put_limit("model-api", concurrency=5)
        for task_id in ("draft", "review"):
            admin.put_task(TaskSpec(id=task_id, agent_id="agent_h", trigger=manual(),
                                    execution={"concurrency_limit": 10, "limits": [{"name": "model-api"}]}))
        admin.put_task(TaskSpec(id="unlimited", agent_id="agent_h", trigger=manual()))
        admin.trigger("draft")
        admin.trigger("unlimited")
        claimed = agent.claim("agent_h", "wh", max_instances=5)
        [a] = [c for c in claimed if c.task_id == "draft"]
        [u] = [c for c in claimed if c.task_id == "unlimited"]

        # Refused, naming the field, with nothing written: without retry_after_seconds, or a
        # limit the instance does not draw on.
        for name, after in (("model-api", None), ("other", 5)):
            with pytest.raises(Invalid) as invalid:
                agent.fail(a.id, a.lease_token, "HTTP 429", retry_after_seconds=after, hold_limit=name)
            assert [e.field for e in invalid.value.errors] == ["hold_limit"]
            assert admin.get_instance(a.id).status == "RUNNING"
        with pytest.raises(Invalid):
            agent.fail(u.id, u.lease_token, "HTTP 429", retry_after_seconds=5, hold_limit="model-api")
        assert admin.get_limit("model-api").held_until is None

        sent = datetime.now(timezone.utc)
        throttled = agent.fail(a.id, a.lease_token, "HTTP 429 from the model API", retry_after_seconds=30,
                               hold_limit="model-api")
        assert (throttled.status, throttled.attempt, throttled.error_kind) == ("PENDING", 1, "throttled")
        limit = admin.get_limit("model-api")
        assert limit.held_until is not None and limit.held_reason is not None
        assert abs((limit.held_until - throttled.available_at).total_seconds()) < 1, "held as long"
        assert 25 <= (limit.held_until - sent).total_seconds() <= 35
        assert "HTTP 429 from the model API" in limit.held_reason and a.id in limit.held_reason

        # Another task drawing on the limit waits for the hold too, and says so.
        other = admin.trigger("review")
        assert agent.claim("agent_h", "wh", max_instances=5, wait_seconds=0) == []
        eventually(lambda: _reasons(admin, other.id) == [("limit_held", "model-api", None)],
                   "the other task's reasons", timeout=10)
        assert admin.get_instance(other.id).waiting_on[0].until is not None

        # The async client sends it too; releasing the hold lets the work start.
        admin.release_limit("model-api")

        async def throttle_again() -> None:
            async with kairos.async_client(kairos.agent_token) as aagent:
                got = await aagent.claim("agent_h", "wh", max_instances=5)
                assert {c.task_id for c in got} == {"review"}, "draft waits out its own retry_after"
                [b] = got
                done = await aagent.fail(b.id, b.lease_token, "quota", retry_after_seconds=2, hold_limit="model-api")
                assert (done.status, done.attempt) == ("PENDING", 1)

        asyncio.run(throttle_again())
        assert admin.get_limit("model-api").held_until is not None


def test_a_claim_sent_again_with_its_claim_id_gets_the_same_instances_and_tokens(kairos: Kairos) -> None:
    with kairos.client() as admin, kairos.client(kairos.agent_token) as agent:
        admin.put_task(TaskSpec(id="cj", agent_id="agent_cid", trigger=manual(),
                                execution={"concurrency_limit": 20}))
        for _ in range(5):
            admin.trigger("cj")
        cid = str(uuid.uuid4())
        first = agent.claim("agent_cid", "w", max_instances=3, lease_seconds=30, claim_id=cid)
        again = agent.claim("agent_cid", "w", max_instances=3, lease_seconds=30, claim_id=cid)
        assert len(first) == 3
        assert [(i.id, i.lease_token) for i in again] == [(i.id, i.lease_token) for i in first]
        assert all(i.status == "RUNNING" and i.attempt == 1 for i in again)
        assert len(admin.list_instances(task_id="cj", status="PENDING").items) == 2  # nothing more taken

        # Another claim_id, or the same one from another worker, is a new claim.
        other = agent.claim("agent_cid", "w", max_instances=1, claim_id=str(uuid.uuid4()))
        stranger = agent.claim("agent_cid", "w9", max_instances=1, claim_id=cid)
        taken = {i.id for i in first}
        assert len(other) == 1 and len(stranger) == 1
        assert not taken & {other[0].id, stranger[0].id} and other[0].id != stranger[0].id

        # Only what the claim still holds comes back; once it holds nothing, the id claims anew.
        agent.complete(first[0].id, first[0].lease_token, None)
        rest = agent.claim("agent_cid", "w", max_instances=3, claim_id=cid)
        assert [(i.id, i.lease_token) for i in rest] == [(i.id, i.lease_token) for i in first[1:]]
        for i in rest:
            agent.fail(i.id, i.lease_token, "given up", retryable=False)
        newer = admin.trigger("cj")
        fresh = agent.claim("agent_cid", "w", max_instances=3, claim_id=cid)
        assert [i.id for i in fresh] == [newer.id] and fresh[0].lease_token not in {i.lease_token for i in first}

        with pytest.raises(Invalid) as invalid:
            agent.claim("agent_cid", "w", claim_id="")
        assert invalid.value.errors[0].field == "claim_id"
        with pytest.raises(Invalid):
            agent.claim("agent_cid", "w", claim_id="a\nb")
        with pytest.raises(Invalid):
            agent.claim("agent_cid", "w", claim_id="x" * 129)
        assert agent.claim("agent_cid", "w", claim_id="é" * 128) == []


def test_complete_many_answers_each_item_in_order(kairos: Kairos) -> None:
    with kairos.client() as admin, kairos.client(kairos.agent_token) as agent:
        admin.put_task(TaskSpec(id="batch", agent_id="agent_b", trigger=manual(), execution={"concurrency_limit": 10}))
        for _ in range(2):
            admin.trigger("batch")
        x, y = agent.claim("agent_b", "w", max_instances=2)
        unknown = str(uuid.uuid4())
        results = agent.complete_many([
            Completion(x.id, x.lease_token, {"ok": 1}),
            Completion(y.id, str(uuid.uuid4())),
            Completion(unknown, str(uuid.uuid4())),
        ])
        assert [(r.id, r.status) for r in results] == [(x.id, 200), (y.id, 409), (unknown, 404)]
        assert results[0].ok and results[0].instance is not None
        assert results[0].instance.status == "SUCCESS" and results[0].instance.result == {"ok": 1}
        assert results[1].detail is not None and "stale lease" in results[1].detail
        assert admin.get_instance(y.id).status == "RUNNING"  # the stale item wrote nothing
        with pytest.raises(ValueError):
            agent.complete_many([])


def test_errors_map_to_exceptions(kairos: Kairos) -> None:
    with kairos.client() as c:
        with pytest.raises(NotFound) as nf:
            c.get_task("no_such_task")
        assert nf.value.status == 404 and nf.value.type.endswith("/not-found")

        with pytest.raises(Invalid) as invalid:
            c.put_task(TaskSpec(id="bad", agent_id="a", trigger=cron("61 * * * *"), execution={"max_retries": 1000}))
        fields = {e.field for e in invalid.value.errors}
        assert {"trigger.expr", "execution.max_retries"} <= fields
        assert invalid.value.status == 422

    with Client(kairos.url, token="not-a-token") as stranger:
        with pytest.raises(Unauthorized) as unauth:
            stranger.list_tasks()
        assert unauth.value.status == 401 and not isinstance(unauth.value, Forbidden)

    with kairos.client(kairos.agent_token) as agent:
        with pytest.raises(Forbidden) as forbidden:
            agent.put_task(TaskSpec(id="x", agent_id="a", trigger=manual()))
        assert forbidden.value.status == 403 and isinstance(forbidden.value, Unauthorized)

    with kairos.client() as c:
        c.put_task(TaskSpec(id="t", agent_id="a", trigger=manual()))
        inst = c.trigger("t")
        with pytest.raises(Stale):
            c.retry_instance(inst.id)  # PENDING cannot be retried: an illegal transition


def test_apply_creates_replaces_and_leaves_alone(kairos: Kairos) -> None:
    specs = [
        TaskSpec(id="report", agent_id="agent_c", trigger=cron("0 8 * * *", "Europe/Paris")),
        TaskSpec(id="cleanup", agent_id="agent_c", trigger=interval(600), execution={"max_retries": 1}),
    ]
    with kairos.client() as c:
        first = c.apply(specs)
        assert [(r.id, r.outcome) for r in first] == [("report", "created"), ("cleanup", "created")]
        assert [(r.id, r.outcome) for r in c.apply(specs)] == [("report", "unchanged"), ("cleanup", "unchanged")]
        specs[1].execution = {"max_retries": 2}
        again = c.apply(specs)
        assert [(r.id, r.outcome) for r in again] == [("report", "unchanged"), ("cleanup", "configured")]
        assert again[1].task.version == 2 and again[1].task.execution["max_retries"] == 2
        with pytest.raises(ValueError):
            c.apply([specs[0], specs[0]])
        with pytest.raises(Invalid):
            c.apply([TaskSpec(id="broken", agent_id="agent_c", trigger=cron("not cron"))])


def test_async_client_speaks_the_same_api(kairos: Kairos) -> None:
    async def go() -> None:
        async with kairos.async_client() as admin, kairos.async_client(kairos.agent_token) as agent:
            applied = await admin.apply([TaskSpec(id="a1", agent_id="agent_d", trigger=manual())])
            assert applied[0].outcome == "created"
            inst = await admin.trigger("a1", context={"k": "v"})
            [claimed] = await agent.claim("agent_d", "aw", wait_seconds=1, claim_id="c-1")
            assert claimed.id == inst.id and claimed.context == {"k": "v"}
            [repeated] = await agent.claim("agent_d", "aw", claim_id="c-1")
            assert (repeated.id, repeated.lease_token) == (claimed.id, claimed.lease_token)
            await agent.heartbeat(claimed.id, claimed.lease_token)
            done = await agent.complete(claimed.id, claimed.lease_token, [1, 2, 3])
            assert done.result == [1, 2, 3]
            with pytest.raises(Stale):
                await agent.fail(claimed.id, claimed.lease_token, "late")
            assert [t.id async for t in admin.iter_tasks()] == ["a1"]
            assert [i.id async for i in admin.iter_instances(task_id="a1")] == [inst.id]
            with pytest.raises(NotFound):
                await admin.get_instance(str(uuid.uuid4()))

    asyncio.run(go())
