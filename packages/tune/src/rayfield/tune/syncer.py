"""Copy an experiment directory to and from cloud storage (``upload_dir``).

``tune.run(upload_dir=URI, sync_to_cloud=...)`` (classic; ``sync_function`` is the 0.7
name) or ``RunConfig(sync_config=SyncConfig(upload_dir=URI, syncer=...))`` (modern) keep
a copy of ``<local_dir>/<name>`` at ``<URI>/<name>``: uploaded every ``sync_period``
seconds after the experiment state is saved, and once more when the experiment ends.
``resume=True`` with an empty (or missing) local directory first downloads that copy.

What does the copying (``sync_to_cloud`` / ``SyncConfig.syncer``):

* ``None`` or ``"auto"``: by the URI's scheme: ``file://PATH`` (:class:`FileSyncer`,
  a local or mounted directory) and ``s3://BUCKET/PREFIX`` (:class:`S3Syncer`, boto3:
  ``pip install 'rayfield-tune[aws]'``);
* a command template (:class:`CommandSyncer`) such as ``"aws s3 sync {source} {target}"``
  or the classic ``"gsutil rsync -r {local_dir} {remote_dir}"``: run for an upload with
  the local directory as source, and for a download with the two swapped;
* a function ``f(source, target)`` (:class:`FunctionSyncer`; ``tune.function`` wrappers
  are accepted), called the same way;
* a :class:`Syncer` instance.

Uploads run on the driver's writer thread, after the files they copy were flushed.
A download makes the local experiment directory mode 0700; the built-in syncers write
its files 0600. What a download brings is someone else's copy as far as pickles go:
resuming from it loads none without ``trusted=True`` (see :mod:`rayfield.tune.pickles`).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from rayfield.tune.error import TuneError
from rayfield.util import private_files

__all__ = [
    "CommandSyncer",
    "FileSyncer",
    "FunctionSyncer",
    "S3Syncer",
    "SyncConfig",
    "Syncer",
    "get_syncer",
]

log = logging.getLogger(__name__)


class Syncer:
    """Copies a directory tree up to a remote URI and back.

    Subclasses implement :meth:`sync_up` and :meth:`sync_down`; both raise
    :class:`TuneError` when the copy fails.
    """

    def sync_up(self, local_dir: str, remote_dir: str) -> None:
        """Make ``remote_dir`` hold every file of ``local_dir`` (newer files replace)."""
        raise NotImplementedError

    def sync_down(self, remote_dir: str, local_dir: str) -> None:
        """Copy every file under ``remote_dir`` into ``local_dir``."""
        raise NotImplementedError


@dataclass
class SyncConfig:
    """Modern spelling of the cloud copy: ``RunConfig(sync_config=SyncConfig(...))``.

    Attributes:
        upload_dir: the URI the experiment directory is copied under (``file://``,
            ``s3://`` or anything the ``syncer`` understands).
        syncer: ``"auto"`` / None, a command template, a function ``f(source, target)``
            or a :class:`Syncer` (see the module docstring).
        sync_period: seconds between two uploads while the experiment runs (one more
            upload always follows its end); also the least seconds between two copies
            of a running trial's directory to the driver (``sync_to_driver``, see
            :mod:`rayfield.tune.driver_sync`).
        sync_on_checkpoint: also copy a running trial's directory to the driver after
            each of its checkpoints (``sync_to_driver``).
    """

    upload_dir: str | None = None
    syncer: Any = "auto"
    sync_period: float = 300.0
    sync_on_checkpoint: bool = True


def _unwrap(fn: Any) -> Any:
    """The function inside a ``tune.function`` wrapper, else ``fn``."""
    inner = getattr(fn, "func", None)
    return inner if callable(inner) else fn


class CommandSyncer(Syncer):
    """Runs a shell command made from ``template``.

    Args:
        template: contains ``{source}`` and ``{target}``, or the classic ``{local_dir}``
            and ``{remote_dir}``; the paths are shell-quoted into it.
        timeout_s: the longest one command may run.

    Raises:
        TuneError: the template lacks the placeholders.
    """

    def __init__(self, template: str, timeout_s: float = 1800.0) -> None:
        modern = "{source}" in template and "{target}" in template
        classic = "{local_dir}" in template and "{remote_dir}" in template
        if not (modern or classic):
            raise TuneError(
                f"sync command {template!r} must contain {{source}} and {{target}} (or the "
                "classic {local_dir} and {remote_dir}), e.g. 'aws s3 sync {source} {target}'"
            )
        self.template = template
        self.timeout_s = timeout_s

    def _run(self, source: str, target: str, local: str, remote: str) -> None:
        command = self.template.format(
            source=shlex.quote(source),
            target=shlex.quote(target),
            local_dir=shlex.quote(local),
            remote_dir=shlex.quote(remote),
        )
        try:
            done = subprocess.run(
                command, shell=True, capture_output=True, text=True, timeout=self.timeout_s
            )
        except subprocess.TimeoutExpired:
            raise TuneError(f"sync command timed out after {self.timeout_s} s: {command}") from None
        if done.returncode != 0:
            raise TuneError(
                f"sync command failed (exit {done.returncode}): {command}\n{done.stderr.strip()}"
            )

    def sync_up(self, local_dir: str, remote_dir: str) -> None:
        self._run(local_dir, remote_dir, local_dir, remote_dir)

    def sync_down(self, remote_dir: str, local_dir: str) -> None:
        # The classic template names the sides: a download swaps what fills them.
        private_files.ensure_private_dir(local_dir)  # the experiment directory: 0700
        self._run(remote_dir, local_dir, remote_dir, local_dir)


class FunctionSyncer(Syncer):
    """Calls ``fn(source, target)``: ``(local_dir, remote_dir)`` to upload, and
    ``(remote_dir, local_dir)`` to download. An exception it raises becomes a TuneError."""

    def __init__(self, fn: Callable[[str, str], Any]) -> None:
        if not callable(fn):
            raise TuneError(f"sync function must be callable, got {type(fn).__name__}")
        self.fn = fn

    def _call(self, source: str, target: str) -> None:
        try:
            self.fn(source, target)
        except Exception as exc:
            raise TuneError(f"sync function {self.fn!r} failed: {exc}") from exc

    def sync_up(self, local_dir: str, remote_dir: str) -> None:
        self._call(local_dir, remote_dir)

    def sync_down(self, remote_dir: str, local_dir: str) -> None:
        private_files.ensure_private_dir(local_dir)  # the experiment directory: 0700
        self._call(remote_dir, local_dir)


def _walk(root: str) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of every file under ``root``; left out: the
    temporary files of atomic writes and the REST server's token file (a secret)."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith((".experiment_state-", ".tune_server")) or name.endswith(".tmp"):
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:  # removed since the listing (an old checkpoint)
                continue
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return out


class _Incremental(Syncer):
    """Uploads only the files whose size or modification time changed since this
    syncer's last upload of them (the first upload of a process copies everything)."""

    def __init__(self) -> None:
        self._sent: dict[tuple[str, str], tuple[int, int]] = {}

    def sync_up(self, local_dir: str, remote_dir: str) -> None:
        for rel, stamp in _walk(local_dir).items():
            key = (remote_dir, rel)
            if self._sent.get(key) == stamp:
                continue
            try:
                self._put(os.path.join(local_dir, rel), remote_dir, rel)
            except FileNotFoundError:
                continue
            self._sent[key] = stamp

    def _put(self, path: str, remote_dir: str, rel: str) -> None:
        raise NotImplementedError


