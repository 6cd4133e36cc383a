/**
 * The optional OpenTelemetry hook. When `@opentelemetry/api` can be imported (an optional peer
 * dependency, loaded once with a dynamic import), a handler runs inside the trace context of
 * its instance (the claim's `traceparent`/`tracestate`) and inside a span named after the task,
 * so the agent's own spans nest under the instance. Without the package nothing is loaded and
 * handlers are called directly.
 */
import type * as Otel from "@opentelemetry/api";

import type { ClaimedInstance } from "./models.js";
import { VERSION } from "./version.js";

/** The loaded API, or undefined when the package is not installed. */
export type OtelApi = typeof Otel;

let loading: Promise<OtelApi | undefined> | undefined;

/** `@opentelemetry/api` when it is installed, else undefined; imported at most once. */
export function loadOtel(): Promise<OtelApi | undefined> {
  loading ??= import("@opentelemetry/api").then(
    (m) => m,
    () => undefined,
  );
  return loading;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/**
 * The context of `traceparent`: through the registered propagator when there is one (so the
 * application's propagation setup applies), else parsed as W3C trace context directly.
 */
function parentContext(api: OtelApi, traceparent: string, tracestate: string | undefined): Otel.Context {
  const carrier: Record<string, string> = { traceparent };
  if (tracestate) {
    carrier["tracestate"] = tracestate;
  }
  const extracted = api.propagation.extract(api.ROOT_CONTEXT, carrier);
  if (api.trace.getSpanContext(extracted) !== undefined) {
    return extracted;
  }
  const m = TRACEPARENT.exec(traceparent.trim());
  if (m === null || m[1] === "ff" || (m[1] === "00" && m[5] !== undefined)) {
    return api.ROOT_CONTEXT;
  }
  const spanContext: Otel.SpanContext = {
    traceId: m[2] as string,
    spanId: m[3] as string,
    traceFlags: parseInt(m[4] as string, 16) & 1,
    isRemote: true,
  };
  if (tracestate) {
    spanContext.traceState = api.createTraceState(tracestate);
  }
  if (!api.trace.isSpanContextValid(spanContext)) {
    return api.ROOT_CONTEXT;
  }
  return api.trace.setSpanContext(api.ROOT_CONTEXT, spanContext);
}

/**
 * Runs `run` inside a span named after the instance's task, child of the instance's trace
 * context when it carries one. The span records a thrown error and ends when `run` settles.
 */
export async function traced<T>(
  api: OtelApi,
  instance: ClaimedInstance,
  workerId: string,
  run: () => T | Promise<T>,
): Promise<T> {
  const parent = instance.traceparent
    ? parentContext(api, instance.traceparent, instance.tracestate ?? undefined)
    : api.ROOT_CONTEXT;
  const tracer = api.trace.getTracer("kairos-agent", VERSION);
  const attributes: Otel.Attributes = {
    "kairos.task_id": instance.task_id,
    "kairos.instance_id": instance.id,
    "kairos.window_key": instance.window_key,
    "kairos.attempt": instance.attempt,
    "kairos.agent_id": instance.agent_id,
    "kairos.worker_id": workerId,
  };
  return tracer.startActiveSpan(
    instance.task_id,
    { kind: api.SpanKind.CONSUMER, attributes },
    parent,
    async (span: Otel.Span): Promise<T> => {
      try {
        return await run();
      } catch (e) {
        if (e instanceof Error) {
          span.recordException(e);
        }
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
        throw e;
      } finally {
        span.end();
      }
    },
  );
}
