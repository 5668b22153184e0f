"""Several client processes writing and reading through one node.

Client processes run this file as a script (``python test_multiprocess.py ROLE ARGS``) and
report on stdout, one JSON line per step.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from rayfield.store import StoreClient, StoreFullError
from rayfield.store.testing import local_node, wait_for

NUM_PROCS, NUM_OBJECTS = 4, 200


def _oid(proc: int, i: int) -> bytes:
    return hashlib.sha1(f"{proc}/{i}".encode()).digest()


def _data(proc: int, i: int) -> bytes:
    """1 B to 1 MiB, log-uniform, and 4 MiB for every 40th object."""
    rng = random.Random(f"{proc}/{i}")
    size = 4 << 20 if i % 40 == 0 else int(2 ** rng.uniform(0, 20))
    return rng.randbytes(size)


def _emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


# ---- client processes ----------------------------------------------------------------------


def writer_reader(socket_path: str, proc: str) -> None:
    """Put NUM_OBJECTS objects, then read every other process's objects and check them."""
    me = int(proc)
    with StoreClient(socket_path, name=f"proc{me}") as client:
        for i in range(NUM_OBJECTS):
            data = _data(me, i)
            digest = hashlib.sha256(data).digest()
            if i % 2:
                client.put(_oid(me, i), data, metadata=digest)
            else:  # create, write in place, seal
                view = client.create(_oid(me, i), len(data), metadata=digest)
                view[:] = data
                view.release()
                client.seal(_oid(me, i))
        bad, checked = [], 0
        for other in range(NUM_PROCS):
            for start in range(0, NUM_OBJECTS if other != me else 0, 50):
                idx = range(start, min(start + 50, NUM_OBJECTS))
                bufs = client.get([_oid(other, i) for i in idx], timeout_s=60.0)
                for i, buf in zip(idx, bufs):
                    want = hashlib.sha256(_data(other, i)).digest()
                    if buf is None or hashlib.sha256(buf).digest() != want or buf.metadata != want:
                        bad.append(f"{other}/{i}")
                    checked += 1
                    if buf is not None:
                        buf.release()
        _emit(proc=me, checked=checked, bad=bad)


def blocked_reader(socket_path: str, oid_hex: str) -> None:
    """Wait in get for an object that does not exist yet; report what arrived and when."""
    with StoreClient(socket_path) as client:
        _emit(step="waiting")
        start = time.monotonic()
        [buf] = client.get([bytes.fromhex(oid_hex)], timeout_s=30.0)
        digest = None if buf is None else hashlib.sha256(buf).hexdigest()
        _emit(step="done", elapsed_s=time.monotonic() - start, sha256=digest)


def holder(socket_path: str, held_hex: str, unsealed_hex: str) -> None:
    """Hold references to objects and an unsealed object, then wait to be killed."""
    with StoreClient(socket_path) as client:
        bufs = client.get([bytes.fromhex(h) for h in held_hex.split(",")], timeout_s=10.0)
        client.create(bytes.fromhex(unsealed_hex), 2 << 20)
        _emit(step="holding", found=[b is not None for b in bufs])
        time.sleep(120)


def numpy_writer(socket_path: str, oid_hex: str) -> None:
    """Write a float64 array straight into the store through a numpy view."""
    with StoreClient(socket_path) as client:
        view = client.create(bytes.fromhex(oid_hex), 8 * 1_000_000, metadata=b"float64")
        array = np.frombuffer(view, dtype=np.float64)
        array[:] = np.arange(1_000_000, dtype=np.float64)
        del array
        view.release()
        client.seal(bytes.fromhex(oid_hex))
        _emit(step="sealed")


# ---- helpers -----------------------------------------------------------------------------


@contextmanager
def _processes() -> Iterator[Any]:
    """Start client processes with ``spawn(role, *args)``; kill and reap them at exit."""
    procs: list[subprocess.Popen] = []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))

    def spawn(role: str, *args: Any) -> subprocess.Popen:
        cmd = [sys.executable, __file__, role, *map(str, args)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True))
        return procs[-1]

    try:
        yield spawn
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()


def _line(proc: subprocess.Popen, timeout_s: float = 60.0) -> dict[str, Any]:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    assert line, f"process {proc.pid} said nothing in {timeout_s} s (exit code {proc.poll()})"
    return json.loads(line)


