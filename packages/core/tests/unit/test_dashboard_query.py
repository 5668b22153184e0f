"""The dashboard API's query parameters: every malformed or out-of-range value is a
QueryError (answered 400), never a crash deeper down (no processes, no sockets)."""

from __future__ import annotations

import pytest

pytest.importorskip("aiohttp")  # the dashboard extra, part of the test extra

from rayfield.dashboard import query
from rayfield.dashboard.security import origin_ok

BAD_INTEGERS = ["abc", "1.5", "1e3", " 7", "7 ", "+7", "1_000", "--1", "0x10", "١٢", "\x00"]


@pytest.mark.parametrize("raw", BAD_INTEGERS)
@pytest.mark.parametrize("name", sorted(query.INTS))
def test_malformed_integers_are_refused(name: str, raw: str) -> None:
    with pytest.raises(query.QueryError, match=f"{name} must be a decimal integer"):
        query.integer({name: raw}, name, 0)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("offset", "99999999999999999999"),  # past 64 bits
        ("offset", "-99999999999999999999"),
        ("offset", "9223372036854775808"),
        ("offset", "9" * 5000),
        ("limit", "1000000000000"),  # past the 32-bit field
        ("limit", "-1"),
        ("recent", "-5"),
        ("recent", "1000001"),
        ("max_bytes", "0"),
        ("max_bytes", "-1"),
    ],
)
def test_out_of_range_integers_are_refused(name: str, raw: str) -> None:
    with pytest.raises(query.QueryError, match=f"{name} must be between"):
        query.integer({name: raw}, name, 0)


def test_valid_integers_and_defaults() -> None:
    assert query.integer({}, "offset", -65536) == -65536
    assert query.integer({"offset": ""}, "offset", 3) == 3
    assert query.integer({"offset": "-100"}, "offset", 0) == -100
    assert query.integer({"offset": str(2**63 - 1)}, "offset", 0) == 2**63 - 1
    assert query.integer({"limit": str(2**32 - 1)}, "limit", 0) == 2**32 - 1
    assert query.integer({"recent": "0"}, "recent", 200) == 0


def test_a_very_long_value_is_refused_and_cut_in_the_message() -> None:
    with pytest.raises(query.QueryError) as err:
        query.integer({"limit": "9" * 10_000}, "limit", 0)
    assert len(str(err.value)) < 200


@pytest.mark.parametrize(("raw", "value"), [("", False), ("0", False), ("1", True), ("true", True)])
def test_flags(raw: str, value: bool) -> None:
    assert query.flag({"download": raw}, "download") is value
    assert query.flag({}, "download") is False


def test_a_bad_flag_is_refused() -> None:
    with pytest.raises(query.QueryError, match="download must be 0 or 1"):
        query.flag({"download": "maybe"}, "download")


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"node": "n"},
        {"name": "node.out"},
        {"node": "n", "name": "../etc/passwd"},
        {"node": "n", "name": ".hidden"},
        {"node": "n", "name": "a\x00b"},
        {"node": "n", "name": "x" * 256},
        {"node": "n" * 301, "name": "node.out"},
    ],
)
def test_log_file_needs_a_node_and_a_bare_name(params: dict[str, str]) -> None:
    with pytest.raises(query.QueryError):
        query.log_file(params)


def test_log_file_ok() -> None:
    assert query.log_file({"node": "127.0.0.1:5", "name": "worker-1.out"}) == (
        "127.0.0.1:5",
        "worker-1.out",
    )


def test_origin_follows_the_scheme() -> None:
    assert origin_ok("POST", "https://h:1", "h:1", "https")
    assert not origin_ok("POST", "http://h:1", "h:1", "https")
    assert origin_ok("POST", "http://h:1", "h:1")
    assert origin_ok("GET", None, "h:1", "https")
