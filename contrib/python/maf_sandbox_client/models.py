"""The values that cross the wire, as small frozen dataclasses.

Field names are PROTOCOL.md's. Keys and specs may also be given as plain dicts (sent as they
are) or as any object with the same attributes — a ``maf_sandbox.SandboxKey`` or
``maf_sandbox.SandboxSpec`` works unchanged, its enums and frozensets turned into JSON.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .errors import InvalidParams, UnexpectedReply
from .wire import Base64Str, plain

__all__ = [
    "DEFAULT_TRANSFER_LIMITS",
    "BackendDeclarations",
    "Capability",
    "DisposalFailure",
    "Egress",
    "EntryKind",
    "ExecResult",
    "Isolation",
    "IsolationScope",
    "OsFamily",
    "ReapResult",
    "SandboxEntry",
    "SandboxEvent",
    "SandboxInfo",
    "SandboxKey",
    "SandboxLimits",
    "SandboxSpec",
    "ScopePurge",
    "TransferLimits",
    "key_to_wire",
    "spec_to_wire",
]


class Isolation(enum.StrEnum):
    NONE = "none"
    RUNTIME = "runtime"
    PROCESS = "os_process"
    CONTAINER = "container"
    HARDENED_CONTAINER = "hardened_container"
    MICROVM = "microvm"
    VM = "vm"


class IsolationScope(enum.StrEnum):
    CONVERSATION = "conversation"
    CALL = "call"


class Egress(enum.StrEnum):
    UNRESTRICTED = "unrestricted"
    ALLOWLIST = "allowlist"
    CLOSED = "closed"


class Capability(enum.StrEnum):
    EXEC = "exec"
    RUN_CODE = "run_code"
    HOST_TOOLS = "host_tools"
    FILES_IN = "files_in"
    FILES_OUT = "files_out"
    FILES_LIST = "files_list"
    FILES_DELETE = "files_delete"
    RECLAIM = "reclaim"
    SNAPSHOT = "snapshot"
    ATTACHED_IDENTITY = "attached_identity"


class OsFamily(enum.StrEnum):
    POSIX = "posix"
    WINDOWS = "windows"


class EntryKind(enum.StrEnum):
    """What ``files.stat`` says a path is (its final component, never followed)."""

    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    #: fifo, socket, device, hard link — or a kind this client does not know.
    OTHER = "other"


# ---- keys and specs ---------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxKey:
    """Which sandbox a caller may reach; asserted by the agent host, never by a model."""

    scope: str
    thread_id: str
    agent_dir: str
    #: ``""`` for a conversation-scoped sandbox; names one tool call for isolation_scope "call".
    call_id: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {"scope": self.scope, "thread_id": self.thread_id, "agent_dir": self.agent_dir,
                "call_id": self.call_id}

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> SandboxKey:
        agent = value.get("agent_dir", value.get("agent_id", ""))
        return cls(str(value.get("scope", "")), str(value.get("thread_id", "")), str(agent),
                   str(value.get("call_id") or ""))


@dataclass(frozen=True)
class TransferLimits:
    max_bytes_per_file: int
    max_total_bytes: int
    max_files: int

    def within(self, ceiling: Any) -> bool:
        """Whether every field is at or below ``ceiling``'s (the router's match)."""
        return (self.max_bytes_per_file <= ceiling.max_bytes_per_file
                and self.max_total_bytes <= ceiling.max_total_bytes
                and self.max_files <= ceiling.max_files)

    @classmethod
    def from_wire(cls, value: Any, default: TransferLimits) -> TransferLimits:
        if not isinstance(value, Mapping):
            return default
        try:
            return cls(int(value["max_bytes_per_file"]), int(value["max_total_bytes"]),
                       int(value["max_files"]))
        except (KeyError, TypeError, ValueError):
            return default


_MIB = 1024 * 1024
#: A spec's default transfer limits (PROTOCOL.md: 8 MiB / 32 MiB / 64 files).
DEFAULT_TRANSFER_LIMITS = TransferLimits(8 * _MIB, 32 * _MIB, 64)


@dataclass(frozen=True)
class SandboxLimits:
    files_in: TransferLimits = DEFAULT_TRANSFER_LIMITS
    files_out: TransferLimits = DEFAULT_TRANSFER_LIMITS


@dataclass(frozen=True)
class SandboxSpec:
    """What a sandbox of one kind needs. ``None`` members are not sent (the daemon's default).

    ``kind`` is part of the sandbox's identity. Set ``labels`` to tag the container
    (the daemon stores them as ``maf-sandbox.label.<name>``).
    """

    kind: str
    image: str | None = None
    image_id: str | None = None
    egress: str | None = None
    egress_allow: Sequence[str] | None = None
    work_dir: str | None = None
    labels: Mapping[str, str] | None = None
    requires: Sequence[str] | None = None
    min_isolation: str | None = None
    isolation_scope: str | None = None
    requires_os_family: str | None = None
    files_in: TransferLimits | Mapping[str, int] | None = None
    files_out: TransferLimits | Mapping[str, int] | None = None
    declared_outputs: Sequence[Any] | None = None
    outputs_named_at_call_time: bool | None = None
    host_tools: Mapping[str, Any] | None = None
    confined_to_guest_call_path: bool | None = None
    min_cleanup: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return spec_to_wire(self)


def _jsonable(value: Any) -> Any:
    """A JSON-ready copy: enums by value, sets sorted, dataclasses as dicts, tuples as lists."""
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(_jsonable(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=str)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    raise TypeError(f"cannot send a {type(value).__name__} to the daemon")


_MISSING = object()
#: Spec fields a dataclass may have that the wire does not take (the daemon refuses unknown
#: members): maf-sandbox before 0.38 had ``identities`` as a field (since: derived from
#: ``host_tools``).
_PROCESS_ONLY_SPEC_FIELDS = frozenset({"identities"})


def key_to_wire(key: Any) -> dict[str, Any]:
    """A key as the wire's object: a mapping is sent as given (the daemon validates it, and
    takes ``agent_id`` for ``agent_dir``); anything else is read by attribute (``scope``,
    ``thread_id``, ``agent_dir`` — or ``agent_id``, its name in maf-sandbox 0.42+ —
    and ``call_id``)."""
    if isinstance(key, Mapping):
        return {str(k): _jsonable(v) for k, v in key.items()}
    if isinstance(key, SandboxKey):
        return key.to_wire()
    agent = getattr(key, "agent_dir", _MISSING)
    if agent is _MISSING:
        agent = getattr(key, "agent_id", _MISSING)
    try:
        if agent is _MISSING:
            raise AttributeError("no agent_dir (or agent_id)")
        out = {"scope": _jsonable(key.scope), "thread_id": _jsonable(key.thread_id),
               "agent_dir": _jsonable(agent)}
    except AttributeError as exc:
        raise TypeError(f"a sandbox key needs scope, thread_id and agent_dir: {exc}") from None
    out["call_id"] = _jsonable(getattr(key, "call_id", "") or "")
    return out


def spec_to_wire(spec: Any) -> dict[str, Any]:
    """A spec as the wire's object: a mapping is sent as given (enums and sets made JSON);
    a dataclass (ours or maf_sandbox's) by its fields, leaving out those that are ``None``
    (the daemon's default applies) and ``identities`` (a field of maf-sandbox before 0.38
    that only the host uses, and that the daemon would refuse)."""
    if isinstance(spec, Mapping):
        return {str(k): _jsonable(v) for k, v in spec.items()}
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(spec):
            value = getattr(spec, f.name)
            if value is None or f.name in _PROCESS_ONLY_SPEC_FIELDS:
                continue
            out[f.name] = _jsonable(value)
        return out
    raise TypeError(f"a sandbox spec must be a mapping or a dataclass, not {type(spec).__name__}")


# ---- results ----------------------------------------------------------------------------


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise UnexpectedReply(f"the daemon sent a {what} that is not base64 text")
    if isinstance(value, Base64Str) and value.decoded is not None:
        return value.decoded  # decoded by the reader, as strictly
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise UnexpectedReply(f"the daemon sent a {what} that is not base64") from None


@dataclass(frozen=True)
class ExecResult:
    """One command's outcome. A non-zero exit is a result, not an error.

    ``stdout_bytes``/``stderr_bytes`` are the exact bytes; ``stdout_text``/``stderr_text``
    (also ``stdout``/``stderr``) are UTF-8 views with replacement decoding, for display.
    """

    exit_code: int
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    #: The daemon's wall time for the call, in milliseconds (``None`` if it did not say).
    duration_ms: int | None = None
    #: The reply as sent, for members this client does not model.
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def stdout_text(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def stdout(self) -> str:
        return self.stdout_text

    @property
    def stderr(self) -> str:
        return self.stderr_text

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @classmethod
    def from_wire(cls, value: Any) -> ExecResult:
        if not isinstance(value, Mapping) or not isinstance(value.get("exit_code"), int):
            raise UnexpectedReply(f"the daemon sent an exec result without exit_code: {value!r}")
        duration = value.get("duration_ms")
        return cls(
            exit_code=value["exit_code"],
            stdout_bytes=_b64(value.get("stdout_b64", ""), "stdout_b64"),
            stderr_bytes=_b64(value.get("stderr_b64", ""), "stderr_b64"),
            duration_ms=duration if isinstance(duration, int) else None,
            raw=plain(dict(value)),
        )


@dataclass(frozen=True)
class SandboxEntry:
    """One path, as ``files.stat`` describes it. ``size_bytes`` is ``None`` for anything
    but a regular file."""

    path: str
    kind: EntryKind
    size_bytes: int | None

    @classmethod
    def from_wire(cls, value: Any) -> SandboxEntry:
        if not isinstance(value, Mapping):
            raise UnexpectedReply(f"the daemon sent a stat that is not an object: {value!r}")
        try:
            kind = EntryKind(value.get("kind"))
        except ValueError:
            kind = EntryKind.OTHER
        size = value.get("size")
        return cls(str(value.get("path", "")), kind, size if isinstance(size, int) else None)


@dataclass(frozen=True)
class DisposalFailure:
    """Why a sandbox may still be there: ``code`` (``unreachable``, ``timeout``, ``refused``,
    ``unlisted``, ``unknown``) to branch on, ``detail`` for a log."""

    code: str
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"

    @classmethod
    def from_wire(cls, value: Any) -> DisposalFailure | None:
        if value is None:
            return None
        if isinstance(value, Mapping):
            return cls(str(value.get("code", "unknown")), str(value.get("detail", "")))
        return cls("unknown", str(value))


@dataclass(frozen=True)
class ScopePurge:
    """What ``dispose_scope`` did: workloads removed, and why any may still be there."""

    disposed: int = 0
    undisposed: DisposalFailure | None = None


@dataclass(frozen=True)
class ReapCandidate:
    """A workload a dry-run ``reap`` would remove."""

    sandbox: str
    name: str
    scope: str
    created: str

    @classmethod
    def from_wire(cls, value: Any) -> ReapCandidate:
        if not isinstance(value, Mapping):
            raise UnexpectedReply(f"the daemon sent a reap candidate that is not an object: {value!r}")
        return cls(str(value.get("sandbox", "")), str(value.get("name", "")),
                   str(value.get("scope", "")), str(value.get("created", "")))


@dataclass(frozen=True)
class ReapResult:
    """What ``reap`` did. The counts include only successful removals. A dry run
    (``dry_run=True``) removes nothing: its counts are 0 and ``would_dispose`` lists the first
    64 workloads that would go (by name), ``would_dispose_count`` counts them all."""

    disposed: int = 0
    proxies_removed: int = 0
    networks_removed: int = 0
    failures: tuple[DisposalFailure, ...] = ()
    dry_run: bool = False
    would_dispose: tuple[ReapCandidate, ...] = ()
    would_dispose_count: int = 0
    would_remove_proxies: int = 0
    would_remove_networks: int = 0

    @classmethod
    def from_wire(cls, value: Any) -> ReapResult:
        if not isinstance(value, Mapping):
            raise UnexpectedReply(f"the daemon sent a reap result that is not an object: {value!r}")
        failures = tuple(
            f for f in (DisposalFailure.from_wire(v) for v in value.get("failures") or ())
            if f is not None
        )
        would = tuple(ReapCandidate.from_wire(v) for v in value.get("would_dispose") or ())
        return cls(int(value.get("disposed", 0)), int(value.get("proxies_removed", 0)),
                   int(value.get("networks_removed", 0)), failures,
                   value.get("dry_run") is True, would,
                   int(value.get("would_dispose_count", len(would))),
                   int(value.get("would_remove_proxies", 0)),
                   int(value.get("would_remove_networks", 0)))


@dataclass(frozen=True)
class SandboxInfo:
    """One entry of ``sandbox.list``."""

    sandbox: str
    name: str
    key: SandboxKey
    kind: str
    state: str
    created: str | None
    image: str | None
    owner: str | None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: The labels given at acquire (``spec.labels``); never the daemon's own.
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> SandboxInfo:
        key = value.get("key")
        labels = value.get("labels")
        return cls(
            sandbox=str(value.get("sandbox", "")),
            name=str(value.get("name", "")),
            key=SandboxKey.from_wire(key if isinstance(key, Mapping) else {}),
            kind=str(value.get("kind", "")),
            state=str(value.get("state", "")),
            created=value.get("created") if isinstance(value.get("created"), str) else None,
            image=value.get("image") if isinstance(value.get("image"), str) else None,
            owner=None if value.get("owner") is None else str(value.get("owner")),
            raw=dict(value),
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
        )


@dataclass(frozen=True)
class SandboxEvent:
    """One ``events.event`` notification (today: ``egress.decision``). ``count`` is how many
    identical decisions it stands for (the daemon coalesces a flood, PROTOCOL.md "Decisions as
    events"): they happened from ``first_time`` to ``time``; ``first_time`` is ``time`` when
    ``count`` is 1 (or the daemon did not say). ``reason`` is the decision's reason when it has
    one (``"not_connect"``: a plain-HTTP request to the proxy, refused), else None."""

    type: str
    key: SandboxKey | None
    kind: str | None
    sandbox: str | None
    decision: str | None
    host: str | None
    port: int | None
    time: str | None
    count: int = 1
    first_time: str | None = None
    reason: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> SandboxEvent:
        def s(name: str) -> str | None:
            v = value.get(name)
            return v if isinstance(v, str) else None

        key = value.get("key")
        port = value.get("port")
        count = value.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            count = 1
        return cls(
            type=s("type") or "",
            key=SandboxKey.from_wire(key) if isinstance(key, Mapping) else None,
            kind=s("kind"),
            sandbox=s("sandbox"),
            decision=s("decision"),
            host=s("host"),
            port=port if isinstance(port, int) else None,
            time=s("time"),
            count=count,
            first_time=s("first_time") or s("time"),
            reason=s("reason"),
            raw=dict(value),
        )


@dataclass(frozen=True)
class BackendDeclarations:
    """What the daemon declares (``daemon.describe``), in maf-sandbox's shape (behaviour-core
    §1.5); each default is maf-sandbox's meaning of silence. ``observes_egress`` stays false:
    :class:`~maf_sandbox_client.DaemonSandboxBackend` has no ``observe_egress`` hook (the
    daemon's ``egress.decision`` events are read with ``AsyncClient.events``)."""

    capabilities: frozenset[str] = frozenset({Capability.EXEC, Capability.FILES_IN})
    limits: SandboxLimits = SandboxLimits()
    egress_modes: frozenset[str] = frozenset()
    os_families: frozenset[str] = frozenset()
    isolation_scopes: frozenset[str] = frozenset({IsolationScope.CONVERSATION})
    observes_egress: bool = False
    egress_method_tokens: frozenset[str] | None = frozenset()

    @classmethod
    def from_describe(cls, describe: Mapping[str, Any]) -> BackendDeclarations:
        def members(name: str, enum_type: type[enum.StrEnum]) -> frozenset[str]:
            out: set[str] = set()
            for v in describe.get(name) or ():
                if isinstance(v, str):
                    try:
                        out.add(enum_type(v))
                    except ValueError:
                        out.add(v)
            return frozenset(out)

        limits = describe.get("limits")
        limits = limits if isinstance(limits, Mapping) else {}
        return cls(
            capabilities=members("capabilities", Capability),
            limits=SandboxLimits(
                TransferLimits.from_wire(limits.get("files_in"), DEFAULT_TRANSFER_LIMITS),
                TransferLimits.from_wire(limits.get("files_out"), DEFAULT_TRANSFER_LIMITS),
            ),
            egress_modes=members("egress_modes", Egress),
            os_families=members("os_families", OsFamily),
            isolation_scopes=members("isolation_scopes", IsolationScope),
        )


def seconds_from(value: timedelta | float | int, what: str) -> float:
    """A positive, finite number of seconds from a timedelta or a number."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidParams(f"{what} must be a positive, finite duration",
                            data={"field": what, "client_side": True})
    return float(seconds)
