"""The command line shared by the small examples: ``--smoke-test``, a local 2-CPU runtime."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import rayfield


def run_example(
    main: Callable[[bool], dict[str, Any]], summary: Callable[[dict[str, Any]], str]
) -> None:
    """Parse ``--smoke-test``, run ``main`` on ``rayfield.init(num_cpus=2)``, print
    ``summary(result)`` and exit 0 if ``result["ok"]``, else 1."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke-test", action="store_true", help="finish quickly for testing")
    args = parser.parse_args()
    rayfield.init(num_cpus=2)
    try:
        out = main(args.smoke_test)
    finally:
        rayfield.shutdown()
    print(summary(out))
    sys.exit(0 if out["ok"] else 1)
