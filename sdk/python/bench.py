"""Drain benchmark: Worker processes drain N no-op instances with batch completions.

The shape is kairos-bench's claim scenario (``bench/src/claim.rs``, ``claim_complete``):
N PENDING instances spread over T manual tasks (concurrency_limit 1000, no retries) of one
agent, inserted directly, a fresh database and a fresh ``kairos serve`` (the release build,
``KAIROS_DATABASE_MAX_CONNECTIONS=24``, open mode), and A agents, each claiming up to 100 at a
time and reporting each claimed batch in one ``POST /v1/completions``. Here each agent is a
``Worker`` process with ``concurrency=100`` and ``batch=100``, running a no-op handler. The
clock runs from releasing the (already started) workers to the last success; every instance
is then checked to be SUCCESS at attempt 1.

    cargo build --release --bins
    DATABASE_URL=postgres://user:pass@127.0.0.1:5432/postgres \\
        target/sdk-venv/bin/python sdk/python/bench.py --instances 20000 --tasks 100 --agents 1,4
    # the raw-HTTP figure for the same shape:
    DATABASE_URL=... target/release/kairos-bench --only claim --claim-tasks 100 --agents 1,4 \\
        --claim-instances 20000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
AGENT = "bench_agent"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _noop_sync(instance: Any) -> None:
    return None


async def _noop_async(instance: Any) -> None:
    return None


def _agent(
    url: str,
    index: int,
    concurrency: int,
    batch: int,
    mode: str,
    ready: "Synchronized[int]",
    go: Event,
    stop: Event,
    done: "Synchronized[int]",
    claims: "Synchronized[int]",
) -> None:
    from kairos_agent import Worker

    worker = Worker(url, AGENT, concurrency=concurrency, batch=batch, lease_seconds=60,
                    worker_id=f"py{index}", wait_seconds=1, handle_signals=False)

    def watch() -> None:
        while not stop.wait(0.005):
            done.value = worker.stats.succeeded
        done.value = worker.stats.succeeded
        claims.value = worker.stats.claims
        worker.stop()

    with ready.get_lock():
        ready.value += 1
    go.wait()
    threading.Thread(target=watch, daemon=True).start()
    worker.run(_noop_async if mode == "async" else _noop_sync)
    done.value = worker.stats.succeeded
    claims.value = worker.stats.claims


class Server:
    def __init__(self, binary: Path, db_url: str) -> None:
        self.url = f"http://127.0.0.1:{_free_port()}"
        env = dict(os.environ)
        env.update({
            "DATABASE_URL": db_url,
            "KAIROS_LISTEN": self.url.removeprefix("http://"),
            "KAIROS_NODE_ID": "bench",
            "KAIROS_CONFIG": str(ROOT / "config" / "kairos.toml"),
            "KAIROS_DATABASE_MAX_CONNECTIONS": "24",
            "RUST_LOG": "warn",
        })
        self.process = subprocess.Popen([str(binary), "serve"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise SystemExit("kairos did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)


def run_once(binary: Path, admin_url: str, n: int, tasks: int, agents: int, concurrency: int, batch: int,
             mode: str) -> Tuple[float, str, str]:
    name = f"kairos_sdk_bench_{os.getpid()}_{secrets.token_hex(3)}"
    parts = urlsplit(admin_url)
    db_url = urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    server: Optional[Server] = None
    procs: List[Any] = []
    try:
        server = Server(binary, db_url)
        from kairos_agent import Client, TaskSpec, manual

        with Client(server.url) as c:
            for t in range(tasks):
                c.put_task(TaskSpec(id=f"c{t}", agent_id=AGENT, trigger=manual(),
                                    execution={"concurrency_limit": 1000, "max_retries": 0}))
        with psycopg.connect(db_url, autocommit=True) as db:
            db.execute(
                "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, "
                "max_attempts, available_at) select gen_random_uuid(), 'c' || (g %% %s), 'w' || g, now(), "
                "'PENDING', 'manual', %s, 1, now() from generate_series(1, %s) g",
                (tasks, AGENT, n),
            )
        ctx = mp.get_context("spawn")
        ready = ctx.Value("i", 0)
        go, stop = ctx.Event(), ctx.Event()
        counters = [ctx.Value("q", 0) for _ in range(agents)]
        claim_counts = [ctx.Value("q", 0) for _ in range(agents)]
        for i in range(agents):
            p = ctx.Process(target=_agent, args=(server.url, i, concurrency, batch, mode, ready, go, stop, counters[i],
                                                 claim_counts[i]))
            p.start()
            procs.append(p)
        while ready.value < agents:
            time.sleep(0.01)
        time.sleep(0.3)  # the last one has reached go.wait()
        started = time.monotonic()
        go.set()
        deadline = started + 600
        while sum(c.value for c in counters) < n:
            if time.monotonic() > deadline or any(not p.is_alive() for p in procs):
                raise SystemExit(f"drain stalled at {sum(c.value for c in counters)} of {n}")
            time.sleep(0.002)
        elapsed = time.monotonic() - started
        stop.set()
        for p in procs:
            p.join(30)
        with psycopg.connect(db_url, autocommit=True) as db:
            rows = db.execute("select status, attempt, count(*) from task_instance group by 1, 2").fetchall()
        if rows != [("SUCCESS", 1, n)]:
            raise SystemExit(f"not exactly once: {rows}")
        claims = sum(c.value for c in claim_counts)
        return n / elapsed, f"{elapsed:.2f}s", f"{claims} claims ({n / max(claims, 1):.0f} instances per claim)"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        if server is not None:
            server.stop()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=20_000)
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--agents", default="1,4", help="comma-separated worker process counts")
    ap.add_argument("--concurrency", type=int, default=100, help="Worker concurrency (the claim size)")
    ap.add_argument("--batch", type=int, default=100, help="Worker batch (completions per request)")
    ap.add_argument("--handler", choices=["sync", "async"], default="sync")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--kairos", type=Path, default=ROOT / "target" / "release" / "kairos")
    a = ap.parse_args()
    admin_url = os.environ.get("DATABASE_URL")
    if not admin_url:
        raise SystemExit("DATABASE_URL must name the PostgreSQL to measure (its role needs CREATEDB)")
    if not a.kairos.exists():
        raise SystemExit(f"{a.kairos} not found: cargo build --release --bins")
    print(f"| agents | handler | instances/s | time | {a.instances} instances over {a.tasks} tasks, "
          f"concurrency {a.concurrency}, batch {a.batch} |")
    print("|---:|---|---:|---:|---|")
    for agents in (int(x) for x in a.agents.split(",")):
        for _ in range(a.runs):
            rate, took, detail = run_once(a.kairos, admin_url, a.instances, a.tasks, agents, a.concurrency, a.batch,
                                          a.handler)
            print(f"| {agents} | {a.handler} | {rate:,.0f} | {took} | {detail} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
