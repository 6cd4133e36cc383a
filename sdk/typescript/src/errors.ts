/**
 * Errors: the API's problem+json answers mapped to one class per status family.
 *
 * | status   | error                                                          |
 * | -------- | -------------------------------------------------------------- |
 * | 400, 422 | {@link Invalid} (`errors` lists `{field, message}` for 422)    |
 * | 401      | {@link Unauthorized}                                           |
 * | 403      | {@link Forbidden} (a subclass of {@link Unauthorized})         |
 * | 404      | {@link NotFound}                                               |
 * | 409      | {@link Stale} (a stale lease, an illegal transition, ...)      |
 * | 412      | {@link VersionMismatch}                                        |
 * | 413      | {@link TooLarge} (a subclass of {@link Invalid})               |
 * | 429, 503 | {@link Unavailable} (`retryAfter` from `Retry-After`)          |
 * | other    | {@link KairosError}                                            |
 *
 * A request that got no answer at all (connection refused, reset, timeout) is
 * {@link TransportError} (status 0).
 */

/** One validation problem: the dotted path of the field and what is wrong with it. */
export interface FieldError {
  field: string;
  message: string;
}

/** The problem+json body of an error answer, as far as it could be read. */
export type Problem = Record<string, unknown>;

export interface ErrorOptions {
  method?: string;
  path?: string;
  problem?: Problem | undefined;
  cause?: unknown;
}

/**
 * An answer the API refused with, or a request that got no answer. `status` is the HTTP status
 * (0 when there was no answer), `detail` the problem's detail (or the transport error's text),
 * `problem` the whole problem+json body when there was one.
 */
export class KairosError extends Error {
  readonly status: number;
  readonly detail: string;
  readonly method: string;
  readonly path: string;
  readonly problem: Problem;

  constructor(status: number, detail: string, options: ErrorOptions = {}) {
    const method = options.method ?? "";
    const where = method ? `${method} ${options.path ?? ""}: ` : "";
    const code = status ? `HTTP ${status}: ` : "";
    super(`${where}${code}${detail}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = status;
    this.detail = detail;
    this.method = method;
    this.path = options.path ?? "";
    this.problem = options.problem ?? {};
  }

  /** The problem type URI (`https://kairos.dev/problems/<slug>`), or `""`. */
  get type(): string {
    const value = this.problem["type"];
    return typeof value === "string" ? value : "";
  }
}

/** No answer: the connection failed, was cut, or the request timed out. */
export class TransportError extends KairosError {}

/** 400 (not JSON) or 422 (values that parse but are not allowed); `errors` names the fields. */
export class Invalid extends KairosError {
  readonly errors: FieldError[];

  constructor(status: number, detail: string, options: ErrorOptions = {}) {
    super(status, detail, options);
    this.errors = [];
    const raw = this.problem["errors"];
    if (Array.isArray(raw)) {
      for (const e of raw as unknown[]) {
        if (e !== null && typeof e === "object") {
          const o = e as Record<string, unknown>;
          this.errors.push({ field: String(o["field"] ?? ""), message: String(o["message"] ?? "") });
        }
      }
    }
  }
}

/** 413: a result over 64 KiB, or a body over the server's `max_body_bytes`. */
export class TooLarge extends Invalid {}

/** 401: no token, or an unknown one. */
export class Unauthorized extends KairosError {}

/** 403: the token's role or agent list does not allow this call. */
export class Forbidden extends Unauthorized {}

/** 404: no such task, instance or limit (or another agent's, for a token limited to agents). */
export class NotFound extends KairosError {}

/**
 * 409: the lease token no longer holds the instance (reaped, cancelled, finished, or a newer
 * attempt holds it), or the transition is not allowed from the instance's status.
 */
export class Stale extends KairosError {}

/** 412: `If-Match` named another version than the current one. */
export class VersionMismatch extends KairosError {}

/**
 * 429 (too many waiting claims) or 503 (shutting down, database unavailable). `retryAfter` is the
 * server's `Retry-After` in seconds, when it sent one.
 */
export class Unavailable extends KairosError {
  readonly retryAfter: number | undefined;

  constructor(status: number, detail: string, options: ErrorOptions & { retryAfter?: number | undefined } = {}) {
    super(status, detail, options);
    this.retryAfter = options.retryAfter;
  }
}

/** The error for an answer with `status` (>= 400) and its parsed body, if any. */
export function errorFor(
  status: number,
  problem: Problem | undefined,
  text: string,
  options: { method: string; path: string; retryAfter?: number | undefined },
): KairosError {
  let detail = text;
  if (problem !== undefined) {
    const d = problem["detail"];
    const t = problem["title"];
    if (typeof d === "string" && d) {
      detail = d;
    } else if (typeof t === "string" && t) {
      detail = t;
    }
  }
  if (!detail) {
    detail = "no detail given";
  }
  const o: ErrorOptions = { method: options.method, path: options.path, problem };
  switch (status) {
    case 400:
    case 422:
      return new Invalid(status, detail, o);
    case 413:
      return new TooLarge(status, detail, o);
    case 401:
      return new Unauthorized(status, detail, o);
    case 403:
      return new Forbidden(status, detail, o);
    case 404:
      return new NotFound(status, detail, o);
    case 409:
      return new Stale(status, detail, o);
    case 412:
      return new VersionMismatch(status, detail, o);
    case 429:
    case 503:
      return new Unavailable(status, detail, { ...o, retryAfter: options.retryAfter });
    default:
      return new KairosError(status, detail, o);
  }
}
