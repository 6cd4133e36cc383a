// The Worker against a real kairos: an exactly-once drain, failure kinds, heartbeats, lost
// leases, refused tokens and shutdown (also of a worker process signalled with SIGTERM).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { openSync, closeSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Fatal, Retryable, Throttled, Unauthorized, Worker, type Job } from "../src/index.js";
import { Relay, RunningWorker, eventually, quietLogger, sleep, tempDir, withKairos, type RelayedRequest } from "./harness.js";

const FAST_RETRY = { retry_backoff: { base_seconds: 1, max_seconds: 1, jitter: 0 } };

test("four workers drain 300 instances exactly once", async () => {
  await withKairos(async (k) => {
    await k.task("drain", "drain_agent", { max_retries: 0 });
    await k.triggerMany("drain", 300);
    assert.deepEqual(await k.statuses(), { PENDING: 300 });

    // The handler's effect, counted per instance and per worker.
    const effects = new Map<string, number>();
    const byWorker = new Map<string, number>();
    const handler = async (job: Job): Promise<unknown> => {
      effects.set(job.id, (effects.get(job.id) ?? 0) + 1);
      byWorker.set(job.worker_id ?? "?", (byWorker.get(job.worker_id ?? "?") ?? 0) + 1);
      await sleep(Math.random() * 10);
      return { window: job.window_key };
    };
    const workers = ["w1", "w2", "w3", "w4"].map(
      (id) => new RunningWorker(k.worker("drain_agent", id, { concurrency: 8, batch: 50 }), handler),
    );
    let stats;
    try {
      await eventually(async () => (await k.statuses())["SUCCESS"] === 300, "300 instances SUCCESS", 120_000);
    } finally {
      stats = await Promise.all(workers.map((w) => w.stop()));
    }

    assert.equal(effects.size, 300, "every instance ran");
    assert.deepEqual([...new Set(effects.values())], [1], "no instance ran twice");
    assert.deepEqual(
      await k.query("select status, attempt, count(*)::int as n from task_instance group by 1, 2"),
      [{ status: "SUCCESS", attempt: 1, n: 300 }],
    );
    const rows = await k.query<{ worker_id: string; n: number }>(
      "select worker_id, count(*)::int as n from task_instance group by 1 order by 1",
    );
    assert.deepEqual(
      Object.fromEntries(rows.map((r) => [r.worker_id, r.n])),
      Object.fromEntries([...byWorker.entries()].sort()),
    );
    assert.ok(rows.length >= 2, `the work was shared: ${JSON.stringify(rows)}`);
    assert.equal(stats.reduce((s, x) => s + x.succeeded, 0), 300);
    assert.equal(stats.reduce((s, x) => s + x.claimed, 0), 300);
    assert.equal(stats.reduce((s, x) => s + x.leaseLost + x.failed + x.requestErrors, 0), 0);
    const [{ n: mismatched }] = (await k.query<{ n: number }>(
      "select count(*)::int as n from task_instance where result->>'window' <> window_key",
    )) as [{ n: number }];
    assert.equal(mismatched, 0);
  });
});

