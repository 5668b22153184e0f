"""The monitor process: runs the autoscaler loop of one cluster until SIGTERM.

``python -m rayfield.autoscaler.monitor BOOTSTRAP_YAML [--interval-s S]`` (started by
``rayfield-autoscaler up``). Each step reads the load and the current
``request_resources`` request through rayfield-core's public
``rayfield.util.state.StateClient``, and writes its report
(:mod:`rayfield.autoscaler.report`) to the GCS key-value store, where ``rayfield
status`` shows it; after ``MAX_FAILURES`` steps in a row that raise, the monitor exits
with status 1 (the reference's abort rule).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rayfield.autoscaler.autoscaler import Autoscaler, Row
from rayfield.autoscaler.cluster_state import StatefulProvider
from rayfield.autoscaler.commands import head_node, node_setup, provider_for, started_line
from rayfield.autoscaler.config import load_config
from rayfield.autoscaler.sdk import KV_NAMESPACE, REQUEST_KEY, STATUS_KEY, parse_request

MAX_FAILURES = 5
MAX_CONCURRENT_LAUNCHES = 10  # the reference's max_concurrent_launches

logger = logging.getLogger("rayfield.autoscaler")


def state_load(provider: StatefulProvider) -> Any:
    """A load function over the cluster's GCS: rows of ``StateClient.nodes()``, each with
    the node's pending work by resource shape (``demand``, from
    ``StateClient.resource_demand()``)."""
    from rayfield.util.state import StateClient

    def load() -> list[Row]:
        head = head_node(provider)
        if head is None:
            return []
        with StateClient(provider.gcs_address(head), token=provider.token(head)) as client:
            rows = list(client.nodes())
            demand = client.resource_demand()
        for row in rows:
            row["demand"] = [d for d in demand if d["node_id"] == row["node_id"]]
        return rows

    return load


def _client(provider: StatefulProvider) -> Any:
    from rayfield.util.state import StateClient

    head = head_node(provider)
    if head is None:
        return None
    return StateClient(provider.gcs_address(head), token=provider.token(head))


def state_requests(provider: StatefulProvider) -> Any:
    """A function returning the bundles of the cluster's current ``request_resources``
    request ([] while there is none or the cluster has no head)."""

    def requested() -> list[dict[str, float]]:
        client = _client(provider)
        if client is None:
            return []
        with client:
            return parse_request(client.kv_get(KV_NAMESPACE, REQUEST_KEY))

    return requested


def state_publish(provider: StatefulProvider) -> Any:
    """A function writing a step's report to the cluster's GCS (``STATUS_KEY``)."""

    def publish(report: dict[str, Any]) -> None:
        client = _client(provider)
        if client is None:
            return
        with client:
            client.kv_put(KV_NAMESPACE, STATUS_KEY, json.dumps(report).encode())

    return publish


def main(argv: list[str] | None = None) -> int:
    """Run the loop; the exit status."""
    parser = argparse.ArgumentParser(prog="rayfield.autoscaler.monitor")
    parser.add_argument("config")
    parser.add_argument("--interval-s", type=float, default=5.0)
    parser.add_argument("--heartbeat-timeout-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = load_config(args.config)
    provider = provider_for(config)
    launcher = ThreadPoolExecutor(MAX_CONCURRENT_LAUNCHES, thread_name_prefix="launch")
    autoscaler = Autoscaler(
        config,
        provider,
        state_load(provider),
        executor=launcher,
        setup=node_setup(config, provider),
        requests_fn=state_requests(provider),
        publish_fn=state_publish(provider),
        heartbeat_timeout_s=args.heartbeat_timeout_s,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    failures = 0
    logger.info("%s", started_line(config["cluster_name"], os.getpid()))
    while not stop.is_set():
        try:
            autoscaler.update()
            failures = 0
        except Exception:
            failures += 1
            logger.exception("autoscaler step failed (%d in a row)", failures)
            if failures >= MAX_FAILURES:
                logger.error("%d failures in a row: the monitor stops", failures)
                launcher.shutdown(wait=True, cancel_futures=True)
                return 1
        stop.wait(autoscaler.next_step_in(args.interval_s))
    launcher.shutdown(wait=True, cancel_futures=True)
    logger.info("monitor stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