class FileSyncer(_Incremental):
    """``file://PATH`` targets: a directory on this machine or a mounted file system."""

    @staticmethod
    def _path(uri: str) -> str:
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            raise TuneError(f"FileSyncer takes file:// URIs, got {uri!r}")
        return os.path.expanduser(parsed.netloc + parsed.path if parsed.scheme else uri)

    def _put(self, path: str, remote_dir: str, rel: str) -> None:
        target = os.path.join(self._path(remote_dir), rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.{os.getpid()}.tmp"
        shutil.copy2(path, tmp)
        os.replace(tmp, target)

    def sync_down(self, remote_dir: str, local_dir: str) -> None:
        source = self._path(remote_dir)
        if not os.path.isdir(source):
            raise TuneError(f"nothing to download: {remote_dir} is not a directory")
        for dirpath, _dirs, files in os.walk(source):
            # The copy is this user's: directories 0700, files 0600, whatever the source's.
            target = os.path.join(local_dir, os.path.relpath(dirpath, source))
            private_files.ensure_private_dir(target)
            for name in files:
                with (
                    open(os.path.join(dirpath, name), "rb") as src,
                    private_files.open_private(os.path.join(target, name), "wb") as dst,
                ):
                    shutil.copyfileobj(src, dst)


class S3Syncer(_Incremental):
    """``s3://BUCKET/PREFIX`` targets through boto3 (``pip install 'rayfield-tune[aws]'``).

    Credentials and the endpoint come from boto3's usual sources (environment,
    ``~/.aws``); ``client`` replaces the client (tests, other endpoints).

    Raises:
        TuneError: boto3 is not installed.
    """

    def __init__(self, client: Any = None) -> None:
        super().__init__()
        if client is None:
            try:
                import boto3
            except ImportError:
                raise TuneError(
                    "s3:// upload_dir needs boto3: pip install 'rayfield-tune[aws]'"
                ) from None
            client = boto3.client("s3")
        self.client = client

    @staticmethod
    def _split(uri: str) -> tuple[str, str]:
        parsed = urlparse(uri)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise TuneError(f"S3Syncer takes s3://BUCKET/PREFIX URIs, got {uri!r}")
        return parsed.netloc, parsed.path.strip("/")

    def _put(self, path: str, remote_dir: str, rel: str) -> None:
        bucket, prefix = self._split(remote_dir)
        key = "/".join(p for p in (prefix, rel.replace(os.sep, "/")) if p)
        try:
            self.client.upload_file(path, bucket, key)
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise TuneError(f"upload of {path} to s3://{bucket}/{key} failed: {exc}") from exc

    def sync_down(self, remote_dir: str, local_dir: str) -> None:
        bucket, prefix = self._split(remote_dir)
        base = prefix + "/" if prefix else ""
        found = 0
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=base
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    rel = obj["Key"][len(base) :]
                    if not rel or rel.endswith("/") or ".." in rel.split("/"):
                        continue
                    target = os.path.join(local_dir, *rel.split("/"))
                    private_files.ensure_private_dir(os.path.dirname(target))
                    self.client.download_file(bucket, obj["Key"], target)
                    found += 1
        except TuneError:
            raise
        except Exception as exc:
            raise TuneError(f"download of {remote_dir} failed: {exc}") from exc
        if not found:
            raise TuneError(f"nothing to download: no objects under {remote_dir}")


def get_syncer(upload_dir: str, syncer: Any = "auto") -> Syncer:
    """The :class:`Syncer` for ``upload_dir`` and a ``sync_to_cloud`` value.

    Raises:
        TuneError: an ``"auto"`` syncer for a scheme with no built-in syncer (pass a
            command template or a function), or a value of an unknown kind.
    """
    syncer = _unwrap(syncer)
    if isinstance(syncer, Syncer):
        return syncer
    if isinstance(syncer, str) and syncer != "auto":
        return CommandSyncer(syncer)
    if callable(syncer):
        return FunctionSyncer(syncer)
    if syncer not in (None, "auto"):
        raise TuneError(
            f"sync_to_cloud must be a command template, a function f(source, target) or a "
            f"Syncer, got {type(syncer).__name__}"
        )
    scheme = urlparse(upload_dir).scheme
    if scheme == "file":
        return FileSyncer()
    if scheme == "s3":
        return S3Syncer()
    raise TuneError(
        f"no built-in syncer for {upload_dir!r} (built in: file://, s3://): pass "
        "sync_to_cloud='<command with {source} and {target}>' or a function f(source, target)"
    )


class CloudSync:
    """The driver's use of a syncer: throttled uploads of one experiment directory.

    Args:
        syncer: does the copying.
        local_dir: the experiment directory.
        remote_dir: ``<upload_dir>/<experiment name>``.
        period_s: the least time between two :meth:`maybe_upload` uploads.
    """

    def __init__(self, syncer: Syncer, local_dir: str, remote_dir: str, period_s: float) -> None:
        self.syncer, self.local_dir, self.remote_dir = syncer, local_dir, remote_dir
        self.period_s = period_s
        self._last = time.monotonic()

    def due(self) -> bool:
        """True when ``period_s`` has passed since the last upload (and marks it done)."""
        now = time.monotonic()
        if now - self._last < self.period_s:
            return False
        self._last = now
        return True

    def upload(self) -> None:
        """Upload now (raises TuneError on failure)."""
        self.syncer.sync_up(self.local_dir, self.remote_dir)

    def download(self) -> None:
        """Fill the local directory from the remote copy (raises TuneError)."""
        log.info("downloading the experiment from %s to %s", self.remote_dir, self.local_dir)
        self.syncer.sync_down(self.remote_dir, self.local_dir)


def remote_dir_of(upload_dir: str, name: str) -> str:
    """``<upload_dir>/<name>`` for a URI (no doubled slash)."""
    return upload_dir.rstrip("/") + "/" + name