test("Fatal goes DEAD at once; Retryable and other errors are retried", async () => {
  await withKairos(async (k) => {
    for (const name of ["fatal", "retry", "boom", "custom"]) {
      await k.task(name, "fail_agent", { max_retries: 3, ...FAST_RETRY });
    }
    const c = k.client();
    const ids: Record<string, string> = {};
    for (const name of ["fatal", "retry", "boom", "custom"]) {
      ids[name] = (await c.trigger(name)).id;
    }
    class BadInput extends Error {}
    const handler = (job: Job): unknown => {
      if (job.task_id === "fatal") throw new Fatal("bad input: the report template is missing");
      if (job.task_id === "custom") throw new BadInput("no such region");
      if (job.attempt === 1) {
        if (job.task_id === "retry") throw new Retryable("upstream answered 503");
        throw new TypeError("kaput");
      }
      return { attempt: job.attempt };
    };
    const w = new RunningWorker(
      k.worker("fail_agent", "fw", { concurrency: 4, isFatal: (e) => e instanceof BadInput }),
      handler,
    );
    let stats;
    try {
      await eventually(async () => {
        for (const id of Object.values(ids)) {
          const s = (await c.getInstance(id)).status;
          if (s !== "SUCCESS" && s !== "DEAD") return false;
        }
        return true;
      }, "every instance finished");
    } finally {
      stats = await w.stop();
    }
    const fatal = await c.getInstance(ids["fatal"] as string);
    assert.deepEqual([fatal.status, fatal.attempt, fatal.error_kind], ["DEAD", 1, "agent"]);
    assert.equal(fatal.error, "bad input: the report template is missing");
    assert.deepEqual(
      fatal.events.map((e) => [e.from, e.to]).at(-1),
      ["RUNNING", "DEAD"],
    );
    const custom = await c.getInstance(ids["custom"] as string);
    assert.deepEqual([custom.status, custom.attempt, custom.error], ["DEAD", 1, "Error: no such region"]);

    const retry = await c.getInstance(ids["retry"] as string);
    assert.deepEqual([retry.status, retry.attempt, retry.result], ["SUCCESS", 2, { attempt: 2 }]);
    assert.ok(retry.events.some((e) => e.to === "FAILED" && e.reason === "agent: upstream answered 503"));
    const boom = await c.getInstance(ids["boom"] as string);
    assert.deepEqual([boom.status, boom.attempt], ["SUCCESS", 2]);
    assert.ok(boom.events.some((e) => e.to === "FAILED" && e.reason === "agent: TypeError: kaput"), JSON.stringify(boom.events));

    assert.equal(stats.failed, 4);
    assert.equal(stats.succeeded, 2);
    assert.equal(stats.leaseLost, 0);
  });
});

test("Throttled waits its time with the attempt unspent", async () => {
  await withKairos(async (k) => {
    await k.client().putTask({
      id: "quota",
      agent_id: "quota_agent",
      trigger: { type: "manual" },
      execution: { max_retries: 0 },
      circuit_breaker: { failure_threshold: 1 },
    });
    const c = k.client();
    const id = (await c.trigger("quota")).id;
    const runs: Array<[number, number]> = [];
    const w = new RunningWorker(k.worker("quota_agent", "qw"), (job: Job) => {
      runs.push([performance.now(), job.attempt]);
      if (runs.length === 1) throw new Throttled(2, "HTTP 429 from the model API");
      return { attempt: job.attempt, run: runs.length };
    });
    let stats;
    try {
      await eventually(async () => ["SUCCESS", "DEAD"].includes((await c.getInstance(id)).status), "the instance finished");
    } finally {
      stats = await w.stop();
    }
    const done = await c.getInstance(id);
    assert.deepEqual([done.status, done.attempt, done.result], ["SUCCESS", 1, { attempt: 1, run: 2 }]);
    assert.deepEqual(runs.map((r) => r[1]), [1, 1], "the throttled attempt was not spent");
    const gap = (runs[1] as [number, number])[0] - (runs[0] as [number, number])[0];
    assert.ok(gap >= 1900, `run again ${gap} ms after the throttle, before its 2 s were up`);
    const task = await c.getTask("quota");
    assert.deepEqual([task.consecutive_failures, task.paused], [0, false]);
    assert.ok(done.events.some((e) => e.reason === "throttled: HTTP 429 from the model API"));
    assert.equal(stats.throttled, 1);
    assert.equal(stats.failed, 0);
    assert.equal(stats.succeeded, 1);
  });
});

test("a holdLimit the server refuses is dropped and the throttle still reported", async () => {
  await withKairos(async (k) => {
    await k.task("quota_nolimit", "qn_agent", { max_retries: 0 });
    const c = k.client();
    const id = (await c.trigger("quota_nolimit")).id;
    const relay = await new Relay(k.url, () => undefined).start();
    const attempts: number[] = [];
    const w = new RunningWorker(
      new Worker(relay.url, "qn_agent", { token: k.agentToken, workerId: "qnw", waitSeconds: 1, handleSignals: false, logger: quietLogger() }),
      (job: Job) => {
        attempts.push(job.attempt);
        if (attempts.length === 1) throw new Throttled(1, "rate limited", { holdLimit: "no-such-limit" });
        return "done";
      },
    );
    let stats;
    try {
      await eventually(async () => ["SUCCESS", "DEAD"].includes((await c.getInstance(id)).status), "the instance finished");
    } finally {
      stats = await w.stop();
      await relay.close();
    }
    const fails = relay.to(/\/fail$/).map((r) => JSON.parse(r.body) as Record<string, unknown>);
    assert.deepEqual(fails.map((f) => f["hold_limit"]), ["no-such-limit", undefined]);
    assert.ok(fails.every((f) => f["retry_after_seconds"] === 1));
    const done = await c.getInstance(id);
    assert.deepEqual([done.status, done.attempt, done.result], ["SUCCESS", 1, "done"]);
    assert.deepEqual(attempts, [1, 1]);
    assert.deepEqual([stats.throttled, stats.failed, stats.requestErrors], [1, 0, 1]);
  });
});

