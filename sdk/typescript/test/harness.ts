// A real kairos for every test: the debug binary, a fresh database on the server DATABASE_URL
// names (its role needs CREATEDB), a free loopback port, an admin and an agent token, and fast
// reaper and retry passes. Each test gets its own database and daemon, dropped afterwards; the
// daemon's log is checked for panics.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import pg from "pg";

import { Client, Worker, type Handler, type TaskSpec, type WorkerOptions, type WorkerStats } from "../src/index.js";

/** The repository's root (this file runs from sdk/typescript/build-test/test/). */
export const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
export const SDK = join(ROOT, "sdk", "typescript");

let dbCounter = 0;

export function binary(): string {
  const explicit = process.env["KAIROS_BIN"];
  if (explicit) {
    return resolve(explicit);
  }
  const target = process.env["CARGO_TARGET_DIR"] ?? join(ROOT, "target");
  const bin = join(target, "debug", "kairos");
  if (!existsSync(bin)) {
    throw new Error(`no kairos binary at ${bin}: run \`cargo build --bin kairos\` or set KAIROS_BIN`);
  }
  return bin;
}

export function databaseUrl(): string {
  const url = process.env["DATABASE_URL"];
  if (!url) {
    throw new Error(
      "DATABASE_URL must name a PostgreSQL server whose role may CREATE DATABASE (scripts/ts-sdk-test and scripts/test set it)",
    );
  }
  return url;
}

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Poll `check` until it returns something other than undefined, null or false; throw after
 * `timeoutMs` naming `what`.
 */
