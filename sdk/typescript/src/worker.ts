/**
 * `Worker`: the agent loop done once, correctly.
 *
 * `new Worker(url, agentId, options).run(handler)` claims instances of `agentId` with long
 * polls, at most `concurrency` in flight; runs `handler(job)` for each; extends each lease at a
 * third of its length; reports successes in batches (one `POST /v1/completions` per batch, after
 * a short linger) and failures one by one; and stops on SIGTERM/SIGINT or `stop()`.
 *
 * The rules it keeps:
 * - A handler's return value is the instance's `result` (any JSON value, at most 64 KiB).
 * - Throwing {@link Fatal} fails the attempt with `retryable: false` (DEAD); throwing
 *   {@link Retryable}, or anything else, fails it with `retryable: true` (FAILED, retried after
 *   the task's backoff while attempts remain).
 * - Throwing {@link Throttled} reports the attempt throttled: PENDING again after
 *   `retry_after_seconds`, its attempt unspent, the circuit breaker untouched.
 * - A lost lease (409 on a heartbeat, the completion or the failure report) aborts
 *   `job.signal`, drops the result, and is logged and counted; it is never thrown.
 * - A request that got no answer or a 503/429 is sent again unchanged (a claim with its
 *   `claim_id`, a report under the same lease token) after `Retry-After` or a backoff.
 * - Shutdown: stop claiming at once, let running handlers finish for up to the grace (their
 *   results are still reported), then give the rest back: failed with
 *   `retryable: true, retry_at_once: true`. A second signal ends the grace at once.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { hostname } from "node:os";

import { Client, MAX_CLAIM, MAX_COMPLETIONS, type ClaimOptions } from "./client.js";
import { Invalid, KairosError, NotFound, Stale, TooLarge, Unauthorized, Unavailable } from "./errors.js";
import type { ClaimedInstance, CompletionResult, TraceContext } from "./models.js";
import { Flag, Semaphore, sleep } from "./sync.js";
import { loadOtel, traced, type OtelApi } from "./tracing.js";

/** The server keeps results up to this many bytes serialized. */
export const MAX_RESULT_BYTES = 65536;
/** Largest completion request body the worker builds (the server's default limit is 262144). */
const MAX_BATCH_BODY_BYTES = 200_000;
/** The server stores errors cut to 4096 bytes; longer text is not sent. */
const MAX_ERROR_CHARS = 4000;
/** Bounds of a throttled attempt's wait (the server's `retry_after_seconds`). */
export const MIN_THROTTLE_SECONDS = 1;
export const MAX_THROTTLE_SECONDS = 86400;
/** How long the worker keeps trying to report what it holds once shutdown is under way. */
const REPORT_TIMEOUT_MS = 10_000;
/** How long a claim waits for more handlers to finish once one has. */
const CLAIM_GATHER_MS = 5;
/** Batch completions sent at once. */
const MAX_FLUSHES_IN_FLIGHT = 2;

const WORKER_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

/** Fail this attempt; retried after the task's backoff while attempts remain (as any error). */
export class Retryable extends Error {
  override name = "Retryable";
}

/** Fail this attempt for good: `retryable: false`, the instance goes DEAD at once. */
export class Fatal extends Error {
  override name = "Fatal";
}

/**
 * This attempt was throttled, not failed: a quota refused it (an HTTP 429 from a model API),
 * and it may be tried again in `after` seconds (its `Retry-After`). Reported with
 * `retry_after_seconds = ceil(after)`, kept within 1 to 86400: the instance goes back to
 * PENDING until then with the same attempt, and the circuit breaker counts nothing.
 * `holdLimit` names a shared limit the task draws on whose quota it was: it is held until then.
 */
export class Throttled extends Error {
  override name = "Throttled";
  readonly after: number;
  readonly reason: string;
  readonly holdLimit: string | undefined;

  constructor(after: number, reason = "rate limited", options: { holdLimit?: string } = {}) {
    super(reason);
    if (Number.isNaN(after)) {
      throw new RangeError("Throttled(after) must be a number of seconds, not NaN");
    }
    if (options.holdLimit !== undefined && (typeof options.holdLimit !== "string" || options.holdLimit === "")) {
      throw new RangeError("Throttled holdLimit must be a limit's name");
    }
    this.after = after;
    this.reason = reason;
    this.holdLimit = options.holdLimit;
  }

  /** The whole seconds reported: `ceil(after)`, kept within 1 to 86400. */
  get retryAfterSeconds(): number {
    if (this.after <= MIN_THROTTLE_SECONDS) return MIN_THROTTLE_SECONDS;
    if (this.after >= MAX_THROTTLE_SECONDS) return MAX_THROTTLE_SECONDS;
    return Math.min(MAX_THROTTLE_SECONDS, Math.ceil(this.after));
  }
}

/** The reason `job.signal` aborts with: the lease is gone, the result will be dropped. */
export class LeaseLost extends Error {
  override name = "LeaseLost";
}

