// The Client against a real kairos: every call round-trips, errors map to their classes.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  Client,
  Forbidden,
  Invalid,
  NotFound,
  Stale,
  TransportError,
  Unauthorized,
  VERSION,
  VersionMismatch,
  cron,
  manual,
  type TaskSpec,
} from "../src/index.js";
import { SDK, freePort, withKairos } from "./harness.js";

test("the package's version is package.json's", () => {
  const pkg = JSON.parse(readFileSync(join(SDK, "package.json"), "utf8")) as { version: string };
  assert.equal(VERSION, pkg.version);
});

test("task calls round-trip through the API", async () => {
  await withKairos(async (k) => {
    const c = k.client();
    const spec: TaskSpec = {
      id: "daily",
      agent_id: "report_agent",
      trigger: cron("0 30 8 * * *", "Asia/Shanghai"),
      execution: { max_retries: 3 },
      context: { region: "cn-north" },
    };
    const t = await c.putTask(spec);
    assert.equal(t.version, 1);
    assert.equal(t.execution.max_retries, 3);
    assert.deepEqual(t.trigger, { type: "cron", expr: "0 30 8 * * *", timezone: "Asia/Shanghai", jitter_seconds: 0 });
    assert.notEqual(t.next_fire_at, null);
    assert.equal((await c.getTask("daily")).id, "daily");

    const applied = await c.apply([spec, { id: "other", agent_id: "report_agent", trigger: manual() }]);
    assert.deepEqual(applied.map((a) => [a.id, a.outcome]), [["daily", "unchanged"], ["other", "created"]]);
    const changed = await c.apply([{ ...spec, context: { region: "eu" } }]);
    assert.equal(changed[0]?.outcome, "configured");
    await assert.rejects(c.apply([spec, spec]), /defined twice/);

    await assert.rejects(c.putTask({ ...spec, context: {} }, { ifMatch: 1 }), VersionMismatch);
    assert.equal((await c.putTask({ ...spec, context: {} }, { ifMatch: 2 })).version, 3);

    const paused = await c.pauseTask("daily", "maintenance");
    assert.equal(paused.paused, true);
    assert.match(paused.paused_reason ?? "", /maintenance/);
    assert.equal((await c.resumeTask("daily")).paused, false);

    const page1 = await c.listTasks({ agentId: "report_agent", limit: 1 });
    assert.equal(page1.items.length, 1);
    assert.notEqual(page1.next_cursor, null);
    const all = [];
    for await (const task of c.iterTasks({ agentId: "report_agent" })) all.push(task.id);
    assert.deepEqual(all.sort(), ["daily", "other"]);

    const inst = await c.trigger("other", { windowKey: "w1", context: { q: "é ✓" } });
    assert.deepEqual([inst.status, inst.window_key, inst.idempotency_key], ["PENDING", "w1", "other:w1"]);
    assert.equal((await c.trigger("other", { windowKey: "w1" })).id, inst.id, "idempotent by window key");
    const listed = await c.listInstances({ taskId: "other", status: ["PENDING", "RUNNING"] });
    assert.deepEqual(listed.items.map((i) => i.id), [inst.id]);
    const iterated = [];
    for await (const i of c.iterInstances({ agentId: "report_agent" })) iterated.push(i.id);
    assert.deepEqual(iterated, [inst.id]);
    const cancelled = await c.cancelInstance(inst.id, "not needed");
    assert.equal(cancelled.status, "CANCELLED");
    const detail = await c.getInstance(inst.id);
    assert.deepEqual(detail.events.map((e) => e.to), ["PENDING", "CANCELLED"]);
    const retried = await c.retryInstance(inst.id, "needed after all");
    assert.equal(retried.status, "PENDING");

    await c.deleteTask("daily");
    await assert.rejects(c.getTask("daily"), NotFound);
  });
});

