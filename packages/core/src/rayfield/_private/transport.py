"""gRPC for the GCS and the driver side: channels, TLS, the token, servers, errors.

This is the one module of the GCS and the driver that imports grpc (the node process
has its own, in the node manager). Payloads are raw bytes (flatbuffers encoded by
``rayfield._private.protocol``); services are grpcio generic handlers, so no generated
stubs are involved.

- ``open_channel``: a client channel, plaintext or mutual TLS, messages capped.
- ``serve``: a server with the token check in front of every handler.
- ``RpcError`` and ``status``: what callers catch, and its status name and details.
- ``TlsConfig``: the certificate, key and CA paths, and the grpc credentials made of them.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from rayfield._private.protocol.errors import GcsAuthError

__all__ = [
    "AUTH_METADATA_KEY",
    "FAST_RECONNECT",
    "RpcError",
    "Server",
    "TlsConfig",
    "TokenInterceptor",
    "auth_metadata",
    "open_channel",
    "serve",
    "status",
]

AUTH_METADATA_KEY = "authorization"
ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_CA = "RAYFIELD_TLS_CERT", "RAYFIELD_TLS_KEY", "RAYFIELD_TLS_CA"
FAST_RECONNECT: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
"""Channel options: reconnect 0.1 s after a failure, backing off to at most 1 s."""
UNAVAILABLE_STATUSES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
"""Status names that mean the peer did not answer (as opposed to refused the call)."""

RpcError = grpc.RpcError
"""The exception a failed call raises; ``status(exc)`` gives its status and details."""

Server = grpc.Server
"""A running gRPC server (``stop(grace_s)``), as ``serve`` returns it."""


def status(exc: BaseException) -> tuple[str, str]:
    """``(status name, details)`` of a failed call, e.g. ``("UNAVAILABLE", "...")``.

    An exception that is not a call's failure gives ``("UNKNOWN", str(exc))``.
    """
    code = getattr(exc, "code", None)
    if not callable(code):
        return "UNKNOWN", str(exc)
    details = getattr(exc, "details", None)
    return code().name, (details() if callable(details) else "") or ""


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries the cluster ``token`` (``authorization: Bearer``)."""
    return ((AUTH_METADATA_KEY, f"Bearer {token}"),)


@dataclass(frozen=True)
class TlsConfig:
    """Paths of this process's certificate and key (PEM) and of the cluster CA.

    TLS is mutual: a server requires a client certificate signed by the CA, and a
    client checks the server's against the same CA.
    """

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

    def read(self) -> tuple[bytes, bytes, bytes]:
        """The certificate, key and CA (PEM bytes).

        Raises:
            GcsAuthError: when a file cannot be read.
        """
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
        cert, key, ca = self.read()
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=True
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Mutual-TLS credentials for a client channel.

        Raises:
            GcsAuthError: when a file cannot be read.
        """
        cert, key, ca = self.read()
        return grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert
        )


def _message_options(max_message_bytes: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


def open_channel(
    address: str,
    tls: TlsConfig | None,
    max_message_bytes: int,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A channel to ``address`` (HOST:PORT): mutual TLS with ``tls``, else plaintext.

    Args:
        address: the server's ``host:port``.
        tls: the certificates, or None for plaintext.
        max_message_bytes: largest message sent or received, in bytes.
        options: extra grpc channel options, appended.

    Callers make calls with ``channel.unary_unary(path)`` / ``unary_stream(path)``
    and raw-bytes payloads.

    Raises:
        GcsAuthError: when a TLS file cannot be read.
    """
    opts = [*_message_options(max_message_bytes), *options]
    if tls is not None:
        return grpc.secure_channel(address, tls.channel_credentials(), options=opts)
    return grpc.insecure_channel(address, options=opts)


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses, with UNAUTHENTICATED, every call that lacks the cluster token.

    The check runs before the payload is decoded (a refused call's deserializer ignores
    its bytes) and compares with ``hmac.compare_digest``.

    Args:
        token: the expected token (hex).
        streaming_methods: full method names (``/service/Method``) whose responses are
            streamed, so the refusal uses the same handler kind.
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


UnaryHandler = Callable[[bytes], bytes]
StreamHandler = Callable[[bytes, Callable[[], bool]], Iterator[bytes]]
ErrorStatus = Callable[[str, Exception], tuple[str, str]]


def _unary(method: str, fn: UnaryHandler, on_error: ErrorStatus) -> grpc.RpcMethodHandler:
    def handle(raw: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            return fn(raw)
        except Exception as exc:
            name, message = on_error(method, exc)
            context.abort(grpc.StatusCode[name], message)
            raise  # unreachable: abort raises

    return grpc.unary_unary_rpc_method_handler(handle)


def _stream(method: str, fn: StreamHandler, on_error: ErrorStatus) -> grpc.RpcMethodHandler:
    def handle(raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            yield from fn(raw, context.is_active)
        except Exception as exc:
            name, message = on_error(method, exc)
            context.abort(grpc.StatusCode[name], message)

    return grpc.unary_stream_rpc_method_handler(handle)


def serve(
    service: str,
    unary: Mapping[str, UnaryHandler],
    streaming: Mapping[str, StreamHandler],
    on_error: ErrorStatus,
    token: str,
    host: str,
    port: int,
    tls: TlsConfig | None,
    max_message_bytes: int,
    max_workers: int,
) -> tuple[grpc.Server, int]:
    """A server of ``/<service>/<Method>`` bound to ``host:port``, not started yet.

    Args:
        service: the service name, e.g. ``"rayfield.Gcs"``.
        unary: method name -> handler from request bytes to reply bytes.
        streaming: method name -> handler from (request bytes, ``is_active``) to an
            iterator of reply bytes.
        on_error: maps (method name, exception a handler raised) to (status name,
            message), e.g. ``("NOT_FOUND", "no such actor")``; the call fails with it.
        token: the cluster token every call must carry.
        host: address to listen on.
        port: TCP port; 0 picks a free one.
        tls: mutual TLS when given, plaintext otherwise.
        max_message_bytes: largest request accepted and reply sent, in bytes.
        max_workers: server threads.

    Returns:
        ``(server, bound port)``; call ``server.start()``.

    Raises:
        OSError: when it cannot listen on ``host:port`` (in use or not allowed).
        GcsAuthError: when a TLS file cannot be read.
    """
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="gcs"),
        interceptors=[TokenInterceptor(token, frozenset(f"/{service}/{m}" for m in streaming))],
        options=[*_message_options(max_message_bytes), ("grpc.so_reuseport", 0)],
    )
    handlers = {name: _unary(name, fn, on_error) for name, fn in unary.items()}
    handlers.update({name: _stream(name, fn, on_error) for name, fn in streaming.items()})
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, tls.server_credentials())
    except RuntimeError:  # grpc's "Failed to bind": said below in words
        bound = 0
    if not bound:
        raise OSError(
            f"cannot listen on {address}: the port is in use or not allowed here; "
            "pick another with --port (0: any free one)"
        )
    return server, bound
