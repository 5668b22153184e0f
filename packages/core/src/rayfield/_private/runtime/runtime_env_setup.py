"""A worker's side of its runtime_env: unpack its packages, enter its working_dir.

The node starts a worker for a runtime_env (``node_manager/runtime_envs.py``) with the
env's ``env_vars`` and its virtual environment's Python already in place, and with
``RAYFIELD_RUNTIME_ENV`` (the canonical JSON) and ``RAYFIELD_RUNTIME_ENV_DIR`` (the node's
cache, ``<temp_dir>/runtime_resources``) set. Before it registers, the worker calls
:func:`apply`: each package (``rayfield-pkg://<hex>``) is read from the store (the node
fetches it from the GCS or another node, as exported code), checked against its hash and
unpacked once per node into ``<cache>/pkg/<hex>/`` (an ``flock`` makes concurrent workers
wait for the first; the unpacking goes to a temporary directory renamed into place), all
directories 0700 and this user's (``common/private_files.py``). The working_dir's copy
becomes the cwd and the first entry of ``sys.path``; the py_modules' copies follow it;
``PYTHONPATH`` gets them too, for the processes a task starts.

A failure is raised to the worker, which then fails the tasks it is given with
``RuntimeEnvSetupError`` instead of running them (``worker_main.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rayfield._private.common import private_files
from rayfield._private.common import runtime_env as renv
from rayfield._private.driver import runtime_env_packages as packages

__all__ = ["ENV_DIR_VAR", "ENV_ERROR_VAR", "ENV_VAR", "apply", "unpack"]

ENV_VAR = "RAYFIELD_RUNTIME_ENV"
ENV_DIR_VAR = "RAYFIELD_RUNTIME_ENV_DIR"
ENV_ERROR_VAR = "RAYFIELD_RUNTIME_ENV_ERROR"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with private_files.open_private(path, "ab") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def unpack(client: Any, uri: str, cache_dir: Path, timeout_s: float | None) -> Path:
    """The directory holding the package ``uri``, unpacked under ``cache_dir`` once (the
    package read through the store client ``client``).

    Raises:
        RuntimeError: the package is not in the cluster within ``timeout_s``, or its
            content does not match its hash.
    """
    digest = uri[len(renv.PKG_SCHEME) :]
    root = private_files.ensure_private_dir(cache_dir / "pkg", what="the runtime_env cache")
    target = root / digest
    if target.is_dir():
        return target
    with _locked(root / f"{digest}.lock"):
        if target.is_dir():  # another worker unpacked it meanwhile
            return target
        [buf] = client.get([packages.package_id(uri)], timeout_s=timeout_s)
        if buf is None:
            raise RuntimeError(f"package {uri} was not found in the cluster within {timeout_s} s")
        blob = bytes(buf)
        buf.release()
        if not packages.blob_matches(uri, blob):
            raise RuntimeError(f"package {uri}: its content does not match its hash")
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{digest}-"))
        try:
            with zipfile.ZipFile(io.BytesIO(blob)) as zf:
                zf.extractall(tmp)  # (names with .. or a leading / are made safe)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


def apply(client: Any, env: dict[str, Any], cache_dir: Path) -> None:
    """Set this process up for ``env``: packages unpacked, cwd and module search path.

    Raises:
        RuntimeError: a package could not be read (see :func:`unpack`).
        OSError: the cache could not be written.
        UnsafeFileError: the cache directory is not this user's alone.
    """
    timeout = renv.setup_timeout_s(env)
    paths = [str(unpack(client, uri, cache_dir, timeout)) for uri in env.get("py_modules", ())]
    wd = env.get("working_dir")
    if wd:
        folder = str(unpack(client, wd, cache_dir, timeout))
        os.chdir(folder)
        paths.insert(0, folder)
    if paths:
        sys.path[:0] = paths
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *([old] if old else [])])
