// The parts that need no daemon: argument checks and the signature's known answer.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";

import { Fatal, Retryable, Throttled, Worker, sign, verifySignature } from "../src/index.js";
import { errorText } from "../src/worker.js";

test("Throttled checks its arguments and bounds its wait", () => {
  assert.equal(new Throttled(2).holdLimit, undefined);
  const t = new Throttled(5, "HTTP 429", { holdLimit: "openai" });
  assert.deepEqual([t.after, t.reason, t.holdLimit, t.retryAfterSeconds], [5, "HTTP 429", "openai", 5]);
  assert.equal(new Throttled(0.5).retryAfterSeconds, 1);
  assert.equal(new Throttled(-3).retryAfterSeconds, 1);
  assert.equal(new Throttled(2.1).retryAfterSeconds, 3);
  assert.equal(new Throttled(Infinity).retryAfterSeconds, 86400);
  assert.throws(() => new Throttled(1, "x", { holdLimit: "" }), RangeError);
  assert.throws(() => new Throttled(NaN), RangeError);
});

test("error texts: the message of the SDK's errors, name and message of others", () => {
  assert.equal(errorText(new Fatal("bad input")), "bad input");
  assert.equal(errorText(new Retryable("later")), "later");
  assert.equal(errorText(new TypeError("kaput")), "TypeError: kaput");
  assert.equal(errorText("a string"), "a string");
  assert.equal(errorText(new Error("nul\u0000here")), "Error: nulhere");
  assert.equal(errorText(new Error("x".repeat(5000))).length, 4000);
});

test("Worker options are checked", () => {
  assert.throws(() => new Worker("http://127.0.0.1:9", "a", { concurrency: 0 }), RangeError);
  assert.throws(() => new Worker("http://127.0.0.1:9", "a", { batch: 501 }), RangeError);
  assert.throws(() => new Worker("http://127.0.0.1:9", "a", { leaseSeconds: 0 }), RangeError);
  assert.throws(() => new Worker("http://127.0.0.1:9", "a", { workerId: "has space" }), RangeError);
  assert.match(new Worker("http://127.0.0.1:9", "a").workerId, /^[A-Za-z0-9_.:-]+-\d+-[0-9a-f]{6}$/);
});

test("sign is HMAC-SHA256 of '<t>.<body>' in hex", () => {
  const body = '{"instance":{"id":"é"}}';
  const mac = createHmac("sha256", "k").update(`1700000000.${body}`).digest("hex");
  assert.equal(sign("k", body, 1700000000), `t=1700000000,v1=${mac}`);
  assert.ok(verifySignature("k", `t=1700000000,v1=${mac}`, Buffer.from(body), { now: 1700000000 }));
  assert.ok(!verifySignature("k", `t=1700000000,v1=${mac.toUpperCase()}`, body, { now: 1700000000 }));
});
