"""Tasks through a real node: pins, wait, worker death with retries and error objects."""

from __future__ import annotations

import os
import threading
from typing import Any

from rayfield.store import StoreClient
from rayfield.store._native import ClientDisconnectedEvent, WorkerRegisteredEvent
from rayfield.store.testing import wait_for


def oid() -> bytes:
    return os.urandom(20)


def test_pin_keeps_a_future_object_from_eviction(node: Any) -> None:
    with StoreClient(node.socket_path) as owner, StoreClient(node.socket_path) as writer:
        pinned = oid()
        owner.pin([pinned])  # before the object exists
        writer.put(pinned, b"x" * (20 << 20))
        for _ in range(8):  # 160 MB through a 64 MB store: everything else is evicted
            writer.put(oid(), b"y" * (20 << 20))
        assert owner.contains(pinned)
        owner.unpin([pinned])
        for _ in range(4):
            writer.put(oid(), b"z" * (20 << 20))
        assert not owner.contains(pinned)


def test_a_free_of_an_id_pinned_ahead_of_its_arrival_is_not_notified(node: Any) -> None:
    """Freeing an absent id reports a deletion of no bytes, but not while another client
    pins it ahead of its arrival (that client still waits for it)."""
    with (
        StoreClient(node.socket_path) as subscriber,
        StoreClient(node.socket_path) as client,
        StoreClient(node.socket_path) as pinner,
    ):
        subscriber.subscribe()
        pinned, marker = oid(), oid()
        pinner.pin([pinned])
        assert client.delete([pinned, marker]) == [False, False]
        seen = []  # notifications come in order: the marker's ends those of this delete
        while not seen or seen[-1] != marker:
            event = subscriber.next_notification(timeout_s=5.0)
            assert event is not None, "no notification for the marker"
            seen.append(event[1])
        assert pinned not in seen


def test_wait_returns_when_enough_are_ready(node: Any) -> None:
    with StoreClient(node.socket_path) as a, StoreClient(node.socket_path) as b:
        ids = [oid() for _ in range(4)]
        a.put(ids[2], b"ready")
        assert a.wait(ids, 1, timeout_s=0) == [False, False, True, False]
        assert a.wait(ids, 2, timeout_s=0.05) == [False, False, True, False]  # timed out
        got: list[list[bool]] = []
        # a timeout no test run reaches: the wait returns because the second object came
        waiter = threading.Thread(target=lambda: got.append(a.wait(ids, 2, timeout_s=600)))
        waiter.start()
        wait_for(lambda: node.waited([ids[0]]) == [True], message="the wait to be parked")
        assert not got  # one ready object of the two asked for: still waiting
        b.put(ids[0], b"later")
        wait_for(lambda: got, timeout=30, message="the wait to return once two are ready")
        waiter.join()
        assert got == [[True, False, True, False]]
        # wait takes no references: the objects stay deletable
        assert a.delete([ids[0], ids[2]]) == [True, True]


def _worker(socket_path: str) -> StoreClient:
    w = StoreClient(socket_path, kind="worker")
    w.register_worker(oid())
    return w


def test_dead_worker_task_is_retried_then_fails_with_an_error_object(node: Any) -> None:
    with StoreClient(node.socket_path) as driver:
        result = oid()
        driver.submit_task(
            oid(), b"payload", resources={"CPU": 1}, return_ids=[result], max_retries=1
        )
        first = _worker(node.socket_path)
        assert first.next_task(timeout_s=5)["payload"] == b"payload"
        first.close()  # dies while running: retried
        second = _worker(node.socket_path)
        assert second.next_task(timeout_s=5) is not None
        second.close()  # dies again: no retry left
        [buf] = driver.get([result], timeout_s=5)
        assert buf is not None
        assert buf.metadata == b"WORKER_DIED"
        assert b"worker process died" in bytes(buf)
        buf.release()
        assert node.scheduler_snapshot()["available"] == {"CPU": 2.0}


def test_task_pins_arguments_until_done(node: Any) -> None:
    with StoreClient(node.socket_path) as driver:
        arg = oid()
        driver.put(arg, b"a" * (30 << 20))
        task = oid()
        driver.submit_task(task, b"p", resources={"CPU": 1}, dependencies=[arg], pins=[arg])
        for _ in range(4):  # would evict `arg` if the node did not pin it
            driver.put(oid(), b"b" * (20 << 20))
        assert driver.contains(arg)
        w = _worker(node.socket_path)
        got = w.next_task(timeout_s=5)
        assert got["task_id"] == task
        w.task_done(task)
        wait_for(lambda: not node.running_tasks(), message="the node to take the task as done")
        for _ in range(4):
            driver.put(oid(), b"c" * (20 << 20))
        assert not driver.contains(arg)
        w.close()


