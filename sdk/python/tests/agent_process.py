"""A worker process for the tests that kill or signal one: claims for an agent and runs a
handler that sleeps ``--sleep`` seconds, then returns ``{"worker": <worker id>}``."""

from __future__ import annotations

import argparse
import logging
import time

from kairos_agent import ClaimedInstance, Worker


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("token")
    p.add_argument("agent_id")
    p.add_argument("worker_id")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--lease-seconds", type=int, default=60)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--grace", type=float, default=30.0)
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = Worker(
        a.url,
        a.agent_id,
        token=a.token,
        concurrency=a.concurrency,
        lease_seconds=a.lease_seconds,
        worker_id=a.worker_id,
        wait_seconds=2,
        shutdown_grace=a.grace,
    )

    def handler(instance: ClaimedInstance) -> object:
        logging.info("running instance %s", instance.id)
        time.sleep(a.sleep)
        return {"worker": a.worker_id}

    stats = worker.run(handler)
    logging.info("exiting: %s", stats)


if __name__ == "__main__":
    main()