test("heartbeats keep a 5 s lease alive through a 12 s handler", async () => {
  await withKairos(async (k) => {
    await k.task("slow", "hb_agent", { max_retries: 0 });
    await k.task("unbeaten", "hb_none", { max_retries: 0 });
    const c = k.client();
    const slowId = (await c.trigger("slow")).id;
    const controlId = (await c.trigger("unbeaten")).id;
    const w = new RunningWorker(k.worker("hb_agent", "hb", { leaseSeconds: 5 }), async (job: Job) => {
      await sleep(12_000);
      return { slept: 12, lost: job.signal.aborted };
    });
    let stats;
    try {
      // The control: the same 5 s lease without heartbeats is reaped well within 12 s.
      const [control] = await k.client(k.agentToken).claim("hb_none", "nobody", { leaseSeconds: 5, waitSeconds: 5 });
      assert.equal(control?.id, controlId);
      const reaped = await eventually(
        async () => {
          const i = await c.getInstance(controlId);
          return i.status === "DEAD" ? i : undefined;
        },
        "the unbeaten lease reaped",
        15_000,
      );
      assert.equal(reaped.error_kind, "lease_expired");
      assert.equal((await c.getInstance(slowId)).status, "RUNNING", "the beaten lease outlived the unbeaten one");
      await eventually(async () => (await c.getInstance(slowId)).status === "SUCCESS", "the slow handler done", 30_000);
    } finally {
      stats = await w.stop();
    }
    const done = await c.getInstance(slowId);
    assert.equal(done.attempt, 1);
    assert.deepEqual(done.result, { slept: 12, lost: false });
    assert.deepEqual(done.events.map((e) => e.to), ["PENDING", "RUNNING", "SUCCESS"]);
    assert.ok(stats.heartbeats >= 3, JSON.stringify(stats));
    assert.equal(stats.leaseLost, 0);
    assert.equal(stats.succeeded, 1);
  });
});

test("a 409 on complete is swallowed, counted, and the worker goes on", async () => {
  await withKairos(async (k) => {
    await k.task("cancelled_midway", "c409_agent");
    const c = k.client();
    const victimId = (await c.trigger("cancelled_midway", { windowKey: "victim" })).id;
    const worker = k.worker("c409_agent", "cw");
    const w = new RunningWorker(worker, async (job: Job) => {
      if (job.window_key === "victim") {
        await c.cancelInstance(job.id, "operator changed their mind");
      }
      return { window: job.window_key };
    });
    let stats;
    try {
      await eventually(() => worker.stats.completeConflicts === 1, "the 409 on complete counted", 20_000);
      const afterId = (await c.trigger("cancelled_midway", { windowKey: "after" })).id;
      await eventually(async () => (await c.getInstance(afterId)).status === "SUCCESS", "the next instance done", 20_000);
    } finally {
      stats = await w.stop();
    }
    const victim = await c.getInstance(victimId);
    assert.equal(victim.status, "CANCELLED");
    assert.equal(victim.result, null);
    assert.equal(stats.completeConflicts, 1);
    assert.equal(stats.leaseLost, 1);
    assert.equal(stats.succeeded, 1);
    assert.equal(stats.failed, 0);
  });
});

test("a 409 on a heartbeat aborts job.signal and drops the result", async () => {
  await withKairos(async (k) => {
    await k.task("fenced", "hb409_agent");
    const c = k.client();
    const id = (await c.trigger("fenced")).id;
    const seen: { reason?: string } = {};
    const worker = k.worker("hb409_agent", "hw", { leaseSeconds: 3 });
    const w = new RunningWorker(worker, async (job: Job) => {
      await c.cancelInstance(job.id);
      await new Promise<void>((resolve) => job.signal.addEventListener("abort", () => resolve(), { once: true }));
      seen.reason = (job.signal.reason as Error).message;
      return "too late";
    });
    let stats;
    try {
      await eventually(() => worker.stats.droppedResults === 1, "the result dropped", 20_000);
    } finally {
      stats = await w.stop();
    }
    assert.match(seen.reason ?? "", /409/);
    assert.equal(stats.heartbeatConflicts, 1);
    assert.equal(stats.leaseLost, 1);
    assert.equal(stats.succeeded, 0);
    assert.equal((await c.getInstance(id)).status, "CANCELLED");
  });
});