/**
 * What a handler gets: the claimed instance (every field of the API's `ClaimedInstance`:
 * `context`, `idempotency_key`, `window_key`, `attempt`, `lease_token`, ...) plus `signal`,
 * aborted (with a {@link LeaseLost} reason) when the lease is lost or the attempt is given up
 * at shutdown, and the instance's W3C `traceparent`/`tracestate` when the server sent them.
 */
export type Job = ClaimedInstance & {
  readonly signal: AbortSignal;
  readonly traceparent: string | undefined;
  readonly tracestate: string | undefined;
};

/** A handler: takes the job, returns (or resolves to) its result, or throws. */
export type Handler = (job: Job) => unknown;

/** Where the worker logs; `console` fits. */
export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** A logger writing to stderr at `level` and above. */
export function stderrLogger(level: "debug" | "info" | "warn" | "error" | "silent" = "info"): Logger {
  const order = ["debug", "info", "warn", "error", "silent"];
  const min = order.indexOf(level);
  const at = (l: string) => (message: string) => {
    if (order.indexOf(l) >= min) {
      process.stderr.write(`${new Date().toISOString()} ${l.toUpperCase()} kairos-agent: ${message}\n`);
    }
  };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

export interface WorkerOptions {
  /** A bearer token with the `agent` (or `admin`) role, if the server has tokens. */
  token?: string;
  /** Most handlers running at once (default 8); a claim takes at most the free slots. */
  concurrency?: number;
  /** Most successes in one `POST /v1/completions` (1-500, default 100). */
  batch?: number;
  /** The lease asked for on each claim and heartbeat (default 60); heartbeats every third. */
  leaseSeconds?: number;
  /** This worker's name in the instances and their history (default `<host>-<pid>-<random>`). */
  workerId?: string;
  /** How long one claim long-polls for work (default 20, at most the server's limit). */
  waitSeconds?: number;
  /** How long a success waits for others to share its batch (default 20 ms). */
  lingerMs?: number;
  /** How long running handlers may finish after a stop (default 30 s). */
  shutdownGraceSeconds?: number;
  /** Stop on SIGTERM/SIGINT while running (default true). */
  handleSignals?: boolean;
  /** Errors to fail for good besides {@link Fatal}: true means `retryable: false`. */
  isFatal?: (error: unknown) => boolean;
  /** Run handlers in spans when `@opentelemetry/api` is installed (default true). */
  tracing?: boolean;
  /** Where to log (default: stderr, info and above). */
  logger?: Logger;
  /** The `fetch` to send requests with (default: the global one). */
  fetch?: typeof fetch;
}

/** What a worker did. */
export interface WorkerStats {
  /** Claim requests answered (with or without instances). */
  claims: number;
  /** Instances claimed. */
  claimed: number;
  /** Successes the server accepted. */
  succeeded: number;
  /** Failure reports the server accepted (the instance went FAILED or DEAD). */
  failed: number;
  /** Throttled attempts the server accepted; not counted in `failed`. */
  throttled: number;
  /** Attempts whose lease was found lost (a 409 on a heartbeat, completion or failure). */
  leaseLost: number;
  /** 409 answers to completions (each also counted in `leaseLost`). */
  completeConflicts: number;
  /** 409 answers to heartbeats (each also counted in `leaseLost`). */
  heartbeatConflicts: number;
  /** 409 answers to failure reports (each also counted in `leaseLost`). */
  failConflicts: number;
  /** Handler results not reported because the lease was lost first. */
  droppedResults: number;
  /** Leases extended. */
  heartbeats: number;
  /** Attempts failed (retryable, at once) because the handler still ran after the grace. */
  givenUpAtShutdown: number;
  /** Requests that got no usable answer (retried, or given up and logged). */
  requestErrors: number;
}

function newStats(): WorkerStats {
  return {
    claims: 0,
    claimed: 0,
    succeeded: 0,
    failed: 0,
    throttled: 0,
    leaseLost: 0,
    completeConflicts: 0,
    heartbeatConflicts: 0,
    failConflicts: 0,
    droppedResults: 0,
    heartbeats: 0,
    givenUpAtShutdown: 0,
    requestErrors: 0,
  };
}

/** One claimed instance from claim to acknowledged report. */
class Held {
  readonly abort = new AbortController();
  readonly job: Job;
  readonly trace: TraceContext;
  /** When the lease would expire (ms, monotonic) unless extended; reports are retried until then. */
  leaseUntil: number;
  beatTimer: NodeJS.Timeout | undefined;
  /** A heartbeat answered 409 while the report was under way: the report's answer tells. */
  beatsEnded = false;
  running = true;
  givenUp = false;
  reporting = false;
  reported = false;

  constructor(
    readonly instance: ClaimedInstance,
    leaseUntil: number,
  ) {
    this.leaseUntil = leaseUntil;
    const traceparent = instance.traceparent ?? undefined;
    const tracestate = instance.tracestate ?? undefined;
    this.trace = { traceparent: traceparent ?? null, tracestate: tracestate ?? null };
    this.job = { ...instance, signal: this.abort.signal, traceparent, tracestate };
  }

  get lost(): boolean {
    return this.abort.signal.aborted;
  }

  describe(): string {
    const i = this.instance;
    return `instance ${i.id} (task ${i.task_id}, window ${i.window_key}, attempt ${i.attempt})`;
  }
}

interface Queued {
  held: Held;
  result: unknown;
  encoded: string;
}

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

const now = (): number => performance.now();

/** The error text reported for a failed handler (U+0000 removed, at most 4000 characters). */
export function errorText(e: unknown): string {
  let text: string;
  if (e instanceof Retryable || e instanceof Fatal || e instanceof Throttled) {
    text = e.message || e.name;
  } else if (e instanceof Error) {
    text = e.message ? `${e.name}: ${e.message}` : e.name;
  } else {
    text = String(e);
  }
  return text.replaceAll("\u0000", "").slice(0, MAX_ERROR_CHARS);
}

function defaultWorkerId(): string {
  const host = hostname().replace(/[^A-Za-z0-9_.:-]/g, "-").slice(0, 80) || "worker";
  return `${host}-${process.pid}-${randomBytes(3).toString("hex")}`;
}

function retryPause(e: KairosError, failures: number): number {
  if (e instanceof Unavailable && e.retryAfter !== undefined) {
    return e.retryAfter * 1000;
  }
  return backoff(failures);
}

/** 100 ms doubling to 5 s, with +-25% jitter. */
function backoff(failures: number): number {
  const base = Math.min(5000, 100 * 2 ** Math.min(failures, 10));
  return base * (0.75 + Math.random() * 0.5);
}

/** Claims and runs the instances of one agent until stopped. */
export class Worker {
  readonly url: string;
  readonly agentId: string;
  readonly workerId: string;
  readonly concurrency: number;
  readonly batch: number;
  readonly leaseSeconds: number;
  readonly waitSeconds: number;
  readonly lingerMs: number;
  readonly shutdownGraceSeconds: number;
  readonly stats: WorkerStats = newStats();

  private readonly handleSignals: boolean;
  private readonly isFatal: ((error: unknown) => boolean) | undefined;
  private readonly tracing: boolean;
  private readonly log: Logger;
  private readonly client: Client;
  private readonly beatEveryMs: number;

  private started = false;
  private stopRequested = false;
  private readonly stopping = new Flag();
  private readonly force = new Flag();
  private readonly slotFreed = new Flag();
  private readonly queued = new Flag();
  private readonly more = new Flag();
  private readonly flushSlots = new Semaphore(MAX_FLUSHES_IN_FLIGHT);
  /** Aborts the claim in flight (until its answer begins) when the worker stops. */
  private claimAbort = new AbortController();
  /** Aborts every request and wait still under way once the worker has stopped. */
  private readonly ended = new AbortController();
  /** By lease token: an instance whose lease this worker lost may be claimed by it again. */
  private readonly held = new Map<string, Held>();
  private running = 0;
  private queue: Queued[] = [];
  private flushNow = false;
  private readonly reports = new Set<Promise<void>>();
  private fatal: KairosError | undefined;
  private handler: Handler = () => undefined;
  private otel: OtelApi | undefined;

  constructor(url: string, agentId: string, options: WorkerOptions = {}) {
    const concurrency = options.concurrency ?? 8;
    const batch = options.batch ?? 100;
    const leaseSeconds = options.leaseSeconds ?? 60;
    const waitSeconds = options.waitSeconds ?? 20;
    const lingerMs = options.lingerMs ?? 20;
    const grace = options.shutdownGraceSeconds ?? 30;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError("concurrency must be an integer of at least 1");
    if (!Number.isInteger(batch) || batch < 1 || batch > MAX_COMPLETIONS) throw new RangeError(`batch must be 1 to ${MAX_COMPLETIONS}`);
    if (!Number.isInteger(leaseSeconds) || leaseSeconds < 1) throw new RangeError("leaseSeconds must be an integer of at least 1");
    if (!Number.isInteger(waitSeconds) || waitSeconds < 0) throw new RangeError("waitSeconds must be a non-negative integer");
    if (!(lingerMs >= 0) || !(grace >= 0)) throw new RangeError("lingerMs and shutdownGraceSeconds must not be negative");
    this.url = url;
    this.agentId = agentId;
    this.workerId = options.workerId ?? defaultWorkerId();
    if (!WORKER_ID.test(this.workerId)) {
      throw new RangeError("workerId must be 1-128 characters of letters, digits, '_', '.', '-', ':'");
    }
    this.concurrency = concurrency;
    this.batch = batch;
    this.leaseSeconds = leaseSeconds;
    this.waitSeconds = waitSeconds;
    this.lingerMs = lingerMs;
    this.shutdownGraceSeconds = grace;
    this.handleSignals = options.handleSignals ?? true;
    this.isFatal = options.isFatal;
    this.tracing = options.tracing ?? true;
    this.log = options.logger ?? stderrLogger("info");
    this.client = new Client(url, { token: options.token, fetch: options.fetch });
    this.beatEveryMs = (leaseSeconds * 1000) / 3;
  }

  /**
   * Begin the shutdown: no new claims; running handlers get the grace. Called again (or a
   * second signal), the grace ends at once.
   */
  stop(): void {
    this.requestStop("stop() called");
  }

  /**
   * Run until SIGTERM/SIGINT or `stop()`, then shut down; resolves to the stats. Rejects with
   * `Unauthorized` or `Invalid` when the server refuses the claims themselves (a wrong token or
   * agent id), after shutting down.
   */
  async run(handler: Handler): Promise<WorkerStats> {
    if (this.started) {
      throw new Error("a Worker runs once; create another");
    }
    this.started = true;
    this.handler = handler;
    this.otel = this.tracing ? await loadOtel() : undefined;
    const onSignal = (signal: NodeJS.Signals): void => this.requestStop(`received ${signal}`);
    if (this.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    this.log.info(
      `worker ${this.workerId} started: agent ${this.agentId}, concurrency ${this.concurrency}, lease ${this.leaseSeconds}s`,
    );
    const completions = this.completionLoop();
    const claims = this.claimLoop();
    try {
      await this.stopping.wait();
      await claims;
      await this.drain();
    } finally {
      this.ended.abort(new Error("the worker has stopped"));
      this.queued.set();
      this.more.set();
      await completions;
      for (const h of this.held.values()) {
        clearTimeout(h.beatTimer);
      }
      if (this.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
    this.log.info(`worker ${this.workerId} stopped: ${JSON.stringify(this.stats)}`);
    if (this.fatal !== undefined) {
      throw this.fatal;
    }
    return this.stats;
  }

  private requestStop(why: string): void {
    if (this.stopRequested) {
      if (!this.force.isSet) {
        this.log.warn(`worker ${this.workerId}: ${why} again; giving running handlers up now`);
        this.force.set();
      }
      return;
    }
    this.stopRequested = true;
    this.log.info(
      `worker ${this.workerId} stopping (${why}): no new claims; waiting up to ${this.shutdownGraceSeconds}s for ${this.running} running handler(s)`,
    );
    this.claimAbort.abort(new Error("the worker is stopping"));
    this.stopping.set();
    this.slotFreed.set();
  }

  // --- claiming -------------------------------------------------------------------------------

  private async claimLoop(): Promise<void> {
    let failures = 0;
    // A claim that got no usable answer may have taken instances all the same: it is sent again
    // unchanged, with the same claim_id, so those come back (same lease tokens).
    let pending: ClaimOptions | undefined;
    while (!this.stopping.isSet) {
      let request: ClaimOptions;
      if (pending !== undefined) {
        request = pending;
      } else {
        let free = this.concurrency - this.running;
        if (free <= 0) {
          this.slotFreed.clear();
          await this.slotFreed.wait();
          continue;
        }
        // Short handlers free their slots in bursts: take the burst in one claim.
        while (this.running > 0 && free < this.concurrency && !this.stopping.isSet) {
          this.slotFreed.clear();
          if (!(await this.slotFreed.wait(CLAIM_GATHER_MS))) {
            break;
          }
          free = this.concurrency - this.running;
        }
        if (this.stopping.isSet) {
          break;
        }
        request = {
          maxInstances: Math.min(free, MAX_CLAIM),
          leaseSeconds: this.leaseSeconds,
          waitSeconds: this.waitSeconds,
          claimId: randomUUID(),
        };
      }
      let claimed: ClaimedInstance[];
      try {
        claimed = await this.client.claim(this.agentId, this.workerId, { ...request, signal: this.claimAbort.signal });
      } catch (e) {
        if (this.claimAbort.signal.aborted && !(e instanceof KairosError)) {
          break; // stopping: the claim was cut before its answer began
        }
        if (e instanceof Unauthorized || e instanceof Invalid || e instanceof NotFound) {
          this.log.error(`worker ${this.workerId}: claims for agent ${this.agentId} refused: ${e.message}; stopping`);
          this.fatal = e;
          this.requestStop("claims refused");
          return;
        }
        const err = e instanceof KairosError ? e : new KairosError(0, errorText(e), { method: "POST", path: "/v1/claims" });
        failures += 1;
        this.stats.requestErrors += 1;
        const resend = pending !== undefined;
        pending = request;
        const pause = retryPause(err, failures);
        this.log.warn(
          `worker ${this.workerId}: claim ${request.claimId ?? ""} ${err instanceof Unavailable ? `answered ${err.status} (${err.detail})` : `failed: ${err.message}`}; sending it again in ${(pause / 1000).toFixed(1)}s${resend ? " (again)" : ""}`,
        );
        await Promise.race([sleep(pause, this.ended.signal), this.stopping.wait()]);
        continue;
      }
      const retried = pending !== undefined;
      failures = 0;
      pending = undefined;
      this.stats.claims += 1;
      for (const instance of claimed) {
        // Instances answered to a claim sent again may have leases older than this answer.
        this.start(instance, retried);
      }
    }
  }

  private start(instance: ClaimedInstance, beatNow: boolean): void {
    const existing = this.held.get(instance.lease_token);
    if (existing !== undefined) {
      this.log.error(`${existing.describe()} was answered twice; the second is ignored`);
      return;
    }
    const h = new Held(instance, now() + this.leaseSeconds * 1000);
    this.held.set(instance.lease_token, h);
    this.running += 1;
    this.stats.claimed += 1;
    this.scheduleBeat(h, beatNow ? 0 : this.beatEveryMs);
    void this.runHandler(h).then((outcome) => this.handlerDone(h, outcome));
  }

  private async runHandler(h: Held): Promise<Outcome> {
    try {
      const otel = this.otel;
      const value =
        otel === undefined
          ? await this.handler(h.job)
          : await traced(otel, h.instance, this.workerId, () => this.handler(h.job));
      return { ok: true, value };
    } catch (error) {
      return { ok: false, error };
    }
  }

  // --- outcomes -------------------------------------------------------------------------------

  private handlerDone(h: Held, outcome: Outcome): void {
    this.running -= 1;
    h.running = false;
    this.slotFreed.set();
    this.more.set();
    if (h.givenUp) {
      this.log.info(`handler of ${h.describe()} finished after the attempt was given up at shutdown; its outcome is dropped`);
      return;
    }
    if (h.lost) {
      this.stats.droppedResults += 1;
      this.log.info(`result of ${h.describe()} dropped: lease lost (${reasonOf(h.abort.signal)})`);
      this.finish(h);
      return;
    }
    if (outcome.ok) {
      this.queueSuccess(h, outcome.value);
      return;
    }
    const e = outcome.error;
    if (e instanceof Throttled) {
      const held = e.holdLimit === undefined ? "" : ` (holding limit ${e.holdLimit} as long)`;
      this.log.info(`${h.describe()} throttled, to be tried again in ${e.retryAfterSeconds}s${held}: ${errorText(e)}`);
      this.reportFailure(h, errorText(e), { retryable: true, retryAfter: e.retryAfterSeconds, holdLimit: e.holdLimit });
    } else if (e instanceof Fatal || (this.isFatal !== undefined && this.isFatal(e))) {
      this.log.warn(`${h.describe()} failed (fatal, will not be retried): ${errorText(e)}`);
      this.reportFailure(h, errorText(e), { retryable: false });
    } else {
      const stack = e instanceof Error && !(e instanceof Retryable) && e.stack ? `\n${e.stack}` : "";
      this.log.warn(`${h.describe()} failed (retryable): ${errorText(e)}${stack}`);
      this.reportFailure(h, errorText(e), { retryable: true });
    }
  }

  private queueSuccess(h: Held, value: unknown): void {
    let text: string | undefined;
    try {
      text = JSON.stringify(value === undefined ? null : value);
    } catch (e) {
      this.reportFailure(h, `the handler's result is not JSON: ${errorText(e)}`, { retryable: false });
      return;
    }
    if (text === undefined) {
      this.reportFailure(h, `the handler's result is not JSON: a ${typeof value}`, { retryable: false });
      return;
    }
    const size = Buffer.byteLength(text, "utf8");
    if (size > MAX_RESULT_BYTES) {
      this.reportFailure(
        h,
        `the handler's result is ${size} bytes serialized; at most ${MAX_RESULT_BYTES} are kept (store large outputs elsewhere and return a reference)`,
        { retryable: false },
      );
      return;
    }
    const i = h.instance;
    const encoded = `{"id":${JSON.stringify(i.id)},"lease_token":${JSON.stringify(i.lease_token)},"result":${text}}`;
    this.queue.push({ held: h, result: value === undefined ? null : value, encoded });
    this.queued.set();
    this.more.set();
  }

  private leaseLost(h: Held, reason: string): void {
    if (!h.lost) {
      this.stats.leaseLost += 1;
      h.abort.abort(new LeaseLost(reason));
    }
  }

  private finish(h: Held): void {
    h.reported = true;
    clearTimeout(h.beatTimer);
    this.held.delete(h.instance.lease_token);
  }

  private spawn(work: Promise<void>): void {
    const p = work.catch((e: unknown) => {
      this.log.error(`worker ${this.workerId}: unexpected error: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
    });
    this.reports.add(p);
    void p.finally(() => this.reports.delete(p));
  }

  private reportFailure(
    h: Held,
    error: string,
    how: { retryable: boolean; atOnce?: boolean; retryAfter?: number; holdLimit?: string | undefined },
  ): void {
    this.spawn(this.sendFailure(h, error, how));
  }

  /**
   * Report a failed attempt, or with `retryAfter` a throttled one; sent again under the same
   * lease token while it gets no answer. A `holdLimit` the server refuses is dropped and the
   * throttle reported without it (the server checks it before writing anything).
   */
  private async sendFailure(
    h: Held,
    error: string,
    how: { retryable: boolean; atOnce?: boolean; retryAfter?: number; holdLimit?: string | undefined },
  ): Promise<void> {
    const i = h.instance;
    const kind = how.retryAfter === undefined ? "failure" : "throttle report";
    let holdLimit = how.holdLimit;
    let failures = 0;
    h.reporting = true;
    try {
      for (;;) {
        let after;
        try {
          after = await this.client.fail(i.id, i.lease_token, error, {
            retryable: how.retryable,
            ...(how.atOnce ? { retryAtOnce: true } : {}),
            ...(how.retryAfter !== undefined ? { retryAfterSeconds: how.retryAfter } : {}),
            ...(holdLimit !== undefined ? { holdLimit } : {}),
            trace: h.trace,
            signal: this.ended.signal,
          });
        } catch (e) {
          if (e instanceof Stale) {
            this.stats.failConflicts += 1;
            this.leaseLost(h, `${kind} answered 409: ${e.detail}`);
            this.log.warn(`${kind} of ${h.describe()} not recorded: lease lost (${e.detail})`);
            return;
          }
          if (e instanceof NotFound) {
            this.stats.requestErrors += 1;
            this.log.error(`${kind} of ${h.describe()} not recorded: the instance no longer exists (${e.detail})`);
            return;
          }
          if (e instanceof Invalid) {
            this.stats.requestErrors += 1;
            if (holdLimit !== undefined && e.errors.some((f) => f.field === "hold_limit")) {
              this.log.error(
                `${kind} of ${h.describe()}: limit ${holdLimit} not held (${e.detail}); reporting the throttle without it`,
              );
              holdLimit = undefined;
              continue;
            }
            this.log.error(`${kind} of ${h.describe()} refused: ${e.message}; its lease will expire and the reaper retries it`);
            return;
          }
          if (e instanceof Unauthorized) {
            this.stats.requestErrors += 1;
            this.log.error(`${kind} of ${h.describe()} refused: ${e.message}; its lease will expire and the reaper retries it`);
            return;
          }
          if (!(e instanceof KairosError)) {
            this.unexpected(`${kind} of ${h.describe()}`, e);
            return;
          }
          // No answer, or 503/429: the report may have been recorded all the same; sent again
          // under the same lease token it is answered as the first was.
          failures += 1;
          this.stats.requestErrors += 1;
          const pause = this.reportPause(e, failures, h.leaseUntil);
          if (pause === undefined) {
            this.log.error(`${kind} of ${h.describe()} not recorded after ${failures} tries: ${e.message}; its lease will expire`);
            return;
          }
          this.log.warn(`${kind} of ${h.describe()} failed: ${e.message}; retrying in ${(pause / 1000).toFixed(1)}s`);
          await sleep(pause, this.ended.signal);
          continue;
        }
        if (how.retryAfter !== undefined) {
          this.stats.throttled += 1;
          const held = holdLimit === undefined ? "" : `, limit ${holdLimit} held as long`;
          this.log.info(
            `${h.describe()} recorded as throttled: ${after.status} again at ${after.available_at}, attempt ${after.attempt} unspent${held}: ${error}`,
          );
        } else {
          this.stats.failed += 1;
          this.log.info(
            `${h.describe()} recorded as ${after.status} (retryable ${how.retryable}, available at ${after.available_at}): ${error}`,
          );
        }
        return;
      }
    } finally {
      this.finish(h);
    }
  }

  // --- completions ----------------------------------------------------------------------------

  private async completionLoop(): Promise<void> {
    while (!this.ended.signal.aborted) {
      await this.queued.wait();
      if (this.ended.signal.aborted) {
        return;
      }
      const deadline = now() + this.lingerMs;
      // Linger only while handlers still run: nothing else can join this batch.
      while (this.queue.length < this.batch && !this.flushNow && this.running > 0) {
        const remaining = deadline - now();
        if (remaining <= 0) {
          break;
        }
        this.more.clear();
        if (!(await this.more.wait(remaining))) {
          break;
        }
      }
      await this.flushSlots.acquire();
      // Taken and sent in one step: the shutdown, which waits while anything is queued or in
      // flight, never sees a batch that is neither.
      const items = this.takeBatch();
      if (this.queue.length === 0) {
        this.queued.clear();
      }
      if (items.length === 0) {
        this.flushSlots.release();
        continue;
      }
      this.spawn(this.flush(items));
    }
  }

  private takeBatch(): Queued[] {
    const items: Queued[] = [];
    let size = 0;
    while (this.queue.length > 0 && items.length < this.batch) {
      const c = this.queue[0] as Queued;
      if (items.length > 0 && size + c.encoded.length + 1 > MAX_BATCH_BODY_BYTES) {
        break;
      }
      this.queue.shift();
      if (c.held.lost) {
        this.stats.droppedResults += 1;
        this.log.info(`result of ${c.held.describe()} dropped: lease lost (${reasonOf(c.held.abort.signal)})`);
        this.finish(c.held);
        continue;
      }
      items.push(c);
      size += Buffer.byteLength(c.encoded, "utf8") + 1;
    }
    return items;
  }

  private async flush(items: Queued[]): Promise<void> {
    for (const c of items) {
      c.held.reporting = true;
    }
    try {
      const raw = `{"completions":[${items.map((c) => c.encoded).join(",")}]}`;
      const results = await this.sendBatch(items, raw);
      if (results === undefined) {
        return;
      }
      if (results.length !== items.length) {
        this.log.error(
          `batch completion answered ${results.length} results for ${items.length} items; leases of the rest will expire`,
        );
      }
      items.forEach((c, n) => {
        const r = results[n];
        if (r !== undefined) {
          this.completionOutcome(c.held, r.status, "detail" in r ? r.detail : undefined);
        }
      });
    } finally {
      for (const c of items) {
        if (!c.held.reported) {
          this.finish(c.held);
        }
      }
      this.flushSlots.release();
    }
  }

  private async sendBatch(items: Queued[], raw: string): Promise<CompletionResult[] | undefined> {
    let failures = 0;
    // One trace per request: a batch of one carries its instance's trace context.
    const trace = items.length === 1 ? (items[0] as Queued).held.trace : undefined;
    for (;;) {
      try {
        return await this.client.completeEncoded(raw, { trace, signal: this.ended.signal });
      } catch (e) {
        if (e instanceof Invalid || e instanceof TooLarge) {
          // One item the server cannot take refuses the whole batch: report one by one.
          if (items.length > 1) {
            this.log.warn(`batch completion of ${items.length} refused (${e.message}); reporting them one by one`);
          }
          for (const c of items) {
            await this.completeSingle(c);
          }
          return undefined;
        }
        if (e instanceof Unauthorized || e instanceof NotFound) {
          this.stats.requestErrors += 1;
          this.log.error(
            `batch completion of ${items.length} refused: ${e.message}; their leases will expire and the reaper retries them`,
          );
          return undefined;
        }
        if (!(e instanceof KairosError)) {
          this.unexpected(`batch completion of ${items.length}`, e);
          return undefined;
        }
        failures += 1;
        this.stats.requestErrors += 1;
        const pause = this.reportPause(e, failures, Math.max(...items.map((c) => c.held.leaseUntil)));
        if (pause === undefined) {
          this.log.error(
            `batch completion of ${items.length} not recorded after ${failures} tries: ${e.message}; their leases will expire`,
          );
          return undefined;
        }
        this.log.warn(`batch completion of ${items.length} failed: ${e.message}; retrying in ${(pause / 1000).toFixed(1)}s`);
        await sleep(pause, this.ended.signal);
      }
    }
  }

  private async completeSingle(c: Queued): Promise<void> {
    const h = c.held;
    const i = h.instance;
    h.reporting = true;
    let failures = 0;
    for (;;) {
      try {
        await this.client.complete(i.id, i.lease_token, c.result, { trace: h.trace, signal: this.ended.signal });
        this.completionOutcome(h, 200, undefined);
        return;
      } catch (e) {
        if (e instanceof Stale) {
          this.completionOutcome(h, 409, e.detail);
        } else if (e instanceof NotFound) {
          this.completionOutcome(h, 404, e.detail);
        } else if (e instanceof Invalid) {
          this.log.warn(`result of ${h.describe()} refused (${e.detail}); failing the attempt for good`);
          await this.sendFailure(h, `the result was refused: ${e.detail}`, { retryable: false });
        } else if (e instanceof Unauthorized) {
          this.stats.requestErrors += 1;
          this.log.error(`completion of ${h.describe()} refused: ${e.message}; its lease will expire and the reaper retries it`);
        } else if (e instanceof KairosError) {
          failures += 1;
          this.stats.requestErrors += 1;
          const pause = this.reportPause(e, failures, h.leaseUntil);
          if (pause !== undefined) {
            this.log.warn(`completion of ${h.describe()} failed: ${e.message}; retrying in ${(pause / 1000).toFixed(1)}s`);
            await sleep(pause, this.ended.signal);
            continue;
          }
          this.log.error(`completion of ${h.describe()} not recorded after ${failures} tries: ${e.message}; its lease will expire`);
        }
        return;
      }
    }
  }

  /**
   * How long to wait before sending a report again after `e`, or undefined to give up: the
   * lease would have expired by now (heartbeats extend `leaseUntil` while they get through),
   * the shutdown's grace is over and it failed a few times, or the worker has stopped.
   */
  private reportPause(e: KairosError, failures: number, leaseUntil: number): number | undefined {
    const t = now();
    if (this.ended.signal.aborted || t >= leaseUntil || (this.force.isSet && failures > 3)) {
      return undefined;
    }
    return Math.min(retryPause(e, failures), Math.max(10, leaseUntil - t));
  }

  /** A report cut by the worker's end, or an error no answer explains: logged, not retried. */
  private unexpected(what: string, e: unknown): void {
    if (this.ended.signal.aborted) {
      this.log.error(`${what} not recorded: the worker stopped first; the lease will expire`);
    } else {
      this.log.error(`${what} failed unexpectedly: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
    }
  }

  private completionOutcome(h: Held, status: number, detail: string | undefined): void {
    if (status === 200) {
      this.stats.succeeded += 1;
      this.log.debug(`${h.describe()} succeeded`);
    } else if (status === 409) {
      this.stats.completeConflicts += 1;
      this.leaseLost(h, `completion answered 409: ${detail ?? ""}`);
      this.log.warn(`result of ${h.describe()} dropped: lease lost (completion answered 409: ${detail ?? ""})`);
    } else if (status === 404) {
      this.stats.requestErrors += 1;
      this.log.error(`result of ${h.describe()} not recorded: the instance no longer exists (${detail ?? ""})`);
    } else {
      this.stats.requestErrors += 1;
      this.log.error(`result of ${h.describe()} not recorded: HTTP ${status} (${detail ?? ""}); its lease will expire`);
    }
    this.finish(h);
  }

  // --- heartbeats -----------------------------------------------------------------------------

  private scheduleBeat(h: Held, delayMs: number): void {
    clearTimeout(h.beatTimer);
    if (h.reported || this.ended.signal.aborted) {
      return;
    }
    h.beatTimer = setTimeout(() => void this.beat(h), delayMs);
  }

  private async beat(h: Held): Promise<void> {
    if (h.reported || h.beatsEnded || h.lost || h.givenUp) {
      return;
    }
    const i = h.instance;
    const sent = now();
    try {
      await this.client.heartbeat(i.id, i.lease_token, { leaseSeconds: this.leaseSeconds, signal: this.ended.signal });
      this.stats.heartbeats += 1;
      h.leaseUntil = Math.max(h.leaseUntil, sent + this.leaseSeconds * 1000);
      this.scheduleBeat(h, this.beatEveryMs);
    } catch (e) {
      if (e instanceof Stale) {
        if (h.reported) {
          return; // the report landed first: the lease ended normally
        }
        if (h.reporting) {
          // The report may have landed and its answer been lost; its retry tells.
          h.beatsEnded = true;
          return;
        }
        this.stats.heartbeatConflicts += 1;
        this.leaseLost(h, `heartbeat answered 409: ${e.detail}`);
        this.log.warn(`lease of ${h.describe()} lost (heartbeat answered 409: ${e.detail}); its result will be dropped`);
      } else if (e instanceof NotFound) {
        this.leaseLost(h, `heartbeat answered 404: ${e.detail}`);
        this.log.warn(`lease of ${h.describe()} lost: the instance no longer exists (${e.detail})`);
      } else if (e instanceof KairosError) {
        this.stats.requestErrors += 1;
        this.log.warn(`heartbeat of ${h.describe()} failed: ${e.message}; retrying`);
        this.scheduleBeat(h, Math.min(1000, this.beatEveryMs / 3));
      }
    }
  }

  // --- shutdown -------------------------------------------------------------------------------

  private async drain(): Promise<void> {
    if (this.running > 0) {
      const deadline = now() + this.shutdownGraceSeconds * 1000;
      while (this.running > 0 && !this.force.isSet) {
        const remaining = deadline - now();
        if (remaining <= 0) {
          break;
        }
        this.slotFreed.clear();
        await Promise.race([this.slotFreed.wait(remaining), this.force.wait()]);
      }
    }
    for (const h of [...this.held.values()]) {
      if (!h.running || h.givenUp) {
        continue;
      }
      h.givenUp = true;
      this.stats.givenUpAtShutdown += 1;
      clearTimeout(h.beatTimer);
      this.leaseLost(h, "the worker shut down before the handler finished");
      this.log.warn(
        `${h.describe()} given up at shutdown: the handler still runs after ${this.shutdownGraceSeconds}s; failing it retryable`,
      );
      // Given back, not failed on its merits: retryable at once, so another worker takes it
      // without waiting out the task's backoff.
      this.reportFailure(h, `worker ${this.workerId} shut down before the handler finished`, {
        retryable: true,
        atOnce: true,
      });
    }
    // Report what is held: the queued successes at once, then every report in flight.
    this.flushNow = true;
    this.more.set();
    this.queued.set();
    const deadline = now() + REPORT_TIMEOUT_MS;
    while ((this.queue.length > 0 || this.reports.size > 0) && now() < deadline) {
      await Promise.race([...this.reports, sleep(Math.min(100, Math.max(0, deadline - now())))]);
    }
    const left = this.queue.length + this.reports.size;
    if (left > 0) {
      this.log.error(
        `worker ${this.workerId}: ${left} outcome(s) not reported within ${REPORT_TIMEOUT_MS / 1000}s; their leases will expire and the reaper retries them`,
      );
    }
  }
}

function reasonOf(signal: AbortSignal): string {
  const r: unknown = signal.reason;
  return r instanceof Error ? r.message : String(r);
}
