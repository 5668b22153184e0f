"""Fixtures of rayfield-tune's tests, from :mod:`rayfield.testing` (the runtime fixtures
and their leak check)."""

from __future__ import annotations

pytest_plugins = ["rayfield.testing"]