test("a refused token stops the worker with the error", async () => {
  await withKairos(async (k) => {
    const w = new Worker(k.url, "any_agent", {
      token: "wrong-token",
      workerId: "nw",
      waitSeconds: 1,
      handleSignals: false,
      logger: quietLogger(),
    });
    await assert.rejects(w.run(() => "never"), Unauthorized);
  });
});

test("results that cannot be stored fail the attempt for good", async () => {
  await withKairos(async (k) => {
    await k.task("bad_result", "br_agent", { max_retries: 3 });
    const c = k.client();
    const big = (await c.trigger("bad_result", { windowKey: "big" })).id;
    const cyclic = (await c.trigger("bad_result", { windowKey: "cyclic" })).id;
    const w = new RunningWorker(k.worker("br_agent", "bw"), (job: Job) => {
      if (job.window_key === "big") return "x".repeat(70_000);
      const o: Record<string, unknown> = {};
      o["self"] = o;
      return o;
    });
    try {
      await eventually(
        async () => (await c.getInstance(big)).status === "DEAD" && (await c.getInstance(cyclic)).status === "DEAD",
        "both DEAD",
      );
    } finally {
      await w.stop();
    }
    assert.match((await c.getInstance(big)).error ?? "", /70002 bytes serialized; at most 65536/);
    assert.match((await c.getInstance(cyclic)).error ?? "", /not JSON/);
  });
});

test("shutdown gives handlers past the grace back, retryable at once", async () => {
  await withKairos(async (k) => {
    // A 10-minute backoff: the retry happens within seconds only because the given-up attempt
    // is failed with retry_at_once.
    await k.task("stuck", "sd_agent", {
      max_retries: 2,
      retry_backoff: { base_seconds: 600, max_seconds: 600, jitter: 0 },
    });
    const c = k.client();
    const id = (await c.trigger("stuck")).id;
    const seen: { reason?: string } = {};
    const handler = async (job: Job): Promise<string> => {
      if (job.attempt === 1) {
        await new Promise<void>((resolve) => job.signal.addEventListener("abort", () => resolve(), { once: true }));
        seen.reason = (job.signal.reason as Error).message;
        await sleep(200);
      }
      return `done on attempt ${job.attempt}`;
    };
    const w = new RunningWorker(k.worker("sd_agent", "sd1", { shutdownGraceSeconds: 0.5 }), handler);
    await eventually(async () => (await c.getInstance(id)).status === "RUNNING", "the instance running", 20_000);
    const started = performance.now();
    const stats = await w.stop();
    assert.ok(performance.now() - started < 5000);
    assert.equal(stats.givenUpAtShutdown, 1);
    assert.equal(stats.failed, 1);
    assert.match(seen.reason ?? "", /shut down/);
    const failed = await c.getInstance(id);
    assert.ok(["FAILED", "PENDING"].includes(failed.status), failed.status);
    assert.equal(failed.error, "worker sd1 shut down before the handler finished");

    const w2 = new RunningWorker(k.worker("sd_agent", "sd2"), handler);
    try {
      await eventually(async () => (await c.getInstance(id)).status === "SUCCESS", "the retry done elsewhere", 20_000);
    } finally {
      await w2.stop();
    }
    assert.equal((await c.getInstance(id)).result, "done on attempt 2");
  });
});

const AGENT = fileURLToPath(new URL("./agent-process.js", import.meta.url));

function agentProcess(url: string, token: string, agentId: string, workerId: string, args: string[], dir: string) {
  const logPath = join(dir, `${workerId}.log`);
  const log = openSync(logPath, "w");
  const child = spawn(process.execPath, [AGENT, url, token, agentId, workerId, ...args], {
    stdio: ["ignore", log, log],
  });
  closeSync(log);
  const exited = new Promise<number | string>((resolve) =>
    child.once("exit", (code, signal) => resolve(code ?? signal ?? "?")),
  );
  return { child, exited, logPath };
}

