"""The rayfield namespace: public names, and install hints for missing libraries."""

from __future__ import annotations

import sys

import pytest

import rayfield


def test_missing_library_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    # rayfield-rllib may be installed: make it look absent for this test.
    monkeypatch.setitem(sys.modules, "rayfield.rllib", None)
    if "rllib" in vars(rayfield):  # set by an earlier import of the subpackage
        monkeypatch.delattr(rayfield, "rllib")
    with pytest.raises(ImportError, match="pip install rayfield-rllib"):
        from rayfield import rllib  # noqa: F401
    with pytest.raises(AttributeError):
        rayfield.no_such_name  # noqa: B018


def test_public_names_exist() -> None:
    assert set(rayfield._PUBLIC) == set(rayfield.__all__)  # each imported on first use
    for name in rayfield.__all__:
        assert hasattr(rayfield, name), name
    assert rayfield.ObjectID is rayfield.ObjectRef
