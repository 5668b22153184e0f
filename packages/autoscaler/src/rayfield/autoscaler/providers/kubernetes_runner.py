"""Running commands and copying files in a pod: :class:`KubernetesCommandRunner`, the
:class:`~rayfield.autoscaler.command_runner.CommandRunner` of the ``kubernetes``
provider, through the Kubernetes exec API (``pods/exec``) instead of SSH.

Two transports reach the exec API (``provider.command_runner``):

- ``api`` (default): the official ``kubernetes`` client's websocket stream
  (``kubernetes.stream.stream`` over ``connect_get_namespaced_pod_exec``), with an
  ``ApiClient`` of the runner's own (the stream swaps the client's request method while
  it runs, so it is not shared with the provider's threads);
- ``kubectl``: ``kubectl exec -i -n NAMESPACE POD -c CONTAINER -- ...`` (kubectl from
  ``$PATH``, configured as it configures itself: ``$KUBECONFIG`` or the pod's service
  account).

**What runs in the pod.** Every call execs the same fixed command,
``bash -c 'eval "$(head -c "$1")"' rayfield-exec N``, and sends on the exec's stdin a
bash script of N bytes (then, for a copy to the pod, the tar archive). The script
``cd``s to ``$HOME`` (where SSH would start), exports the environment and runs the
command; so the environment (the cluster token of a worker) is on no command line: not
in the pod's process list, not in the exec request's URL (which the API server's audit
log records), not in a log. ``head -c`` reads exactly the script, so neither transport
needs stdin to be closed (the exec protocol before ``v5.channel.k8s.io`` cannot close
it). A command's stdin is ``/dev/null``; for :meth:`~KubernetesCommandRunner.run` its
stderr goes to its stdout, so what the exec's own stderr carries is the transport's.
The container needs ``bash``, GNU ``head`` and ``tar`` (Debian- and Ubuntu-based
images have them; busybox's ``head`` may read past the script).

**Exit statuses.** The exec API ends with a status on its error channel: ``Success``
(0), ``NonZeroExitCode`` with the code, or another failure (the container is gone,
``bash`` is missing), mapped to 255 as SSH maps "no connection"; a refused or failed
connection (pod not found, RBAC, no API server) is 255 too, and kubectl exits with the
command's status after printing ``command terminated with exit code N``, with its own
failures mapped to 255. The reason goes to the log (:meth:`run`) or into the
:class:`~rayfield.autoscaler.command_runner.CommandError` (:meth:`output`, copies).

**File copies** are tar archives over exec (Python's ``tarfile`` here, ``tar`` in the
pod): :meth:`~KubernetesCommandRunner.sync_up` replaces the target (a directory's
contents replace the target directory's, as ``rsync --delete`` does), extracting into
a new sibling directory that is then renamed over it; :meth:`sync_down` makes ``target``
a copy of ``source`` (archived in the pod, extracted here with the ``data`` filter:
no absolute paths, no ``..``, no links out of the target). A leading ``~/`` means the
pod user's home.

Tested against the exec endpoint of ``tests/integration/fake_kubernetes.py`` (a websocket server
that runs the command with bash on this machine), with the real client and real kubectl;
not run against a real cluster here.
"""

from __future__ import annotations

import abc
import io
import json
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import IO, Any

from rayfield.autoscaler.command_runner import CommandError, CommandRunner, env_script
from rayfield.autoscaler.providers.kubernetes_api import api_client

__all__ = [
    "EXEC_PREFIX",
    "RUNNERS",
    "ExecResult",
    "KubectlExec",
    "KubernetesCommandRunner",
    "StreamExec",
    "exec_status",
    "remote_path",
]

#: The command every exec runs; the script's length in bytes follows it.
EXEC_PREFIX = ("bash", "-c", 'eval "$(head -c "$1")"', "rayfield-exec")
#: The transports ``provider.command_runner`` may name.
RUNNERS = ("api", "kubectl")
NO_CONNECTION = 255
TIMED_OUT = 124
_TERMINATED = re.compile(rb"command terminated with exit code (\d+)")
_CHUNK = 64 * 1024


