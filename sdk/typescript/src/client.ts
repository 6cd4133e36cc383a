/**
 * `Client`: typed calls over kairos' REST API (openapi.yaml), with the platform's `fetch`.
 * Every method rejects with a {@link KairosError} subclass when the API refuses the call
 * (`Stale` for 409, `NotFound`, `Unauthorized`, `Invalid` with `errors`, ...) and with
 * {@link TransportError} when no answer came.
 */
import type { components } from "./api.js";
import { KairosError, NotFound, TransportError, errorFor, type Problem } from "./errors.js";
import {
  formatTimestamp,
  type ApplyResult,
  type ClaimedInstance,
  type Completion,
  type CompletionResult,
  type Instance,
  type InstanceDetail,
  type InstanceStatus,
  type Limit,
  type Page,
  type Rate,
  type Task,
  type TaskSpec,
  type TraceContext,
} from "./models.js";
import { VERSION } from "./version.js";

type Schemas = components["schemas"];

/** Longest the client waits for an answer, except a long-poll claim, which adds its wait. */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** Most instances one claim may take (the server's bound). */
export const MAX_CLAIM = 100;
/** Most items one `POST /v1/completions` may carry (the server's bound). */
export const MAX_COMPLETIONS = 500;

export interface ClientOptions {
  /** A bearer token (`admin`, or `agent` for the agent's calls); none when kairos runs open. */
  token?: string | undefined;
  /** Longest wait for an answer, in milliseconds (default 30000; a claim adds its wait). */
  timeoutMs?: number | undefined;
  /** The `fetch` to send requests with (default: the global one). */
  fetch?: typeof fetch | undefined;
}

/** Per-call options every method takes. */
export interface CallOptions {
  /** Aborts the request until its answer begins to arrive; the call then rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
}

/** The W3C trace headers to send with an agent's report (`traceparent`, `tracestate`). */
export interface TraceOptions {
  trace?: TraceContext | undefined;
}

export interface ListTasksOptions extends CallOptions {
  agentId?: string;
  paused?: boolean;
  limit?: number;
  cursor?: string;
}

export interface ListInstancesOptions extends CallOptions {
  taskId?: string;
  agentId?: string;
  /** One status or several (any of them matches). */
  status?: InstanceStatus | InstanceStatus[];
  windowKey?: string;
  from?: Date | string;
  to?: Date | string;
  limit?: number;
  cursor?: string;
}

export interface TriggerOptions extends CallOptions {
  /** With a window key the task already has, the existing instance is answered unchanged. */
  windowKey?: string;
  delaySeconds?: number;
  runAt?: Date | string;
  /** Merged over the task's context by top-level key. */
  context?: Record<string, unknown>;
  priority?: number;
  debounceKey?: string;
}

export interface ClaimOptions extends CallOptions {
  /** At most this many instances (1-100, default 1). */
  maxInstances?: number;
  leaseSeconds?: number;
  /** Long poll: wait up to this many seconds for work. */
  waitSeconds?: number;
  /**
   * Makes the claim safe to send again: repeated with the same `claimId` and worker id while
   * that worker still holds some of what the first one took, it is answered with those
   * instances and the same lease tokens. Use a new one (a UUID) for each new claim.
   */
  claimId?: string;
}

export interface FailOptions extends CallOptions, TraceOptions {
  /** false: DEAD now. Default true: FAILED, retried after the backoff while attempts remain. */
  retryable?: boolean;
  /** Retry at once instead of after the backoff (an attempt given back). */
  retryAtOnce?: boolean;
  /**
   * 1-86400: the attempt was throttled, not failed: PENDING again that many seconds from now,
   * its attempt unspent, nothing counted for the circuit breaker.
   */
  retryAfterSeconds?: number;
  /** With `retryAfterSeconds`: hold this shared limit (the instance's key of it) as long. */
  holdLimit?: string;
}

export interface PutLimitOptions extends CallOptions {
  concurrency?: number;
  rate?: Rate;
  perKey?: boolean;
  ifMatch?: number | string;
}

interface Call<T> {
  method: string;
  path: string;
  query?: Record<string, string | undefined> | undefined;
  body?: unknown;
  /** A body already encoded as JSON text. */
  raw?: string | undefined;
  headers?: Record<string, string> | undefined;
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
  parse: (status: number, body: unknown) => T;
}

function seg(value: string): string {
  return encodeURIComponent(value);
}

function ifMatchHeader(ifMatch: number | string | undefined): Record<string, string> {
  if (ifMatch === undefined) {
    return {};
  }
  return { "If-Match": typeof ifMatch === "number" ? `"${ifMatch}"` : ifMatch };
}

function traceHeaders(trace: TraceContext | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (trace?.traceparent) {
    out["traceparent"] = trace.traceparent;
    if (trace.tracestate) {
      out["tracestate"] = trace.tracestate;
    }
  }
  return out;
}

function reasonBody(reason: string | undefined): Schemas["ReasonRequest"] {
  return reason === undefined ? {} : { reason };
}

function retryAfterOf(resp: Response): number | undefined {
  const raw = resp.headers.get("retry-after");
  if (raw === null) {
    return undefined;
  }
  const n = Number(raw.trim());
  return Number.isFinite(n) && raw.trim() !== "" ? Math.max(0, n) : undefined;
}

function object(body: unknown, what: string): Record<string, unknown> {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new TypeError(`${what} is not a JSON object`);
  }
  return body as Record<string, unknown>;
}

function list(body: unknown, key: string): unknown[] {
  const value = object(body, "the answer")[key];
  if (!Array.isArray(value)) {
    throw new TypeError(`the answer has no "${key}" list`);
  }
  return value;
}

function claimed(body: unknown): ClaimedInstance[] {
  const items = list(body, "instances");
  for (const item of items) {
    const o = object(item, "a claimed instance");
    for (const key of ["id", "task_id", "lease_token", "idempotency_key", "window_key"]) {
      if (typeof o[key] !== "string") {
        throw new TypeError(`a claimed instance without a string "${key}"`);
      }
    }
    if (typeof o["attempt"] !== "number") {
      throw new TypeError('a claimed instance without a numeric "attempt"');
    }
    if (o["context"] === null || typeof o["context"] !== "object") {
      o["context"] = {};
    }
  }
  return items as ClaimedInstance[];
}

const asIs = <T>(_status: number, body: unknown): T => body as T;
const nothing = (): undefined => undefined;

/**
 * A client: `new Client("http://127.0.0.1:8080", { token })`. Resources are the API's JSON as
 * typed in openapi.yaml (snake_case fields, RFC 3339 timestamps); options are camelCase.
 */
export class Client {
  readonly url: string;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly fetchImpl: typeof fetch;

  constructor(url: string, options: ClientOptions = {}) {
    this.url = url.replace(/\/+$/, "");
    this.headers = { "User-Agent": `kairos-agent-typescript/${VERSION}`, Accept: "application/json" };
    if (options.token) {
      this.headers["Authorization"] = `Bearer ${options.token}`;
    }
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.fetchImpl = options.fetch ?? globalThis.fetch;
  }

  private async send<T>(call: Call<T>): Promise<T> {
    let url = /^https?:\/\//.test(call.path) ? call.path : this.url + call.path;
    if (call.query !== undefined) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(call.query)) {
        if (v !== undefined) {
          q.set(k, v);
        }
      }
      const s = q.toString();
      if (s) {
        url += `?${s}`;
      }
    }
    const headers: Record<string, string> = { ...this.headers, ...call.headers };
    let payload: string | undefined = call.raw;
    if (payload === undefined && call.body !== undefined) {
      payload = JSON.stringify(call.body);
    }
    if (payload !== undefined) {
      headers["Content-Type"] = "application/json";
    }
    const timeoutMs = call.timeoutMs ?? this.timeoutMs;
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort(new Error(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const outer = call.signal;
    const onAbort = (): void => controller.abort(outer?.reason);
    if (outer !== undefined) {
      if (outer.aborted) {
        clearTimeout(timer);
        throw outer.reason;
      }
      outer.addEventListener("abort", onAbort, { once: true });
    }
    let status: number;
    let text: string;
    let resp: Response;
    try {
      try {
        const init: RequestInit = { method: call.method, headers, signal: controller.signal };
        if (payload !== undefined) {
          init.body = payload;
        }
        resp = await this.fetchImpl(url, init);
        // The answer has begun: it is read whole even if the caller's signal aborts now (a
        // claim's answer holds leases that must not be dropped).
        outer?.removeEventListener("abort", onAbort);
        status = resp.status;
        text = await resp.text();
      } catch (e) {
        if (outer?.aborted && !timedOut && controller.signal.reason === outer.reason) {
          throw outer.reason;
        }
        throw transportError(call, e, timedOut ? `no answer within ${timeoutMs} ms` : undefined);
      }
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    }
    if (status >= 400) {
      let problem: Problem | undefined;
      try {
        const parsed: unknown = JSON.parse(text);
        if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
          problem = parsed as Problem;
        }
      } catch {
        problem = undefined;
      }
      throw errorFor(status, problem, text.slice(0, 500), {
        method: call.method,
        path: call.path,
        retryAfter: retryAfterOf(resp),
      });
    }
    try {
      const body: unknown = text === "" ? undefined : JSON.parse(text);
      return call.parse(status, body);
    } catch (e) {
      const why = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      throw new KairosError(status, `unexpected answer: ${why}`, { method: call.method, path: call.path, cause: e });
    }
  }

  // --- tasks ----------------------------------------------------------------------------------

  /**
   * Create or replace a task (`PUT /v1/tasks/{id}`); the same definition again is a no-op.
   * `ifMatch` makes the write conditional on the task's version (412 otherwise:
   * `VersionMismatch`).
   */
  async putTask(spec: TaskSpec, options: CallOptions & { ifMatch?: number | string } = {}): Promise<Task> {
    return (await this.send(putTaskCall(spec, options.ifMatch, options.signal))).task;
  }

  getTask(taskId: string, options: CallOptions = {}): Promise<Task> {
    return this.send({ method: "GET", path: `/v1/tasks/${seg(taskId)}`, signal: options.signal, parse: asIs<Task> });
  }

  deleteTask(taskId: string, options: CallOptions = {}): Promise<void> {
    return this.send({ method: "DELETE", path: `/v1/tasks/${seg(taskId)}`, signal: options.signal, parse: nothing });
  }

  listTasks(options: ListTasksOptions = {}): Promise<Page<Task>> {
    return this.send({
      method: "GET",
      path: "/v1/tasks",
      query: {
        agent_id: options.agentId,
        paused: options.paused === undefined ? undefined : String(options.paused),
        limit: options.limit === undefined ? undefined : String(options.limit),
        cursor: options.cursor,
      },
      signal: options.signal,
      parse: (_s, body) => page<Task>(body),
    });
  }

  /** Every task matching the filters, page after page. */
  async *iterTasks(options: Omit<ListTasksOptions, "limit" | "cursor"> = {}): AsyncGenerator<Task> {
    let cursor: string | undefined;
    for (;;) {
      const p = await this.listTasks({ ...options, limit: 500, ...(cursor === undefined ? {} : { cursor }) });
      yield* p.items;
      if (p.next_cursor === null) {
        return;
      }
      cursor = p.next_cursor;
    }
  }

  pauseTask(taskId: string, reason?: string, options: CallOptions = {}): Promise<Task> {
    return this.send({
      method: "POST",
      path: `/v1/tasks/${seg(taskId)}/pause`,
      body: reasonBody(reason),
      signal: options.signal,
      parse: asIs<Task>,
    });
  }

  resumeTask(taskId: string, options: CallOptions = {}): Promise<Task> {
    return this.send({ method: "POST", path: `/v1/tasks/${seg(taskId)}/resume`, signal: options.signal, parse: asIs<Task> });
  }

  /**
   * A manual or delayed run. With a `windowKey` the task already has, the existing instance is
   * answered unchanged (the call is idempotent by key).
   */
  trigger(taskId: string, options: TriggerOptions = {}): Promise<Instance> {
    const body: Schemas["TriggerRequest"] = {};
    if (options.windowKey !== undefined) body.window_key = options.windowKey;
    if (options.delaySeconds !== undefined) body.delay_seconds = options.delaySeconds;
    if (options.runAt !== undefined) body.run_at = formatTimestamp(options.runAt);
    if (options.context !== undefined) body.context = options.context;
    if (options.priority !== undefined) body.priority = options.priority;
    if (options.debounceKey !== undefined) body.debounce_key = options.debounceKey;
    return this.send({
      method: "POST",
      path: `/v1/tasks/${seg(taskId)}/trigger`,
      body,
      signal: options.signal,
      parse: asIs<Instance>,
    });
  }

  /**
   * Make each spec true on the server with `PUT`: `created`, `configured` (the definition
   * changed: version bumped) or `unchanged` (a no-op). Stops at the first spec the server
   * refuses, rejecting with its error; the specs before it stay applied.
   */
  async apply(specs: TaskSpec[], options: CallOptions = {}): Promise<ApplyResult[]> {
    const seen = new Set<string>();
    for (const s of specs) {
      if (seen.has(s.id)) {
        throw new Error(`task ${JSON.stringify(s.id)} is defined twice; nothing was applied`);
      }
      seen.add(s.id);
    }
    const out: ApplyResult[] = [];
    for (const spec of specs) {
      let before: Task | undefined;
      try {
        before = await this.getTask(spec.id, options);
      } catch (e) {
        if (!(e instanceof NotFound)) {
          throw e;
        }
      }
      const { created, task } = await this.send(putTaskCall(spec, undefined, options.signal));
      let outcome: ApplyResult["outcome"] = "configured";
      if (created || before === undefined) {
        outcome = "created";
      } else if (before.version === task.version) {
        outcome = "unchanged";
      }
      out.push({ id: spec.id, outcome, task });
    }
    return out;
  }

  // --- instances ------------------------------------------------------------------------------

  /** The instance with its history (`events`) and, PENDING or FAILED, `waiting_on`. */
  getInstance(instanceId: string, options: CallOptions = {}): Promise<InstanceDetail> {
    return this.send({
      method: "GET",
      path: `/v1/instances/${seg(instanceId)}`,
      signal: options.signal,
      parse: asIs<InstanceDetail>,
    });
  }

  /** Instances newest first (by `scheduled_at`); every filter given must match. */
  listInstances(options: ListInstancesOptions = {}): Promise<Page<Instance>> {
    const status = Array.isArray(options.status) ? options.status.join(",") : options.status;
    return this.send({
      method: "GET",
      path: "/v1/instances",
      query: {
        task_id: options.taskId,
        agent_id: options.agentId,
        status,
        window_key: options.windowKey,
        from: options.from === undefined ? undefined : formatTimestamp(options.from),
        to: options.to === undefined ? undefined : formatTimestamp(options.to),
        limit: options.limit === undefined ? undefined : String(options.limit),
        cursor: options.cursor,
      },
      signal: options.signal,
      parse: (_s, body) => page<Instance>(body),
    });
  }

  /** Every instance matching the filters, page after page. */
  async *iterInstances(options: Omit<ListInstancesOptions, "limit" | "cursor"> = {}): AsyncGenerator<Instance> {
    let cursor: string | undefined;
    for (;;) {
      const p = await this.listInstances({ ...options, limit: 500, ...(cursor === undefined ? {} : { cursor }) });
      yield* p.items;
      if (p.next_cursor === null) {
        return;
      }
      cursor = p.next_cursor;
    }
  }

  retryInstance(instanceId: string, reason?: string, options: CallOptions = {}): Promise<Instance> {
    return this.send({
      method: "POST",
      path: `/v1/instances/${seg(instanceId)}/retry`,
      body: reasonBody(reason),
      signal: options.signal,
      parse: asIs<Instance>,
    });
  }

  cancelInstance(instanceId: string, reason?: string, options: CallOptions = {}): Promise<Instance> {
    return this.send({
      method: "POST",
      path: `/v1/instances/${seg(instanceId)}/cancel`,
      body: reasonBody(reason),
      signal: options.signal,
      parse: asIs<Instance>,
    });
  }

  // --- the agent's calls ----------------------------------------------------------------------

  /**
   * Take up to `maxInstances` (at most 100) PENDING instances of `agentId` under fresh leases,
   * waiting up to `waitSeconds` for work (long poll); `[]` when none. Send a claim that got no
   * answer again with its `claimId`.
   */
  claim(agentId: string, workerId: string, options: ClaimOptions = {}): Promise<ClaimedInstance[]> {
    const body: Schemas["ClaimRequest"] = {
      agent_id: agentId,
      worker_id: workerId,
      max_instances: options.maxInstances ?? 1,
    };
    if (options.leaseSeconds !== undefined) body.lease_seconds = options.leaseSeconds;
    if (options.waitSeconds !== undefined) body.wait_seconds = options.waitSeconds;
    if (options.claimId !== undefined) body.claim_id = options.claimId;
    return this.send({
      method: "POST",
      path: "/v1/claims",
      body,
      timeoutMs: this.timeoutMs + (options.waitSeconds ?? 0) * 1000,
      signal: options.signal,
      parse: (_s, b) => claimed(b),
    });
  }

  /** Extend the lease; rejects with `Stale` when it is lost. */
  heartbeat(
    instanceId: string,
    leaseToken: string,
    options: CallOptions & TraceOptions & { leaseSeconds?: number } = {},
  ): Promise<Instance> {
    const body: Schemas["HeartbeatRequest"] = { lease_token: leaseToken };
    if (options.leaseSeconds !== undefined) body.lease_seconds = options.leaseSeconds;
    return this.send({
      method: "POST",
      path: `/v1/instances/${seg(instanceId)}/heartbeat`,
      body,
      headers: traceHeaders(options.trace),
      signal: options.signal,
      parse: asIs<Instance>,
    });
  }

  /** RUNNING -> SUCCESS with `result` (any JSON value, at most 64 KiB serialized). */
  complete(
    instanceId: string,
    leaseToken: string,
    result?: unknown,
    options: CallOptions & TraceOptions = {},
  ): Promise<Instance> {
    const body: Schemas["CompleteRequest"] = { lease_token: leaseToken, result: result ?? null };
    return this.send({
      method: "POST",
      path: `/v1/instances/${seg(instanceId)}/complete`,
      body,
      headers: traceHeaders(options.trace),
      signal: options.signal,
      parse: asIs<Instance>,
    });
  }

  /**
   * Complete 1-500 instances in one request and one commit; each item is fenced on its own
   * lease token and answered in order (200, 409, 404, or 403).
   */
  completeMany(items: Completion[], options: CallOptions & TraceOptions = {}): Promise<CompletionResult[]> {
    if (items.length < 1 || items.length > MAX_COMPLETIONS) {
      throw new RangeError(`completeMany takes 1 to ${MAX_COMPLETIONS} items, got ${items.length}`);
    }
    const body: Schemas["CompletionBatchRequest"] = {
      completions: items.map((c) => ({ id: c.id, lease_token: c.lease_token, result: c.result ?? null })),
    };
    return this.send({
      method: "POST",
      path: "/v1/completions",
      body,
      headers: traceHeaders(options.trace),
      signal: options.signal,
      parse: (_s, b) => list(b, "results") as CompletionResult[],
    });
  }

  /** @internal `POST /v1/completions` with a body the worker encoded item by item. */
  completeEncoded(raw: string, options: CallOptions & TraceOptions = {}): Promise<CompletionResult[]> {
    return this.send({
      method: "POST",
      path: "/v1/completions",
      raw,
      headers: traceHeaders(options.trace),
      signal: options.signal,
      parse: (_s, b) => list(b, "results") as CompletionResult[],
    });
  }

  /**
   * End the attempt: FAILED (retried after the backoff, or at once with `retryAtOnce`) or DEAD
   * (`retryable: false`, or no attempts left). With `retryAfterSeconds` (1-86400) the attempt
   * is reported throttled instead: PENDING again that many seconds from now, `attempt`
   * unchanged, `error_kind: "throttled"`, nothing counted for the circuit breaker; `holdLimit`
   * with it holds that shared limit until the same instant.
   */
  fail(instanceId: string, leaseToken: string, error: string, options: FailOptions = {}): Promise<Instance> {
    const body: Schemas["FailRequest"] = { lease_token: leaseToken, error, retryable: options.retryable ?? true };
    if (options.retryAtOnce) body.retry_at_once = true;
    if (options.retryAfterSeconds !== undefined) body.retry_after_seconds = options.retryAfterSeconds;
    if (options.holdLimit !== undefined) body.hold_limit = options.holdLimit;
    return this.send({
      method: "POST",
      path: `/v1/instances/${seg(instanceId)}/fail`,
      body,
      headers: traceHeaders(options.trace),
      signal: options.signal,
      parse: asIs<Instance>,
    });
  }

  /** @internal `POST` to an absolute URL (a push's callback) with this client's token. */
  callback(url: string, body: unknown, options: CallOptions = {}): Promise<void> {
    return this.send({ method: "POST", path: url, body, signal: options.signal, parse: nothing });
  }

  // --- shared limits --------------------------------------------------------------------------

  /**
   * Create or replace a shared limit (`PUT /v1/limits/{name}`): `concurrency` units RUNNING at
   * once, a `rate`, or both; `perKey: true` keeps a budget per rendered key. The same
   * definition again is a no-op. A change that would leave a task drawing on it unable to
   * start is `Stale` (409) naming the task.
   */
  putLimit(name: string, options: PutLimitOptions = {}): Promise<Limit> {
    const body: Record<string, unknown> = {};
    if (options.concurrency !== undefined) body["concurrency"] = options.concurrency;
    if (options.rate !== undefined) body["rate"] = options.rate;
    if (options.perKey !== undefined) body["per_key"] = options.perKey;
    const typed = body as Schemas["LimitInput"];
    return this.send({
      method: "PUT",
      path: `/v1/limits/${seg(name)}`,
      body: typed,
      headers: ifMatchHeader(options.ifMatch),
      signal: options.signal,
      parse: asIs<Limit>,
    });
  }

  /** The limit with its live usage (`running`, `available_rate`, holds, busiest keys). */
  getLimit(name: string, options: CallOptions = {}): Promise<Limit> {
    return this.send({ method: "GET", path: `/v1/limits/${seg(name)}`, signal: options.signal, parse: asIs<Limit> });
  }

  /** Every limit with its usage, by name (page after page). */
  async listLimits(options: CallOptions = {}): Promise<Limit[]> {
    const out: Limit[] = [];
    let cursor: string | undefined;
    for (;;) {
      const p = await this.send({
        method: "GET",
        path: "/v1/limits",
        query: { limit: "500", cursor },
        signal: options.signal,
        parse: (_s, body) => page<Limit>(body),
      });
      out.push(...p.items);
      if (p.next_cursor === null) {
        return out;
      }
      cursor = p.next_cursor;
    }
  }

  /** Delete a limit; `Stale` (409) while a task draws on it. */
  deleteLimit(name: string, options: CallOptions = {}): Promise<void> {
    return this.send({ method: "DELETE", path: `/v1/limits/${seg(name)}`, signal: options.signal, parse: nothing });
  }

  /**
   * Start nothing that draws on the limit (on `key`, required for a `per_key` limit) for
   * `seconds` (1-86400); a later hold is never shortened.
   */
  holdLimit(name: string, seconds: number, options: CallOptions & { key?: string; reason?: string } = {}): Promise<Limit> {
    const body: Schemas["LimitHoldRequest"] = { seconds };
    if (options.key !== undefined) body.key = options.key;
    if (options.reason !== undefined) body.reason = options.reason;
    return this.send({
      method: "POST",
      path: `/v1/limits/${seg(name)}/hold`,
      body,
      signal: options.signal,
      parse: asIs<Limit>,
    });
  }

  /** Lift the hold of `key`, or every hold of the limit without one. */
  releaseLimit(name: string, options: CallOptions & { key?: string } = {}): Promise<Limit> {
    const body: Schemas["LimitReleaseRequest"] = options.key === undefined ? {} : { key: options.key };
    return this.send({
      method: "POST",
      path: `/v1/limits/${seg(name)}/release`,
      body,
      signal: options.signal,
      parse: asIs<Limit>,
    });
  }
}

