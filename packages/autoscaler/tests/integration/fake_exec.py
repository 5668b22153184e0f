"""The server side of the Kubernetes exec API (``pods/exec``) for the fake API server:
the websocket handshake (RFC 6455) with the ``v5.channel.k8s.io`` or
``v4.channel.k8s.io`` subprotocol, and a command run with ``subprocess`` on this
machine, its stdin, stdout and stderr on channels 0, 1 and 2, and its end as a
``v1.Status`` on channel 3 (``Success``, or ``NonZeroExitCode`` with the code), as the
kubelet reports it. A v5 client closes stdin with ``[255, 0]``."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import subprocess
import threading
from typing import IO, Any

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")


def _read_exact(f: IO[bytes], n: int) -> bytes:
    data = f.read(n)
    if data is None or len(data) < n:
        raise EOFError
    return data


def read_frame(f: IO[bytes]) -> tuple[int, bytes]:
    """One (unfragmented or reassembled) client frame: (opcode, unmasked payload)."""
    opcode, payload = 0, b""
    while True:
        b0, b1 = _read_exact(f, 2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", _read_exact(f, 2))[0]
        elif n == 127:
            n = struct.unpack(">Q", _read_exact(f, 8))[0]
        mask = _read_exact(f, 4) if b1 & 0x80 else b"\0\0\0\0"
        data = bytes(c ^ mask[i % 4] for i, c in enumerate(_read_exact(f, n)))
        opcode = opcode or (b0 & 0x0F)
        payload += data
        if b0 & 0x80:
            return opcode, payload


def frame(opcode: int, payload: bytes) -> bytes:
    """A server frame (final, unmasked)."""
    n = len(payload)
    if n < 126:
        head = struct.pack(">BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack(">BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack(">BBQ", 0x80 | opcode, 127, n)
    return head + payload


def serve_exec(
    handler: Any, argv: list[str], cwd: str, env: dict[str, str], protocols: str
) -> None:
    """Upgrade ``handler`` (a ``BaseHTTPRequestHandler``) to a websocket and run ``argv``
    over it."""
    offered = [p.strip() for p in protocols.split(",")]
    protocol = next((p for p in _PROTOCOLS if p in offered), None)
    key = handler.headers["Sec-WebSocket-Key"].encode()
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode()
    handler.send_response(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept)
    if protocol:
        handler.send_header("Sec-WebSocket-Protocol", protocol)
    handler.end_headers()
    handler.wfile.flush()
    handler.close_connection = True
    lock = threading.Lock()

    def send(opcode: int, payload: bytes) -> None:
        with lock:
            handler.wfile.write(frame(opcode, payload))
            handler.wfile.flush()

    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        status = {"status": "Failure", "reason": "InternalError", "message": str(exc)}
        send(2, b"\3" + json.dumps(status).encode())
        send(8, b"\x03\xe8")
        return

    def pump(src: IO[bytes], channel: int) -> None:
        for chunk in iter(lambda: src.read1(65536), b""):  # type: ignore[attr-defined]
            send(2, bytes([channel]) + chunk)

    def feed() -> None:
        assert proc.stdin is not None
        try:
            while True:
                opcode, data = read_frame(handler.rfile)
                if opcode == 8:
                    break
                if opcode == 9:
                    send(10, data)
                elif opcode in (1, 2) and data:
                    if data[0] == 0 and len(data) > 1:
                        proc.stdin.write(data[1:])
                        proc.stdin.flush()
                    elif data[0] == 255 and data[1:2] == b"\0":
                        proc.stdin.close()
        except (EOFError, OSError, ValueError):
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    pumps = [
        threading.Thread(target=pump, args=(proc.stdout, 1), daemon=True),
        threading.Thread(target=pump, args=(proc.stderr, 2), daemon=True),
    ]
    for t in pumps:
        t.start()
    threading.Thread(target=feed, daemon=True).start()
    code = proc.wait()
    for t in pumps:
        t.join()
    if code == 0:
        status: dict[str, Any] = {"metadata": {}, "status": "Success"}
    else:
        status = {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: exit status {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    try:
        send(2, b"\3" + json.dumps(status).encode())
        send(8, b"\x03\xe8")
    except OSError:
        pass
