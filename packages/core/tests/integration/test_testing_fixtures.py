"""rayfield.testing's pytest fixtures on real runtimes, and its leak check failing a test."""

from __future__ import annotations

from typing import Any

import pytest

import rayfield as rf
from rayfield.testing import local_runtime


@pytest.mark.rayfield_runtime(num_cpus=3, resources={"slot": 2})
def test_the_marker_sizes_the_runtime(rayfield_runtime: dict[str, Any]) -> None:
    resources = rf.cluster_resources()
    assert resources["CPU"] == 3 and resources["slot"] == 2
    assert rayfield_runtime["session_dir"]


def test_local_runtime_refuses_a_second_runtime(cluster: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match="already connected"), local_runtime():
        pass
    assert rf.is_initialized()  # the fixture's runtime is untouched


def test_local_runtime_starts_and_shuts_down(rayfield_leak_check: Any) -> None:
    with local_runtime(num_cpus=1, object_store_memory=64 << 20):

        @rf.remote
        def double(x: int) -> int:
            return 2 * x

        assert rf.get(double.remote(21), timeout=60) == 42
    assert not rf.is_initialized()


LEAKY = """
import subprocess, sys
import pytest

def test_leaves_a_child(rayfield_leak_check):
    pytest.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])

def test_allowed_child(rayfield_leak_check):
    pass

@pytest.mark.rayfield_allow_leaks("child process")
def test_allowance_without_reason(rayfield_leak_check):
    pass

def teardown_module():
    pytest.child.kill()
    pytest.child.wait()
"""


def test_a_leaking_test_fails_listing_what_it_left(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky=LEAKY)
    result = pytester.runpytest_subprocess("-p", "rayfield.testing", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*the test left behind (threads, fds, child processes, shared memory):*",
            "*child process * -c import time; time.sleep(30)*",
            "*rayfield_allow_leaks needs reason=*",
        ]
    )
