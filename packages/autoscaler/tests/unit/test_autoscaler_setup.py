"""The autoscaler loop with a provider whose nodes are set up over SSH (``needs_setup``):
new workers are set up, failed ones replaced and their type backed off, nodes stopped
before they are terminated. A recording NodeSetup stands in for SSH: no process."""

from __future__ import annotations

from typing import Any

from test_autoscaler_loop import Cluster, setup

from rayfield.autoscaler.node_provider import (
    KIND_WORKER,
    STATUS_UNINITIALIZED,
    STATUS_UP_TO_DATE,
    STATUS_UPDATE_FAILED,
    TAG_NODE_KIND,
    TAG_NODE_STATUS,
    TAG_RUNTIME_CONFIG,
)


class RecordingSetup:
    """Marks a node up to date (or failed, for the ids in ``fail``) and records calls."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.runtime_hashes = {"head": "h-head", "worker": "h-worker"}
        self.fail: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    def update(self, node_id: str, restart_only: bool = False) -> None:
        self.calls.append(("update", node_id))
        if node_id in self.fail:
            self.provider.set_node_tags(node_id, {TAG_NODE_STATUS: STATUS_UPDATE_FAILED})
            raise RuntimeError("setup failed")
        self.provider.set_node_tags(
            node_id, {TAG_NODE_STATUS: STATUS_UP_TO_DATE, TAG_RUNTIME_CONFIG: "h-worker"}
        )

    def stop(self, node_id: str) -> bool:
        self.calls.append(("stop", node_id))
        return True


def with_setup() -> tuple[Any, Cluster, list[float], Any, RecordingSetup]:
    provider, cluster, clock, autoscaler = setup()
    recording = RecordingSetup(provider)
    autoscaler.setup = recording  # type: ignore[assignment]
    return provider, cluster, clock, autoscaler, recording


def test_new_workers_are_created_uninitialized_and_set_up() -> None:
    provider, _, _, autoscaler, rec = with_setup()
    assert autoscaler.update().launch == {"worker": 1}
    assert provider.node_tags("n1")[TAG_NODE_STATUS] == STATUS_UNINITIALIZED
    autoscaler.update()  # the next step sets it up
    assert rec.calls == [("update", "n1")]
    assert provider.node_tags("n1")[TAG_NODE_STATUS] == STATUS_UP_TO_DATE
    autoscaler.update()
    assert rec.calls == [("update", "n1")]  # up to date: not again
    # The config's worker runtime hash changes (a file mount did): set up again.
    rec.runtime_hashes["worker"] = "h-worker-2"
    autoscaler.update()
    assert rec.calls == [("update", "n1"), ("update", "n1")]


def test_a_failed_setup_replaces_the_worker_and_backs_its_type_off() -> None:
    provider, _, clock, autoscaler, rec = with_setup()
    rec.fail.add("n1")
    autoscaler.update()  # launch n1
    autoscaler.update()  # set up n1: fails
    assert provider.node_tags("n1")[TAG_NODE_STATUS] == STATUS_UPDATE_FAILED
    decision = autoscaler.update()  # replaced: stopped, terminated; the type backed off
    assert ("stop", "n1") in rec.calls and provider.is_terminated("n1")
    assert decision.launch == {}
    assert "worker" in autoscaler.backoff.blocked(clock[0])
    clock[0] += 60  # past the backoff
    assert autoscaler.update().launch == {"worker": 1}
    assert provider.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER}) == ["n2"]


def test_idle_workers_are_stopped_before_they_are_terminated() -> None:
    provider, cluster, clock, autoscaler, rec = with_setup()
    cluster.queued = 2
    autoscaler.update()
    autoscaler.update()
    workers = provider.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})
    cluster.joined |= set(workers)
    cluster.queued = 0
    autoscaler.update()
    clock[0] += 120  # past idle_timeout_minutes (1)
    decision = autoscaler.update()
    gone = [n for n, _ in decision.terminate]
    assert gone and all(("stop", n) in rec.calls for n in gone)
    assert all(provider.is_terminated(n) for n in gone)
