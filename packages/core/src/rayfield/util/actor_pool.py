"""ActorPool: spread calls over a fixed set of actors, one call per actor at a time.

Example:
    import rayfield as rf
    from rayfield.util import ActorPool

    @rf.remote
    class Doubler:
        def double(self, v):
            return 2 * v

    pool = ActorPool([Doubler.remote(), Doubler.remote()])
    print(list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])))  # [2, 4, 6, 8]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import rayfield as rf
from rayfield import ActorHandle, ObjectRef

__all__ = ["ActorPool"]

#: ``fn(actor, value)`` starts one call and returns its ObjectRef (or a list of them).
SubmitFn = Callable[[Any, Any], Any]


def _first_ref(future: Any) -> ObjectRef[Any]:
    return future[0] if isinstance(future, (list, tuple)) else future


def _all_refs(future: Any) -> list[ObjectRef[Any]]:
    return list(future) if isinstance(future, (list, tuple)) else [future]


class ActorPool:
    """Run calls on a set of actors, giving each actor at most one call at a time.

    ``fn`` arguments are ``lambda actor, value: actor.method.remote(value)``: they start a
    call on the actor they are given and return its ObjectRef. Values submitted while every
    actor is busy wait in the pool and start, in submission order, as actors free up. An
    actor is free again once its result has been taken with :meth:`get_next` or
    :meth:`get_next_unordered`.

    Args:
        actors: the actor handles to use; the pool may grow with :meth:`push` and shrink
            with :meth:`pop_idle`.
    """

    def __init__(self, actors: Iterable[ActorHandle]) -> None:
        self._idle: list[ActorHandle] = list(actors)
        # index of submission -> (future, actor); dicts keep insertion (= submission) order.
        self._running: dict[int, tuple[Any, ActorHandle]] = {}
        self._pending: list[tuple[SubmitFn, Any]] = []
        self._next_index = 0

    def map(self, fn: SubmitFn, values: Iterable[Any]) -> Iterator[Any]:
        """Apply ``fn`` to every value; yield the results in the order of ``values``.

        All values are submitted at once; results of earlier submissions that were not
        taken yet are discarded.
        """
        self._discard_results()
        for v in values:
            self.submit(fn, v)
        return self._results(self.get_next)

    def map_unordered(self, fn: SubmitFn, values: Iterable[Any]) -> Iterator[Any]:
        """Like :meth:`map`, but yield each result as soon as it is ready."""
        self._discard_results()
        for v in values:
            self.submit(fn, v)
        return self._results(self.get_next_unordered)

    def _results(self, take: Callable[[], Any]) -> Iterator[Any]:
        while self.has_next():
            yield take()

    def submit(self, fn: SubmitFn, value: Any) -> None:
        """Start ``fn(actor, value)`` on an idle actor, or queue it until one is free."""
        if self._idle:
            actor = self._idle.pop()
            self._running[self._next_index] = (fn(actor, value), actor)
            self._next_index += 1
        else:
            self._pending.append((fn, value))

    def has_next(self) -> bool:
        """True if a submitted call's result has not been taken yet."""
        return bool(self._running)

    def get_next(self, timeout: float | None = None) -> Any:
        """The result of the oldest submitted call whose result was not taken yet.

        Args:
            timeout: seconds to wait for it; None waits as long as it takes.

        Raises:
            StopIteration: nothing was submitted that has not been taken.
            TimeoutError: the result was not ready within ``timeout``; the call stays in
                the pool and a later ``get_next`` can take it.
            TaskError: the call raised (the original exception class as well).
        """
        if not self._running:
            raise StopIteration("no more results to get")
        index = next(iter(self._running))
        future = self._running[index][0]
        if timeout is not None:
            refs = _all_refs(future)
            ready, _ = rf.wait(refs, num_returns=len(refs), timeout=timeout)
            if len(ready) < len(refs):
                raise TimeoutError(f"result not ready within {timeout} s")
        return self._take(index)

    def get_next_unordered(self, timeout: float | None = None) -> Any:
        """The result of any submitted call that is ready (whichever finishes first).

        Raises:
            StopIteration: nothing was submitted that has not been taken.
            TimeoutError: no result became ready within ``timeout`` seconds.
            TaskError: the call raised.
        """
        if not self._running:
            raise StopIteration("no more results to get")
        by_ref = {_first_ref(future): i for i, (future, _) in self._running.items()}
        ready, _ = rf.wait(list(by_ref), num_returns=1, timeout=timeout)
        if not ready:
            raise TimeoutError(f"no result ready within {timeout} s")
        return self._take(by_ref[ready[0]])

    def _take(self, index: int) -> Any:
        future, actor = self._running.pop(index)
        self._return_actor(actor)
        return rf.get(future)

    def _return_actor(self, actor: ActorHandle) -> None:
        self._idle.append(actor)
        if self._pending:
            self.submit(*self._pending.pop(0))

    def _discard_results(self) -> None:
        while self._running:
            _, actor = self._running.pop(next(iter(self._running)))
            self._return_actor(actor)

    def has_free(self) -> bool:
        """True if an actor is idle and no submitted value is waiting for one."""
        return bool(self._idle) and not self._pending

    def pop_idle(self) -> ActorHandle | None:
        """Remove an idle actor from the pool and return it; None if none is free."""
        return self._idle.pop() if self.has_free() else None

    def push(self, actor: ActorHandle) -> None:
        """Add an actor to the pool (it starts a waiting value at once, if any).

        Raises:
            ValueError: the actor already belongs to this pool.
        """
        busy = [a for _, a in self._running.values()]
        if actor in self._idle or actor in busy:
            raise ValueError("the actor already belongs to this ActorPool")
        self._return_actor(actor)
