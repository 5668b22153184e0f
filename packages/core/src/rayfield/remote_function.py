"""Remote functions: ``@rayfield.remote`` on a function."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from rayfield._private.common import options as opt
from rayfield._private.common import scheduling, task_retry
from rayfield._private.common.options import TaskOptions
from rayfield._private.driver import runtime_env_packages
from rayfield._private.runtime import placement
from rayfield._private.runtime.object_ref import ObjectRef
from rayfield._private.runtime.runtime import get_runtime

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RemoteFunction", "TaskOptions"]

R = TypeVar("R")


class RemoteFunction(Generic[R]):
    """A function that runs as a task (Ray's ``RemoteFunction``): ``f.remote(*args)``
    returns ObjectRef(s) at once; ``R`` is the function's return type.

    Options (``@remote(...)`` or ``f.options(...)``): ``num_returns`` (classic
    ``num_return_vals``), ``num_cpus`` (default 1), ``num_gpus``, ``resources``, ``memory``
    (bytes), ``max_calls`` (worker exits after that many calls), ``max_retries`` (runs
    after the first one, after a worker crash or an exception ``retry_exceptions`` allows;
    default 3; -1: unlimited), ``retry_exceptions`` (Ray's name: ``True`` retries any
    exception the task raises, a list of exception classes only those; default False:
    exceptions are not retried, and when retries run out ``get`` raises the last one),
    ``name``, ``scheduling_strategy`` (``"DEFAULT"``; ``"SPREAD"``: across the cluster's
    nodes, round robin among those with free resources;
    ``rayfield.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id, soft)``:
    on that node), ``runtime_env`` (a dict or ``rayfield.runtime_env.RuntimeEnv``:
    ``env_vars``, ``working_dir``, ``excludes``, ``py_modules``, ``pip``, ``config``; merged
    over the job's, see ``rayfield.runtime_env``).

    Args:
        function: the function to run remotely.
        options: its options (above), checked here.

    Raises:
        TypeError: an unknown option, or a bad ``retry_exceptions``.
        ValueError: an option with a bad value (a negative amount, a bad count).
    """

    def __init__(self, function: Callable[..., R], options: dict[str, Any]) -> None:
        self._function = function
        self._options = opt.normalize(options, actor=False)
        # (the runtime it was exported to, weakly: a runtime shut down is not kept alive by
        # its functions; the code id there)
        self._exported: tuple[weakref.ref[Any], bytes] | None = None
        functools.update_wrapper(self, function)

    def __reduce__(self) -> Any:  # a recursive task pickles itself: leave the runtime out
        return (RemoteFunction, (self._function, self._options))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = getattr(self._function, "__name__", "f")
        raise TypeError(
            f"Remote functions cannot be called directly. Instead of running '{name}()', "
            f"try '{name}.remote()'."
        )

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef[R]:
        """Submit a task running the function on ``args`` and ``kwargs`` (Ray's
        ``f.remote``); returns at once.

        Args:
            *args: positional arguments; an ObjectRef among them is replaced by its
                value before the task runs (the task waits for it).
            **kwargs: keyword arguments, likewise.

        Returns:
            The ref of the task's result; with ``num_returns=n`` above 1, a list of ``n``
            refs (typed as one ref, as in Ray: annotate the result as a list).

        Raises:
            RayfieldError: rayfield is not initialized.
            TypeError: an argument cannot be serialized.
        """
        return self._submit(args, kwargs, self._options)

    def options(self, **options: Unpack[TaskOptions]) -> _BoundOptions[R]:
        """The function with other options for the calls made through the result
        (Ray's ``f.options``): ``f.options(num_cpus=2).remote(x)``.

        Args:
            **options: task options (see the class; ``TaskOptions`` lists their names
                and types, so a type checker flags a misspelt one), over the
                function's own. A dict of options passes as ``**opts`` when typed as
                ``TaskOptions``.

        Returns:
            The function bound to these options: ``.remote(...)`` submits with them.

        Raises:
            TypeError: an unknown option (the message names the closest valid one).
            ValueError: an option with a bad value.
        """
        merged = {**self._options, **opt.normalize(dict(options), actor=False)}
        return _BoundOptions(self, merged)

    def _remote(self, args: Any = None, kwargs: Any = None, **options: Any) -> ObjectRef[R]:
        """The classic form: ``f._remote(args=[...], kwargs={...}, num_cpus=2)``."""
        merged = {**self._options, **opt.normalize(dict(options), actor=False)}
        return self._submit(tuple(args or ()), dict(kwargs or {}), merged)

    def _submit(self, args: tuple[Any, ...], kwargs: dict[str, Any], o: dict[str, Any]) -> Any:
        rt = get_runtime()
        if self._exported is None or self._exported[0]() is not rt:
            self._exported = (weakref.ref(rt), rt.export(self._function))
        n = o.get("num_returns", 1)
        resources, group = placement.placed(o, opt.task_resources(o))
        refs = rt.submit(
            "task",
            self._exported[1],
            args,
            kwargs,
            n,
            str(o.get("name") or getattr(self._function, "__name__", "task")),
            resources,
            max_retries=o.get("max_retries", 3),
            options=_payload_options(o, group),
            scheduling=scheduling.encode(o.get("scheduling_strategy")),
            runtime_env=runtime_env_packages.for_submit(rt, o.get("runtime_env")),
        )
        return refs[0] if n == 1 else refs


def _payload_options(o: dict[str, Any], group: dict[str, Any] | None) -> dict[str, Any] | None:
    """The options the worker reads from the task's payload (None: none)."""
    out: dict[str, Any] = {"pg": group} if group else {}
    if o.get("max_calls"):
        out["max_calls"] = o["max_calls"]
    retry = o.get("retry_exceptions")
    if retry:
        out["retry_exceptions"] = retry if retry is True else task_retry.pack(retry)
    return out or None


class _BoundOptions(Generic[R]):
    """A remote function with the options of one ``.options(...)`` call."""

    def __init__(self, fn: RemoteFunction[R], options: dict[str, Any]) -> None:
        self._fn, self._options = fn, options

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef[R]:
        """Submit a task with these options; as :meth:`RemoteFunction.remote`."""
        return self._fn._submit(args, kwargs, self._options)