class ExecResult:
    """What one exec returned: ``status`` (see the module docstring), the command's
    ``stdout`` (empty when it went to a log) and ``error``, the transport's own message
    (empty on success)."""

    def __init__(self, status: int, stdout: bytes = b"", error: str = "") -> None:
        self.status = status
        self.stdout = stdout
        self.error = error


def exec_status(error_channel: bytes | str) -> tuple[int, str]:
    """The exit status and reason in the exec API's final status (a ``v1.Status`` as
    JSON on the error channel): 0 for ``Success``, the code of ``NonZeroExitCode``,
    255 for anything else (with its message), and 255 when there is none (the
    connection ended first)."""
    text = (
        error_channel.decode(errors="replace")
        if isinstance(error_channel, bytes)
        else error_channel
    )
    if not text.strip():
        return NO_CONNECTION, "the exec connection closed without an exit status"
    try:
        status = json.loads(text)
    except ValueError:
        return NO_CONNECTION, f"exec failed: {text.strip()[:300]}"
    if status.get("status") == "Success":
        return 0, ""
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                try:
                    return int(cause["message"]), ""
                except (KeyError, ValueError):
                    break
    return NO_CONNECTION, f"exec failed: {status.get('message') or status.get('reason')}"


class Transport(abc.ABC):
    """Runs ``argv`` in one pod's container through the exec API."""

    @abc.abstractmethod
    def exec(
        self, argv: list[str], stdin: bytes, out: IO[bytes] | None, timeout_s: float | None
    ) -> ExecResult:
        """Run ``argv`` with ``stdin``; its stdout goes to ``out`` (None: returned in the
        result); a timeout gives status 124."""


class StreamExec(Transport):
    """The exec API through the ``kubernetes`` client's websocket stream.

    Args:
        api_client: a ``kubernetes.client.ApiClient`` used by this transport alone.
        namespace, pod, container: where the command runs.
    """

    def __init__(self, api_client: Any, namespace: str, pod: str, container: str | None) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.namespace, self.pod, self.container = namespace, pod, container

    def _why(self, exc: Exception) -> str:
        """Why the exec was refused: the client's websocket errors often lose the API
        server's reply, so a refused exec reads the pod to say what is wrong with it."""
        try:
            self.core.read_namespaced_pod(self.pod, self.namespace)
        except Exception as probe:  # ApiException: 404, 403, ...
            return _why(probe)
        return _why(exc)

    def exec(
        self, argv: list[str], stdin: bytes, out: IO[bytes] | None, timeout_s: float | None
    ) -> ExecResult:
        from kubernetes.stream import stream

        kw: dict[str, Any] = {"container": self.container} if self.container else {}
        try:
            ws = stream(
                self.core.connect_get_namespaced_pod_exec,
                self.pod,
                self.namespace,
                command=argv,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                binary=True,
                _preload_content=False,
                **kw,
            )
        except Exception as exc:  # ApiException(status=0) from a refused websocket
            return ExecResult(
                NO_CONNECTION, error=f"cannot exec in pod {self.pod}: {self._why(exc)}"
            )
        buf = bytearray()
        errors = bytearray()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            for i in range(0, len(stdin), _CHUNK):
                ws.write_stdin(stdin[i : i + _CHUNK])
            ws.close_channel(0)  # EOF where the server speaks v5; not needed (head -c)
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    return ExecResult(TIMED_OUT, bytes(buf), f"timed out after {timeout_s} s")
                ws.update(timeout=0.5)
                data = ws.read_channel(1)
                if data:
                    out.write(data) if out is not None else buf.extend(data)
                errors += ws.read_channel(2)
                if not ws.is_open():
                    break
            status_text = ws.read_channel(3)
        except Exception as exc:  # websocket errors: the connection dropped
            return ExecResult(NO_CONNECTION, bytes(buf), f"exec connection failed: {_why(exc)}")
        finally:
            ws.close()
        status, why = exec_status(status_text)
        stderr = errors.decode(errors="replace").strip()
        return ExecResult(status, bytes(buf), "; ".join(x for x in (why, stderr) if x))


