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

The bootstrap config and the cluster directory's files are read through
:mod:`rayfield.util.private_files`, again at every step: when one of them (or a
directory above) is no longer this user's alone, e.g. another user renamed the cluster
directory away and put their own in its place, the monitor logs the refusal (naming the
path) and exits with status 1 at once, without reading it.
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
from typing import Any, TypeVar

from rayfield.autoscaler.autoscaler import Autoscaler, Row
from rayfield.autoscaler.cluster_state import StatefulProvider
from rayfield.autoscaler.commands import head_node, node_setup, provider_for
from rayfield.autoscaler.config import load_config
from rayfield.autoscaler.head_monitor import started_line
from rayfield.autoscaler.sdk import KV_NAMESPACE, REQUEST_KEY, STATUS_KEY, parse_request
from rayfield.autoscaler.trigger import DemandWatch
from rayfield.util.private_files import UnsafeFileError

MAX_FAILURES = 5
MAX_CONCURRENT_LAUNCHES = 10  # the reference's max_concurrent_launches

logger = logging.getLogger("rayfield.autoscaler")


T = TypeVar("T")


class ClusterGcs:
    """The monitor's one connection to its cluster's GCS (a public
    ``rayfield.util.state.StateClient``), opened at first use, kept across steps and
    polls, and opened again (to the head the provider lists then) after a call fails.

    Args:
        provider: the cluster's provider (its head's GCS address and token).
    """

    def __init__(self, provider: StatefulProvider) -> None:
        self.provider = provider
        self._client: Any = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[Any], T], default: T) -> T:
        """``fn(client)``; ``default`` while the cluster has no head.

        Raises:
            Exception: what ``fn`` raised (the connection is closed first).
        """
        with self._lock:
            if self._client is None:
                self._client = _client(self.provider)
                if self._client is None:
                    return default
            try:
                return fn(self._client)
            except BaseException:
                self._close()
                raise

    def close(self) -> None:
        """Close the connection (the next call opens one)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:
                logger.debug("closing the GCS connection failed: %s", exc)

    def node_records(self) -> list[Row]:
        """``StateClient.node_records()`` (one call to the GCS, none to the nodes): each
        node's resources, pending work by resource shape (``demand``) and idle time
        (``idle_duration_s``) as of its last heartbeat; [] without a head."""
        return self.call(lambda c: list(c.node_records()), [])

    def requested(self) -> list[dict[str, float]]:
        """The bundles of the current ``request_resources`` request ([] while there is
        none or the cluster has no head)."""
        return self.call(lambda c: parse_request(c.kv_get(KV_NAMESPACE, REQUEST_KEY)), [])

    def publish(self, report: dict[str, Any]) -> None:
        """Write a step's report to the GCS (``STATUS_KEY``), where ``rayfield status``
        reads it."""
        self.call(lambda c: c.kv_put(KV_NAMESPACE, STATUS_KEY, json.dumps(report).encode()), None)

    def poll(self) -> list[Row] | None:
        """The node records, or None when they cannot be read now."""
        try:
            return self.node_records()
        except Exception as exc:
            logger.debug("polling the node records failed: %s", exc)
            return None


def _client(provider: StatefulProvider) -> Any:
    from rayfield.util.state import StateClient

    head = head_node(provider)
    if head is None:
        return None
    return StateClient(provider.gcs_address(head), token=provider.token(head))


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


def main(argv: list[str] | None = None) -> int:
    """Run the loop; the exit status."""
    parser = argparse.ArgumentParser(prog="rayfield.autoscaler.monitor")
    parser.add_argument("config")
    parser.add_argument("--interval-s", type=float, default=5.0)
    parser.add_argument("--poll-s", type=float, default=0.1)
    parser.add_argument("--heartbeat-timeout-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = load_config(args.config, private=True)
        provider = provider_for(config)
        setup = node_setup(config, provider)  # reads bootstrap.yaml, checks the key
    except UnsafeFileError as exc:
        logger.error("the monitor does not start: %s", exc)
        return 1
    launcher = ThreadPoolExecutor(MAX_CONCURRENT_LAUNCHES, thread_name_prefix="launch")
    watch = DemandWatch()
    gcs = ClusterGcs(provider)

    def watched_load() -> list[Row]:
        rows = gcs.node_records()
        watch.stepped(rows, time.monotonic())
        return rows

    autoscaler = Autoscaler(
        config,
        provider,
        watched_load,
        executor=launcher,
        setup=setup,
        requests_fn=gcs.requested,
        publish_fn=gcs.publish,
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
        except UnsafeFileError as exc:
            logger.error("the monitor stops: %s", exc)
            launcher.shutdown(wait=True, cancel_futures=True)
            gcs.close()
            return 1
        except Exception:
            failures += 1
            logger.exception("autoscaler step failed (%d in a row)", failures)
            if failures >= MAX_FAILURES:
                logger.error("%d failures in a row: the monitor stops", failures)
                launcher.shutdown(wait=True, cancel_futures=True)
                gcs.close()
                return 1
        wait_for_step(stop, autoscaler.next_step_in(args.interval_s), gcs.poll, watch, args.poll_s)
    launcher.shutdown(wait=True, cancel_futures=True)
    gcs.close()
    logger.info("monitor stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
