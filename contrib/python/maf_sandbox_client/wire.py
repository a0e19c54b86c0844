"""Framing and limits of the wire (proto/PROTOCOL.md, "Transport and framing", "Limits").

One frame is one JSON value in compact form followed by LF; a CR before the LF is ignored and
blank lines are skipped. Requests are JSON-RPC 2.0 objects with an integer ``id``.
"""

from __future__ import annotations

import binascii
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Mapping
from typing import Any

from .errors import FrameTooLarge, InvalidParams

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_REPLY_BYTES",
    "DECODE_OFFLOAD_BYTES",
    "decode_on_loop",
    "plain",
    "DEFAULT_ROOT_SOCKET",
    "INT64_MAX",
    "INT64_MIN",
    "OFFLOAD_BYTES",
    "SOCKET_ENV",
    "SOCKET_NAME",
    "Base64Str",
    "Base64Text",
    "approx_size",
    "b64decode_strict",
    "b64encode_text",
    "check_sendable",
    "decode_frame",
    "default_socket_path",
    "encode_notification",
    "encode_request",
    "encode_work",
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


#: The integers the daemon reads (JSON numbers are int64 there). One outside this range is a
#: ParseError answered with a null ``id``, which no call in flight could be told of.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: A frame larger than this (about) is encoded or decoded on a worker thread, so a large
#: ``files.write`` or ``files.read`` does not hold the event loop for a second.
OFFLOAD_BYTES = 1024 * 1024
#: A received frame up to this long is decoded on the event loop: with its long base64
#: strings taken out (:func:`decode_frame`) that is their strict decoding, about 4 ms a MiB
#: of content at most, less than the two thread switches of a worker thread under load.
DECODE_OFFLOAD_BYTES = 4 * 1024 * 1024


def _refuse(field: str, why: str) -> InvalidParams:
    return InvalidParams(f"{field}: {why}", data={"field": field, "client_side": True})


def check_sendable(value: Any, where: str = "params") -> None:
    """Refuses, before sending, a value the daemon could only answer with an error that has a
    null ``id`` (so no call could be told it failed): a NUL in a string (the daemon refuses
    ``\\u0000`` anywhere), a lone surrogate (not UTF-8), a non-finite number (not JSON), an
    integer outside int64 (the daemon's JSON numbers)."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, str):
            if "\x00" in v:
                raise _refuse(at, "a string may not contain NUL (U+0000)")
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    raise _refuse(at, "a string is not valid Unicode (a lone surrogate)") from None
        elif isinstance(v, int):
            if not INT64_MIN <= v <= INT64_MAX:
                raise _refuse(at, f"integers must be within int64 ({INT64_MIN}..{INT64_MAX})")
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


class Base64Text:
    """Base64 text (ASCII bytes of its alphabet: nothing to escape) that goes into a frame as
    a JSON string without passing through ``json.dumps`` — which holds the interpreter for
    the whole string, about half a second for 64 MiB."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __str__(self) -> str:
        return self.data.decode("ascii")

    def __repr__(self) -> str:
        return f"Base64Text({len(self.data)} bytes)"


#: Raw bytes per base64 call (a multiple of 3, so the pieces join into one valid text): short
#: enough that other threads (the event loop) get the interpreter between two pieces.
B64_CHUNK_BYTES = 3 * 128 * 1024


def b64encode_text(data: bytes | bytearray | memoryview) -> Base64Text:
    """``data`` in base64: in one call up to OFFLOAD_BYTES (about a millisecond, made on the
    caller's thread), piece by piece beyond (made on a worker thread)."""
    view = memoryview(data).cast("B")
    if len(view) <= OFFLOAD_BYTES:
        return Base64Text(binascii.b2a_base64(view, newline=False))
    return Base64Text(b"".join(binascii.b2a_base64(view[i:i + B64_CHUNK_BYTES], newline=False)
                               for i in range(0, len(view), B64_CHUNK_BYTES)))


#: Base64 characters per decoding call (a multiple of 4): short enough that the event loop
#: gets the interpreter between two pieces when a large text is decoded on a worker thread.
B64_DECODE_CHUNK = 4 * 128 * 1024


