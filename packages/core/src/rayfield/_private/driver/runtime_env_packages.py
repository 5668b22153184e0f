"""The runtime_env of a submitted task: local files zipped, stored in the cluster once,
and the env's canonical string.

A ``working_dir`` directory is zipped (``excludes``: gitignore-style patterns, matched by
``pathspec`` against paths relative to it), and so is each ``py_modules`` directory (under
its own name) or ``.py`` file; ``.zip`` and ``.whl`` files are taken as they are. The zip is
deterministic (sorted entries, fixed timestamps), so its id is its content hash: it is
stored as exported code is (``Runtime.export_blob``: the node's store, and in a cluster the
GCS, ``common/code.py``) and named ``rayfield-pkg://<hex>`` in the env, which a worker
unpacks (``runtime/runtime_env_setup.py``). Unchanged files give the same id, so they are
stored once. A package past ``MAX_PACKAGE_BYTES`` (100 MiB) is refused.

Each process caches the canonical string of every runtime_env it submitted with, so a
directory is zipped once per process (its later changes are not picked up, as in Ray).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from collections.abc import Mapping
from typing import Any

from rayfield._private.common import code
from rayfield._private.common import runtime_env as renv

__all__ = [
    "JOB_ENV_VAR",
    "MAX_PACKAGE_BYTES",
    "blob_matches",
    "for_submit",
    "job_env",
    "package",
    "package_id",
    "set_job_env",
    "zip_directory",
]

MAX_PACKAGE_BYTES = 100 << 20
JOB_ENV_VAR = "RAYFIELD_JOB_RUNTIME_ENV"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def zip_directory(path: str, excludes: list[str] | None = None, top: str | None = None) -> bytes:
    """The files under ``path`` as a deterministic zip (``top``: the folder they go under
    in the zip; None: at its root), leaving out what ``excludes`` matches.

    Raises:
        ValueError: the files left in add up to more than ``MAX_PACKAGE_BYTES``; the
            message gives the size and suggests ``excludes``.
    """
    import zipfile

    import pathspec

    spec = pathspec.GitIgnoreSpec.from_lines(excludes or [])
    files: list[tuple[str, str]] = []
    total = 0
    for root, dirs, names in os.walk(path):
        rel_root = os.path.relpath(root, path)
        rel_root = "" if rel_root == "." else rel_root.replace(os.sep, "/") + "/"
        dirs[:] = sorted(d for d in dirs if not spec.match_file(rel_root + d + "/"))
        for name in sorted(names):
            rel = rel_root + name
            full = os.path.join(root, name)
            if spec.match_file(rel) or not os.path.isfile(full):
                continue
            total += os.path.getsize(full)
            files.append((full, rel))
    if total > MAX_PACKAGE_BYTES:
        raise ValueError(
            f"runtime_env: {path} holds {total / 2**20:.1f} MiB of files, over the "
            f"{MAX_PACKAGE_BYTES >> 20} MiB a working_dir or py_module may hold. Leave large "
            "files out with 'excludes' (gitignore-style patterns, e.g. "
            "{'excludes': ['data/', '*.ckpt']}), or pass data with rayfield.put()."
        )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for full, rel in files:
            info = zipfile.ZipInfo(f"{top}/{rel}" if top else rel, _ZIP_TIME)
            info.external_attr = (stat.S_IMODE(os.stat(full).st_mode) | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(full, "rb") as f:
                zf.writestr(info, f.read())
    return out.getvalue()


def _file_zip(path: str) -> bytes:
    """A single ``.py`` file as a zip with it at the root."""
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo(os.path.basename(path), _ZIP_TIME)
        info.external_attr = 0o644 << 16
        with open(path, "rb") as f:
            zf.writestr(info, f.read())
    return out.getvalue()


def _read_archive(path: str) -> bytes:
    size = os.path.getsize(path)
    if size > MAX_PACKAGE_BYTES:
        raise ValueError(
            f"runtime_env: {path} is {size / 2**20:.1f} MiB, over the "
            f"{MAX_PACKAGE_BYTES >> 20} MiB a package may hold"
        )
    with open(path, "rb") as f:
        return f.read()


def _uri(blob: bytes) -> str:
    return renv.PKG_SCHEME + code.code_id(blob)[len(code.CODE_ORIGIN) :].hex()


def package(env: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """``env`` (checked by ``common.runtime_env.check``) with its local paths replaced
    by package URIs, and the packages (URI -> zip bytes) to store.

    Raises:
        ValueError: a package over ``MAX_PACKAGE_BYTES``.
        OSError: a file could not be read.
    """
    out = dict(env)
    blobs: dict[str, bytes] = {}

    def add(blob: bytes) -> str:
        uri = _uri(blob)
        blobs[uri] = blob
        return uri

    wd = env.get("working_dir")
    if wd and not renv.is_uri(wd):
        out["working_dir"] = add(
            _read_archive(wd) if os.path.isfile(wd) else zip_directory(wd, env.get("excludes"))
        )
    out.pop("excludes", None)  # applied: the zip holds what they left
    modules = []
    for path in env.get("py_modules", ()):
        if renv.is_uri(path):
            modules.append(path)
        elif os.path.isdir(path):
            name = os.path.basename(os.path.normpath(path))
            modules.append(add(zip_directory(path, top=name)))
        elif path.endswith(".py"):
            modules.append(add(_file_zip(path)))
        else:
            modules.append(add(_read_archive(path)))
    if modules:
        out["py_modules"] = modules
    return out, blobs


Packed = tuple[dict[str, Any], dict[str, bytes]]
"""A runtime_env with package URIs, and the packages (URI -> zip) still to store."""


def _store(rt: Any, packed: Packed) -> dict[str, Any]:
    """Store the packages of ``packed`` through ``rt`` (once each); its env."""
    env, blobs = packed
    for blob in blobs.values():
        rt.export_blob(blob)
    return env


def job_env(env: Mapping[str, Any] | None) -> Packed:
    """``init()``'s runtime_env, checked and packed (not stored yet): ``env``, else the
    JSON in ``RAYFIELD_JOB_RUNTIME_ENV`` (set by job submission for an entrypoint).

    Raises:
        ValueError: a bad runtime_env (``common/runtime_env.check``), a package over
            ``MAX_PACKAGE_BYTES``, or ``RAYFIELD_JOB_RUNTIME_ENV`` that is not JSON.
        TypeError: a value of the wrong type.
    """
    where = "init(runtime_env=...)"
    if env is None:
        text = os.environ.get(JOB_ENV_VAR, "")
        if not text.strip():
            return {}, {}
        try:
            env = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{JOB_ENV_VAR} must hold a runtime_env as JSON: {exc}") from None
        where = JOB_ENV_VAR
    return package(renv.check(env, where=where))


def set_job_env(rt: Any, packed: Packed) -> None:
    """Make ``packed`` (from :func:`job_env`) the runtime_env every task and actor of this
    process's job runs in unless it gives its own; its packages are stored now."""
    rt.runtime_env = _store(rt, packed)
    rt.runtime_env_string = renv.canonical(rt.runtime_env)
    rt.runtime_env_cache = {}


