"""The monitor process: runs the autoscaler loop of one cluster until SIGTERM.

``python -m rayfield.autoscaler.monitor BOOTSTRAP_YAML [--interval-s S] [--poll-s S]``
(started by ``rayfield-autoscaler up``). Each step reads the load (the GCS's node
records: resources, pending demand and idle time as each node's last heartbeat reported
them) and the current ``request_resources`` request through rayfield-core's public
``rayfield.util.state.StateClient``, and writes its report
(:mod:`rayfield.autoscaler.report`) to the GCS key-value store, where ``rayfield
status`` shows it. Steps run every ``--interval-s``, at an idle worker's timeout, and
between those as soon as a poll of the node records (every ``--poll-s``) finds new
demand or a node that joined or left (:class:`~rayfield.autoscaler.trigger.DemandWatch`);
after ``MAX_FAILURES`` steps in a row that raise, the monitor exits
with status 1 (the reference's abort rule).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rayfield.autoscaler.autoscaler import Autoscaler, Row
from rayfield.autoscaler.cluster_state import StatefulProvider
from rayfield.autoscaler.commands import head_node, node_setup, provider_for, started_line
from rayfield.autoscaler.config import load_config
from rayfield.autoscaler.sdk import KV_NAMESPACE, REQUEST_KEY, STATUS_KEY, parse_request
from rayfield.autoscaler.trigger import DemandWatch

MAX_FAILURES = 5
MAX_CONCURRENT_LAUNCHES = 10  # the reference's max_concurrent_launches

logger = logging.getLogger("rayfield.autoscaler")


def state_load(provider: StatefulProvider) -> Any:
    """A load function over the cluster's GCS: ``StateClient.node_records()`` (one call to
    the GCS, none to the nodes): each node's resources, pending work by resource shape
    (``demand``) and idle time (``idle_duration_s``) as of its last heartbeat."""

    def load() -> list[Row]:
        client = _client(provider)
        if client is None:
            return []
        with client:
            return list(client.node_records())

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


Poll = Callable[[], list[Row] | None]


def wait_for_step(
    stop: threading.Event,
    wait_s: float,
    poll: Poll,
    watch: DemandWatch,
    poll_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Wait up to ``wait_s`` for the next step, polling the node records every
    ``poll_s``; return early when ``stop`` is set or ``watch`` finds the polled records
    call for a step. ``poll`` returns None when the records cannot be read (the wait goes
    on)."""
    end = clock() + wait_s
    while not stop.is_set():
        left = end - clock()
        if left <= 0 or stop.wait(min(poll_s, left)):
            return
        rows = poll()
        if rows is not None and watch.due(rows, clock()):
            return


def _poller(
    provider: StatefulProvider,
) -> tuple[Callable[[], list[Row] | None], Callable[[], None]]:
    """A poll of the node records on one kept connection (opened again after a failure),
    and the function that closes it."""
    held: list[Any] = []

    def close() -> None:
        while held:
            try:
                held.pop().close()
            except Exception as exc:
                logger.debug("closing the poll's connection failed: %s", exc)

    def poll() -> list[Row] | None:
        try:
            if not held:
                client = _client(provider)
                if client is None:
                    return None
                held.append(client)
            return list(held[0].node_records())
        except Exception as exc:
            logger.debug("polling the node records failed: %s", exc)
            close()
            return None

    return poll, close


def main(argv: list[str] | None = None) -> int:
    """Run the loop; the exit status."""
    parser = argparse.ArgumentParser(prog="rayfield.autoscaler.monitor")
    parser.add_argument("config")
    parser.add_argument("--interval-s", type=float, default=5.0)
    parser.add_argument("--poll-s", type=float, default=0.1)
    parser.add_argument("--heartbeat-timeout-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = load_config(args.config)
    provider = provider_for(config)
    launcher = ThreadPoolExecutor(MAX_CONCURRENT_LAUNCHES, thread_name_prefix="launch")
    watch = DemandWatch()
    load = state_load(provider)

    def watched_load() -> list[Row]:
        rows = load()
        watch.stepped(rows, time.monotonic())
        return rows

    autoscaler = Autoscaler(
        config,
        provider,
        watched_load,
        executor=launcher,
        setup=node_setup(config, provider),
        requests_fn=state_requests(provider),
        publish_fn=state_publish(provider),
        heartbeat_timeout_s=args.heartbeat_timeout_s,
    )
    poll, close_poll = _poller(provider)
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
                close_poll()
                return 1
        wait_for_step(stop, autoscaler.next_step_in(args.interval_s), poll, watch, args.poll_s)
    launcher.shutdown(wait=True, cancel_futures=True)
    close_poll()
    logger.info("monitor stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