test("agent calls: claim, heartbeat, complete, completeMany, fail, throttle", async () => {
  await withKairos(async (k) => {
    await k.task("job", "agent1", { max_retries: 1 });
    const admin = k.client();
    const agent = k.client(k.agentToken);
    for (let n = 0; n < 5; n++) await admin.trigger("job", { windowKey: `w${n}`, context: { n } });

    assert.deepEqual(await agent.claim("nobody", "wk", { waitSeconds: 0 }), []);
    const claimed = await agent.claim("agent1", "wk", { maxInstances: 5, leaseSeconds: 30, claimId: "c-1" });
    assert.equal(claimed.length, 5);
    const again = await agent.claim("agent1", "wk", { maxInstances: 5, leaseSeconds: 30, claimId: "c-1" });
    assert.deepEqual(again.map((i) => i.lease_token).sort(), claimed.map((i) => i.lease_token).sort(), "same claim id, same leases");
    const [a, b, c, d, e] = claimed as [typeof claimed[0], typeof claimed[0], typeof claimed[0], typeof claimed[0], typeof claimed[0]];
    assert.equal(typeof a.context["n"], "number");

    const beat = await agent.heartbeat(a.id, a.lease_token, { leaseSeconds: 60 });
    assert.equal(beat.status, "RUNNING");
    assert.equal((await agent.complete(a.id, a.lease_token, { ok: 1 })).status, "SUCCESS");
    assert.equal((await agent.complete(a.id, a.lease_token, { ok: 1 })).status, "SUCCESS", "a repeated report is answered as the first");
    await assert.rejects(agent.heartbeat(a.id, a.lease_token), Stale);

    const results = await agent.completeMany([
      { id: b.id, lease_token: b.lease_token, result: "b" },
      { id: c.id, lease_token: "00000000-0000-4000-8000-000000000000", result: "c" },
      { id: "00000000-0000-4000-8000-000000000001", lease_token: c.lease_token },
    ]);
    assert.deepEqual(results.map((r) => r.status), [200, 409, 404]);
    assert.throws(() => agent.completeMany([]), RangeError);

    const failed = await agent.fail(c.id, c.lease_token, "went wrong", { retryable: false });
    assert.deepEqual([failed.status, failed.error], ["DEAD", "went wrong"]);
    const throttled = await agent.fail(d.id, d.lease_token, "HTTP 429", { retryAfterSeconds: 30 });
    assert.deepEqual([throttled.status, throttled.attempt, throttled.error_kind], ["PENDING", 1, "throttled"]);
    await assert.rejects(
      agent.fail(e.id, e.lease_token, "x", { retryAfterSeconds: 0 }),
      (err: unknown) => err instanceof Invalid && err.errors.some((f) => f.field === "retry_after_seconds"),
    );
    const again2 = await agent.fail(e.id, e.lease_token, "later", { retryAtOnce: true });
    assert.equal(again2.status, "FAILED");
  });
});

test("limit calls round-trip through the API", async () => {
  await withKairos(async (k) => {
    const c = k.client();
    const lim = await c.putLimit("openai", { concurrency: 8, rate: { count: 500, per_seconds: 60 } });
    assert.deepEqual([lim.name, lim.concurrency, lim.rate?.count, lim.per_key, lim.running], ["openai", 8, 500, false, 0]);
    assert.equal((await c.putLimit("openai", { concurrency: 8, rate: { count: 500, per_seconds: 60 } })).version, lim.version);
    await assert.rejects(c.putLimit("openai", { concurrency: 9, ifMatch: lim.version + 1 }), VersionMismatch);
    const held = await c.holdLimit("openai", 60, { reason: "quota" });
    assert.notEqual(held.held_until, null);
    assert.match(held.held_reason ?? "", /quota/);
    assert.equal((await c.releaseLimit("openai")).held_until, null);
    await c.putTask({
      id: "draws",
      agent_id: "a",
      trigger: manual(),
      execution: { limits: [{ name: "openai" }] },
    });
    await assert.rejects(c.deleteLimit("openai"), Stale);
    assert.deepEqual((await c.listLimits()).map((l) => l.name), ["openai"]);
    await c.deleteTask("draws");
    await c.deleteLimit("openai");
    await assert.rejects(c.getLimit("openai"), NotFound);
  });
});

test("errors map to their classes", async () => {
  await withKairos(async (k) => {
    await assert.rejects(k.client("nope").listTasks(), (e: unknown) => e instanceof Unauthorized && e.status === 401);
    await assert.rejects(
      k.client(k.agentToken).putTask({ id: "t", agent_id: "a", trigger: manual() }),
      (e: unknown) => e instanceof Forbidden && e instanceof Unauthorized && e.status === 403,
    );
    await assert.rejects(
      k.client().putTask({ id: "t", agent_id: "a", trigger: { type: "cron", expr: "nonsense" } }),
      (e: unknown) =>
        e instanceof Invalid && e.status === 422 && e.errors.some((f) => f.field.startsWith("trigger")) && e.type.includes("problems"),
    );
    await assert.rejects(k.client().getInstance("00000000-0000-4000-8000-000000000000"), NotFound);
    const port = await freePort();
    await assert.rejects(
      new Client(`http://127.0.0.1:${port}`).listTasks(),
      (e: unknown) => e instanceof TransportError && e.status === 0 && /ECONNREFUSED/.test(e.message),
    );
  });
});