def for_submit(rt: Any, env: Mapping[str, Any] | None) -> str:
    """The canonical runtime_env of a task or actor submitted through ``rt`` with the
    option ``env`` (checked; None: not given), merged over the job's; "" for the default.

    Raises:
        ValueError: a package over ``MAX_PACKAGE_BYTES``.
    """
    if not env:
        return getattr(rt, "runtime_env_string", "")  # (local mode: none)
    cache: dict[str, str] | None = getattr(rt, "runtime_env_cache", None)
    if cache is None:  # local mode runs tasks in this process: runtime_env does not apply
        return ""
    key = renv.canonical(env)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = renv.canonical(renv.merge(rt.runtime_env, _store(rt, package(env))))
    return hit


def package_id(uri: str) -> bytes:
    """The store id of the package ``uri`` (``rayfield-pkg://<hex>``)."""
    return code.CODE_ORIGIN + bytes.fromhex(uri[len(renv.PKG_SCHEME) :])


def blob_matches(uri: str, blob: bytes) -> bool:
    """Whether ``blob`` is the package ``uri`` names (its content hash)."""
    digest = hashlib.sha1(blob).digest()[: 20 - len(code.CODE_ORIGIN)]
    return digest.hex() == uri[len(renv.PKG_SCHEME) :]
