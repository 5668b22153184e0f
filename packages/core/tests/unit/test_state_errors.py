"""The state API raises rayfield's own errors: no gRPC type reaches its callers."""

from __future__ import annotations

import grpc
import pytest

from rayfield._private.driver.state_client import _CheckedNode
from rayfield._private.node_manager.node_service import PeerError
from rayfield.util import state


class _Stub:
    def introspect(self, timeout_s: float) -> dict[str, int]:
        raise PeerError(grpc.StatusCode.UNAVAILABLE, "connection refused")

    def list_logs(self, timeout_s: float) -> list[str]:
        return ["worker-1.out"]


def test_a_failed_node_call_is_a_node_call_error_with_status_and_address() -> None:
    node = _CheckedNode(_Stub(), "10.0.0.2:7000")  # type: ignore[arg-type]
    with pytest.raises(state.NodeCallError) as info:
        node.introspect(timeout_s=1)
    exc = info.value
    assert not isinstance(exc, grpc.RpcError)
    assert (exc.status, exc.details, exc.address) == (
        "UNAVAILABLE",
        "connection refused",
        "10.0.0.2:7000",
    )
    assert "10.0.0.2:7000" in str(exc)
    assert state.call_status(exc) == ("UNAVAILABLE", "connection refused")


def test_calls_that_succeed_pass_through() -> None:
    assert _CheckedNode(_Stub(), "a:1").list_logs(timeout_s=1) == ["worker-1.out"]  # type: ignore[arg-type]


def test_call_status_of_gcs_errors_and_others() -> None:
    assert state.call_status(state.GcsUnavailableError("down"))[0] == "UNAVAILABLE"
    assert state.call_status(ValueError("plain")) == ("UNKNOWN", "plain")
