/**
 * The push side: check a push's `Kairos-Signature`, and a framework-free receiver that turns a
 * push into a handler call.
 *
 * kairos pushes each instance of a `dispatch: {mode: webhook}` task as `POST <url>` with the
 * body `{"instance": {...}, "callbacks": {"heartbeat", "complete", "fail"}}` and the header
 * `Kairos-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`. The receiver's
 * answer decides the attempt: a 2xx with `{"status": "success", "result": ...}` completes it;
 * `202` means the receiver reports later through the callbacks with the lease token; anything
 * else fails the attempt (retryable, `error_kind: dispatch`).
 */
import { createHmac, timingSafeEqual } from "node:crypto";

import { Client } from "./client.js";
import { Invalid, KairosError, NotFound, Stale } from "./errors.js";
import type { ClaimedInstance } from "./models.js";
import { sleep } from "./sync.js";
import { loadOtel, traced, type OtelApi } from "./tracing.js";
import { Fatal, LeaseLost, MAX_RESULT_BYTES, Throttled, errorText, stderrLogger, type Handler, type Job, type Logger } from "./worker.js";

/** Largest push body the receiver takes (a claimed instance with a 64 KiB context fits). */
export const MAX_PUSH_BYTES = 1 << 20;

const STAMP = /^[0-9]{1,20}$/;

function bytes(body: string | Uint8Array): Buffer {
  return typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
}

function hmacHex(secret: string | Uint8Array, stamp: string, body: Buffer): string {
  return createHmac("sha256", typeof secret === "string" ? Buffer.from(secret, "utf8") : secret)
    .update(`${stamp}.`, "ascii")
    .update(body)
    .digest("hex");
}

/** The `Kairos-Signature` header kairos would send for `body` at `timestamp` (unix seconds). */
export function sign(secret: string | Uint8Array, body: string | Uint8Array, timestamp?: number): string {
  const t = String(Math.floor(timestamp ?? Date.now() / 1000));
  return `t=${t},v1=${hmacHex(secret, t, bytes(body))}`;
}

export interface VerifyOptions {
  /** Largest accepted age (either way) of the signature's timestamp, in seconds (default 300; null: not checked). */
  tolerance?: number | null;
  /** The time to compare with, in unix seconds (default: this machine's clock). */
  now?: number;
}

/**
 * Whether `header` (`Kairos-Signature`) signs `body` (the raw bytes as received, before any
 * parsing) with `secret`, at a time within `tolerance` seconds of now. Compared in constant
 * time; a missing or malformed header is false, never an exception. Several `v1=` values (a
 * secret being rotated) pass when any matches.
 */
export function verifySignature(
  secret: string | Uint8Array,
  header: string | null | undefined,
  body: string | Uint8Array,
  options: VerifyOptions = {},
): boolean {
  if (!header) {
    return false;
  }
  let stamp: string | undefined;
  const candidates: string[] = [];
  for (const part of header.split(",")) {
    const eq = part.indexOf("=");
    if (eq < 0) {
      continue;
    }
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === "t") {
      stamp = value;
    } else if (key === "v1") {
      candidates.push(value);
    }
  }
  if (stamp === undefined || !STAMP.test(stamp) || candidates.length === 0) {
    return false;
  }
  const tolerance = options.tolerance === undefined ? 300 : options.tolerance;
  if (tolerance !== null) {
    const clock = options.now ?? Date.now() / 1000;
    if (Math.abs(clock - Number(stamp)) > tolerance) {
      return false;
    }
  }
  const expected = Buffer.from(hmacHex(secret, stamp, bytes(body)), "utf8");
  let ok = false;
  for (const c of candidates) {
    const given = Buffer.from(c, "utf8");
    if (given.length === expected.length && timingSafeEqual(given, expected)) {
      ok = true;
    }
  }
  return ok;
}

/** What a receiver did. */
export interface WebhookStats {
  /** Pushes whose signature checked out. */
  received: number;
  /** Pushes refused with 401 (missing, wrong or stale signature). */
  badSignature: number;
  /** Answered 200 with the result. */
  answeredSuccess: number;
  /** Answered 500: the handler failed retryably within `respondWithinMs`. */
  answeredFailure: number;
  /** Answered 202 (long work, or a fatal or throttled outcome to report). */
  accepted: number;
  /** Handlers that threw `Throttled`: reported through the fail callback. */
  throttled: number;
  /** Reports made through the callbacks that kairos recorded. */
  callbacksRecorded: number;
  /** Callback reports refused with 409: the lease was lost. */
  leaseLost: number;
  /** Callback reports that got no usable answer. */
  callbackErrors: number;
}

