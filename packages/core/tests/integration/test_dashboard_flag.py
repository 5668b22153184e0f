"""``init(include_dashboard=True)``: the embedded runtime has no dashboard and says so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import rayfield as rf


@pytest.mark.parametrize("flag", ["include_dashboard", "include_webui"])
def test_embedded_init_warns_where_the_dashboard_is(
    flag: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rayfield")
    rf.init(num_cpus=1, object_store_memory=64 << 20, temp_dir=str(tmp_path), **{flag: True})
    try:
        assert rf.get(rf.put(1)) == 1  # the runtime works as usual
    finally:
        rf.shutdown()
    [warning] = [r.getMessage() for r in caplog.records if "include_dashboard" in r.getMessage()]
    assert "rayfield start --head --include-dashboard" in warning


def test_no_warning_without_the_flag(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rayfield")
    rf.init(num_cpus=1, object_store_memory=64 << 20, temp_dir=str(tmp_path))
    rf.shutdown()
    assert "include_dashboard" not in caplog.text
