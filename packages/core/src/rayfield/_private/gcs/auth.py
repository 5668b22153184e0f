"""Security of the GCS: the cluster token, its check on every call, and mutual TLS.

The token is 256 random bits written as hex to a file only its owner can read.
Every call carries ``authorization: Bearer <hex>`` in its metadata; the
server's ``TokenInterceptor`` checks it before the payload is decoded (a refused
call's deserializer ignores the bytes) and compares with ``hmac.compare_digest``.
TLS, when configured, is mutual: the server requires a client certificate signed
by the cluster CA, and the client checks the server's against the same CA.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from rayfield._private.gcs.errors import GcsAuthError

__all__ = [
    "AUTH_METADATA_KEY",
    "TlsConfig",
    "TokenInterceptor",
    "create_token_file",
    "read_token",
]

AUTH_METADATA_KEY = "authorization"
TOKEN_BYTES = 32  # 256 bits
ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_CA = "RAYFIELD_TLS_CERT", "RAYFIELD_TLS_KEY", "RAYFIELD_TLS_CA"


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


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries ``token``."""
    return ((AUTH_METADATA_KEY, f"Bearer {token}"),)


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses, with UNAUTHENTICATED, every call that lacks the cluster token.

    Args:
        token: the expected token (hex).
        streaming_methods: full method names (``/service/Method``) whose
            responses are streamed, so the refusal uses the same handler kind.
    """

    def __init__(self, token: str, streaming_methods: frozenset[str] = frozenset()):
        self._expected = f"Bearer {token}".encode()
        self._streaming = streaming_methods

    def _authorized(self, details: grpc.HandlerCallDetails) -> bool:
        for key, value in details.invocation_metadata or ():
            if key == AUTH_METADATA_KEY:
                got = value.encode() if isinstance(value, str) else bytes(value)
                return hmac.compare_digest(got, self._expected)
        return False

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        if self._authorized(handler_call_details):
            return continuation(handler_call_details)
        return _refusal(handler_call_details.method in self._streaming)


def _ignore_payload(_raw: bytes) -> bytes:
    # grpc treats a None request as a deserialization failure (INTERNAL).
    return b""


def _refusal(streaming: bool) -> grpc.RpcMethodHandler:
    message = (
        "missing or wrong cluster token: pass the token of this cluster "
        "(the GCS --token-file) as 'authorization: Bearer <hex>'"
    )

    def abort(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if streaming:
        return grpc.unary_stream_rpc_method_handler(abort, request_deserializer=_ignore_payload)
    return grpc.unary_unary_rpc_method_handler(abort, request_deserializer=_ignore_payload)


@dataclass(frozen=True)
class TlsConfig:
    """Paths of this process's certificate and key (PEM) and of the cluster CA."""

    cert_path: str
    key_path: str
    ca_path: str

    @classmethod
    def from_env(cls) -> TlsConfig | None:
        """TLS from RAYFIELD_TLS_CERT/KEY/CA; None when none of them is set.

        Raises:
            GcsAuthError: when only some of the three variables are set.
        """
        values = [os.environ.get(k, "") for k in (ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_CA)]
        if not any(values):
            return None
        if not all(values):
            raise GcsAuthError(
                f"TLS needs all of {ENV_TLS_CERT}, {ENV_TLS_KEY} and {ENV_TLS_CA}; "
                "set the missing ones or unset all three"
            )
        return cls(*values)

    def _read(self) -> tuple[bytes, bytes, bytes]:
        try:
            cert, key, ca = (
                Path(p).read_bytes() for p in (self.cert_path, self.key_path, self.ca_path)
            )
        except OSError as exc:
            raise GcsAuthError(f"cannot read a TLS file: {exc}") from None
        return cert, key, ca

    def server_credentials(self) -> grpc.ServerCredentials:
        """Mutual-TLS credentials for a server: client certificates are required.

        Raises:
            GcsAuthError: when a file cannot be read.
        """
        cert, key, ca = self._read()
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=True
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Mutual-TLS credentials for a client channel.

        Raises:
            GcsAuthError: when a file cannot be read.
        """
        cert, key, ca = self._read()
        return grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert
        )


def open_channel(
    address: str,
    tls: TlsConfig | None,
    max_message_bytes: int,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A gRPC channel to ``address``: mutual TLS with ``tls``, else plaintext; messages
    capped at ``max_message_bytes`` both ways; extra channel ``options`` appended.

    Raises:
        GcsAuthError: when a TLS file cannot be read.
    """
    opts = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        *options,
    ]
    if tls is not None:
        return grpc.secure_channel(address, tls.channel_credentials(), options=opts)
    return grpc.insecure_channel(address, options=opts)
