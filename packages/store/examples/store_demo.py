"""rayfield-store end to end: a node, two worker processes, zero-copy data.

The driver starts a node (object store + local scheduler), puts a 64 MB
numpy array into the store, and submits one task per chunk of it. The node's
scheduler dispatches the tasks to two worker processes, which read their
chunk straight from shared memory (no copy), put their partial sums back, and
report the task done. The driver gathers the partial sums and checks them
against numpy. It then fills the store past its capacity to show LRU
eviction of unreferenced objects, and prints what the node saw.

Run: python packages/store/examples/store_demo.py
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from rayfield.store import NodeServer, StoreClient

NUM_WORKERS = 2
NUM_CHUNKS = 32
ARRAY_BYTES = 64 << 20


def object_id(name: str) -> bytes:
    return hashlib.sha1(name.encode()).digest()  # 20 bytes


def worker_main(socket_path: str) -> None:
    """A worker: take dispatched tasks, sum a chunk of the shared array, put the result."""
    client = StoreClient(socket_path, kind="worker", name=f"demo-worker-{os.getpid()}")
    client.register_worker(os.urandom(20))
    while True:
        task = client.next_task(timeout_s=30)
        if task is None:
            break
        array_id, start, stop, result_id = pickle.loads(task["payload"])
        if array_id is None:  # shutdown
            break
        [buf] = client.get([array_id])
        data = np.frombuffer(buf, dtype=np.float64)  # zero-copy view of the store
        partial = np.array([data[start:stop].sum(), os.getpid()], dtype=np.float64)
        del data
        buf.release()
        client.put(result_id, partial.tobytes(), metadata=b"RAW")
        client.task_done(task["task_id"])
    client.close()


def main() -> int:
    session = tempfile.mkdtemp(prefix="rayfield-demo-")
    socket_path = os.path.join(session, "node.sock")
    node = NodeServer(socket_path, capacity_bytes=256 << 20, resources={"CPU": NUM_WORKERS})
    node.start()
    workers = [
        subprocess.Popen([sys.executable, __file__, "--worker", socket_path])
        for _ in range(NUM_WORKERS)
    ]
    try:
        driver = StoreClient(socket_path, name="demo-driver")
        array = np.random.default_rng(0).random(ARRAY_BYTES // 8)
        array_id = object_id("array")
        t0 = time.perf_counter()
        driver.put(array_id, array, metadata=b"float64")
        put_s = time.perf_counter() - t0
        print(
            f"put a {array.nbytes >> 20} MB array in {put_s * 1e3:.1f} ms "
            f"({array.nbytes / put_s / 1e9:.2f} GB/s)"
        )

        bounds = np.linspace(0, array.size, NUM_CHUNKS + 1).astype(int)
        result_ids = [object_id(f"partial-{i}") for i in range(NUM_CHUNKS)]
        t0 = time.perf_counter()
        for i in range(NUM_CHUNKS):
            payload = pickle.dumps((array_id, int(bounds[i]), int(bounds[i + 1]), result_ids[i]))
            driver.submit_task(
                object_id(f"task-{i}"), payload, resources={"CPU": 1}, dependencies=[array_id]
            )
        results = driver.get(result_ids, timeout_s=60)
        if any(r is None for r in results):
            print("FAILED: some tasks did not finish in 60 s", file=sys.stderr)
            return 1
        partials = [np.frombuffer(r, dtype=np.float64) for r in results]
        total = sum(p[0] for p in partials)
        pids = {int(p[1]) for p in partials}
        elapsed = time.perf_counter() - t0
        expected = array.sum()
        ok = bool(np.isclose(total, expected))
        print(
            f"{NUM_CHUNKS} tasks on {len(pids)} worker processes in {elapsed * 1e3:.1f} ms: "
            f"sum={total:.6f} expected={expected:.6f} {'OK' if ok else 'MISMATCH'}"
        )
        del partials, results

        # Fill the store past its capacity: unreferenced objects are evicted (LRU).
        for i in range(40):
            driver.put(object_id(f"filler-{i}"), np.full(8 << 20, i, dtype=np.uint8))
        stats = driver.stats()
        print(
            f"after 320 MB of puts into a 256 MB store: {stats['num_objects']} objects, "
            f"{stats['num_evictions']} evicted ({stats['evicted_bytes'] >> 20} MB), "
            f"{stats['used_bytes'] >> 20} MB in use"
        )
        print("scheduler:", {k: node.scheduler_snapshot()[k] for k in ("total", "available")})

        for i in range(NUM_WORKERS):
            driver.submit_task(
                object_id(f"stop-{i}"), pickle.dumps((None, 0, 0, None)), resources={"CPU": 1}
            )
        driver.close()
        return 0 if ok else 1
    finally:
        for w in workers:
            try:
                w.wait(timeout=10)
            except subprocess.TimeoutExpired:
                w.kill()
        node.stop()
        shutil.rmtree(session, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2])
    else:
        raise SystemExit(main())