/** The parts of a request the receiver reads: a node:http `IncomingMessage` or a fetch `Request` fit. */
export interface PushRequest {
  method?: string | undefined;
  headers: Headers | Record<string, string | string[] | undefined>;
}

/** The answer to send back: status, headers and a JSON body. */
export interface PushResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface ReceiverOptions {
  /** The task's `dispatch.secret`. */
  secret: string | Uint8Array;
  /** A bearer token allowed for the instance's agent, sent with the callbacks. */
  token?: string;
  /**
   * How long to wait for the handler before answering 202 and reporting through the callbacks
   * instead (default 10000 ms). Keep it well below the task's `dispatch.timeout_seconds`.
   */
  respondWithinMs?: number;
  /** After a 202, the lease asked for on each heartbeat (sent every third of it); default 60. */
  leaseSeconds?: number;
  /** Largest accepted age of a signature's timestamp in seconds (default 300; null: not checked). */
  tolerance?: number | null;
  /** Run handlers in spans when `@opentelemetry/api` is installed (default true). */
  tracing?: boolean;
  logger?: Logger;
  fetch?: typeof fetch;
}

/** A receiver function with its stats and a way to wait for reports still under way. */
export interface WebhookReceiver {
  (request: PushRequest, body: string | Uint8Array): Promise<PushResponse>;
  readonly stats: WebhookStats;
  /** Resolves true once no long run is left to report (false after `timeoutMs`). */
  waitIdle(timeoutMs?: number): Promise<boolean>;
}

type Outcome =
  | { ok: true; result: unknown }
  | { ok: false; error: string; retryable: boolean; retryAfter?: number; holdLimit?: string | undefined };

function headerOf(request: PushRequest, name: string): string | undefined {
  const h = request.headers;
  if (typeof (h as Headers).get === "function") {
    return (h as Headers).get(name) ?? undefined;
  }
  const v = (h as Record<string, string | string[] | undefined>)[name];
  return Array.isArray(v) ? v[0] : v;
}

function answer(status: number, body: unknown): PushResponse {
  return { status, headers: { "content-type": "application/json" }, body: JSON.stringify(body) };
}

function outcomeOf(settled: { ok: true; value: unknown } | { ok: false; error: unknown }): Outcome {
  if (!settled.ok) {
    const e = settled.error;
    if (e instanceof Throttled) {
      return { ok: false, error: errorText(e), retryable: true, retryAfter: e.retryAfterSeconds, holdLimit: e.holdLimit };
    }
    return { ok: false, error: errorText(e), retryable: !(e instanceof Fatal) };
  }
  const value = settled.value === undefined ? null : settled.value;
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    return { ok: false, error: `the handler's result is not JSON: ${errorText(e)}`, retryable: false };
  }
  if (text === undefined) {
    return { ok: false, error: "the handler's result is not JSON", retryable: false };
  }
  const size = Buffer.byteLength(text, "utf8");
  if (size > MAX_RESULT_BYTES) {
    return {
      ok: false,
      error: `the handler's result is ${size} bytes serialized; at most ${MAX_RESULT_BYTES} are kept`,
      retryable: false,
    };
  }
  return { ok: true, result: value };
}

/**
 * A push receiver for any HTTP server: `const receive = webhookReceiver(handler, { secret,
 * token })`, then for each request read the raw body and answer with what
 * `await receive(req, body)` returns. It checks the signature (401 otherwise), runs the
 * handler, and answers `200 {"status": "success", "result": ...}` when it finishes within
 * `respondWithinMs`; longer work is answered 202 and reported later through the push's
 * callbacks, with heartbeats meanwhile. `Fatal` and `Throttled` outcomes are answered 202 and
 * reported through the fail callback (an answer can only fail an attempt retryably); a
 * retryable failure within the wait is answered 500.
 */
