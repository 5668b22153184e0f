"""An unnamed actor lives while a handle to it exists anywhere, and ends with its last one.

Each actor here holds one CPU of the two the fixture's node has, so the node's free CPUs
tell which actors are alive: waits are on that observable state, never on a sleep.
"""

from __future__ import annotations

import gc
from typing import Any

import rayfield as rf
from rayfield.testing import wait_for


@rf.remote(num_cpus=1)
class Backend:
    def __init__(self) -> None:
        self.n = 0

    def incr(self) -> int:
        self.n += 1
        return self.n


@rf.remote(num_cpus=1)
class Frontend:
    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def call(self) -> int:
        return int(rf.get(self.backend.incr.remote()))


@rf.remote
def call_twice(backend: Any) -> int:
    rf.get(backend.incr.remote())
    return int(rf.get(backend.incr.remote()))


@rf.remote(num_cpus=0)
def make_backend() -> Any:
    backend = Backend.remote()
    rf.get(backend.incr.remote())
    return backend


def free_cpus_become(n: float, timeout_s: float = 20.0) -> None:
    """Wait until the node has ``n`` free CPUs (the actors holding them ended or started)."""

    def free() -> bool:
        gc.collect()
        return rf.available_resources().get("CPU", 0.0) == n

    wait_for(free, timeout_s, f"{n} free CPUs (now {rf.available_resources().get('CPU')})")


def test_a_handle_passed_to_a_constructor_keeps_the_actor(cluster: Any) -> None:
    frontend = Frontend.remote(Backend.remote())  # the driver's handle to Backend goes at once
    gc.collect()
    assert [rf.get(frontend.call.remote()) for _ in range(3)] == [1, 2, 3]
    free_cpus_become(0)  # both alive
    assert rf.get(frontend.call.remote(), timeout=30) == 4
    del frontend
    free_cpus_become(2)  # Frontend ended, then Backend with Frontend's handle


def test_a_handle_passed_to_a_task_keeps_the_actor_until_the_task_is_done(cluster: Any) -> None:
    ref = call_twice.remote(Backend.remote())
    gc.collect()
    assert rf.get(ref, timeout=30) == 2
    free_cpus_become(2)  # the task finished: its hold went, and so did the actor


def test_a_handle_returned_from_a_task_keeps_the_actor(cluster: Any) -> None:
    ref = make_backend.remote()
    backend = rf.get(ref, timeout=30)
    del ref  # the result object goes; the driver's own handle remains
    gc.collect()
    assert rf.get(backend.incr.remote(), timeout=30) == 2
    free_cpus_become(1)
    del backend
    free_cpus_become(2)


def test_a_handle_put_in_an_object_keeps_the_actor_while_the_object_lives(cluster: Any) -> None:
    backend = Backend.remote()
    ref = rf.put([backend])
    del backend
    gc.collect()
    free_cpus_become(1)
    [again] = rf.get(ref)
    assert rf.get(again.incr.remote(), timeout=30) == 1
    del again
    gc.collect()
    assert rf.available_resources().get("CPU") == 1  # the object still holds it
    del ref
    free_cpus_become(2)


def test_calls_made_through_a_dropped_handle_still_run(cluster: Any) -> None:
    ref = Backend.remote().incr.remote()
    gc.collect()
    assert rf.get(ref, timeout=30) == 1
    free_cpus_become(2)


def test_named_and_detached_actors_outlive_their_handles(cluster: Any) -> None:
    named = Backend.options(name="kept").remote()
    rf.get(named.incr.remote())
    del named
    gc.collect()
    assert rf.get(rf.get_actor("kept").incr.remote(), timeout=30) == 2
    rf.kill(rf.get_actor("kept"))
    free_cpus_become(2)
