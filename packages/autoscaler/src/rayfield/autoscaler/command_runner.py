"""Running commands and copying files on a node: the :class:`CommandRunner` interface and
its SSH implementation (OpenSSH's ``ssh``, ``rsync`` over it, ``scp`` where rsync is
missing).

A command's environment travels on the ssh session's standard input (a ``bash -s``
script that exports it, then runs the command), never on a command line: a cluster
token given to a worker shows in no process list and no log. Host keys are pinned at
first contact (``StrictHostKeyChecking=accept-new``) in the known-hosts file the runner
is given, the cluster's own (:mod:`rayfield.autoscaler.known_hosts`): a node whose key
changed is refused. ``host_key_checking=False`` (the config's
``auth.host_key_checking: false``) goes back to the reference launcher's way,
``StrictHostKeyChecking=no`` with an empty known-hosts file (``/dev/null``): any key is
accepted, so whoever answers at a node's address gets the commands and the cluster
token. Authentication is by the cluster's key only (``IdentitiesOnly``, ``BatchMode``:
never a password prompt).
"""

from __future__ import annotations

import abc
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import IO, Any

from rayfield.autoscaler import known_hosts as known_hosts_file

__all__ = ["CommandError", "CommandRunner", "SSHCommandRunner"]


class CommandError(RuntimeError):
    """A command or a file copy on a node failed; the message says which and how."""


