"""tools/check_pickle.py: which uses of pickle it finds, how the allow-list matches them,
and what it prints and exits with (no package is imported: the sources are parsed)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_pickle", TOOLS / "check_pickle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NamedTuple classes look their module up
    spec.loader.exec_module(module)
    return module


cp = _load()


def _uses(tmp_path: Path, source: str) -> list[tuple[int, str, str]]:
    """``(line, function, call)`` of every use in a module made of ``source``."""
    path = tmp_path / "packages" / "demo" / "src" / "demo.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return [(u.line, u.function, u.call) for u in cp.find_uses(path, tmp_path)]


def test_aliases_and_from_imports_are_followed(tmp_path: Path) -> None:
    source = """\
        import pickle as p
        from pickle import loads
        from cloudpickle import loads as cl
        import cloudpickle
        import json


        def read(blob):
            json.loads(blob)
            return p.loads(blob), loads(blob), cl(blob), cloudpickle.dumps(blob)
        """
    assert _uses(tmp_path, source) == [
        (10, "read", "pickle.loads"),
        (10, "read", "pickle.loads"),
        (10, "read", "cloudpickle.loads"),
        (10, "read", "cloudpickle.dumps"),
    ]


def test_references_and_subclasses_count_not_only_calls(tmp_path: Path) -> None:
    source = """\
        import pickle


        class Safe(pickle.Unpickler):
            pass


        def read_all(blobs):
            return list(map(pickle.loads, blobs))
        """
    assert _uses(tmp_path, source) == [
        (4, "Safe", "pickle.Unpickler"),
        (9, "read_all", "pickle.loads"),
    ]


def test_torch_load_needs_weights_only_true(tmp_path: Path) -> None:
    source = """\
        import torch
        from torch import load


        def ok(f):
            return torch.load(f, weights_only=True, map_location="cpu")


        def not_ok(f, flag):
            torch.load(f)
            torch.load(f, weights_only=False)
            torch.load(f, weights_only=flag)
            return load(f)
        """
    assert _uses(tmp_path, source) == [
        (10, "not_ok", "torch.load"),
        (11, "not_ok", "torch.load"),
        (12, "not_ok", "torch.load"),
        (13, "not_ok", "torch.load"),
    ]


def test_uses_are_named_by_their_enclosing_class_and_functions(tmp_path: Path) -> None:
    source = """\
        import pickle

        STATE = pickle.dumps({})


        class Store:
            def restore(self, blob):
                def inner():
                    return pickle.loads(blob)

                return inner()

            async def later(self, blob):
                return pickle.loads(blob)
        """
    assert _uses(tmp_path, source) == [
        (3, "<module>", "pickle.dumps"),
        (9, "Store.restore.inner", "pickle.loads"),
        (14, "Store.later", "pickle.loads"),
    ]


def test_names_that_are_not_imported_from_pickle_are_left_alone(tmp_path: Path) -> None:
    source = """\
        import json
        from mylib import loads


        def read(blob, pickle):
            return json.loads(blob), loads(blob), pickle.loads(blob)
        """
    assert _uses(tmp_path, source) == []


def test_check_matches_entries_and_reports_stale_ones() -> None:
    use = cp.Use("a.py", 3, "read", "pickle.loads", "unpickling runs any code")
    other = cp.Use("a.py", 9, "write", "pickle.dumps", "pickling")
    allowed = cp.Allowed("a.py", "read", "pickle.loads", "why")
    stale = cp.Allowed("b.py", "gone", "pickle.load", "why")
    assert cp.check([use, other], [allowed, stale]) == ([other], [stale])
    lines = cp.report([other], [stale])
    assert lines[0].startswith("a.py:9: pickle.dumps in write: pickling; write JSON")
    assert "add an Allowed(file, function, call, reason) entry" in lines[0]
    assert "pickle.load in gone of b.py matches no use any more" in lines[1]


def test_main_lists_offenders_with_file_and_line_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _uses(tmp_path, "import torch\n\n\ndef read(f):\n    return torch.load(f)\n")
    monkeypatch.setattr(cp, "ALLOWED", ())
    assert cp.main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "packages/demo/src/demo.py:5: torch.load in read: " in err
    assert "pass weights_only=True" in err
    entry = cp.Allowed("packages/demo/src/demo.py", "read", "torch.load", "a test")
    monkeypatch.setattr(cp, "ALLOWED", (entry,))
    assert cp.main(["--root", str(tmp_path)]) == 0


def test_this_repository_passes() -> None:
    assert cp.main(["--root", str(TOOLS.parent)]) == 0
