// The tracing hook: with @opentelemetry/api installed, a handler runs inside its instance's
// trace context (the claim's traceparent) and a span named after the task, and the reports of
// that instance carry the traceparent header.
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { test } from "node:test";

import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  AlwaysOnSampler,
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from "@opentelemetry/sdk-trace-base";

import { Fatal, Worker, type Job } from "../src/index.js";
import { RunningWorker, eventually, quietLogger, sleep, withKairos } from "./harness.js";

const exporter = new InMemorySpanExporter();
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
// Every span recorded, whatever the sampled flag of the instance's traceparent says.
trace.setGlobalTracerProvider(
  new BasicTracerProvider({ sampler: new AlwaysOnSampler(), spanProcessors: [new SimpleSpanProcessor(exporter)] }),
);
const tracer = trace.getTracer("agent-under-test");

/** The handler every test runs: one span of the agent's own inside the worker's. */
async function handler(job: Job): Promise<unknown> {
  await tracer.startActiveSpan("agent-step", async (span) => {
    await sleep(5);
    span.end();
  });
  if (job.task_id === "traced_fatal") throw new Fatal("no way");
  return { traceparent: job.traceparent ?? null };
}

function parentOf(span: ReadableSpan): string | undefined {
  return span.parentSpanContext?.spanId;
}

/** Checks the spans of one instance: the task's span under `traceparent`, the agent's under it. */
function assertNested(taskId: string, traceparent: string): void {
  const [, traceId, spanId] = traceparent.split("-") as [string, string, string];
  const spans = exporter.getFinishedSpans();
  const taskSpan = spans.find((s) => s.name === taskId);
  assert.ok(taskSpan !== undefined, `a span named ${taskId} among ${spans.map((s) => s.name).join(", ")}`);
  assert.equal(taskSpan.spanContext().traceId, traceId, "the task's span is in the instance's trace");
  assert.equal(parentOf(taskSpan), spanId, "the task's span is a child of the traceparent's span");
  const steps = spans.filter(
    (s) => s.name === "agent-step" && s.spanContext().traceId === traceId && parentOf(s) === taskSpan.spanContext().spanId,
  );
  assert.equal(steps.length, 1, "the agent's own span nests under the task's span");
}

test("with the daemon's traceparent, handler spans nest under the instance", async (t) => {
  await withKairos(async (k) => {
    await k.task("traced", "trace_agent");
    const c = k.client();
    const id = (await c.trigger("traced")).id;
    const seen: { job?: Job } = {};
    const w = new RunningWorker(k.worker("trace_agent", "tw"), (job: Job) => {
      seen.job = job;
      return handler(job);
    });
    try {
      await eventually(async () => (await c.getInstance(id)).status === "SUCCESS", "the instance done", 20_000);
    } finally {
      await w.stop();
    }
    const traceparent = seen.job?.traceparent;
    if (!traceparent) {
      t.skip("the daemon's claim answers carry no traceparent yet: nothing to nest under");
      return;
    }
    assertNested("traced", traceparent);
  });
});

/**
 * A relay in front of the daemon: forwards every request, adds `traceparent`/`tracestate` to
 * each instance of a claim's answer, and records the headers of the agent's reports.
 */
async function relay(upstream: string): Promise<{ server: Server; url: string; reports: Array<{ path: string; headers: IncomingHttpHeaders }>; issued: Map<string, string> }> {
  const reports: Array<{ path: string; headers: IncomingHttpHeaders }> = [];
  const issued = new Map<string, string>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (b: Buffer) => chunks.push(b));
    req.on("end", () => {
      void (async () => {
        const path = req.url ?? "/";
        if (/\/(complete|fail)$|^\/v1\/completions$/.test(path)) {
          reports.push({ path, headers: req.headers });
        }
        const headers: Record<string, string> = {};
        for (const [name, value] of Object.entries(req.headers)) {
          if (typeof value === "string" && !["host", "content-length", "connection"].includes(name)) headers[name] = value;
        }
        const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined;
        const init: RequestInit = { method: req.method ?? "GET", headers };
        if (body !== undefined) init.body = body;
        const answer = await fetch(upstream + path, init);
        let text = await answer.text();
        if (path === "/v1/claims" && answer.status === 200) {
          const parsed = JSON.parse(text) as { instances: Array<Record<string, unknown>> };
          for (const i of parsed.instances) {
            // A trace id and a span id of the instance's own: its UUID's hex digits.
            const hex = String(i["id"]).replaceAll("-", "");
            const tp = `00-${hex}-${hex.slice(16)}-01`;
            issued.set(String(i["id"]), tp);
            i["traceparent"] = tp;
            i["tracestate"] = "kairos=1";
          }
          text = JSON.stringify(parsed);
        }
        const out: Record<string, string> = { "content-type": answer.headers.get("content-type") ?? "application/json" };
        const retryAfter = answer.headers.get("retry-after");
        if (retryAfter !== null) out["retry-after"] = retryAfter;
        res.writeHead(answer.status, out);
        res.end(text);
      })().catch(() => {
        res.writeHead(502);
        res.end();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return { server, url: `http://127.0.0.1:${port}`, reports, issued };
}

test("a claim's traceparent parents the handler's span and goes with the instance's reports", async () => {
  await withKairos(async (k) => {
    await k.task("traced_ok", "relay_agent");
    await k.task("traced_fatal", "relay_agent");
    const c = k.client();
    const okId = (await c.trigger("traced_ok")).id;
    const fatalId = (await c.trigger("traced_fatal")).id;
    const r = await relay(k.url);
    const worker = new Worker(r.url, "relay_agent", {
      token: k.agentToken,
      workerId: "rw",
      waitSeconds: 1,
      lingerMs: 0,
      handleSignals: false,
      logger: quietLogger(),
    });
    const w = new RunningWorker(worker, handler);
    try {
      await eventually(
        async () => (await c.getInstance(okId)).status === "SUCCESS" && (await c.getInstance(fatalId)).status === "DEAD",
        "both instances finished",
        20_000,
      );
    } finally {
      await w.stop();
      r.server.closeAllConnections();
      await new Promise<void>((resolve) => r.server.close(() => resolve()));
    }
    const okTrace = r.issued.get(okId) as string;
    const fatalTrace = r.issued.get(fatalId) as string;
    assert.deepEqual((await c.getInstance(okId)).result, { traceparent: okTrace }, "job.traceparent is the claim's");
    assertNested("traced_ok", okTrace);
    assertNested("traced_fatal", fatalTrace);
    const failed = exporter.getFinishedSpans().find((s) => s.name === "traced_fatal");
    assert.equal(failed?.status.code, 2, "the failed handler's span has status ERROR");
    assert.equal(failed?.attributes["kairos.instance_id"], fatalId);

    const complete = r.reports.find((x) => x.path === "/v1/completions" || x.path.endsWith("/complete"));
    assert.equal(complete?.headers["traceparent"], okTrace, "the completion carries the instance's traceparent");
    assert.equal(complete?.headers["tracestate"], "kairos=1");
    const fail = r.reports.find((x) => x.path === `/v1/instances/${fatalId}/fail`);
    assert.equal(fail?.headers["traceparent"], fatalTrace, "the failure carries the instance's traceparent");
  });
});
