"""The process context (`_private/context.py`), without processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rayfield._private import context
from rayfield._private.context import Mode, ProcessContext
from rayfield.exceptions import RayfieldError


@pytest.fixture
def no_context(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process without a context (the one a test run may hold is put back)."""
    saved = context.clear()
    monkeypatch.delenv("RAYFIELD_GCS_ADDRESS", raising=False)
    yield
    context.clear()
    if saved is not None:
        context.install(saved)


def test_install_require_clear(no_context: None) -> None:
    assert context.current() is None
    with pytest.raises(RayfieldError, match="not initialized"):
        context.require()
    ctx = ProcessContext(Mode.CONNECTED, runtime=object(), info={"session_dir": "/s"})
    context.install(ctx)
    assert context.require() is ctx and context.current() is ctx
    with pytest.raises(RuntimeError, match="has a rayfield context already"):
        context.install(ProcessContext(Mode.LOCAL, runtime=object()))
    assert context.clear() is ctx
    assert context.clear() is None and context.current() is None


def test_cluster_address_and_sessions_root(
    no_context: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert context.gcs_address() is None and context.sessions_root() is None
    info = {"gcs_address": "127.0.0.1:6379", "temp_dir": "/tmp/rf-root"}
    context.install(ProcessContext(Mode.CONNECTED, runtime=object(), info=info))
    assert context.gcs_address() == "127.0.0.1:6379"
    assert context.sessions_root() == Path("/tmp/rf-root")
    # A worker's node names its cluster in the environment; that address wins.
    monkeypatch.setenv("RAYFIELD_GCS_ADDRESS", "10.0.0.2:7000")
    assert context.gcs_address() == "10.0.0.2:7000"
    context.clear()
    assert context.gcs_address() == "10.0.0.2:7000" and context.sessions_root() is None


def test_an_embedded_context_without_cluster(no_context: None) -> None:
    context.install(ProcessContext(Mode.EMBEDDED, runtime=object(), info={"session_dir": "/s"}))
    assert context.gcs_address() is None and context.sessions_root() is None
    assert context.require().node is None and context.require().job_id == b""


def test_both_runtimes_implement_the_runtime_protocol() -> None:
    """The public API talks to either runtime through ``interface.Runtime`` (mypy checks
    the signatures; this checks the members exist at run time too)."""
    from rayfield._private.runtime.interface import Runtime
    from rayfield._private.runtime.local_mode import LocalRuntime
    from rayfield._private.runtime.runtime import StoreRuntime

    assert isinstance(LocalRuntime({"CPU": 1.0}), Runtime)
    members = {"close", "export", "put", "get", "wait", "submit"}
    assert members <= set(dir(StoreRuntime))
