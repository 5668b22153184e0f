"""rayfield.store doing the benchmark's operations: the peer of ``_ray_side``.

Run by ``bench_store.py`` in its own process; prints one result line (``_common.emit``).
This process hosts the ``NodeServer`` (1 GiB memfd arena, prefaulted) and does
nothing else; the clients are two spawned processes, so that the one-client
rows, like the two-client ones and like Ray's driver, talk to a node in another
process.

A small put is ``client.put`` of 8 bytes under a fresh id; a small get is
``client.get([oid])`` of one existing 8-byte object and ``release()``. A large put
is ``create`` + ``np.copyto`` into the returned memoryview + ``seal``, the same
copy as the memcpy baseline; objects are deleted in ~16 MB batches outside the
timed calls.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from typing import Any

import numpy as np
from _common import (
    GB,
    LARGE_SIZES,
    SMALL_DATA,
    STORE_BYTES,
    concurrent_rates,
    emit,
    free_every,
    params,
    rates,
)

from rayfield.store import NodeServer, StoreClient

_clients: dict[str, StoreClient] = {}
_sources: dict[int, np.ndarray] = {}
_start_line: Any = None  # a multiprocessing.Barrier for the two clients, set by _init_client


def _init_client(barrier: Any) -> None:
    global _start_line
    _start_line = barrier


def _client(sock: str) -> StoreClient:
    """This client process's connection, kept across calls as a driver keeps its own."""
    if sock not in _clients:
        _clients[sock] = StoreClient(sock, name=f"bench-{os.getpid()}")
    return _clients[sock]


def _source(size_bytes: int) -> np.ndarray:
    """The pre-built array a put copies from, one per size and process."""
    if size_bytes not in _sources:
        rng = np.random.default_rng(1)
        _sources[size_bytes] = rng.integers(0, 256, size_bytes, dtype=np.uint8)
    return _sources[size_bytes]


def _fresh_ids(n: int) -> list[bytes]:
    return [os.urandom(20) for _ in range(n)]


def small_calls(sock: str, calls: int, warmup: int, repeats: int) -> dict[str, Any]:
    """Seconds of each repeat of ``calls`` small puts, then of ``calls`` small gets."""
    client = _client(sock)
    put_seconds = []
    for r in range(repeats + 1):  # repeat 0 is the warm-up
        ids = _fresh_ids(warmup if r == 0 else calls)
        t0 = time.perf_counter()
        for oid in ids:
            client.put(oid, SMALL_DATA)
        put_seconds.append(time.perf_counter() - t0)
        client.delete(ids)
    oid = os.urandom(20)
    client.put(oid, SMALL_DATA)
    get_seconds = []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        for _ in range(warmup if r == 0 else calls):
            [buf] = client.get([oid], 1.0)
            buf.release()
        get_seconds.append(time.perf_counter() - t0)
    client.delete([oid])
    return {"put": put_seconds[1:], "get": get_seconds[1:]}


def put_loop(sock: str, size_bytes: int, n: int, warmup: int, together: bool) -> dict[str, Any]:
    """``create`` + copy + ``seal`` ``warmup + n`` objects; the last ``n`` are timed.

    Returns the summed seconds of the timed puts (deletes excluded) and the
    wall-clock window of the timed loop (deletes included), for the two-client
    rows; with ``together`` the timed loop starts when both clients are ready.
    """
    client = _client(sock)
    src = _source(size_bytes)
    batch = free_every(size_bytes)

    def put(oid: bytes) -> None:
        view = client.create(oid, size_bytes)
        np.copyto(np.frombuffer(view, dtype=np.uint8), src)
        client.seal(oid)

    for oid in _fresh_ids(warmup):
        put(oid)
        client.delete([oid])
    if together:
        _start_line.wait(timeout=120)
    pending: list[bytes] = []
    started = time.time()
    put_seconds = 0.0
    for oid in _fresh_ids(n):
        t0 = time.perf_counter()
        put(oid)
        put_seconds += time.perf_counter() - t0
        pending.append(oid)
        if len(pending) >= batch:
            client.delete(pending)
            pending = []
    if pending:
        client.delete(pending)
    return {"put_seconds": put_seconds, "window": (started, time.time())}


def run(sock: str, pool: Any, p: dict[str, Any]) -> dict[str, Any]:
    """Every row, one after another, against one node and two client processes."""
    repeats, calls = p["repeats"], p["small_calls"]
    small = pool.apply(small_calls, (sock, calls, p["small_warmup"], repeats))
    result: dict[str, Any] = {
        "small_put": rates([calls] * repeats, small["put"]),
        "small_get": rates([calls] * repeats, small["get"]),
    }
    for name, size in LARGE_SIZES.items():
        n, warmup = p["puts"][name], p["put_warmup"][name]
        gb = n * size / GB
        loops = [pool.apply(put_loop, (sock, size, n, warmup, False)) for _ in range(repeats)]
        result[f"put_{name}_1c"] = rates([gb] * repeats, [loop["put_seconds"] for loop in loops])
        windows = []
        for _ in range(repeats):
            loops = pool.starmap(put_loop, [(sock, size, n, warmup, True)] * 2, chunksize=1)
            windows.append([loop["window"] for loop in loops])
        result[f"put_{name}_2c"] = concurrent_rates(2 * gb, windows)
    return result


def main() -> None:
    p = params()
    sock = os.path.join(tempfile.mkdtemp(prefix="rayfield-bench-"), "node.sock")
    with NodeServer(sock, STORE_BYTES, prefault=True) as node:
        ctx = multiprocessing.get_context("spawn")  # the node's threads make fork unsafe
        with ctx.Pool(2, _init_client, (ctx.Barrier(2),)) as pool:
            result = run(sock, pool, p)
        result["node_stats"] = node.stats()
    emit(result)


if __name__ == "__main__":
    main()