test("SIGTERM mid-run loses nothing: running handlers finish, the rest stays PENDING", async () => {
  await withKairos(async (k) => {
    await k.task("graceful", "sig_agent", { max_retries: 0 });
    const c = k.client();
    const ids = await k.triggerMany("graceful", 10);
    const dir = tempDir();
    const agent = agentProcess(k.url, k.agentToken, "sig_agent", "sigw", ["--concurrency=4", "--sleep=2000", "--grace=20"], dir);
    try {
      await eventually(
        async () => (await k.statuses())["RUNNING"] === 4,
        "the worker process running 4 instances",
        30_000,
      );
      agent.child.kill("SIGTERM");
      assert.equal(await agent.exited, 0);
    } finally {
      if (agent.child.exitCode === null) agent.child.kill("SIGKILL");
    }
    const log = readFileSync(agent.logPath, "utf8");
    assert.match(log, /received SIGTERM/);
    const rows = await k.query<{ status: string; attempt: number; worker_id: string | null; n: number }>(
      "select status, attempt, worker_id, count(*)::int as n from task_instance group by 1, 2, 3 order by 1",
    );
    // Everything the process held finished under it; nothing else was touched.
    const success = rows.find((r) => r.status === "SUCCESS");
    const pending = rows.find((r) => r.status === "PENDING");
    assert.ok(success !== undefined && success.worker_id === "sigw" && success.attempt === 1, JSON.stringify(rows));
    assert.ok(pending !== undefined && pending.attempt === 1 && pending.worker_id === null, JSON.stringify(rows));
    assert.equal(success.n + pending.n, 10, JSON.stringify(rows));
    assert.ok(success.n >= 4, JSON.stringify(rows));

    // Another worker drains the rest: all ten done, each once, none on a second attempt.
    const w = new RunningWorker(k.worker("sig_agent", "after"), () => ({ worker: "after" }));
    try {
      await eventually(async () => (await k.statuses())["SUCCESS"] === 10, "all 10 SUCCESS");
    } finally {
      await w.stop();
    }
    for (const id of ids) {
      const i = await c.getInstance(id);
      assert.equal(i.attempt, 1);
      assert.deepEqual(i.events.map((e) => e.to), ["PENDING", "RUNNING", "SUCCESS"]);
    }
  });
});

test("SIGTERM past the grace gives the held instances back at once, nothing lost", async () => {
  await withKairos(async (k) => {
    await k.task("long", "sig2_agent", {
      max_retries: 2,
      retry_backoff: { base_seconds: 600, max_seconds: 600, jitter: 0 },
    });
    const ids = await k.triggerMany("long", 3);
    const dir = tempDir();
    const agent = agentProcess(k.url, k.agentToken, "sig2_agent", "sigl", ["--concurrency=3", "--sleep=600000", "--grace=0.5"], dir);
    try {
      await eventually(async () => (await k.statuses())["RUNNING"] === 3, "the worker process running 3 instances", 30_000);
      agent.child.kill("SIGTERM");
      assert.equal(await agent.exited, 0);
    } finally {
      if (agent.child.exitCode === null) agent.child.kill("SIGKILL");
    }
    const w = new RunningWorker(k.worker("sig2_agent", "rescuer"), (job: Job) => ({ attempt: job.attempt }));
    try {
      await eventually(async () => (await k.statuses())["SUCCESS"] === 3, "all 3 SUCCESS on the second attempt", 20_000);
    } finally {
      await w.stop();
    }
    const c = k.client();
    for (const id of ids) {
      const i = await c.getInstance(id);
      assert.deepEqual([i.attempt, i.result, i.worker_id], [2, { attempt: 2 }, "rescuer"]);
      assert.ok(i.events.some((e) => e.to === "FAILED" && (e.reason ?? "").includes("sigl shut down")), JSON.stringify(i.events));
    }
  });
});

