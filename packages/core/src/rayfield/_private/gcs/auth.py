"""The cluster token file: created once per cluster, read by every process that joins.

The token is 256 random bits written as hex to a file only its owner can read.
Every call carries it as ``authorization: Bearer <hex>`` (``transport.auth_metadata``),
and the server's ``transport.TokenInterceptor`` checks it before decoding a payload.
Mutual TLS is ``transport.TlsConfig``.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from rayfield._private.protocol.errors import GcsAuthError

__all__ = ["TOKEN_BYTES", "create_token_file", "read_token"]

TOKEN_BYTES = 32  # 256 bits


def create_token_file(path: str | os.PathLike[str]) -> str:
    """Create ``path`` holding a new random 256-bit token (hex), readable by its owner only.

    Returns:
        The token (64 hex characters).

    Raises:
        FileExistsError: when ``path`` exists (an existing token is never overwritten).
    """
    token = secrets.token_hex(TOKEN_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def read_token(path: str | os.PathLike[str]) -> str:
    """Read the token written by ``create_token_file``.

    Raises:
        GcsAuthError: when the file is missing, readable by group or others
            (fix with ``chmod 600 PATH``), or does not hold 64 hex characters.
    """
    p = Path(path)
    try:
        mode = p.stat().st_mode
        text = p.read_text().strip()
    except OSError as exc:
        raise GcsAuthError(f"cannot read the cluster token file {p}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise GcsAuthError(
            f"the cluster token file {p} is accessible by other users "
            f"(mode {stat.S_IMODE(mode):o}): run chmod 600 {p}"
        )
    try:
        ok = len(bytes.fromhex(text)) == TOKEN_BYTES
    except ValueError:
        ok = False
    if not ok:
        raise GcsAuthError(
            f"{p} does not hold a cluster token ({TOKEN_BYTES * 2} hex characters); "
            "recreate it with create_token_file"
        )
    return text