class KubectlExec(Transport):
    """The exec API through ``kubectl exec``.

    Args:
        namespace, pod, container: where the command runs.
        kubectl: the kubectl command (default ``kubectl`` from ``$PATH``).
    """

    def __init__(
        self, namespace: str, pod: str, container: str | None, kubectl: str = "kubectl"
    ) -> None:
        self.namespace, self.pod, self.container, self.kubectl = namespace, pod, container, kubectl

    def command(self, argv: list[str]) -> list[str]:
        """The kubectl command line running ``argv`` in the pod."""
        where = ["-c", self.container] if self.container else []
        return [self.kubectl, "exec", "-i", "-n", self.namespace, self.pod, *where, "--", *argv]

    def exec(
        self, argv: list[str], stdin: bytes, out: IO[bytes] | None, timeout_s: float | None
    ) -> ExecResult:
        direct = out is not None and _has_fileno(out)
        try:
            done = subprocess.run(
                self.command(argv),
                input=stdin,
                stdout=out if direct else subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=timeout_s,
                check=False,
            )
        except FileNotFoundError:
            raise CommandError(
                f"{self.kubectl!r} is not on PATH: install kubectl or set "
                "provider.command_runner: api"
            ) from None
        except subprocess.TimeoutExpired:
            return ExecResult(TIMED_OUT, error=f"timed out after {timeout_s} s")
        stdout = done.stdout or b""
        if out is not None and not direct:
            out.write(stdout)
            stdout = b""
        if done.returncode == 0:
            return ExecResult(0, stdout)
        found = _TERMINATED.search(done.stderr)
        message = done.stderr.decode(errors="replace").strip()[-500:]
        if found:
            return ExecResult(int(found.group(1)), stdout, message)
        return ExecResult(NO_CONNECTION, stdout, f"kubectl exec failed: {message}")


def _has_fileno(f: IO[bytes]) -> bool:
    try:
        f.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return False
    return True


