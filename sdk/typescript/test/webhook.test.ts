// The push side against a real kairos: signatures of real pushes, and webhookReceiver answering
// inline, with 202 and callbacks, and refusing bad signatures, served by node:http.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { test } from "node:test";

import { Fatal, Retryable, Throttled, sign, verifySignature, webhookReceiver, type Job } from "../src/index.js";
import { eventually, quietLogger, sleep, withKairos, type Kairos } from "./harness.js";

const SECRET = "push-signing-key-0001";

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

async function serve(
  handle: (req: IncomingMessage, body: Buffer) => Promise<{ status: number; headers: Record<string, string>; body: string }>,
): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    void readBody(req)
      .then((body) => handle(req, body))
      .then((answer) => {
        res.writeHead(answer.status, answer.headers);
        res.end(answer.body);
      })
      .catch(() => {
        res.writeHead(500);
        res.end();
      });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return { server, url: `http://127.0.0.1:${port}` };
}

function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

async function webhookTask(k: Kairos, taskId: string, url: string, secret = SECRET, execution: Record<string, unknown> = {}) {
  await k.client().putTask({
    id: taskId,
    agent_id: "hook_agent",
    trigger: { type: "manual" },
    execution: { concurrency_limit: 10, ...execution },
    dispatch: { mode: "webhook", url, secret, timeout_seconds: 10 },
    circuit_breaker: { failure_threshold: 1000 },
  });
}

test("verifySignature accepts kairos's real pushes and refuses tampered or old ones", async () => {
  await withKairos(async (k) => {
    const requests: Array<{ headers: IncomingMessage["headers"]; body: Buffer }> = [];
    const { server, url } = await serve(async (req, body) => {
      requests.push({ headers: req.headers, body });
      return { status: 200, headers: { "content-type": "application/json" }, body: '{"status": "success", "result": {"recorded": true}}' };
    });
    try {
      await webhookTask(k, "signed", `${url}/kairos/push`);
      const c = k.client();
      const inst = await c.trigger("signed", { windowKey: "w1", context: { q: "é ✓" } });
      await eventually(async () => (await c.getInstance(inst.id)).status === "SUCCESS", "the push recorded", 20_000);
      assert.deepEqual((await c.getInstance(inst.id)).result, { recorded: true });
    } finally {
      await close(server);
    }
    assert.equal(requests.length, 1);
    const { headers, body } = requests[0] as { headers: IncomingMessage["headers"]; body: Buffer };
    const header = headers["kairos-signature"] as string;
    assert.equal(headers["idempotency-key"], "signed:w1");

    assert.ok(verifySignature(SECRET, header, body));
    assert.ok(verifySignature(Buffer.from(SECRET), header, body));
    assert.ok(verifySignature(SECRET, header, body.toString("utf8")), "the body as text signs the same");
    const stamp = Number(/^t=(\d+),/.exec(header)?.[1]);
    assert.ok(Math.abs(stamp - Date.now() / 1000) < 60);
    assert.equal(sign(SECRET, body, stamp), header, "the same bytes as the daemon signs");

    assert.ok(!verifySignature("another-secret", header, body));
    assert.ok(!verifySignature(SECRET, header, Buffer.concat([body, Buffer.from(" ")])));
    assert.ok(!verifySignature(SECRET, header, body.toString("utf8").replace("signed:w1", "signed:w2")));
    assert.ok(!verifySignature(SECRET, header, body, { now: stamp + 301 }), "too old");
    assert.ok(!verifySignature(SECRET, header, body, { now: stamp - 301 }), "from the future");
    assert.ok(verifySignature(SECRET, header, body, { now: stamp + 299 }));
    assert.ok(verifySignature(SECRET, header, body, { tolerance: null, now: stamp + 10_000 }));
    const old = sign(SECRET, body, stamp - 3600);
    assert.ok(!verifySignature(SECRET, old, body), "a replay an hour old");
    assert.ok(!verifySignature(SECRET, null, body));
    assert.ok(!verifySignature(SECRET, `v1=${header.split("v1=")[1]}`, body));
    assert.ok(!verifySignature(SECRET, "garbage", body));
    // Hostile headers are refused, never an exception (a receiver must not answer 500).
    assert.ok(!verifySignature(SECRET, `t=\u00b2,v1=${header.split("v1=")[1]}`, body));
    assert.ok(!verifySignature(SECRET, `t=${stamp},v1=\u00e9\u00e9`, body));
    assert.ok(!verifySignature(SECRET, `t=${stamp},v1=`, body));
    // A rotated secret: the old and the new signature side by side.
    assert.ok(verifySignature(SECRET, `${sign("old-secret", body, stamp)},${header.split(",")[1]}`, body));
  });
});