def _info(node: Any, oid: bytes) -> dict[str, Any] | None:
    return next((o for o in node.list_objects() if o["object_id"] == oid), None)


# ---- tests -------------------------------------------------------------------------------


def test_concurrent_writers_and_readers(tmp_path: Any) -> None:
    with local_node(tmp_path, 256 << 20) as node, _processes() as spawn:
        procs = [spawn("writer_reader", node.socket_path, i) for i in range(NUM_PROCS)]
        reports = [_line(p, timeout_s=90.0) for p in procs]
        for proc in procs:
            assert proc.wait(timeout=30) == 0
        for report in reports:
            assert report["checked"] == (NUM_PROCS - 1) * NUM_OBJECTS and report["bad"] == []
        objects = node.list_objects()
        assert len(objects) == NUM_PROCS * NUM_OBJECTS
        assert all(o["state"] == "sealed" and o["ref_count"] == 0 for o in objects)
        wait_for(lambda: node.stats()["num_clients"] == 0, message="every client gone")


def test_blocked_reader_wakes_on_seal(node: Any) -> None:
    oid, data = os.urandom(20), os.urandom(100_000)
    with _processes() as spawn, StoreClient(node.socket_path) as client:
        reader = spawn("blocked_reader", node.socket_path, oid.hex())
        assert _line(reader)["step"] == "waiting"
        wait_for(lambda: node.waited([oid]) == [True], message="the reader's get parked")
        view = client.create(oid, len(data))
        view[:] = data
        view.release()
        # created, not sealed: the node still holds the reader's get parked
        assert node.waited([oid]) == [True]
        assert reader.poll() is None
        client.seal(oid)
        report = _line(reader, timeout_s=10.0)
        assert report["sha256"] == hashlib.sha256(data).hexdigest()
        assert node.waited([oid]) == [False]
        assert reader.wait(timeout=10) == 0


def test_references_of_killed_process_are_released(tmp_path: Any) -> None:
    held, deleted, unsealed, new = (os.urandom(20) for _ in range(4))
    with (
        local_node(tmp_path, 16 << 20) as node,
        _processes() as spawn,
        StoreClient(node.socket_path) as client,
    ):
        client.put(held, bytes(10 << 20))
        client.put(deleted, b"small")
        victim = spawn("holder", node.socket_path, f"{held.hex()},{deleted.hex()}", unsealed.hex())
        assert _line(victim) == {"step": "holding", "found": [True, True]}
        assert _info(node, held)["ref_count"] == 1
        assert client.delete([deleted]) == [False]  # referenced: deleted later
        with pytest.raises(StoreFullError):  # `held` cannot be evicted
            client.put(new, bytes(10 << 20))
        clients = node.stats()["num_clients"]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        wait_for(lambda: node.stats()["num_clients"] == clients - 1)
        wait_for(lambda: _info(node, deleted) is None)
        wait_for(lambda: _info(node, unsealed) is None)
        assert _info(node, held)["ref_count"] == 0
        client.put(new, bytes(10 << 20))  # evicts `held`
        assert not client.contains(held) and client.contains(new)


def test_zero_copy_numpy(node: Any) -> None:
    oid = os.urandom(20)
    with _processes() as spawn, StoreClient(node.socket_path) as client:
        assert _line(spawn("numpy_writer", node.socket_path, oid.hex())) == {"step": "sealed"}
        first, second = client.get([oid], timeout_s=5.0) + client.get([oid], timeout_s=5.0)
        a = np.frombuffer(first, dtype=np.float64)
        b = np.frombuffer(second, dtype=np.float64)
        assert first.metadata == b"float64" and np.array_equal(a, np.arange(1_000_000))
        assert a.ctypes.data == b.ctypes.data  # both views of the same shared memory
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[0] = 42.0
        with pytest.raises(ValueError):
            np.frombuffer(first, dtype=np.float64).setflags(write=True)
        assert _info(node, oid)["ref_count"] == 2
        del a, b, first, second


if __name__ == "__main__":
    role, *role_args = sys.argv[1:]
    roles = {f.__name__: f for f in (writer_reader, blocked_reader, holder, numpy_writer)}
    roles[role](*role_args)
