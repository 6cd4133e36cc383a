"""A real kairos for every test: the debug binary (built with cargo once per session), a fresh
database on the server ``DATABASE_URL`` names (its role needs CREATEDB), a free loopback port,
an admin and an agent token, and fast reaper and retry scanner passes. Each test gets its own
database and daemon, dropped afterwards; the daemon's log is checked for panics."""

from __future__ import annotations

import asyncio
import itertools
import queue
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

from kairos_agent import AsyncClient, Client, Handler, Worker, WorkerStats

ROOT = Path(__file__).resolve().parents[3]
# One INFO line per request would bury the worker's own log lines.
logging.getLogger("httpx").setLevel(logging.WARNING)
SDK = ROOT / "sdk" / "python"
T = TypeVar("T")
_db_counter = itertools.count(1)


class _Dropper:
    """Drops the tests' databases in the background: a drop waits for a checkpoint (seconds on
    a server with fsync on), which the next test need not wait for."""

    def __init__(self) -> None:
        self.failures: List[str] = []
        self._queue: "queue.SimpleQueue[Optional[Tuple[str, str]]]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="drop-databases", daemon=True)
        self._thread.start()

    def drop(self, admin_url: str, name: str) -> None:
        self._queue.put((admin_url, name))

    def finish(self) -> None:
        self._queue.put(None)
        self._thread.join(120)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            admin_url, name = item
            try:
                with psycopg.connect(admin_url, autocommit=True) as conn:
                    conn.execute(f'drop database if exists "{name}" with (force)')
            except psycopg.Error as e:
                self.failures.append(f"{name}: {e}")