export function webhookReceiver(handler: Handler, options: ReceiverOptions): WebhookReceiver {
  const respondWithinMs = options.respondWithinMs ?? 10_000;
  const leaseSeconds = options.leaseSeconds ?? 60;
  if (!(respondWithinMs >= 0)) throw new RangeError("respondWithinMs must not be negative");
  if (!(leaseSeconds >= 1)) throw new RangeError("leaseSeconds must be at least 1");
  const tolerance = options.tolerance === undefined ? 300 : options.tolerance;
  const log = options.logger ?? stderrLogger("info");
  const client = new Client("http://callbacks.invalid", { token: options.token, fetch: options.fetch });
  const background = new Set<Promise<void>>();
  const otel: Promise<OtelApi | undefined> = options.tracing === false ? Promise.resolve(undefined) : loadOtel();
  const stats: WebhookStats = {
    received: 0,
    badSignature: 0,
    answeredSuccess: 0,
    answeredFailure: 0,
    accepted: 0,
    throttled: 0,
    callbacksRecorded: 0,
    leaseLost: 0,
    callbackErrors: 0,
  };

  const describe = (i: ClaimedInstance): string =>
    `instance ${i.id} (task ${i.task_id}, window ${i.window_key}, attempt ${i.attempt})`;

  const detach = (work: Promise<void>): void => {
    const p = work.catch((e: unknown) => log.error(`push report failed unexpectedly: ${errorText(e)}`));
    background.add(p);
    void p.finally(() => background.delete(p));
  };

  async function report(
    instance: ClaimedInstance,
    url: string,
    kind: string,
    body: Record<string, unknown>,
    lost: AbortController,
  ): Promise<void> {
    for (let attempt = 1; attempt <= 6; attempt += 1) {
      try {
        await client.callback(url, body);
        stats.callbacksRecorded += 1;
        log.info(`${describe(instance)}: ${kind} recorded through the callback`);
        return;
      } catch (e) {
        if (e instanceof Stale) {
          stats.leaseLost += 1;
          lost.abort(new LeaseLost(`${kind} answered 409: ${e.detail}`));
          log.warn(`${kind} of ${describe(instance)} not recorded: lease lost (${e.detail})`);
          return;
        }
        stats.callbackErrors += 1;
        if (e instanceof Invalid && "hold_limit" in body && e.errors.some((f) => f.field === "hold_limit")) {
          log.error(`${kind} of ${describe(instance)}: limit not held (${e.detail}); reporting the throttle without it`);
          delete body["hold_limit"];
          continue;
        }
        if (e instanceof KairosError && e.status !== 0 && e.status < 500 && e.status !== 429) {
          log.error(`${kind} of ${describe(instance)} refused: ${e.message}`);
          return;
        }
        log.warn(`${kind} of ${describe(instance)} failed (try ${attempt}): ${errorText(e)}`);
        await sleep(Math.min(5000, 200 * 2 ** attempt));
      }
    }
    log.error(`${kind} of ${describe(instance)} not recorded; the lease will expire and the instance be retried`);
  }

  function failBody(instance: ClaimedInstance, o: Extract<Outcome, { ok: false }>): Record<string, unknown> {
    if (o.retryAfter !== undefined) {
      const body: Record<string, unknown> = {
        lease_token: instance.lease_token,
        error: o.error,
        retry_after_seconds: o.retryAfter,
      };
      if (o.holdLimit !== undefined) body["hold_limit"] = o.holdLimit;
      return body;
    }
    return { lease_token: instance.lease_token, error: o.error, retryable: o.retryable };
  }

  async function finishLater(
    instance: ClaimedInstance,
    callbacks: Record<string, string>,
    settled: Promise<Outcome>,
    lost: AbortController,
  ): Promise<void> {
    const stop = new AbortController();
    const beats = (async () => {
      for (;;) {
        await sleep((leaseSeconds * 1000) / 3, stop.signal);
        if (stop.signal.aborted) return;
        try {
          await client.callback(callbacks["heartbeat"] ?? "", { lease_token: instance.lease_token, lease_seconds: leaseSeconds });
        } catch (e) {
          if (e instanceof Stale || e instanceof NotFound) {
            stats.leaseLost += 1;
            lost.abort(new LeaseLost(`heartbeat answered ${e.status}: ${e.detail}`));
            log.warn(`lease of ${describe(instance)} lost (heartbeat answered ${e.status}: ${e.detail})`);
            return;
          }
          stats.callbackErrors += 1;
          log.warn(`heartbeat of ${describe(instance)} failed: ${errorText(e)}`);
        }
      }
    })();
    let o: Outcome;
    try {
      o = await settled;
    } finally {
      stop.abort();
      await beats;
    }
    if (lost.signal.aborted) {
      log.info(`result of ${describe(instance)} dropped: lease lost`);
      return;
    }
    if (o.ok) {
      await report(instance, callbacks["complete"] ?? "", "complete", { lease_token: instance.lease_token, result: o.result }, lost);
      return;
    }
    if (o.retryAfter !== undefined) {
      stats.throttled += 1;
    }
    log.warn(`${describe(instance)} failed (${o.retryAfter !== undefined ? "throttled" : o.retryable ? "retryable" : "fatal"}): ${o.error}`);
    await report(instance, callbacks["fail"] ?? "", "fail", failBody(instance, o), lost);
  }

  const receive = async (request: PushRequest, body: string | Uint8Array): Promise<PushResponse> => {
    if (request.method !== undefined && request.method.toUpperCase() !== "POST") {
      return answer(405, { error: "pushes are POST requests" });
    }
    const raw = bytes(body);
    if (raw.length > MAX_PUSH_BYTES) {
      return answer(413, { error: `a push body is at most ${MAX_PUSH_BYTES} bytes` });
    }
    if (!verifySignature(options.secret, headerOf(request, "kairos-signature"), raw, { tolerance })) {
      stats.badSignature += 1;
      log.warn(
        `push refused: missing, wrong or stale Kairos-Signature (idempotency key ${headerOf(request, "idempotency-key") ?? "none"})`,
      );
      return answer(401, { error: "bad signature" });
    }
    let instance: ClaimedInstance;
    let callbacks: Record<string, string>;
    try {
      const push = JSON.parse(raw.toString("utf8")) as { instance?: unknown; callbacks?: unknown };
      const i = push.instance as Record<string, unknown> | null | undefined;
      const c = push.callbacks as Record<string, unknown> | null | undefined;
      if (i === null || typeof i !== "object" || typeof i["id"] !== "string" || typeof i["lease_token"] !== "string") {
        throw new TypeError("no instance with an id and a lease_token");
      }
      if (c === null || typeof c !== "object") {
        throw new TypeError("no callbacks");
      }
      if (i["context"] === null || typeof i["context"] !== "object") {
        i["context"] = {};
      }
      instance = i as unknown as ClaimedInstance;
      callbacks = Object.fromEntries(Object.entries(c).map(([k, v]) => [k, String(v)]));
    } catch (e) {
      log.warn(`push refused: not a kairos push body (${errorText(e)})`);
      return answer(400, { error: `not a kairos push: ${errorText(e)}` });
    }
    stats.received += 1;
    // The instance's trace context: in the body, or else in the push's own headers.
    if (!instance.traceparent) {
      const traceparent = headerOf(request, "traceparent");
      if (traceparent) {
        instance.traceparent = traceparent;
        const tracestate = headerOf(request, "tracestate");
        if (tracestate) {
          instance.tracestate = tracestate;
        }
      }
    }
    const lost = new AbortController();
    const job: Job = {
      ...instance,
      signal: lost.signal,
      traceparent: instance.traceparent ?? undefined,
      tracestate: instance.tracestate ?? undefined,
    };
    const api = await otel;
    const settled: Promise<Outcome> = (async () => {
      try {
        const value = api === undefined ? await handler(job) : await traced(api, instance, "webhook", () => handler(job));
        return outcomeOf({ ok: true, value });
      } catch (error) {
        return outcomeOf({ ok: false, error });
      }
    })();
    let timer: NodeJS.Timeout | undefined;
    const first = await Promise.race([
      settled,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), respondWithinMs);
      }),
    ]);
    clearTimeout(timer);
    if (first === undefined) {
      stats.accepted += 1;
      log.info(`${describe(instance)}: still running after ${respondWithinMs} ms; answering 202, reporting through the callbacks`);
      detach(finishLater(instance, callbacks, settled, lost));
      return answer(202, { status: "accepted" });
    }
    if (first.ok) {
      stats.answeredSuccess += 1;
      return answer(200, { status: "success", result: first.result });
    }
    if (first.retryAfter !== undefined) {
      // Only a callback can report a throttled attempt (an answer fails it, spending it).
      stats.accepted += 1;
      stats.throttled += 1;
      log.info(`${describe(instance)} throttled, to be pushed again in ${first.retryAfter}s: ${first.error}; answering 202`);
      detach(report(instance, callbacks["fail"] ?? "", "fail", failBody(instance, first), lost));
      return answer(202, { status: "accepted" });
    }
    if (first.retryable) {
      stats.answeredFailure += 1;
      log.warn(`${describe(instance)} failed (retryable): ${first.error}`);
      return answer(500, { status: "failed", error: first.error });
    }
    // Only a callback can fail an attempt for good.
    stats.accepted += 1;
    log.warn(`${describe(instance)} failed (fatal): ${first.error}; answering 202 and reporting it through the fail callback`);
    detach(report(instance, callbacks["fail"] ?? "", "fail", failBody(instance, first), lost));
    return answer(202, { status: "accepted" });
  };

  const waitIdle = async (timeoutMs?: number): Promise<boolean> => {
    const deadline = timeoutMs === undefined ? Infinity : performance.now() + timeoutMs;
    while (background.size > 0) {
      const remaining = deadline - performance.now();
      if (remaining <= 0) return false;
      await Promise.race([...background, sleep(Math.min(remaining, 1000))]);
    }
    return true;
  };

  return Object.assign(receive, { stats, waitIdle });
}
