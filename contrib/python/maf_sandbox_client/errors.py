"""Errors: one class per wire error code, chosen from the code, never from the message.

Every error the daemon sends is ``{"code": int, "message": str, "data": {"type": str, ...}}``
(proto/PROTOCOL.md, "Errors"). :func:`error_from_wire` turns one into an exception whose class
is looked up in :data:`ERROR_CLASSES` by ``code``, or by ``data.type`` for a code this client
does not know yet, and whose builtin base is what the Python sandbox vocabulary
(maf-sandbox 0.41 / maf-sandbox-docker 0.22) raises for the same condition, so a host written
against that package catches the same builtins here.

Every class also derives from :class:`SandboxError`, which carries ``code``, ``type``,
``message`` and ``data`` as the daemon sent them.
"""

from __future__ import annotations

import base64
import binascii
import errno as _errno
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ERROR_CLASSES",
    "ERROR_TYPES",
    "ClientTimeout",
    "ConnectionLost",
    "DaemonUnavailable",
    "FrameTimeout",
    "FrameTooLarge",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "ParseError",
    "ProtocolError",
    "SandboxBackendNotPermitted",
    "SandboxCapabilityNotSupported",
    "SandboxConfinementError",
    "SandboxConflict",
    "SandboxEgressNotEnforced",
    "SandboxEngineError",
    "SandboxEngineTimeout",
    "SandboxEngineUnavailable",
    "SandboxEngineVersionNotSupported",
    "SandboxError",
    "SandboxExecCancelled",
    "SandboxExecOutputLimitExceeded",
    "SandboxFileNotFoundError",
    "SandboxFilePermissionError",
    "SandboxFreezeFailed",
    "SandboxNotADirectoryError",
    "SandboxNotFound",
    "SandboxOSError",
    "SandboxOsFamilyNotSupported",
    "SandboxPermissionDenied",
    "SandboxScopeNotEnforced",
    "SandboxTimeoutError",
    "SandboxNotServed",
    "SandboxOutputError",
    "SandboxTransferCapExceeded",
    "SandboxTransferLimitsNotPermitted",
    "ShuttingDown",
    "TooManyConnections",
    "UnexpectedReply",
    "error_class_for",
    "error_from_wire",
]


