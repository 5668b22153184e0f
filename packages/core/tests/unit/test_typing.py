"""The public API's static types, as mypy sees them in a user's program (mypy's older
versions print ``builtins.str`` where newer ones print ``str``: both are read)."""

from __future__ import annotations

from pathlib import Path

from mypy import api as mypy_api

PROGRAM = """
import rayfield as rf


@rf.remote
def f(x: int) -> str:
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
]


def test_remote_get_put_wait_have_precise_types(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    out, err, _ = mypy_api.run(
        [str(program), "--cache-dir", str(tmp_path / "cache"), "--show-traceback"]
    )
    revealed = [
        line.split('Revealed type is "', 1)[1].rstrip('"').replace("builtins.", "")
        for line in out.splitlines()
        if "Revealed type is" in line
    ]
    assert revealed == EXPECTED, out + err
    assert "error" not in out.replace("Revealed", ""), out
