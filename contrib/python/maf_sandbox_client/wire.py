"""Framing and limits of the wire (proto/PROTOCOL.md, "Transport and framing", "Limits").

One frame is one JSON value in compact form followed by LF; a CR before the LF is ignored and
blank lines are skipped. Requests are JSON-RPC 2.0 objects with an integer ``id``.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from typing import Any

from .errors import FrameTooLarge, InvalidParams

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_ROOT_SOCKET",
    "SOCKET_ENV",
    "SOCKET_NAME",
    "check_sendable",
    "decode_frame",
    "default_socket_path",
    "encode_notification",
    "encode_request",
]

#: The daemon's default largest request frame (LF excluded): 96 MiB, which admits a 64 MiB
#: file in base64 plus its envelope. ``daemon.describe`` says the configured value
#: (``wire.max_frame_bytes``); the client learns it whenever it calls describe.
DEFAULT_MAX_FRAME_BYTES = 96 * 1024 * 1024

#: The largest reply frame this client accepts. Replies are not bound by the request limit:
#: ``files.read`` of 256 files may return 256 MiB of content, about 342 MiB in base64.
#: A longer line is a protocol violation and ends the connection.
DEFAULT_MAX_REPLY_BYTES = 512 * 1024 * 1024

#: The environment variable naming the socket (as for the CLI and libmaf-sandbox).
SOCKET_ENV = "MAF_SANDBOX_SOCKET"
#: The system daemon's socket (meson's ``socket_path`` default).
DEFAULT_ROOT_SOCKET = "/run/maf-sandbox.sock"
#: The socket's name in ``$XDG_RUNTIME_DIR``, for a daemon a user runs itself.
SOCKET_NAME = "maf-sandbox.sock"


def default_socket_path() -> str:
    """The socket the CLI would use (client/msb.c): ``$MAF_SANDBOX_SOCKET``; else, for a user
    other than root who runs a daemon of their own, ``$XDG_RUNTIME_DIR/maf-sandbox.sock``;
    else ``/run/maf-sandbox.sock``, the system daemon's (open to its socket group)."""
    env = os.environ.get(SOCKET_ENV)
    if env:
        return env
    if os.geteuid() == 0:
        return DEFAULT_ROOT_SOCKET
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        own = os.path.join(runtime, SOCKET_NAME)
        try:
            if stat.S_ISSOCK(os.lstat(own).st_mode):
                return own
        except OSError:
            pass
    return DEFAULT_ROOT_SOCKET


def _refuse(field: str, why: str) -> InvalidParams:
    return InvalidParams(f"{field}: {why}", data={"field": field, "client_side": True})


def check_sendable(value: Any, where: str = "params") -> None:
    """Refuses, before sending, a value the daemon could only answer with an error that has a
    null ``id`` (so no call could be told it failed): a NUL in a string (the daemon refuses
    ``\\u0000`` anywhere), a lone surrogate (not UTF-8), a non-finite number (not JSON)."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, str):
            if "\x00" in v:
                raise _refuse(at, "a string may not contain NUL (U+0000)")
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise _refuse(at, "a string is not valid Unicode (a lone surrogate)") from None
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise _refuse(at, "numbers must be finite")
        elif isinstance(v, Mapping):
            for k, item in v.items():
                if not isinstance(k, str):
                    raise _refuse(at, "object keys must be strings")
                stack.append((k, at))
                stack.append((item, f"{at}.{k}"))
        elif isinstance(v, (list, tuple)):
            for i, item in enumerate(v):
                stack.append((item, f"{at}[{i}]"))


def _dump(obj: Any) -> bytes:
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8") + b"\n"


def encode_request(request_id: int, method: str, params: Mapping[str, Any] | None,
                   max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """One request frame, LF included. Raises :class:`InvalidParams` for a value that cannot
    travel and :class:`FrameTooLarge` (client side) for a frame over ``max_frame_bytes``."""
    check_sendable(method, "method")
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        check_sendable(params)
        msg["params"] = params
    frame = _dump(msg)
    if len(frame) - 1 > max_frame_bytes:
        raise FrameTooLarge(
            f"the request is {len(frame) - 1} bytes, over the daemon's frame limit of "
            f"{max_frame_bytes} bytes", data={"limit": max_frame_bytes, "size": len(frame) - 1,
                                              "client_side": True})
    return frame


def encode_notification(method: str, params: Mapping[str, Any] | None = None) -> bytes:
    """A frame without ``id`` (the daemon executes it and never answers)."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        check_sendable(params)
        msg["params"] = params
    return _dump(msg)


def decode_frame(line: bytes) -> Any:
    """The JSON value of one received line (LF and an optional CR stripped); ``None`` for a
    blank line. Raises ``ValueError`` for text that is not JSON."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line.strip():
        return None
    return json.loads(line.decode("utf-8"))