def _why(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return f"HTTP {status} {reason}" if status else str(reason)


def remote_path(path: str) -> str:
    """``path`` as a bash word: quoted, with a leading ``~`` or ``~/`` as ``$HOME``."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:]) if path[2:] else '"$HOME"/'
    return shlex.quote(path)


def exec_input(script: str, payload: bytes = b"") -> tuple[list[str], bytes]:
    """The argv and stdin of one exec: :data:`EXEC_PREFIX` with the script's length, and
    the script followed by ``payload``."""
    data = script.encode()
    return [*EXEC_PREFIX, str(len(data))], data + payload


def command_script(cmd: str, env: dict[str, str] | None, merge_stderr: bool) -> str:
    """The script that runs ``cmd`` in the home directory with ``env`` exported and
    stdin from ``/dev/null`` (stderr into stdout with ``merge_stderr``)."""
    head = ['cd "$HOME" 2>/dev/null || true', "exec </dev/null"]
    if merge_stderr:
        head.append("exec 2>&1")
    return "\n".join(head) + "\n" + env_script(cmd, env)


class KubernetesCommandRunner(CommandRunner):
    """A :class:`~rayfield.autoscaler.command_runner.CommandRunner` for one pod through
    the exec API (see the module docstring).

    Args:
        namespace: the pod's namespace.
        pod: the pod's name (the node id).
        container: the container to run in; None: the pod's first (the API's default).
        transport: ``"api"`` (the kubernetes client) or ``"kubectl"``, or a
            :class:`Transport`.
        provider_config: configures the ``api`` transport's client (as the provider's).

    Raises:
        ValueError: ``transport`` is neither ``"api"`` nor ``"kubectl"``.
    """

    def __init__(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        transport: str | Transport = "api",
        provider_config: dict[str, Any] | None = None,
    ) -> None:
        self.namespace, self.pod, self.container = namespace, pod, container
        if isinstance(transport, str) and transport not in RUNNERS:
            raise ValueError(f"provider.command_runner {transport!r}: pick one of {RUNNERS}")
        self._transport = transport
        self._provider_config = dict(provider_config or {})

    @property
    def transport(self) -> Transport:
        """The transport (the ``api`` one's client is made at first use)."""
        if self._transport == "kubectl":
            self._transport = KubectlExec(self.namespace, self.pod, self.container)
        elif self._transport == "api":
            client = api_client(self._provider_config)
            self._transport = StreamExec(client, self.namespace, self.pod, self.container)
        assert isinstance(self._transport, Transport)
        return self._transport

    def _exec(
        self, script: str, payload: bytes, out: IO[bytes] | None, timeout_s: float | None
    ) -> ExecResult:
        argv, stdin = exec_input(script, payload)
        return self.transport.exec(argv, stdin, out, timeout_s)

    def run(
        self,
        cmd: str,
        env: dict[str, str] | None = None,
        log: IO[bytes] | None = None,
        timeout_s: float | None = None,
    ) -> int:
        done = self._exec(command_script(cmd, env, merge_stderr=True), b"", log, timeout_s)
        if done.error and log is not None:
            log.write(f"[{self.pod}] {done.error}\n".encode())
        return done.status

    def output(self, cmd: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> str:
        done = self._exec(command_script(cmd, env, merge_stderr=False), b"", None, timeout_s)
        if done.status != 0:
            raise CommandError(
                f"{cmd!r} in pod {self.namespace}/{self.pod} exited {done.status}: {done.error}"
            )
        return done.stdout.decode(errors="replace")

    def sync_up(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        src = Path(source).expanduser()
        is_dir = src.is_dir()
        if not is_dir and target.endswith("/"):
            target = target + src.name
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            if is_dir:
                for child in sorted(src.iterdir()):
                    tar.add(child, arcname=child.name)
            else:
                tar.add(src, arcname=PurePosixPath(target.rstrip("/")).name)
        payload = buf.getvalue()
        t = remote_path(target.rstrip("/") or "/")
        extract = f'head -c {len(payload)} | tar -xof - -C "$tmp"'
        if is_dir:  # extract next to the target, then put it in the target's place
            script = (
                f'set -e\nt={t}\nmkdir -p "$(dirname "$t")"\n'
                'tmp=$(mktemp -d "$t.rfsync.XXXXXX")\n'
                f'if ! {extract}; then rm -rf "$tmp"; exit 1; fi\n'
                f'chmod {src.stat().st_mode & 0o777:o} "$tmp"; rm -rf "$t"; mv "$tmp" "$t"\n'
            )
        else:
            script = f'set -e\nt={t}\ntmp=$(dirname "$t")\nmkdir -p "$tmp"\n{extract}\n'
        head = 'cd "$HOME" 2>/dev/null || true\nexec 2>&1\n'
        done = self._exec(head + script, payload, log, None)
        if done.status != 0:
            raise CommandError(
                f"copying {source} to {self.pod}:{target} failed (exit {done.status}"
                f"{'; ' + done.error if done.error else ''})"
            )

    def sync_down(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        s = remote_path(source.rstrip("/") or "/")
        script = (
            'cd "$HOME" 2>/dev/null || true\nexec </dev/null\n'
            f's={s}\ntar -cf - -C "$(dirname "$s")" "$(basename "$s")"\n'
        )
        done = self._exec(script, b"", None, None)
        what = f"{self.pod}:{source} to {target}"
        if done.status != 0:
            raise CommandError(f"copying {what} failed (exit {done.status}; {done.error})")
        dst = Path(target).expanduser()
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            with tempfile.TemporaryDirectory(dir=dst.parent, prefix=".rfsync.") as tmp:
                with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:") as tar:
                    names = tar.getnames()
                    tar.extractall(tmp, filter="data")
                top = Path(tmp) / PurePosixPath(names[0]).parts[0] if names else None
                if top is None or not top.exists():
                    raise CommandError(f"copying {what} failed: the pod sent an empty archive")
                if dst.is_dir() and top.is_dir():
                    shutil.rmtree(dst)
                top.replace(dst)
        except (tarfile.TarError, OSError) as exc:
            raise CommandError(f"copying {what} failed: {exc}") from None
        if log is not None:
            log.write(f"copied {what} ({len(done.stdout)} bytes of tar)\n".encode())