test("503 and 429 on a claim are waited out for their Retry-After, the claim sent again with its claim_id", async () => {
  await withKairos(async (k) => {
    await k.task("busy", "busy_agent");
    const id = (await k.client().trigger("busy")).id;
    const relay = await new Relay(k.url, (r) => {
      if (r.path !== "/v1/claims") return undefined;
      if (r.n === 1) return { status: 503, retryAfter: "1" };
      if (r.n === 2) return { status: 429, retryAfter: "1" };
      return undefined;
    }).start();
    const w = new RunningWorker(
      new Worker(relay.url, "busy_agent", { token: k.agentToken, workerId: "bw", waitSeconds: 1, handleSignals: false, logger: quietLogger() }),
      () => "done",
    );
    let stats;
    try {
      await eventually(async () => (await k.client().getInstance(id)).status === "SUCCESS", "the instance done", 20_000);
    } finally {
      stats = await w.stop();
      await relay.close();
    }
    const claims = relay.to(/^\/v1\/claims$/);
    const ids = claims.slice(0, 3).map((r) => (JSON.parse(r.body) as { claim_id: string }).claim_id);
    assert.equal(new Set(ids).size, 1, `the claim was sent again unchanged: ${ids.join(", ")}`);
    const [a, b, c] = claims as [RelayedRequest, RelayedRequest, RelayedRequest];
    assert.ok(b.at - a.at >= 950, `waited ${b.at - a.at} ms after a 503 with Retry-After: 1`);
    assert.ok(c.at - b.at >= 950, `waited ${c.at - b.at} ms after a 429 with Retry-After: 1`);
    assert.equal(stats.requestErrors, 2);
    assert.equal(stats.succeeded, 1);
  });
});

test("a claim whose answer is lost is sent again with its claim_id and gets those instances", async () => {
  await withKairos(async (k) => {
    await k.task("lost_claim", "lc_agent", { max_retries: 0 });
    const ids = await k.triggerMany("lost_claim", 3);
    const relay = await new Relay(k.url, (r) => (r.path === "/v1/claims" && r.n === 1 ? "lose-answer" : undefined)).start();
    const runs: string[] = [];
    const w = new RunningWorker(
      new Worker(relay.url, "lc_agent", { token: k.agentToken, workerId: "lw", waitSeconds: 1, handleSignals: false, logger: quietLogger() }),
      (job: Job) => {
        runs.push(job.id);
        return "ran";
      },
    );
    let stats;
    try {
      await eventually(async () => (await k.statuses())["SUCCESS"] === 3, "all 3 SUCCESS", 20_000);
    } finally {
      stats = await w.stop();
      await relay.close();
    }
    const [first, second] = relay.to(/^\/v1\/claims$/) as [RelayedRequest, RelayedRequest];
    assert.equal(JSON.parse(second.body).claim_id, JSON.parse(first.body).claim_id);
    assert.deepEqual([...runs].sort(), [...ids].sort(), "each instance ran once");
    const c = k.client();
    for (const id of ids) {
      const i = await c.getInstance(id);
      assert.equal(i.attempt, 1);
      assert.deepEqual(i.events.map((e) => e.to), ["PENDING", "RUNNING", "SUCCESS"], "the same lease: nothing given back or reaped");
    }
    assert.equal(stats.requestErrors, 1);
    assert.equal(stats.claimed, 3);
  });
});

test("reports whose answers are lost are sent again under the same lease", async () => {
  await withKairos(async (k) => {
    await k.task("ok", "lr_agent", { max_retries: 0 });
    await k.task("bad", "lr_agent", { max_retries: 0 });
    const okId = (await k.client().trigger("ok")).id;
    const badId = (await k.client().trigger("bad")).id;
    const relay = await new Relay(k.url, (r) =>
      (r.path === "/v1/completions" || r.path.endsWith("/fail")) && r.n === 1 ? "lose-answer" : undefined,
    ).start();
    const runs: string[] = [];
    const w = new RunningWorker(
      new Worker(relay.url, "lr_agent", { token: k.agentToken, workerId: "rw", waitSeconds: 1, handleSignals: false, logger: quietLogger() }),
      (job: Job) => {
        runs.push(job.task_id);
        if (job.task_id === "bad") throw new Fatal("no");
        return "fine";
      },
    );
    let stats;
    try {
      await eventually(
        async () => (await k.client().getInstance(okId)).status === "SUCCESS" && (await k.client().getInstance(badId)).status === "DEAD",
        "both finished",
        20_000,
      );
      await eventually(() => w.worker.stats.succeeded === 1 && w.worker.stats.failed === 1, "both reports answered", 20_000);
    } finally {
      stats = await w.stop();
      await relay.close();
    }
    assert.deepEqual(runs.sort(), ["bad", "ok"]);
    const completions = relay.to(/^\/v1\/completions$/);
    assert.equal(completions.length, 2);
    assert.equal(completions[0]?.body, completions[1]?.body, "sent again unchanged");
    assert.equal(relay.to(/\/fail$/).length, 2);
    assert.deepEqual([stats.succeeded, stats.failed, stats.requestErrors, stats.leaseLost], [1, 1, 2, 0]);
    assert.equal((await k.client().getInstance(okId)).result, "fine");
  });
});