class CommandRunner(abc.ABC):
    """Runs shell commands on one node and copies files to and from it."""

    @abc.abstractmethod
    def run(
        self,
        cmd: str,
        env: dict[str, str] | None = None,
        log: IO[bytes] | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Run ``cmd`` with bash on the node; its exit status (255: no connection).

        Args:
            cmd: a bash command line.
            env: exported before ``cmd`` runs (not shown in any process list).
            log: receives the command's stdout and stderr; None discards them.
            timeout_s: seconds before the local side gives up (status 124).
        """

    @abc.abstractmethod
    def output(self, cmd: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> str:
        """The stdout of ``cmd`` on the node.

        Raises:
            CommandError: it exited non-zero or timed out.
        """

    @abc.abstractmethod
    def sync_up(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        """Copy the local ``source`` (file or directory) to ``target`` on the node; a
        directory's contents replace the target directory's.

        Raises:
            CommandError: the copy failed.
        """

    @abc.abstractmethod
    def sync_down(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        """Copy ``source`` on the node to the local ``target``.

        Raises:
            CommandError: the copy failed.
        """


def env_script(cmd: str, env: dict[str, str] | None) -> str:
    """A bash script that exports ``env`` and runs ``cmd``."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return "\n".join([*lines, cmd, ""])


class SSHCommandRunner(CommandRunner):
    """A :class:`CommandRunner` over OpenSSH.

    Args:
        ip: the node's address.
        ssh_user: the login user.
        ssh_private_key: path of the private key (mode 0600).
        port: the node's SSH port.
        connect_timeout_s: seconds ssh waits for the TCP connection.
        known_hosts: the file the node's host key is recorded in at first contact and
            checked against afterwards (created 0600, and checked as a private file
            before every ssh call); None: ssh's own (``~/.ssh/known_hosts``).
        host_key_checking: False accepts any host key and records none
            (``StrictHostKeyChecking=no``, known hosts ``/dev/null``); ``known_hosts``
            is then unused.
    """

    def __init__(
        self,
        ip: str,
        ssh_user: str,
        ssh_private_key: str | Path,
        port: int = 22,
        connect_timeout_s: float = 5.0,
        *,
        known_hosts: str | Path | None = None,
        host_key_checking: bool = True,
    ) -> None:
        self.ip = ip
        self.ssh_user = ssh_user
        self.ssh_private_key = str(ssh_private_key)
        self.port = port
        self.connect_timeout_s = connect_timeout_s
        self.known_hosts = Path(known_hosts) if known_hosts is not None else None
        self.host_key_checking = host_key_checking

    @property
    def target(self) -> str:
        """``user@ip``."""
        return f"{self.ssh_user}@{self.ip}"

    def host_key_options(self) -> dict[str, str]:
        """The ssh options that check the node's host key (see the class docstring);
        the known-hosts file is created or checked first.

        Raises:
            UnsafeFileError: the known-hosts file or a directory above is not this
                user's alone.
        """
        if not self.host_key_checking:
            return {"StrictHostKeyChecking": "no", "UserKnownHostsFile": "/dev/null"}
        opts = {"StrictHostKeyChecking": "accept-new", "HashKnownHosts": "no"}
        if self.known_hosts is not None:
            known_hosts_file.prepare(self.known_hosts)
            opts["UserKnownHostsFile"] = known_hosts_file.option_value(self.known_hosts)
        return opts

    def ssh_options(self) -> list[str]:
        """The options of every ssh (and scp) call.

        Raises:
            UnsafeFileError: the known-hosts file is not this user's alone.
        """
        opts = {
            **self.host_key_options(),
            "IdentitiesOnly": "yes",
            "BatchMode": "yes",
            "ConnectTimeout": str(max(1, round(self.connect_timeout_s))),
            "ServerAliveInterval": "5",
            "ServerAliveCountMax": "3",
            "LogLevel": "ERROR",
        }
        out = ["-i", self.ssh_private_key]
        for k, v in opts.items():
            out += ["-o", f"{k}={v}"]
        return out

    def ssh_command(self, *, tty: bool = False, port_forward: tuple[int, ...] = ()) -> list[str]:
        """``ssh`` with the options, the forwarded ports and the target (no command)."""
        cmd = ["ssh", *self.ssh_options(), "-p", str(self.port)]
        if tty:
            cmd.append("-tt")
        for p in port_forward:
            cmd += ["-L", f"{p}:localhost:{p}"]
        return [*cmd, self.target]

    def _ssh(
        self, cmd: str, env: dict[str, str] | None, **kw: Any
    ) -> subprocess.CompletedProcess[bytes]:
        script = env_script(cmd, env).encode()
        return subprocess.run([*self.ssh_command(), "bash -s"], input=script, check=False, **kw)

    def run(
        self,
        cmd: str,
        env: dict[str, str] | None = None,
        log: IO[bytes] | None = None,
        timeout_s: float | None = None,
    ) -> int:
        out = log if log is not None else subprocess.DEVNULL
        try:
            return self._ssh(
                cmd, env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            return 124

    def output(self, cmd: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> str:
        try:
            done = self._ssh(cmd, env, capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CommandError(f"{cmd!r} on {self.ip} timed out after {timeout_s} s") from None
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip()[-500:]
            raise CommandError(f"{cmd!r} on {self.ip} exited {done.returncode}: {err}")
        return done.stdout.decode(errors="replace")

    def _copy(self, args: list[str], what: str, log: IO[bytes] | None) -> None:
        done = subprocess.run(
            args,
            stdout=log if log is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode != 0:
            raise CommandError(f"copying {what} failed (exit {done.returncode}; {args[0]})")

    def _rsh(self) -> str:
        return shlex.join(["ssh", *self.ssh_options(), "-p", str(self.port)])

    def sync_up(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        is_dir = Path(source).is_dir()
        src = source.rstrip("/") + "/" if is_dir else source
        dst = target.rstrip("/") + "/" if is_dir else target
        parent = target.rstrip("/") if is_dir else str(Path(target).parent)
        what = f"{source} to {self.ip}:{target}"
        if shutil.which("rsync"):
            mkdir = f"mkdir -p {shlex.quote(parent)} && rsync"
            args = ["rsync", "-az", "--delete", "-e", self._rsh(), f"--rsync-path={mkdir}"]
            self._copy([*args, src, f"{self.target}:{dst}"], what, log)
            return
        if self.run(f"mkdir -p {shlex.quote(parent)}", log=log) != 0:
            raise CommandError(f"copying {what} failed: cannot create {parent} on {self.ip}")
        scp = ["scp", *self.ssh_options(), "-P", str(self.port), "-r", "-q"]
        # scp copies a directory's contents with "dir/." into the existing target.
        self._copy([*scp, src + "." if is_dir else src, f"{self.target}:{dst}"], what, log)

    def sync_down(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        what = f"{self.ip}:{source} to {target}"
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        if shutil.which("rsync"):
            args = ["rsync", "-az", "-e", self._rsh(), f"{self.target}:{source}", target]
            self._copy(args, what, log)
            return
        scp = ["scp", *self.ssh_options(), "-P", str(self.port), "-r", "-q"]
        self._copy([*scp, f"{self.target}:{source}", target], what, log)