def test_several_threads_take_tasks_from_one_worker_connection(node: Any) -> None:
    with StoreClient(node.socket_path) as driver:
        worker = _worker(node.socket_path)
        actor = oid()
        driver.submit_task(oid(), b"create", actor_id=actor, actor_creation=True, max_concurrency=4)
        creation = worker.next_task(timeout_s=5)
        worker.task_done(creation["task_id"])
        caller = oid()
        n = 400
        payloads = [b"call-%d" % i for i in range(n)]
        for i, p in enumerate(payloads):
            driver.submit_task(oid(), p, actor_id=actor, caller_id=caller, sequence_no=i)
        seen: list[bytes] = []
        lock = threading.Lock()

        def take() -> None:
            while True:
                task = worker.next_task(timeout_s=1)
                if task is None:
                    return
                with lock:
                    seen.append(task["payload"])
                worker.task_done(task["task_id"])

        threads = [threading.Thread(target=take) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert sorted(seen) == sorted(payloads)  # each call once, none empty or lost
        worker.close()


def test_get_of_an_evicted_object_answers_lost_instead_of_hanging(node: Any) -> None:
    with StoreClient(node.socket_path) as client:
        victim = oid()
        client.put(victim, b"v" * (20 << 20))
        for _ in range(6):  # 120 MB through a 64 MB store: the victim is evicted
            client.put(oid(), b"f" * (20 << 20))
        assert not client.contains(victim)
        assert client.wait([victim], 1, timeout_s=5) == [True]  # ready, as an error
        [buf] = client.get([victim], timeout_s=5)
        assert buf is not None and buf.metadata == b"LOST"
        assert b"evicted" in bytes(buf)


def test_task_done_stores_its_results_before_the_task_ends(node: Any) -> None:
    with StoreClient(node.socket_path) as driver:
        task, first, second = oid(), oid(), oid()
        driver.submit_task(task, b"p", resources={"CPU": 1}, return_ids=[first, second])
        w = _worker(node.socket_path)
        assert w.next_task(timeout_s=5)["task_id"] == task
        w.task_done(task, results=[(first, b"one", b"RAW"), (second, bytearray(b"two"), b"")])
        bufs = driver.get([first, second], timeout_s=5)
        assert [bytes(b) for b in bufs] == [b"one", b"two"]  # type: ignore[arg-type]
        assert [b.metadata for b in bufs] == [b"RAW", b""]  # type: ignore[union-attr]
        for b in bufs:
            b.release()  # type: ignore[union-attr]
        assert node.scheduler_snapshot()["available"] == {"CPU": 2.0}
        w.close()


def test_idle_worker_thread_takes_a_call_left_while_the_other_blocks(node: Any) -> None:
    """Two threads of one worker: one holds its call, the other still gets the next one."""
    with StoreClient(node.socket_path) as driver:
        actor = oid()
        driver.submit_task(oid(), b"create", actor_id=actor, actor_creation=True, max_concurrency=2)
        w = _worker(node.socket_path)
        creation = w.next_task(timeout_s=5)
        assert creation is not None and creation["actor_creation"]
        w.task_done(creation["task_id"])
        caller = oid()
        for i in range(2):  # both dispatched before any thread waits (often in one frame)
            driver.submit_task(oid(), b"%d" % i, actor_id=actor, caller_id=caller, sequence_no=i)
        wait_for(
            lambda: len(node.running_tasks()) == 2, message="both calls dispatched to the worker"
        )
        got: list[bytes] = []
        release = threading.Event()

        def take() -> None:
            task = w.next_task(timeout_s=10)
            if task is not None:
                got.append(task["payload"])
                if task["payload"] == b"0":
                    release.wait(10)  # a call that blocks
                w.task_done(task["task_id"])

        threads = [threading.Thread(target=take) for _ in range(2)]
        for t in threads:
            t.start()
        wait_for(lambda: b"1" in got, message="the idle thread to take call 1")
        taken_while_blocked = list(got)
        release.set()
        for t in threads:
            t.join()
        assert sorted(taken_while_blocked) == [b"0", b"1"]
        w.close()


def test_a_worker_asks_for_a_retry_within_max_retries(node: Any) -> None:
    with StoreClient(node.socket_path) as driver:
        task, result = oid(), oid()
        driver.submit_task(task, b"p", resources={"CPU": 1}, return_ids=[result], max_retries=1)
        w = _worker(node.socket_path)
        first = w.next_task(timeout_s=5)
        assert (first["retries_left"], first["attempt"]) == (1, 0)
        assert first["resources"] == {"CPU": 1.0}
        w.task_done(task, retry=True)  # e.g. an exception retry_exceptions allows
        second = w.next_task(timeout_s=5)
        assert (second["retries_left"], second["attempt"]) == (0, 1)
        w.task_done(task, retry=True)  # none left: the node fails it
        [buf] = driver.get([result], timeout_s=5)
        assert buf is not None and buf.metadata == b"WORKER_DIED"
        assert b"none is left" in bytes(buf)
        buf.release()
        w.close()


def test_cancel_of_a_running_task_is_confirmed_then_sealed(node: Any) -> None:
    with StoreClient(node.socket_path) as driver:
        task, result = oid(), oid()
        driver.submit_task(task, b"p", resources={"CPU": 1}, return_ids=[result])
        w = _worker(node.socket_path)
        assert w.next_task(timeout_s=5) is not None
        assert w.cancel_task(task, query=True) == "running"  # nothing pending yet
        assert driver.cancel_task(task) == "running"
        assert w.cancel_task(task, query=True) == "cancelled"
        w.task_done(task)  # interrupted: no result stored
        [buf] = driver.get([result], timeout_s=5)
        assert buf is not None and buf.metadata == b"CANCELLED"
        buf.release()
        assert driver.cancel_task(task) == "done"
        assert node.scheduler_snapshot()["available"] == {"CPU": 2.0}
        w.close()


def test_recursive_cancel_reaches_what_the_task_submitted(node: Any) -> None:
    with StoreClient(node.socket_path) as driver, _worker(node.socket_path) as w:
        for recursive in (True, False):
            parent, child, child_result = oid(), oid(), oid()
            driver.submit_task(parent, b"p", resources={"CPU": 2}, return_ids=[oid()])
            assert w.next_task(timeout_s=5)["task_id"] == parent
            # submitted by the running task; queued: the parent holds both CPUs
            w.submit_task(child, b"c", resources={"CPU": 1}, return_ids=[child_result])
            driver.cancel_task(parent, recursive=recursive)
            w.task_done(parent)
            [buf] = driver.get([child_result], timeout_s=2 if recursive else 0.2)
            if recursive:
                assert buf is not None and buf.metadata == b"CANCELLED"
                buf.release()
            else:  # the child runs once the parent's CPUs are free
                assert buf is None
                assert w.next_task(timeout_s=5)["task_id"] == child
                w.task_done(child)


def _next_event(node: Any, kind: str) -> Any:
    """The first event of `kind` from the node (others are skipped), within 10 s."""

    def find() -> Any:
        return next((e for e in node.poll_events(timeout_s=0.5) if e.kind == kind), None)

    return wait_for(find, message=f"a {kind} event", interval=0)


def test_node_events_are_typed_and_keep_their_tuple_form(node: Any) -> None:
    worker = _worker(node.socket_path)
    registered = _next_event(node, "worker_registered")
    assert isinstance(registered, WorkerRegisteredEvent)
    assert registered.pid == os.getpid() and registered.client > 0
    assert registered == ("worker_registered", registered.client, os.getpid())
    kind, client, pid = registered  # the positional form still unpacks
    assert (kind, registered[1], pid) == ("worker_registered", client, os.getpid())
    worker.close()
    gone = _next_event(node, "client_disconnected")
    assert isinstance(gone, ClientDisconnectedEvent)
    assert (gone.client, gone.pid, gone.driver) == (client, os.getpid(), False)


def test_waited_says_whether_a_get_still_waits_for_an_object(node: Any) -> None:
    """The host drops objects nothing waits for any more from its fetch loop."""
    with StoreClient(node.socket_path) as a, StoreClient(node.socket_path) as b:
        wanted, other = oid(), oid()
        assert node.waited([wanted, other]) == [False, False]
        got: list[Any] = []
        getter = threading.Thread(target=lambda: got.extend(a.get([wanted], timeout_s=10)))
        getter.start()
        wait_for(lambda: node.waited([wanted]) == [True], message="the get to be parked")
        assert node.waited([other]) == [False]
        b.put(wanted, b"here")
        getter.join(10)
        assert got and got[0] is not None
        got.clear()  # releases the buffer
        assert node.waited([wanted]) == [False]  # the get ended: nothing waits for it


def test_a_put_without_reply_of_an_existing_object_is_left_quietly(node: Any) -> None:
    """A retried task or a restarted actor stores its result again: the object stays as
    it was, and neither the node's log nor the client hears of it."""
    from rayfield.store import _native

    logged: list[str] = []
    _native.set_log_callback(lambda level, message: logged.append(message))
    try:
        with StoreClient(node.socket_path) as a:
            result = oid()
            a.put(result, b"first")
            a.put(result, b"again", wait=False)
            other = oid()
            a.put(other, b"x")  # answered: the no-reply put before it was handled
            [buf] = a.get([result], timeout_s=5)
            assert buf is not None and bytes(memoryview(buf)) == b"first"
            buf.release()
    finally:
        _native.set_log_callback(None)
    assert not [m for m in logged if "already exists" in m], logged