function putTaskCall(
  spec: TaskSpec,
  ifMatch: number | string | undefined,
  signal: AbortSignal | undefined,
): Call<{ created: boolean; task: Task }> {
  const body: Schemas["TaskInput"] = spec;
  return {
    method: "PUT",
    path: `/v1/tasks/${seg(spec.id)}`,
    body,
    headers: ifMatchHeader(ifMatch),
    signal,
    parse: (status, b) => ({ created: status === 201, task: b as Task }),
  };
}

function page<T>(body: unknown): Page<T> {
  const items = list(body, "items") as T[];
  const next = object(body, "the answer")["next_cursor"];
  return { items, next_cursor: typeof next === "string" ? next : null };
}

function transportError(call: Call<unknown>, e: unknown, override?: string): TransportError {
  let text = override;
  if (text === undefined) {
    const cause = e instanceof Error ? (e.cause as { code?: unknown; message?: unknown } | undefined) : undefined;
    const code = cause !== undefined && typeof cause.code === "string" ? cause.code : undefined;
    const causeText = cause !== undefined && typeof cause.message === "string" ? cause.message : undefined;
    const base = e instanceof Error ? e.message : String(e);
    text = `no answer (${code ?? (e instanceof Error ? e.name : "error")}): ${causeText ?? base}`;
  }
  return new TransportError(0, text, { method: call.method, path: call.path, cause: e });
}