def b64decode_strict(text: str | bytes, start: int = 0, stop: int | None = None) -> bytes:
    """``text[start:stop]`` as strict base64 (the alphabet only, padding only at the end),
    decoded piece by piece. Raises ``ValueError`` (``binascii.Error`` is one) for anything
    else."""
    stop = len(text) if stop is None else stop
    n = stop - start
    eq: Any = "=" if isinstance(text, str) else b"="
    if n % 4 or text.find(eq, start, max(start, stop - 2)) >= 0:
        raise ValueError("bad length or padding")
    src: Any = text if isinstance(text, str) else memoryview(text)
    if n <= B64_DECODE_CHUNK:
        return binascii.a2b_base64(src[start:stop], strict_mode=True)
    return b"".join(binascii.a2b_base64(src[i:min(i + B64_DECODE_CHUNK, stop)], strict_mode=True)
                    for i in range(start, stop, B64_DECODE_CHUNK))


def approx_size(value: Any) -> int:
    """About how many bytes ``value`` takes as JSON (its strings' lengths, a little for the
    rest): cheap, to decide whether to encode it on a worker thread."""
    total = 0
    stack: list[Any] = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (str, Base64Text)):
            total += len(v) + 2
        elif isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        else:
            total += 8
    return total


#: What a Base64Text costs encode_request, against a string of the same length: it is
#: copied into the frame once, never walked by json.dumps.
_BLOB_WORK_DIVISOR = 8


def encode_work(value: Any) -> int:
    """About how many bytes of work ``encode_request`` does for ``value``: :func:`approx_size`
    with each :class:`Base64Text` counted at an eighth of its length (a copy, not a walk), to
    decide whether to encode it on a worker thread."""
    total = 0
    stack: list[Any] = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Base64Text):
            total += len(v) // _BLOB_WORK_DIVISOR + 2
        elif isinstance(v, str):
            total += len(v) + 2
        elif isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        else:
            total += 8
    return total


def _placeholders(value: Any, token: str, blobs: list[bytes]) -> Any:
    """A copy of ``value`` with each :class:`Base64Text` replaced by ``token`` + its index in
    ``blobs``; ``value`` itself when it holds none."""
    if isinstance(value, Base64Text):
        blobs.append(value.data)
        return f"{token}{len(blobs) - 1}"
    if isinstance(value, Mapping):
        before = len(blobs)
        out = {k: _placeholders(v, token, blobs) for k, v in value.items()}
        return out if len(blobs) > before else value
    if isinstance(value, (list, tuple)):
        before = len(blobs)
        items = [_placeholders(v, token, blobs) for v in value]
        return items if len(blobs) > before else value
    return value


def _dump(obj: Any) -> bytes:
    # ASCII only (anything else as a \u escape): faster than encoding the text as UTF-8.
    blobs: list[bytes] = []
    token = f"msb-blob-{secrets.token_hex(16)}-"
    obj = _placeholders(obj, token, blobs)
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    if not blobs:
        return text.encode("ascii") + b"\n"
    # Split on the quoted placeholders: text, index, text, index, ..., text.
    parts = re.split(f'"{re.escape(token)}(\\d+)"', text)
    pieces: list[bytes] = []
    for i, part in enumerate(parts):
        pieces.extend((part.encode("ascii"),) if i % 2 == 0 else (b'"', blobs[int(part)], b'"'))
    pieces.append(b"\n")
    return b"".join(pieces)


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


class Base64Str(str):
    """A ``*_b64`` string of a received frame (a ``str``, equal to what ``json.loads`` gives),
    with its strict decoding already made by :func:`decode_frame`: ``decoded``. The client's
    decoders take the bytes from here instead of decoding the text again; what the client
    hands its caller holds plain ``str`` (:func:`plain`)."""

    __slots__ = ("decoded",)

    def __new__(cls, text: str) -> Base64Str:
        self = super().__new__(cls, text)
        self.decoded = None
        return self


#: A ``*_b64`` member's value at least this long is taken out of the text before
#: ``json.loads`` (see :func:`decode_frame`); shorter ones are not worth the extra pass.
FAST_B64_MIN_BYTES = 4096
#: How a member named ``*_b64`` ends and its string value begins, in a compact frame.
_B64_MEMBER = b'_b64":"'
_BLANK = b" \t\n\r\x0b\x0c"
_NOT_FAST = object()


