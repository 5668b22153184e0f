"""Each package's smoke test: the first example of its README, run against the installed
packages (``nox -s release`` runs it with a fresh virtualenv's Python, from a directory
outside the repository).

    python smoke.py store core cli autoscaler tune rllib sgd

The README is read from the installed distribution's metadata (its long description),
so what runs is what ships, and this file needs nothing from the repository. Each
example runs in a process of its own, in a scratch directory; the first ```python block
of the README is run as it is, after the few lines in PRELUDE that some examples take as
given (autoscaler's connection to a cluster). rayfield-cli's first example
is a shell block (``rayfield start --head``, a second node, ``status``, ``stop``): its
``rayfield`` lines run with a private ``--temp-dir`` and ports chosen by the system, so
they never meet another cluster on this machine, and rayfield-autoscaler's example runs
on that cluster before it is stopped. Fails (exit 1) on the first example that fails.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import metadata
from pathlib import Path

TIMEOUT_S = 900

# What an example takes as given, run before it.
PRELUDE = {
    # request_resources() talks to a cluster's GCS: join the one rayfield-cli's example
    # started (its address and temp dir come in the environment).
    "autoscaler": (
        "import os, rayfield\n"
        "rayfield.init(address=os.environ['SMOKE_ADDRESS'],"
        " temp_dir=os.environ['SMOKE_TEMP_DIR'])\n"
    ),
}
EPILOGUE = {"autoscaler": "rayfield.shutdown()\n"}


def readme(package: str) -> str:
    text = metadata(f"rayfield-{package}").get_payload()  # type: ignore[attr-defined]
    if not text:
        raise SystemExit(f"rayfield-{package}: no README in the installed metadata")
    return str(text)


def first_block(text: str, lang: str) -> str:
    m = re.search(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)
    if m is None:
        raise SystemExit(f"no ```{lang} block in the README")
    return m.group(1)


def banner(package: str, what: str) -> None:
    print(f"\n--- smoke rayfield-{package}: {what}", flush=True)


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    print("$ " + shlex.join(cmd), flush=True)
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, timeout=TIMEOUT_S)
    print(f"(ok, {time.monotonic() - t0:.1f} s)", flush=True)


def run_python_example(package: str, scratch: Path, env: dict[str, str] | None = None) -> None:
    code = PRELUDE.get(package, "") + first_block(readme(package), "python")
    code += EPILOGUE.get(package, "")
    banner(package, "the README's first python example")
    print(code, flush=True)
    work = scratch / package
    work.mkdir()
    (work / "example.py").write_text(code)
    run([sys.executable, "example.py"], cwd=work, env=env)


def cluster_example(scratch: Path, with_autoscaler: bool) -> None:
    """rayfield-cli's first (shell) example on a private temp dir; the autoscaler's
    example on that cluster before ``rayfield stop``."""
    block = first_block(readme("cli"), "bash")
    banner("cli", "the README's first example (shell)")
    print(block, flush=True)
    bin_dir = Path(sys.executable).parent
    temp_dir = Path(tempfile.mkdtemp(prefix="rf-smoke-", dir="/tmp"))  # short: socket paths
    private = ["--temp-dir", str(temp_dir)]
    address = ""
    try:
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if not words or words[0] != "rayfield":
                continue
            words[0] = str(bin_dir / "rayfield")
            if words[1:3] == ["start", "--head"]:
                words += ["--port", "0", *private]
                run(words, cwd=temp_dir)
                info = json.loads((temp_dir / "session_latest" / "cluster.json").read_text())
                address = info["gcs_address"]
            elif words[1] == "start" and "--address" in words:
                words[words.index("--address") + 1] = address
                run([*words, *private], cwd=temp_dir)
            elif words[1] == "status":
                run([*words, "--address", address, *private], cwd=temp_dir)
            elif words[1] == "stop":
                if with_autoscaler:
                    env = {**os.environ, "SMOKE_ADDRESS": address, "SMOKE_TEMP_DIR": str(temp_dir)}
                    run_python_example("autoscaler", scratch, env)
                    with_autoscaler = False
                banner("cli", "back to its example")
                run([*words, *private], cwd=temp_dir)
            else:
                raise SystemExit(f"rayfield-cli's example: no rule to run {line!r}")
        if not address:
            raise SystemExit("rayfield-cli's example started no head")
    finally:
        # whatever failed: nothing left running (only this temp dir's processes)
        subprocess.run(
            [str(bin_dir / "rayfield"), "stop", *private], cwd=temp_dir, capture_output=True
        )
        shutil.rmtree(temp_dir, ignore_errors=True)


def main(packages: list[str]) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="rayfield-smoke-"))
    try:
        for package in packages:
            if package == "cli":
                cluster_example(scratch, with_autoscaler="autoscaler" in packages)
            elif package == "autoscaler" and "cli" in packages:
                continue  # ran on the cli example's cluster
            elif package == "autoscaler":
                raise SystemExit("the autoscaler's example runs on rayfield-cli's cluster")
            else:
                run_python_example(package, scratch)
    except subprocess.CalledProcessError as exc:
        print(f"smoke test failed: {shlex.join(exc.cmd)} exited {exc.returncode}")
        return 1
    except subprocess.TimeoutExpired as exc:
        print(f"smoke test failed: {shlex.join(exc.cmd)} ran past {TIMEOUT_S} s")
        return 1
    shutil.rmtree(scratch, ignore_errors=True)  # kept when a test failed
    print(f"\nsmoke tests passed: {', '.join(packages)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