export async function eventually<T>(
  check: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  what: string,
  timeoutMs = 30_000,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== null && value !== false) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${Math.round(timeoutMs / 1000)}s waiting for ${what}`);
    }
    await sleep(intervalMs);
  }
}

/** A temporary directory for one test's files. */
export function tempDir(prefix = "kairos-ts-sdk-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** One running daemon over its own database. */
export class Kairos {
  readonly adminToken = `admin-${randomBytes(8).toString("hex")}`;
  readonly agentToken = `agent-${randomBytes(8).toString("hex")}`;
  readonly dbName = `kairos_tssdk_${process.pid}_${++dbCounter}`;
  readonly dir = tempDir();
  readonly logPath = join(this.dir, "kairos.log");
  url = "";
  private process: ChildProcess | undefined;
  private db: pg.Client | undefined;
  private readonly adminUrl = databaseUrl();

  static async start(env: Record<string, string> = {}): Promise<Kairos> {
    const k = new Kairos();
    try {
      await k.boot(env);
    } catch (e) {
      await k.close();
      throw e;
    }
    return k;
  }

  private async boot(env: Record<string, string>): Promise<void> {
    const admin = new pg.Client({ connectionString: this.adminUrl });
    await admin.connect();
    try {
      await admin.query(`create database "${this.dbName}"`);
    } finally {
      await admin.end();
    }
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    const fullEnv: Record<string, string | undefined> = {
      ...process.env,
      DATABASE_URL: withDatabase(this.adminUrl, this.dbName),
      KAIROS_CONFIG: join(ROOT, "config", "kairos.toml"),
      KAIROS_LISTEN: `127.0.0.1:${port}`,
      KAIROS_NODE_ID: "ts-sdk-test",
      KAIROS_AUTH_TOKENS: `${this.adminToken}:admin,${this.agentToken}:agent`,
      KAIROS_REAPER_INTERVAL_MS: "200",
      KAIROS_RETRY_SCAN_INTERVAL_MS: "200",
      KAIROS_WEBHOOK_INTERVAL_MS: "200",
      KAIROS_SHUTDOWN_GRACE_SECONDS: "5",
      KAIROS_LOG_FORMAT: "text",
      KAIROS_LOG_LEVEL: "info",
      ...env,
    };
    delete fullEnv["RUST_LOG"];
    const log = openSync(this.logPath, "w");
    this.process = spawn(binary(), ["serve"], { cwd: ROOT, env: fullEnv, stdio: ["ignore", log, log] });
    closeSync(log);
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (this.process.exitCode !== null) {
        throw new Error(`kairos exited with ${this.process.exitCode} at start:\n${this.logTail()}`);
      }
      try {
        const r = await fetch(`${this.url}/readyz`, { signal: AbortSignal.timeout(2000) });
        if (r.status === 200) {
          return;
        }
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) {
        throw new Error(`kairos was not ready within 60s:\n${this.logTail()}`);
      }
      await sleep(100);
    }
  }

  logTail(lines = 40): string {
    try {
      return readFileSync(this.logPath, "utf8").split("\n").slice(-lines).join("\n");
    } catch {
      return "";
    }
  }

  client(token?: string): Client {
    return new Client(this.url, { token: token ?? this.adminToken });
  }

  async query<R extends pg.QueryResultRow = Record<string, unknown>>(sql: string, params: unknown[] = []): Promise<R[]> {
    if (this.db === undefined) {
      this.db = new pg.Client({ connectionString: withDatabase(this.adminUrl, this.dbName) });
      await this.db.connect();
    }
    return (await this.db.query<R>(sql, params)).rows;
  }

  /** Instances by status, e.g. `{ SUCCESS: 300 }`. */
  async statuses(): Promise<Record<string, number>> {
    const rows = await this.query<{ status: string; n: number }>(
      "select status, count(*)::int as n from task_instance group by status",
    );
    return Object.fromEntries(rows.map((r) => [r.status, r.n]));
  }

  /** A poll task for `agentId` with a manual trigger and a breaker that never opens. */
  async task(taskId: string, agentId: string, execution: Record<string, unknown> = {}): Promise<void> {
    const spec: TaskSpec = {
      id: taskId,
      agent_id: agentId,
      trigger: { type: "manual" },
      execution: { concurrency_limit: 1000, ...execution },
      circuit_breaker: { failure_threshold: 1000 },
    };
    await this.client().putTask(spec);
  }

  /** `n` instances of `taskId` through the API; their ids. */
  async triggerMany(taskId: string, n: number, parallel = 16): Promise<string[]> {
    const c = this.client();
    const ids: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: parallel }, async () => {
        while (next < n) {
          next += 1;
          ids.push((await c.trigger(taskId)).id);
        }
      }),
    );
    return ids;
  }

  worker(agentId: string, workerId: string, options: WorkerOptions = {}): Worker {
    return new Worker(this.url, agentId, {
      token: this.agentToken,
      workerId,
      waitSeconds: 1,
      handleSignals: false,
      logger: quietLogger(),
      ...options,
    });
  }

  /** Stops the daemon and drops its database; its log is kept when `keepLog` (a failed test). */
  async close(keepLog = false): Promise<void> {
    if (this.db !== undefined) {
      await this.db.end().catch(() => undefined);
      this.db = undefined;
    }
    const p = this.process;
    if (p !== undefined && p.exitCode === null && p.signalCode === null) {
      const exited = new Promise<void>((resolve) => p.once("exit", () => resolve()));
      p.kill("SIGTERM");
      const timer = setTimeout(() => p.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(timer);
    }
    const admin = new pg.Client({ connectionString: this.adminUrl });
    try {
      await admin.connect();
      await admin.query(`drop database if exists "${this.dbName}" with (force)`);
    } catch {
      // best effort: a database left over holds no test's outcome
    } finally {
      await admin.end().catch(() => undefined);
    }
    const text = existsSync(this.logPath) ? readFileSync(this.logPath, "utf8") : "";
    if (text.includes("panicked") || text.includes("internal error")) {
      throw new Error(`the daemon logged panics or internal errors (${this.logPath}):\n${this.logTail(60)}`);
    }
    if (keepLog) {
      process.stderr.write(`kairos log kept: ${this.logPath}\n`);
    } else {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }
}

/** Runs `body` with a fresh daemon, closing it afterwards (also on failure). */
export async function withKairos(body: (k: Kairos) => Promise<void>, env: Record<string, string> = {}): Promise<void> {
  const k = await Kairos.start(env);
  let failed = true;
  try {
    await body(k);
    failed = false;
  } finally {
    try {
      await k.close(failed);
    } catch (e) {
      if (!failed) {
        throw e;
      }
    }
  }
}

/** Keeps warnings and errors (printed when a test fails is what matters), drops the rest. */
export function quietLogger(): { debug(m: string): void; info(m: string): void; warn(m: string): void; error(m: string): void; lines: string[] } {
  const lines: string[] = [];
  const keep = (level: string) => (m: string) => {
    lines.push(`${level} ${m}`);
  };
  return { debug: () => undefined, info: keep("INFO"), warn: keep("WARN"), error: keep("ERROR"), lines };
}

/** A worker running `handler` until `stop()`. */
export class RunningWorker {
  private readonly done: Promise<WorkerStats>;
  private error: unknown;

  constructor(
    readonly worker: Worker,
    handler: Handler,
  ) {
    this.done = worker.run(handler);
    this.done.catch((e: unknown) => {
      this.error = e;
    });
  }

  async stop(timeoutMs = 30_000): Promise<WorkerStats> {
    this.worker.stop();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`worker ${this.worker.workerId} did not stop within ${timeoutMs / 1000}s`)),
        timeoutMs,
      );
    });
    try {
      return await Promise.race([this.done, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  get failed(): unknown {
    return this.error;
  }
}

/** One request as a {@link Relay} saw it; `n` counts the requests to its path so far (from 1). */
export interface RelayedRequest {
  method: string;
  path: string;
  body: string;
  headers: Record<string, string | string[] | undefined>;
  n: number;
  at: number;
}

/**
 * What a relay does with a request: forward it (undefined), answer it itself without
 * forwarding (`{status, retryAfter}`), or forward it and then cut the connection instead of
 * answering (`"lose-answer"`: the daemon did the work, the caller never learns it).
 */
export type RelayRule = (request: RelayedRequest) => undefined | { status: number; retryAfter?: string } | "lose-answer";

/** A loopback HTTP relay in front of a daemon that applies `rule` to each request and records it. */
export class Relay {
  readonly requests: RelayedRequest[] = [];
  url = "";
  private server: import("node:http").Server | undefined;
  private readonly counts = new Map<string, number>();

  constructor(
    private readonly upstream: string,
    private readonly rule: RelayRule,
  ) {}

  async start(): Promise<this> {
    const { createServer } = await import("node:http");
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (b: Buffer) => chunks.push(b));
      req.on("end", () => {
        void this.handle(req, res, Buffer.concat(chunks)).catch(() => {
          res.socket?.destroy();
        });
      });
    });
    const server = this.server;
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    this.url = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`;
    return this;
  }

  private async handle(
    req: import("node:http").IncomingMessage,
    res: import("node:http").ServerResponse,
    body: Buffer,
  ): Promise<void> {
    const path = req.url ?? "/";
    const n = (this.counts.get(path) ?? 0) + 1;
    this.counts.set(path, n);
    const seen: RelayedRequest = {
      method: req.method ?? "GET",
      path,
      body: body.toString("utf8"),
      headers: req.headers,
      n,
      at: performance.now(),
    };
    this.requests.push(seen);
    const action = this.rule(seen);
    if (action !== undefined && action !== "lose-answer") {
      const headers: Record<string, string> = { "content-type": "application/problem+json" };
      if (action.retryAfter !== undefined) headers["retry-after"] = action.retryAfter;
      res.writeHead(action.status, headers);
      res.end(JSON.stringify({ type: "about:blank", title: "relayed", status: action.status, detail: "answered by the relay" }));
      return;
    }
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (typeof value === "string" && !["host", "content-length", "connection"].includes(name)) headers[name] = value;
    }
    const init: RequestInit = { method: seen.method, headers };
    if (body.length > 0) init.body = body;
    const answer = await fetch(this.upstream + path, init);
    const text = await answer.text();
    if (action === "lose-answer") {
      res.socket?.destroy();
      return;
    }
    const out: Record<string, string> = { "content-type": answer.headers.get("content-type") ?? "application/json" };
    const retryAfter = answer.headers.get("retry-after");
    if (retryAfter !== null) out["retry-after"] = retryAfter;
    res.writeHead(answer.status, out);
    res.end(text);
  }

  /** The requests to paths matching `pattern`. */
  to(pattern: RegExp): RelayedRequest[] {
    return this.requests.filter((r) => pattern.test(r.path));
  }

  async close(): Promise<void> {
    const server = this.server;
    if (server !== undefined) {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }
}
