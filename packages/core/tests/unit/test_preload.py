"""Worker preload: the setting's parsing and the pool's fork/spawn decisions (no processes)."""

from __future__ import annotations

import os

import pytest

from rayfield._private.common.preload import (
    ENV_PRELOAD,
    ZygoteState,
    merge_sys_path,
    parse_modules,
    resolve_modules,
)


def test_modules_parse_from_a_string_or_a_list_in_order_once() -> None:
    assert parse_modules("torch, numpy.linalg,,torch") == ("torch", "numpy.linalg")
    assert parse_modules(["gymnasium", "torch"]) == ("gymnasium", "torch")
    assert parse_modules(None) == () and parse_modules("") == () and parse_modules([]) == ()


@pytest.mark.parametrize("bad", ["torch nn", "./mod.py", "1abc", "a..b", "a-b"])
def test_a_name_that_is_no_module_name_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad).replace(".", r"\.")):
        parse_modules([bad])


def test_a_value_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match="list of module names"):
        parse_modules(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        parse_modules([b"torch"])  # type: ignore[list-item]


def test_explicit_setting_wins_over_the_environment_and_empty_turns_it_off() -> None:
    env = {ENV_PRELOAD: "torch,numpy"}
    assert resolve_modules(None, env) == ("torch", "numpy")
    assert resolve_modules(["gymnasium"], env) == ("gymnasium",)
    assert resolve_modules([], env) == ()
    assert resolve_modules(None, {}) == ()


def test_without_modules_every_worker_is_spawned() -> None:
    state = ZygoteState((), started_at=0.0)
    assert state.choice(0.0) == "spawn" and state.choice(1e9) == "spawn"
    assert state.take_warning() is None and state.wait_left(0.0) == 0.0


def test_requests_wait_until_the_zygote_is_ready_then_fork() -> None:
    state = ZygoteState(("torch",), started_at=100.0, ready_timeout_s=30.0)
    assert state.choice(101.0) == "wait"
    assert state.wait_left(110.0) == pytest.approx(20.0)
    state.ready()
    assert state.choice(1000.0) == "fork"  # no timeout once ready
    assert state.take_warning() is None


def test_a_zygote_not_ready_in_time_fails_once_with_a_warning() -> None:
    state = ZygoteState(("torch",), started_at=0.0, ready_timeout_s=30.0)
    assert state.choice(30.5) == "spawn"
    assert state.take_warning() == "not ready after 30 s"
    assert state.take_warning() is None  # warned once
    state.ready()  # a late ready message does not bring it back
    assert state.choice(31.0) == "spawn"


def test_a_failure_after_ready_is_final() -> None:
    state = ZygoteState(("torch",), started_at=0.0)
    state.ready()
    state.failed("the zygote exited")
    state.failed("a second reason")
    assert state.choice(1.0) == "spawn"
    assert state.take_warning() == "the zygote exited"


def test_new_pythonpath_entries_go_after_the_ones_the_zygote_has() -> None:
    sep = os.pathsep
    zygote = ["/cwd", "/a", "/b", "/usr/lib/python3.11", "/site"]
    assert merge_sys_path(zygote, sep.join(["/a", "/b"])) == zygote
    assert merge_sys_path(zygote, sep.join(["/a", "/new", "/b", "/newer"])) == [
        "/cwd",
        "/a",
        "/new",
        "/b",
        "/newer",
        "/usr/lib/python3.11",
        "/site",
    ]
    assert merge_sys_path(["/cwd", "/site"], "/x") == ["/cwd", "/x", "/site"]
    assert merge_sys_path([], "/x") == ["/x"]


def test_a_node_process_refuses_a_bad_preload_flag_before_starting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rayfield._private.node_manager import node_main

    with pytest.raises(SystemExit) as exit_info:
        node_main.main(["--worker-preload-modules", "torch,not a module"])
    assert exit_info.value.code == 2
    assert "'not a module' is not a module name" in capsys.readouterr().err