@pytest.fixture(scope="session")
def dropper() -> Iterator[_Dropper]:
    d = _Dropper()
    yield d
    d.finish()
    if d.failures:
        pytest.fail("test databases could not be dropped: " + "; ".join(d.failures))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def eventually(check: Callable[[], Optional[T]], what: str, timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll ``check`` until it returns something other than None (or False); fail after
    ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Optional[T] = None
    while True:
        last = check()
        if last is not None and last is not False:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def kairos_binary() -> Path:
    explicit = os.environ.get("KAIROS_BIN")
    if explicit:
        return Path(explicit)
    build = subprocess.run(
        ["cargo", "build", "--quiet", "--bin", "kairos"], cwd=ROOT, capture_output=True, text=True
    )
    if build.returncode != 0:
        pytest.fail(f"cargo build --bin kairos failed:\n{build.stderr[-4000:]}")
    return ROOT / "target" / "debug" / "kairos"


@pytest.fixture(scope="session")
def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        pytest.fail("DATABASE_URL must name a PostgreSQL server whose role may CREATE DATABASE "
                    "(scripts/sdk-test and scripts/test set it)")
    return url


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


class Kairos:
    """One running daemon over its own database."""

    def __init__(self, binary: Path, admin_url: str, log_dir: Path, env: Dict[str, str], dropper: _Dropper) -> None:
        self.admin_url = admin_url
        self._dropper = dropper
        self.db_name = f"kairos_sdk_{os.getpid()}_{next(_db_counter)}"
        self.db_url = _with_database(admin_url, self.db_name)
        self.admin_token = "admin-" + secrets.token_hex(8)
        self.agent_token = "agent-" + secrets.token_hex(8)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / "kairos.log"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'create database "{self.db_name}"')
        self._db: Optional[psycopg.Connection[Any]] = None
        full_env = dict(os.environ)
        full_env.update(
            {
                "DATABASE_URL": self.db_url,
                "KAIROS_CONFIG": str(ROOT / "config" / "kairos.toml"),
                "KAIROS_LISTEN": f"127.0.0.1:{self.port}",
                "KAIROS_NODE_ID": "sdk-test",
                "KAIROS_AUTH_TOKENS": f"{self.admin_token}:admin,{self.agent_token}:agent",
                "KAIROS_REAPER_INTERVAL_MS": "200",
                "KAIROS_RETRY_SCAN_INTERVAL_MS": "200",
                "KAIROS_WEBHOOK_INTERVAL_MS": "200",
                "KAIROS_SHUTDOWN_GRACE_SECONDS": "5",
                "KAIROS_LOG_FORMAT": "text",
                "KAIROS_LOG_LEVEL": "info",
            }
        )
        full_env.pop("RUST_LOG", None)
        full_env.update(env)
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [str(binary), "serve"], cwd=ROOT, env=full_env, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                self.close()
                pytest.fail(f"kairos exited with {self.process.returncode} at start:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.close()
                pytest.fail(f"kairos was not ready within 60s:\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def client(self, token: Optional[str] = None) -> Client:
        return Client(self.url, token=token or self.admin_token)

    def async_client(self, token: Optional[str] = None) -> AsyncClient:
        return AsyncClient(self.url, token=token or self.admin_token)

    def query(self, sql: str, params: Sequence[Any] = ()) -> List[Tuple[Any, ...]]:
        if self._db is None:
            self._db = psycopg.connect(self.db_url, autocommit=True)
        return self._db.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def statuses(self, where: str = "true", params: Sequence[Any] = ()) -> Dict[str, int]:
        rows = self.query(f"select status, count(*) from task_instance where {where} group by status", params)
        return {status: count for status, count in rows}

    def metric(self, name: str) -> float:
        text = httpx.get(f"{self.url}/metrics", headers={"Authorization": f"Bearer {self.admin_token}"}).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        self._dropper.drop(self.admin_url, self.db_name)


@pytest.fixture
def kairos_factory(
    kairos_binary: Path, database_url: str, tmp_path: Path, dropper: _Dropper
) -> Iterator[Callable[..., Kairos]]:
    started: List[Kairos] = []

    def start(**env: str) -> Kairos:
        k = Kairos(kairos_binary, database_url, tmp_path, env, dropper)
        started.append(k)
        return k

    yield start
    problems = []
    for k in started:
        k.close()
        text = k.log_path.read_text(errors="replace")
        if "panicked" in text or "internal error" in text:
            problems.append(k.log_tail(60))
    if problems:
        pytest.fail("the daemon logged panics or internal errors:\n" + "\n---\n".join(problems))


@pytest.fixture
def kairos(kairos_factory: Callable[..., Kairos]) -> Kairos:
    return kairos_factory()


def backlog(k: Kairos, task_id: str, agent_id: str, n: int, max_attempts: int = 1) -> None:
    """Insert ``n`` PENDING instances of ``task_id`` in one statement, as kairos-bench seeds its
    claim scenario (``trigger_many`` makes them through the API, one commit each)."""
    k.query(
        "insert into task_instance (id, task_id, window_key, scheduled_at, status, source, agent_id, "
        "max_attempts, available_at) select gen_random_uuid(), %s, 'b' || lpad(g::text, 6, '0'), now(), "
        "'PENDING', 'manual', %s, %s, now() from generate_series(1, %s) g returning 1",
        (task_id, agent_id, max_attempts, n),
    )


def trigger_many(k: Kairos, task_id: str, n: int, parallel: int = 16) -> List[str]:
    """Create ``n`` instances of ``task_id`` through the API; their ids."""

    async def go() -> List[str]:
        sem = asyncio.Semaphore(parallel)
        async with k.async_client() as c:

            async def one() -> str:
                async with sem:
                    return (await c.trigger(task_id)).id

            return list(await asyncio.gather(*(one() for _ in range(n))))

    return asyncio.run(go())


class RunningWorker:
    """A Worker running ``handler`` in its own thread (as a second worker process would)."""

    def __init__(self, worker: Worker, handler: Handler) -> None:
        self.worker = worker
        self.error: Optional[BaseException] = None
        self.result: Optional[WorkerStats] = None
        self.thread = threading.Thread(target=self._run, args=(handler,), name=f"worker-{worker.worker_id}")

    def _run(self, handler: Handler) -> None:
        try:
            self.result = self.worker.run(handler)
        except BaseException as e:  # handed to the test thread in stop()
            self.error = e

    def __enter__(self) -> "RunningWorker":
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> WorkerStats:
        self.worker.stop()
        self.thread.join(timeout)
        if self.thread.is_alive():
            pytest.fail(f"worker {self.worker.worker_id} did not stop within {timeout:.0f}s")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def __exit__(self, *exc: Any) -> None:
        if self.thread.is_alive() or self.result is None and self.error is None:
            self.stop()


def agent_process(k: Kairos, tmp_path: Path, agent_id: str, worker_id: str, **options: Any) -> subprocess.Popen[bytes]:
    """A worker in its own Python process (tests/agent_process.py), logging to a file."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SDK), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    args = [sys.executable, str(SDK / "tests" / "agent_process.py"), k.url, k.agent_token, agent_id, worker_id]
    for key, value in options.items():
        args.append(f"--{key.replace('_', '-')}={value}")
    log = open(tmp_path / f"{worker_id}.log", "wb")
    return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