test("webhookReceiver answers inline or 202 with callbacks, fails Fatal for good, refuses bad signatures", async () => {
  await withKairos(async (k) => {
    const seen = new Map<string, Job>();
    const receive = webhookReceiver(
      async (job: Job) => {
        seen.set(job.task_id, job);
        if (job.task_id === "slow") {
          await sleep(2500);
          return { slow: true, lost: job.signal.aborted };
        }
        if (job.task_id === "fatal") throw new Fatal("cannot ever work");
        if (job.task_id === "flaky" && job.attempt === 1) throw new Retryable("try again");
        if (job.task_id === "quota" && !seen.has("quota-again")) {
          seen.set("quota-again", job);
          throw new Throttled(1, "HTTP 429 from the model API");
        }
        return { window: job.window_key, q: job.context["q"] };
      },
      { secret: SECRET, token: k.agentToken, respondWithinMs: 1000, leaseSeconds: 3, logger: quietLogger() },
    );
    const { server, url } = await serve((req, body) => receive(req, body));
    try {
      const retry = { max_retries: 2, retry_backoff: { base_seconds: 1, max_seconds: 1, jitter: 0 } };
      await webhookTask(k, "fast", url, SECRET, retry);
      await webhookTask(k, "slow", url, SECRET, retry);
      await webhookTask(k, "fatal", url, SECRET, retry);
      await webhookTask(k, "flaky", url, SECRET, retry);
      await webhookTask(k, "quota", url, SECRET, { max_retries: 0 });
      await webhookTask(k, "forged", url, "not-the-receivers-secret", { max_retries: 0 });
      const c = k.client();
      const ids: Record<string, string> = {};
      for (const name of ["fast", "slow", "fatal", "flaky", "forged", "quota"]) {
        ids[name] = (await c.trigger(name, { windowKey: "w", context: { q: name } })).id;
      }
      const final = ["SUCCESS", "DEAD"];
      await eventually(
        async () => {
          for (const id of Object.values(ids)) if (!final.includes((await c.getInstance(id)).status)) return false;
          return true;
        },
        "every push finished",
        30_000,
      );
      assert.ok(await receive.waitIdle(10_000));
      const fast = await c.getInstance(ids["fast"] as string);
      assert.deepEqual([fast.status, fast.attempt, fast.result], ["SUCCESS", 1, { window: "w", q: "fast" }]);
      const slow = await c.getInstance(ids["slow"] as string);
      assert.deepEqual([slow.status, slow.attempt, slow.result], ["SUCCESS", 1, { slow: true, lost: false }]);
      const fatal = await c.getInstance(ids["fatal"] as string);
      assert.deepEqual([fatal.status, fatal.attempt, fatal.error, fatal.error_kind], ["DEAD", 1, "cannot ever work", "agent"]);
      const flaky = await c.getInstance(ids["flaky"] as string);
      assert.deepEqual([flaky.status, flaky.attempt], ["SUCCESS", 2]);
      assert.ok(flaky.events.some((e) => e.to === "FAILED" && (e.reason ?? "").includes("HTTP 500")), JSON.stringify(flaky.events));
      const quota = await c.getInstance(ids["quota"] as string);
      assert.deepEqual([quota.status, quota.attempt], ["SUCCESS", 1], "the throttled push was pushed again, its attempt unspent");
      assert.ok(quota.events.some((e) => e.reason === "throttled: HTTP 429 from the model API"), JSON.stringify(quota.events));
      const forged = await c.getInstance(ids["forged"] as string);
      assert.equal(forged.status, "DEAD");
      assert.match(forged.error ?? "", /HTTP 401/);
      assert.equal(seen.has("forged"), false, "a push with a bad signature never reaches the handler");
      assert.equal(seen.get("fast")?.idempotency_key, "fast:w");

      const s = receive.stats;
      assert.equal(s.badSignature, 1);
      assert.equal(s.answeredSuccess, 3); // fast, flaky's second attempt, quota's second push
      assert.equal(s.answeredFailure, 1); // flaky's first attempt
      assert.equal(s.accepted, 3); // slow, fatal, quota's first push
      assert.equal(s.throttled, 1);
      assert.equal(s.callbacksRecorded, 3);
      assert.equal(s.leaseLost, 0);
    } finally {
      await close(server);
    }
  });
});