def _substitute(value: Any, blobs: dict[str, Base64Str], seen: list[str]) -> Any:
    """``value`` with each string value that is a key of ``blobs`` replaced by its blob (each
    replacement noted in ``seen``)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str):
                if v in blobs:
                    seen.append(v)
                    value[k] = blobs[v]
            elif isinstance(v, (dict, list)):
                _substitute(v, blobs, seen)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, str):
                if v in blobs:
                    seen.append(v)
                    value[i] = blobs[v]
            elif isinstance(v, (dict, list)):
                _substitute(v, blobs, seen)
    return value


def _decode_with_blobs(line: bytes, end: int) -> Any:
    """``json.loads`` of ``line[:end]`` without walking its long base64 strings, or
    ``_NOT_FAST`` when this cannot say (the caller then parses the whole text).

    Each string value of a member named ``*_b64`` of at least FAST_B64_MIN_BYTES is decoded
    as strict base64 (which it must be anyway) and replaced in the text by a unique token, the
    rest parsed by ``json.loads``, and the token put back as a :class:`Base64Str` carrying
    the decoded bytes. Exact: a strict base64 text holds no quote, backslash or control
    character, so it lexes as the token does; the result is used only when each token came
    back as a whole string value, exactly once — then the original text is valid JSON with
    those values, and otherwise (any doubt, or text that is not base64) ``_NOT_FAST``."""
    spans: list[tuple[int, int]] = []
    pos = line.find(_B64_MEMBER, 0, end)
    while pos >= 0:
        start = pos + len(_B64_MEMBER)
        stop = line.find(b'"', start, end)
        if stop < 0:
            return _NOT_FAST
        if stop - start >= FAST_B64_MIN_BYTES:
            spans.append((start, stop))
        pos = line.find(_B64_MEMBER, stop + 1, end)
    if not spans:
        return _NOT_FAST
    token = f"msb-b64-{secrets.token_hex(16)}-"
    blobs: dict[str, Base64Str] = {}
    pieces: list[bytes] = []
    prev = 0
    view = memoryview(line)
    for i, (start, stop) in enumerate(spans):
        try:
            decoded = b64decode_strict(line, start, stop)
        except ValueError:
            return _NOT_FAST
        # str() first: a str subclass made straight from bytes decodes them slowly.
        text = Base64Str(str(view[start:stop], "ascii"))
        text.decoded = decoded
        blobs[f"{token}{i}"] = text
        pieces += (line[prev:start], f"{token}{i}".encode("ascii"))
        prev = stop
    pieces.append(line[prev:end])
    value = json.loads(b"".join(pieces).decode("utf-8"))
    seen: list[str] = []
    value = _substitute(value, blobs, seen) if isinstance(value, (dict, list)) else value
    return value if len(seen) == len(blobs) == len(set(seen)) else _NOT_FAST


def decode_on_loop(line: bytes) -> bool:
    """Whether :func:`decode_frame` of ``line`` is cheap enough for the event loop: at most
    OFFLOAD_BYTES, or at most DECODE_OFFLOAD_BYTES of which all but OFFLOAD_BYTES is long
    ``*_b64`` text (decoded in one C call; the rest is what ``json.loads`` walks). The spans
    are found as :func:`decode_frame` finds them (a memchr-speed scan)."""
    size = len(line)
    if size <= OFFLOAD_BYTES:
        return True
    if size > DECODE_OFFLOAD_BYTES:
        return False
    b64 = 0
    pos = line.find(_B64_MEMBER)
    while pos >= 0:
        start = pos + len(_B64_MEMBER)
        stop = line.find(b'"', start)
        if stop < 0:
            break
        if stop - start >= FAST_B64_MIN_BYTES:
            b64 += stop - start
        pos = line.find(_B64_MEMBER, stop + 1)
    return size - b64 <= OFFLOAD_BYTES


def plain(value: Any) -> Any:
    """``value`` with every :class:`Base64Str` in it (at any depth of dicts and lists) made a
    plain ``str`` without its decoded bytes: what the public ``call`` hands out."""
    if isinstance(value, Base64Str):
        return str.__str__(value)
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (Base64Str, dict, list)):
                value[k] = plain(v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, (Base64Str, dict, list)):
                value[i] = plain(v)
    return value


def decode_frame(line: bytes) -> Any:
    """The JSON value of one received line (LF and an optional CR stripped); ``None`` for a
    blank line. Raises ``ValueError`` for text that is not JSON.

    Long ``*_b64`` members (files.read's content, exec's output) are not walked by
    ``json.loads``: they come back as :class:`Base64Str`, already decoded (see
    ``_decode_with_blobs``); the value is the one ``json.loads`` gives for the same text."""
    end = len(line)
    if end and line[end - 1] == 0x0A:
        end -= 1
    if end and line[end - 1] == 0x0D:
        end -= 1
    if end == 0 or (line[0] in _BLANK and not line[:end].strip()):
        return None
    if end >= FAST_B64_MIN_BYTES:
        try:
            value = _decode_with_blobs(line, end)
        except (ValueError, UnicodeDecodeError, RecursionError):
            value = _NOT_FAST
        if value is not _NOT_FAST:
            return value
    return json.loads(str(memoryview(line)[:end], "utf-8"))
