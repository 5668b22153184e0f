"""The serving wire format: data only, arrays as buffers, malformed bodies refused."""

from __future__ import annotations

import base64
import json

import msgpack
import numpy as np
import pytest

from rayfield.rllib.env.serving_wire import JSON, MSGPACK, WireError, decode, encode


@pytest.mark.parametrize("kind", [JSON, MSGPACK])
def test_round_trip_keeps_arrays_scalars_and_nesting(kind: str) -> None:
    obs = np.arange(12, dtype=np.float32).reshape(3, 4)
    msg = {
        "command": "GET_ACTION",
        "episode_id": "e1",
        "observation": obs,
        "nested": {"t": (np.int64(3), 2.5, True), "img": np.zeros((2, 2), np.uint8)},
    }
    back = decode(encode(msg, kind), kind)
    np.testing.assert_array_equal(back["observation"], obs)
    assert back["observation"].dtype == np.float32
    assert back["nested"]["t"] == [3, 2.5, True]
    assert back["nested"]["img"].dtype == np.uint8 and back["nested"]["img"].shape == (2, 2)


@pytest.mark.parametrize("kind", [JSON, MSGPACK])
def test_objects_that_would_need_pickling_are_refused(kind: str) -> None:
    with pytest.raises(TypeError, match="cannot send"):
        encode({"x": object()}, kind)
    with pytest.raises(TypeError, match="dtype"):
        encode({"x": np.array(["a"], dtype=object)}, kind)


def test_malformed_bodies_raise_wire_errors() -> None:
    bad_json = [b"{", b"[1, 2]", b'"x"']
    for body in bad_json:
        with pytest.raises(WireError):
            decode(body, JSON)
    arr = {"__ndarray__": ["float32", [3], base64.b64encode(b"\0" * 8).decode()]}
    with pytest.raises(WireError, match="needs 12 bytes, got 8"):
        decode(json.dumps({"o": arr}).encode(), JSON)
    evil = {"__ndarray__": ["object", [1], base64.b64encode(b"\0" * 8).decode()]}
    with pytest.raises(WireError, match="dtype 'object'"):
        decode(json.dumps({"o": evil}).encode(), JSON)
    with pytest.raises(WireError, match="shape"):
        decode(json.dumps({"o": {"__ndarray__": ["int8", [-1], ""]}}).encode(), JSON)
    with pytest.raises(WireError):
        decode(b"\xc1\xc1", MSGPACK)
    with pytest.raises(WireError, match="extension type 7"):
        decode(msgpack.packb({"o": msgpack.ExtType(7, b"x")}), MSGPACK)
    with pytest.raises(WireError, match="is not"):
        decode(b"{}", "application/x-python-pickle")
