// A worker process for the tests that signal one: claims for an agent and runs a handler that
// sleeps `--sleep` milliseconds (or until its lease is lost), then returns {"worker": <id>}.
import { Worker, stderrLogger, type Job } from "../src/index.js";

const [url, token, agentId, workerId, ...rest] = process.argv.slice(2);
const opt = (name: string, fallback: number): number => {
  const hit = rest.find((a) => a.startsWith(`--${name}=`));
  return hit === undefined ? fallback : Number(hit.slice(name.length + 3));
};

const worker = new Worker(url ?? "", agentId ?? "", {
  token: token ?? "",
  workerId: workerId ?? "",
  concurrency: opt("concurrency", 8),
  leaseSeconds: opt("lease-seconds", 60),
  shutdownGraceSeconds: opt("grace", 30),
  waitSeconds: 2,
  logger: stderrLogger("info"),
});
const sleepMs = opt("sleep", 0);

const stats = await worker.run(async (job: Job) => {
  process.stderr.write(`running instance ${job.id}\n`);
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, sleepMs);
    job.signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
  return { worker: workerId };
});
process.stderr.write(`exiting: ${JSON.stringify(stats)}\n`);
