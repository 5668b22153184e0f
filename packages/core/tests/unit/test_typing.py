"""The public API's static types, as mypy sees them in a user's program (mypy's older
versions print ``builtins.str`` where newer ones print ``str``: both are read)."""

from __future__ import annotations

from pathlib import Path

from mypy import api as mypy_api

PROGRAM = """
import rayfield as rf
from rayfield.actor import ActorOptions
from rayfield.remote_function import TaskOptions
from rayfield.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@rf.remote
def f(x: int) -> str:
    return str(x)


def plain(x: int) -> str:
    return str(x)


class Counter:
    def incr(self) -> int:
        return 1


RemoteCounter = rf.remote(Counter)
ref = f.remote(1)
reveal_type(f)
reveal_type(ref)
reveal_type(rf.get(ref))
reveal_type(rf.get([ref, ref]))
reveal_type(rf.put(3))
reveal_type(rf.wait([rf.put(3.0)]))
reveal_type(RemoteCounter)
reveal_type(RemoteCounter.options(name="c").remote())
reveal_type(f.options(num_cpus=2).remote(3))
reveal_type(rf.remote(num_cpus=2, max_retries=1)(plain))
task_opts: TaskOptions = {"num_cpus": 1, "max_retries": 0, "scheduling_strategy": "SPREAD"}
actor_opts: ActorOptions = {"num_cpus": 0.5, "resources": {"x": 1.0}}
f.options(**task_opts).remote(1)
RemoteCounter.options(**actor_opts).remote()
node = NodeAffinitySchedulingStrategy("00" * 20, soft=True)
RemoteCounter.options(scheduling_strategy=node, max_restarts=1).remote()
"""

MISSPELT = """
import rayfield as rf


@rf.remote
def f(x: int) -> str:
    return str(x)


class _Counter:
    pass


Counter = rf.remote(_Counter)
f.options(num_cpu=2).remote(1)
Counter.options(max_restart=1).remote()
f.options(scheduling_strategy="SPRED").remote(1)
rf.remote(num_gpu=1)(_Counter)
"""

EXPECTED = [
    "rayfield.remote_function.RemoteFunction[str]",
    "rayfield._private.runtime.object_ref.ObjectRef[str]",
    "str",
    "list[str]",
    "rayfield._private.runtime.object_ref.ObjectRef[int]",
    "tuple[list[rayfield._private.runtime.object_ref.ObjectRef[float]], "
    "list[rayfield._private.runtime.object_ref.ObjectRef[float]]]",
    "rayfield.actor.ActorClass[program.Counter]",
    "rayfield.actor.ActorHandle",
    "rayfield._private.runtime.object_ref.ObjectRef[str]",
    "rayfield.remote_function.RemoteFunction[str]",
]


def _mypy(tmp_path: Path, text: str) -> tuple[str, str]:
    program = tmp_path / "program.py"
    program.write_text(text)
    out, err, _ = mypy_api.run(
        [str(program), "--cache-dir", str(tmp_path / "cache"), "--show-traceback"]
    )
    return out, err


def test_remote_get_put_wait_have_precise_types(tmp_path: Path) -> None:
    out, err = _mypy(tmp_path, PROGRAM)
    revealed = [
        line.split('Revealed type is "', 1)[1].rstrip('"').replace("builtins.", "")
        for line in out.splitlines()
        if "Revealed type is" in line
    ]
    assert revealed == EXPECTED, out + err
    assert "error" not in out.replace("Revealed", ""), out


def test_misspelt_options_are_type_errors(tmp_path: Path) -> None:
    """``.options()`` takes the option names of ``TaskOptions`` / ``ActorOptions``: a
    misspelt name, or a strategy string that is not one, is a mypy error."""
    out, err = _mypy(tmp_path, MISSPELT)
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 4, out + err
    assert '"num_cpu"' in errors[0] and '"options" of "RemoteFunction"' in errors[0], out
    assert '"max_restart"' in errors[1] and '"options" of "ActorClass"' in errors[1], out
    assert "SPRED" in errors[2], out
    assert '"num_gpu"' in errors[3] and '"remote"' in errors[3], out