class SandboxError(Exception):
    """Base of every error this client raises.

    ``code`` is the wire error code (``None`` for a failure found in this process, such as a
    lost connection), ``type`` the wire's ``data.type``, ``data`` the wire's whole ``data``
    object. Branch on the class, ``code`` or ``type``; ``message`` is for people.
    """

    #: The wire code this class stands for; ``None`` for client-side conditions.
    wire_code: int | None = None
    #: The wire ``data.type`` this class stands for.
    wire_type: str | None = None

    def __init__(
        self,
        message: str = "",
        *,
        code: int | None = None,
        type: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code if code is not None else self.wire_code
        self.type = type if type is not None else self.wire_type
        self.data: dict[str, Any] = dict(data) if data else {}

    def __str__(self) -> str:
        if self.type:
            return f"{self.type}: {self.message}" if self.message else self.type
        return self.message

    @property
    def field(self) -> str | None:
        """``data.field``: the param a -32602 names (``None`` when absent)."""
        value = self.data.get("field")
        return value if isinstance(value, str) else None

    @property
    def path(self) -> str | None:
        """``data.path``: the path a file error names, as the caller gave it."""
        value = self.data.get("path")
        return value if isinstance(value, str) else None

    @property
    def working_directory(self) -> str | None:
        """``data.working_directory``: what a file error's path was resolved against."""
        value = self.data.get("working_directory")
        return value if isinstance(value, str) else None

    @property
    def limit(self) -> int | None:
        """``data.limit`` of a cap error."""
        value = self.data.get("limit")
        return value if isinstance(value, int) else None


class _FileError(SandboxError):
    """Sets ``errno``/``filename`` on the OSError-derived file errors."""

    _errno: int | None = None

    def __init__(self, message: str = "", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        if isinstance(self, OSError):
            self.errno = self._errno
            self.strerror = message
            self.filename = self.path


# ---- JSON-RPC envelope (-32700..-32600) -------------------------------------------------


class ProtocolError(SandboxError):
    """The daemon refused the request envelope itself (a client bug, not a sandbox failure)."""


class ParseError(ProtocolError, ValueError):
    wire_code, wire_type = -32700, "ParseError"


class InvalidRequest(ProtocolError, ValueError):
    wire_code, wire_type = -32600, "InvalidRequest"


class MethodNotFound(ProtocolError, NotImplementedError):
    wire_code, wire_type = -32601, "MethodNotFound"


class InvalidParams(SandboxError, ValueError):
    """-32602: a param is unknown, missing, of the wrong type or invalid (``field`` names it).

    Also raised before anything is sent for a value that cannot travel (a NUL in a string,
    a lone surrogate, a non-finite number); then ``data["client_side"]`` is true.
    """

    wire_code, wire_type = -32602, "InvalidParams"


class InternalError(SandboxError, RuntimeError):
    wire_code, wire_type = -32603, "InternalError"


# ---- the engine (1000s) ---------------------------------------------------------------


class SandboxEngineUnavailable(SandboxError, ConnectionError):
    """1000: the Docker engine is not reachable; the daemon keeps retrying."""

    wire_code, wire_type = 1000, "EngineUnavailable"


class SandboxEngineError(SandboxError, RuntimeError):
    """1001: the engine refused the request (``engine_status`` is its HTTP status)."""

    wire_code, wire_type = 1001, "EngineError"

    @property
    def engine_status(self) -> int | None:
        value = self.data.get("engine_status")
        return value if isinstance(value, int) else None


class SandboxEngineTimeout(SandboxError, TimeoutError):
    wire_code, wire_type = 1002, "EngineTimeout"


class SandboxEngineVersionNotSupported(SandboxError, RuntimeError):
    wire_code, wire_type = 1003, "EngineVersionNotSupported"


# ---- router refusals (1100s): the maf-sandbox vocabulary, with its builtins --------------


class SandboxCapabilityNotSupported(SandboxError, RuntimeError):
    """1100: the backend does not declare a capability the spec requires (``data.missing``)."""

    wire_code, wire_type = 1100, "SandboxCapabilityNotSupported"


class SandboxEgressNotEnforced(SandboxError, PermissionError):
    wire_code, wire_type = 1101, "SandboxEgressNotEnforced"


class SandboxOsFamilyNotSupported(SandboxError, RuntimeError):
    wire_code, wire_type = 1102, "SandboxOsFamilyNotSupported"


class SandboxTransferLimitsNotPermitted(SandboxError, PermissionError):
    wire_code, wire_type = 1103, "SandboxTransferLimitsNotPermitted"


class SandboxScopeNotEnforced(SandboxError, PermissionError):
    wire_code, wire_type = 1104, "SandboxScopeNotEnforced"


class SandboxBackendNotPermitted(SandboxError, PermissionError):
    wire_code, wire_type = 1105, "SandboxBackendNotPermitted"


class SandboxConflict(SandboxError, RuntimeError):
    """1106: the container under this sandbox's name is not this key's, or was made from
    another spec (``data.differences``: ``[{field, requested, existing}]`` for ``image`` /
    ``image_id``, ``labels``, ``work_dir``); dispose it first, or use another kind."""

    wire_code, wire_type = 1106, "SandboxConflict"


# ---- the sandbox surface (1200s) -------------------------------------------------------


class SandboxConfinementError(SandboxError, ValueError):
    """1200: a path escapes the working directory or goes through a symbolic link."""

    wire_code, wire_type = 1200, "ConfinementError"


class SandboxNotADirectoryError(_FileError, NotADirectoryError):
    wire_code, wire_type = 1201, "NotADirectoryError"
    _errno = _errno.ENOTDIR


class SandboxFileNotFoundError(_FileError, FileNotFoundError):
    wire_code, wire_type = 1202, "FileNotFoundError"
    _errno = _errno.ENOENT


class SandboxOSError(_FileError, OSError):
    """1203: not a regular file, a directory in the way, or the guest's ``rm`` failed
    (``data.exit_code``, ``data.stderr``)."""

    wire_code, wire_type = 1203, "OSError"


class SandboxFilePermissionError(SandboxOSError, PermissionError):
    """1203 with ``data.errno`` ``EACCES`` or ``EPERM``: on the local file plane, what the
    guest's own permissions refuse. A ``PermissionError`` (and a :class:`SandboxOSError`)."""


class SandboxOutputError(SandboxError, RuntimeError):
    """maf-sandbox's output-collection family (behaviour-core §2.3), a ``RuntimeError``; of it,
    the daemon sends only :class:`SandboxTransferCapExceeded`."""


class SandboxTransferCapExceeded(SandboxOutputError):
    """1204: a file over ``max_bytes`` or a call over a transfer ceiling (never truncated).
    A ``RuntimeError``, as maf-sandbox's (a :class:`SandboxOutputError`)."""

    wire_code, wire_type = 1204, "SandboxTransferCapExceeded"

    @property
    def size(self) -> int | None:
        value = self.data.get("size")
        return value if isinstance(value, int) else None


class _PartialOutput:
    """The output an exec wrote before it timed out or was cancelled (``data.stdout_b64``,
    ``data.stderr_b64``), as bytes; empty for other calls."""

    data: dict[str, Any]

    def _partial(self, key: str) -> bytes:
        value = self.data.get(key)
        if not isinstance(value, str):
            return b""
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return b""

    @property
    def stdout(self) -> bytes:
        return self._partial("stdout_b64")

    @property
    def stderr(self) -> bytes:
        return self._partial("stderr_b64")


class SandboxTimeoutError(_PartialOutput, SandboxError, TimeoutError):
    """1205: the call's own deadline passed (``data.timeout_ms``). For an exec, ``stdout`` and
    ``stderr`` hold what the command wrote before it."""

    wire_code, wire_type = 1205, "TimeoutError"


class SandboxNotFound(SandboxError, LookupError):
    """1206: no sandbox by this id, id prefix or name that the caller may reach
    (``data.sandbox``: what was given)."""

    wire_code, wire_type = 1206, "SandboxNotFound"


class SandboxFreezeFailed(SandboxError, RuntimeError):
    wire_code, wire_type = 1207, "SandboxFreezeFailed"


class SandboxExecOutputLimitExceeded(SandboxError, ValueError):
    """1208: stdout and stderr together exceeded ``max_output_bytes``; nothing is returned."""

    wire_code, wire_type = 1208, "SandboxExecOutputLimitExceeded"


class SandboxExecCancelled(_PartialOutput, SandboxError, RuntimeError):
    """1209 ``Cancelled``: the command was cancelled (``call.cancel``) and killed; ``stdout`` and
    ``stderr`` hold what it wrote before. A task awaiting ``Sandbox.exec`` that is cancelled
    gets ``asyncio.CancelledError`` instead (the client sends the cancel for it)."""

    wire_code, wire_type = 1209, "Cancelled"


# ---- authorisation and the connection (1300s), and client-side conditions --------------


class SandboxPermissionDenied(SandboxError, PermissionError):
    wire_code, wire_type = 1300, "PermissionDenied"


class DaemonUnavailable(SandboxError, ConnectionError):
    """The daemon cannot be reached, or stopped serving this connection."""


class ConnectionLost(DaemonUnavailable):
    """The connection ended while (or before) this call was waiting; the call's outcome is
    unknown: the daemon may have carried it out."""


class FrameTooLarge(SandboxError, ValueError):
    """1301: a frame exceeded the daemon's ``max_frame_bytes``. Raised before sending when
    this client can tell (``data["client_side"]``); from the daemon, it closes the connection."""

    wire_code, wire_type = 1301, "FrameTooLarge"


class TooManyConnections(DaemonUnavailable):
    wire_code, wire_type = 1302, "TooManyConnections"


class ShuttingDown(DaemonUnavailable):
    wire_code, wire_type = 1303, "ShuttingDown"


class FrameTimeout(SandboxError, TimeoutError):
    wire_code, wire_type = 1304, "FrameTimeout"


class SandboxNotServed(SandboxError, NotImplementedError):
    """A method of the sandbox surface this daemon does not serve (``run_code``, ``list_dir``,
    ``reset``): raised in this process, as maf-sandbox-docker raises ``NotImplementedError``;
    ``data["missing"]`` names the capability that would gate it."""


class UnexpectedReply(SandboxError, RuntimeError):
    """The daemon's reply does not have the shape PROTOCOL.md gives it (a client/daemon
    version mismatch or a bug); the connection stays usable."""


class ClientTimeout(SandboxError, TimeoutError):
    """A deadline set in this process (not by the daemon) passed; the late reply is dropped."""


# ---- the table --------------------------------------------------------------------------

#: Wire code → class: the one table. Each class's ``wire_code``/``wire_type`` is its row.
ERROR_CLASSES: Mapping[int, type[SandboxError]] = {
    cls.wire_code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        SandboxEngineUnavailable,
        SandboxEngineError,
        SandboxEngineTimeout,
        SandboxEngineVersionNotSupported,
        SandboxCapabilityNotSupported,
        SandboxEgressNotEnforced,
        SandboxOsFamilyNotSupported,
        SandboxTransferLimitsNotPermitted,
        SandboxScopeNotEnforced,
        SandboxBackendNotPermitted,
        SandboxConflict,
        SandboxConfinementError,
        SandboxNotADirectoryError,
        SandboxFileNotFoundError,
        SandboxOSError,
        SandboxTransferCapExceeded,
        SandboxTimeoutError,
        SandboxNotFound,
        SandboxFreezeFailed,
        SandboxExecOutputLimitExceeded,
        SandboxExecCancelled,
        SandboxPermissionDenied,
        FrameTooLarge,
        TooManyConnections,
        ShuttingDown,
        FrameTimeout,
    )
    if cls.wire_code is not None
}

#: Wire ``data.type`` → class, derived from the same rows.
ERROR_TYPES: Mapping[str, type[SandboxError]] = {
    cls.wire_type: cls for cls in ERROR_CLASSES.values() if cls.wire_type is not None
}

#: The codes after which the daemon closes the connection (their ``id`` is null).
CONNECTION_ENDING_CODES = frozenset({1301, 1302, 1304})


def error_class_for(code: object, type_name: object = None) -> type[SandboxError]:
    """The class for a wire error: by ``code``; for an unknown code, by ``data.type``;
    else :class:`SandboxError` itself."""
    if isinstance(code, int) and not isinstance(code, bool) and code in ERROR_CLASSES:
        return ERROR_CLASSES[code]
    if isinstance(type_name, str) and type_name in ERROR_TYPES:
        return ERROR_TYPES[type_name]
    return SandboxError


def error_from_wire(error: object) -> SandboxError:
    """The exception for a JSON-RPC error object as the daemon sent it.

    Tolerates a malformed object (a non-dict, missing members): the result is then a plain
    :class:`SandboxError` carrying what could be read.
    """
    if not isinstance(error, Mapping):
        return SandboxError(f"malformed error object: {error!r}")
    code = error.get("code")
    message = error.get("message")
    data = error.get("data")
    data = dict(data) if isinstance(data, Mapping) else {}
    type_name = data.get("type")
    cls = error_class_for(code, type_name)
    errno_name = data.get("errno")
    if issubclass(cls, SandboxOSError) and errno_name in ("EACCES", "EPERM"):
        cls = SandboxFilePermissionError
    made = cls(
        message if isinstance(message, str) else "",
        code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        type=type_name if isinstance(type_name, str) else None,
        data=data,
    )
    if isinstance(made, OSError) and isinstance(errno_name, str) \
            and isinstance(getattr(_errno, errno_name, None), int):
        made.errno = getattr(_errno, errno_name)
    return made
