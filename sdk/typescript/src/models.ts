/**
 * The API's resources and request shapes, taken from the types generated from openapi.yaml
 * (src/api.ts): a change of the spec changes these types, and the SDK must still compile.
 * Field names are the API's (snake_case) and timestamps are RFC 3339 strings, as sent.
 */
import type { components } from "./api.js";

type Schemas = components["schemas"];

/** A registered task as the API shows it: the definition with every default filled in. */
export type Task = Schemas["Task"];
/** One window of a task and where it stands. */
export type Instance = Schemas["Instance"];
export type InstanceStatus = Schemas["InstanceStatus"];
/** One transition of an instance (`from` is null on the creating event). */
export type InstanceEvent = Schemas["InstanceEvent"];
/** Why a PENDING or FAILED instance is not running now. */
export type WaitingReason = Schemas["WaitingOn"];
/** An instance with its whole history, oldest transition first, and `waiting_on`. */
export type InstanceDetail = Schemas["InstanceDetail"];
/** A shared limit with its live usage. */
export type Limit = Schemas["Limit"];
/** One key's budget of a `per_key` limit. */
export type LimitKey = Schemas["LimitKey"];
/** A limit's `rate`: at most `count + burst` starts in any `per_seconds` seconds. */
export type Rate = Schemas["LimitRate"];

export type Trigger = Schemas["Trigger"];
export type CronTrigger = Schemas["CronTrigger"];
export type IntervalTrigger = Schemas["IntervalTrigger"];
export type OnceTrigger = Schemas["OnceTrigger"];
export type AfterTrigger = Schemas["AfterTrigger"];
export type ManualTrigger = Schemas["ManualTrigger"];
export type Execution = Schemas["Execution"];
export type RetryBackoff = Schemas["RetryBackoff"];
export type LimitDraw = Schemas["LimitDraw"];
export type Dispatch = Schemas["DispatchInput"];
export type PollDispatch = Schemas["PollDispatchInput"];
export type WebhookDispatch = Schemas["WebhookDispatchInput"];
export type Notify = Schemas["NotifyInput"];
export type CircuitBreaker = Schemas["CircuitBreaker"];

/**
 * W3C trace context of a claimed instance: `traceparent` (and `tracestate`, if any) of the
 * instance's trace, when the server sends them.
 */
export interface TraceContext {
  traceparent?: string | null;
  tracestate?: string | null;
}

/**
 * An instance the caller holds under a lease: every {@link Instance} field plus the
 * `lease_token` that fences its reports and the `context` to run with (the task's context with
 * a manual trigger's merged over it).
 */
export type ClaimedInstance = Schemas["ClaimedInstance"] & TraceContext;

/**
 * A task definition for `putTask` and `apply`: the body of `PUT /v1/tasks/{id}` with its `id`.
 * Fields left out get the server's defaults (`paused` left out keeps the current pause state).
 */
export type TaskSpec = Omit<Schemas["TaskInput"], "id"> & { id: string };

/** One page of a list; pass `next_cursor` as `cursor` for the next (null: the last page). */
export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

/** One item of a batch completion: the instance, its lease token and the result. */
export interface Completion {
  id: string;
  lease_token: string;
  result?: unknown;
}

/**
 * The answer for one item of `completeMany`: `status` 200 with the instance (now SUCCESS), or
 * 409 (stale lease) / 404 (no such instance) / 403 (an agent the token may not act for) with
 * `detail`.
 */
export type CompletionResult = Schemas["CompletionBatchResponse"]["results"][number];

/**
 * What `apply` did with one spec: `created`, `configured` (changed, version bumped) or
 * `unchanged` (the same definition again: a no-op).
 */
export interface ApplyResult {
  id: string;
  outcome: "created" | "configured" | "unchanged";
  task: Task;
}

function timestamp(at: Date | string): string {
  return typeof at === "string" ? at : at.toISOString();
}

/** A cron trigger: `cron("0 30 8 * * *", "Asia/Shanghai")` (six fields, seconds first). */
export function cron(expr: string, timezone = "UTC"): CronTrigger {
  return { type: "cron", expr, timezone };
}

/** An interval trigger, epoch-aligned unless `startAt` is given. */
export function interval(everySeconds: number, startAt?: Date | string): IntervalTrigger {
  const t: IntervalTrigger = { type: "interval", every_seconds: everySeconds };
  if (startAt !== undefined) {
    t.start_at = timestamp(startAt);
  }
  return t;
}

/** A one-shot trigger at `at`. */
export function once(at: Date | string): OnceTrigger {
  return { type: "once", at: timestamp(at) };
}

/** A dependency: run each window of `task` once its instance succeeds. */
export function after(task: string): AfterTrigger {
  return { type: "after", task };
}

/** No schedule: only `trigger` calls create instances. */
export function manual(): ManualTrigger {
  return { type: "manual" };
}

/** @internal */
export function formatTimestamp(at: Date | string): string {
  return timestamp(at);
}
