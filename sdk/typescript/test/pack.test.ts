// `npm pack` makes an installable package: installed from its tarball into an empty project
// (without the optional @opentelemetry/api), it imports, drains real work and type-checks.
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { SDK, eventually, tempDir, withKairos } from "./harness.js";

const npm = process.platform === "win32" ? "npm.cmd" : "npm";

test("npm pack produces a package that installs, imports, runs a worker and type-checks", async (t) => {
  const out = tempDir("kairos-ts-pack-");
  const app = tempDir("kairos-ts-app-");
  t.after(() => {
    rmSync(out, { recursive: true, force: true });
    rmSync(app, { recursive: true, force: true });
  });
  execFileSync(npm, ["pack", "--silent", "--pack-destination", out], { cwd: SDK, stdio: ["ignore", "pipe", "inherit"] });
  const tarballs = readdirSync(out).filter((f) => f.endsWith(".tgz"));
  assert.equal(tarballs.length, 1, `one tarball in ${out}`);
  const tarball = join(out, tarballs[0] as string);
  const listing = execFileSync("tar", ["-tzf", tarball], { encoding: "utf8" }).split("\n").filter(Boolean);
  assert.ok(listing.includes("package/dist/index.js"), listing.join(", "));
  assert.ok(listing.includes("package/dist/index.d.ts"));
  assert.ok(listing.includes("package/README.md"));
  assert.ok(!listing.some((f) => f.includes("/test/") || f.includes("node_modules")), "no tests or dependencies packed");

  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module", private: true }));
  execFileSync(npm, ["install", "--offline", "--no-audit", "--no-fund", "--silent", tarball], { cwd: app, stdio: ["ignore", "pipe", "inherit"] });
  const installed = readdirSync(join(app, "node_modules"));
  assert.deepEqual(installed.filter((n) => !n.startsWith(".")), ["kairos-agent"], "no runtime dependency installed");

  writeFileSync(
    join(app, "main.js"),
    `import { Client, Worker, Fatal, sign, verifySignature, webhookReceiver, cron, VERSION } from "kairos-agent";
const body = '{"instance":{}}';
const header = sign("s", body, 1700000000);
const worker = new Worker("http://127.0.0.1:9", "agent", { handleSignals: false });
console.log(JSON.stringify({
  version: VERSION,
  verified: verifySignature("s", header, body, { now: 1700000010 }),
  client: typeof new Client("http://127.0.0.1:9").claim,
  worker: worker.workerId.length > 0,
  fatal: new Fatal("x") instanceof Error,
  receiver: typeof webhookReceiver(() => null, { secret: "s" }),
  cron: cron("0 * * * * *").type,
}));
`,
  );
  const printed = execFileSync(process.execPath, ["main.js"], { cwd: app, encoding: "utf8" });
  assert.deepEqual(JSON.parse(printed), {
    version: "0.1.0",
    verified: true,
    client: "function",
    worker: true,
    fatal: true,
    receiver: "function",
    cron: "cron",
  });

  // The installed package's Worker drains real work without @opentelemetry/api installed.
  writeFileSync(
    join(app, "worker.js"),
    `import { Worker } from "kairos-agent";
const [url, token] = process.argv.slice(2);
const worker = new Worker(url, "packed_agent", { token, waitSeconds: 1, handleSignals: false });
const done = worker.run((job) => ({ ran: job.window_key, traced: job.traceparent ?? null }));
setTimeout(() => worker.stop(), 3000);
console.log(JSON.stringify(await done));
`,
  );
  await withKairos(async (k) => {
    await k.task("packed", "packed_agent");
    const id = (await k.client().trigger("packed", { windowKey: "w1" })).id;
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ["worker.js", k.url, k.agentToken], { cwd: app, encoding: "utf8" }, (err, out) =>
        err ? reject(err) : resolve(out),
      );
    });
    assert.equal((JSON.parse(stdout) as { succeeded: number }).succeeded, 1);
    const done = await eventually(async () => {
      const i = await k.client().getInstance(id);
      return i.status === "SUCCESS" ? i : undefined;
    }, "the instance done");
    assert.deepEqual((done.result as { ran: string }).ran, "w1");
  });

  // A strict TypeScript consumer compiles against the shipped declarations.
  writeFileSync(
    join(app, "agent.ts"),
    `import { Worker, Throttled, type Job, type Task, type components } from "kairos-agent";
const handle = async (job: Job): Promise<{ window: string }> => {
  if (job.attempt > 3) throw new Throttled(5, "busy");
  job.signal.throwIfAborted();
  return { window: job.window_key };
};
const t: Task | undefined = undefined;
const status: components["schemas"]["InstanceStatus"] = "PENDING";
void new Worker("http://127.0.0.1:9", "agent", { concurrency: 2 }).run(handle);
void t; void status;
`,
  );
  // The README's agent compiles as written.
  const readme = readFileSync(join(SDK, "README.md"), "utf8");
  const example = /## An agent in 20 lines\n\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(example !== undefined, "the README has its agent example");
  assert.ok(example.trim().split("\n").length <= 20, "the README's agent fits in 20 lines");
  writeFileSync(join(app, "readme-agent.ts"), example);
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        noEmit: true,
        module: "NodeNext",
        moduleResolution: "NodeNext",
        target: "ES2022",
        types: ["node"],
        skipLibCheck: false,
        typeRoots: [join(SDK, "node_modules", "@types")],
      },
      files: ["agent.ts", "readme-agent.ts"],
    }),
  );
  execFileSync(process.execPath, [join(SDK, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"], {
    cwd: app,
    stdio: ["ignore", "inherit", "inherit"],
  });
});
