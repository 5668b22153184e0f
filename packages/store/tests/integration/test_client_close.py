"""``StoreClient.close()`` frees the client's file descriptors even while the client object
lives on (buffers of it held, a thread still in a call)."""

from __future__ import annotations

import os
import threading
from typing import Any

from rayfield.store import StoreClient


def eventfds() -> int:
    """How many eventfds this process has open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"
        except OSError:  # closed since listed
            pass
    return count


def test_close_frees_the_eventfd_while_a_buffer_keeps_the_client(node: Any) -> None:
    before = eventfds()
    client = StoreClient(node.socket_path)
    assert eventfds() == before + 1
    object_id = os.urandom(20)
    client.put(object_id, b"x" * 1000)
    [buf] = client.get([object_id])
    client.close()
    assert eventfds() == before  # the buffer (hence the client object) is still alive
    assert bytes(buf)[:1] == b"x"  # the mapping too
    buf.release()


def test_close_during_a_call_lets_the_reading_thread_free_the_eventfd(node: Any) -> None:
    before = eventfds()
    worker = StoreClient(node.socket_path, kind="worker")
    worker.register_worker(os.urandom(20))
    outcome: list[Any] = []

    def wait_for_a_task() -> None:
        try:
            outcome.append(worker.next_task(timeout_s=30))
        except Exception as exc:  # the connection closed under it
            outcome.append(exc)

    reader = threading.Thread(target=wait_for_a_task)
    reader.start()
    worker.close()
    reader.join(timeout=10)
    assert not reader.is_alive() and len(outcome) == 1
    assert eventfds() == before
