"""``DaemonSandboxBackend``: maf-sandbox's ``SandboxBackend`` over maf-sandboxd's socket.

Everything it returns is maf-sandbox's own type (``SandboxEntry`` with ``EntryKind``,
``ExecResult``, ``BackendDeclarations``, ``DisposalFailure``, ``ScopePurge``), and the errors
it raises are maf-sandbox's classes (see ``_errors``). The transport underneath is the
standard-library client, ``maf_sandbox_client``.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import maf_sandbox as ms
import maf_sandbox_client as msc
# The client's own conversion of enums, sets and dataclasses to JSON values (one copy).
from maf_sandbox_client.models import _jsonable

from ._errors import BackendUnavailable, translate, translated

__all__ = ["BACKEND_NAME", "DaemonSandbox", "DaemonSandboxBackend", "ReapResult",
           "declarations_from_describe"]

#: The name the backend registers under when none is given.
BACKEND_NAME = "maf-sandboxd"

#: The spec fields the daemon takes (proto/PROTOCOL.md, "The sandbox key and spec").
_WIRE_SPEC_FIELDS = (
    "kind", "image", "image_id", "egress", "egress_allow", "work_dir", "labels", "requires",
    "min_isolation", "isolation_scope", "requires_os_family", "files_in", "files_out",
    "declared_outputs", "outputs_named_at_call_time", "host_tools",
    "confined_to_guest_call_path", "min_cleanup",
)
#: Spec fields that are the router's and the host's business, never the sandbox's: the
#: router admits calls (``exclusive_admission``), matches attached identities
#: (``max_identity_*``; this backend declares no ``attached_identity``) and program channels
#: (``execution_contract``, ``program``; it declares none). They are not sent.
_HOST_SPEC_FIELDS = frozenset({
    "exclusive_admission", "max_identity_scope", "max_identity_retention_seconds",
    "execution_contract", "program",
})


def _egress_host(rule: Any) -> str:
    """An allowlist entry as the daemon's host string. A rule narrowing methods, paths or
    naming an authority asks for enforcement this backend does not declare: refused here
    rather than widened to the whole host."""
    if isinstance(rule, str):
        return rule
    if isinstance(rule, ms.EgressRule):
        narrowed = [name for name in ("methods", "paths", "authority")
                    if getattr(rule, name, None) is not None]
        if narrowed:
            raise ms.SandboxCapabilityNotSupported(
                f"maf-sandboxd enforces an allowlist by host and port only: the rule for "
                f"{rule.host!r} also names {', '.join(narrowed)} (capabilities egress_methods, "
                "egress_paths and attached_identity are not declared). Allow the host without "
                "them, or pick a backend that declares them.")
        return rule.host
    raise TypeError(f"spec.egress_allow entries must be str or maf_sandbox.EgressRule, not "
                    f"{type(rule).__name__}")


def spec_to_wire(spec: ms.SandboxSpec) -> dict[str, Any]:
    """A maf-sandbox spec as the daemon's ``spec`` object. A field this backend does not know
    (a later maf-sandbox's) is refused unless it holds its default: dropping it could serve a
    workload under less than it asked for."""
    for f in dataclasses.fields(spec):
        if f.name in _WIRE_SPEC_FIELDS or f.name in _HOST_SPEC_FIELDS:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if getattr(spec, f.name) != default:
            raise ms.SandboxCapabilityNotSupported(
                f"maf-sandboxd does not know the spec field {f.name!r} (this maf-sandbox is newer "
                "than the backend): leave it at its default, or upgrade maf-sandbox-daemon")
    out: dict[str, Any] = {}
    for name in _WIRE_SPEC_FIELDS:
        value = getattr(spec, name, None)
        if value is None:
            continue
        if name == "egress_allow":
            if not value:
                continue
            value = [_egress_host(rule) for rule in value]
        elif name == "declared_outputs" and not value:
            continue
        elif name == "labels" and not value:
            continue
        elif name in ("outputs_named_at_call_time", "confined_to_guest_call_path") \
                and value is False:
            continue
        out[name] = _jsonable(value)
    return out


def key_to_wire(key: ms.SandboxKey) -> dict[str, str]:
    return {"scope": key.scope, "thread_id": key.thread_id, "agent_dir": key.agent_id,
            "call_id": key.call_id or ""}


def _members(values: Any, enum_type: Any) -> frozenset[Any]:
    """``values`` as members of maf-sandbox's ``enum_type``; a value it does not know (a newer
    daemon's) is left out, since no spec of this maf-sandbox can ask for it."""
    out: set[Any] = set()
    for value in values or ():
        try:
            out.add(enum_type(value))
        except ValueError:
            pass
    return frozenset(out)


def _transfer(value: Any) -> ms.TransferLimits:
    default = ms.DEFAULT_TRANSFER_LIMITS
    if not isinstance(value, Mapping):
        return default

    def field(name: str) -> int:
        v = value.get(name)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 \
            else getattr(default, name)

    return ms.TransferLimits(max_bytes_per_file=field("max_bytes_per_file"),
                             max_total_bytes=field("max_total_bytes"),
                             max_files=field("max_files"))


def declarations_from_describe(describe: Mapping[str, Any]) -> ms.BackendDeclarations:
    """What ``daemon.describe`` declares, as maf-sandbox's ``BackendDeclarations``.

    ``observes_egress`` is False whatever the daemon says: this backend does not implement
    ``ObservesEgress`` (the daemon's decisions are read with ``AsyncClient.events``), and a
    declaration must never claim more than the backend serves. The one program channel is
    maf-sandbox's ``ExecProgramChannel`` (a guest with ``python3``; the channel checks it before
    a program runs); no attached identity and no egress method tokens are declared.
    """
    limits = describe.get("limits")
    limits = limits if isinstance(limits, Mapping) else {}
    capabilities = _members(describe.get("capabilities"), ms.Capability)
    # A program (maf-sandbox's ProgramRequirements: codeact's Python) runs over exec, and host
    # tools over exec's detached launcher, through maf-sandbox's own ExecProgramChannel, as
    # maf-sandbox-docker declares it; the router refuses HOST_TOOLS without such a channel.
    # It needs exec and files_in (and files_out with host tools), which the daemon serves.
    channels: tuple[ms.ProgramChannel, ...] = ()
    if {ms.Capability.EXEC, ms.Capability.FILES_IN} <= capabilities:
        channels = (ms.ExecProgramChannel(),)
    else:
        capabilities -= {ms.Capability.HOST_TOOLS}
    return ms.BackendDeclarations(
        capabilities=capabilities,
        limits=ms.SandboxLimits(files_in=_transfer(limits.get("files_in")),
                                files_out=_transfer(limits.get("files_out"))),
        egress_modes=_members(describe.get("egress_modes"), ms.Egress),
        os_families=_members(describe.get("os_families"), ms.OsFamily),
        isolation_scopes=_members(describe.get("isolation_scopes"), ms.IsolationScope),
        observes_egress=False,
        egress_method_tokens=frozenset(),
        program_channels=channels,
    )


def _entry(value: msc.SandboxEntry) -> ms.SandboxEntry:
    kind = ms.EntryKind(value.kind.value if isinstance(value.kind, enum.Enum) else value.kind)
    size = value.size_bytes if kind is ms.EntryKind.FILE else None
    return ms.SandboxEntry(path=value.path, kind=kind, size_bytes=size)


def _not_the_callers_timeout(exc: BaseException) -> bool:
    """A TimeoutError that is not the caller's ``timeout`` expiring (the engine's own or the
    frame's): maf-sandbox reserves TimeoutError from ``exec`` for the caller's bound."""
    return isinstance(exc, TimeoutError) and not isinstance(
        exc, (msc.SandboxTimeoutError, msc.ClientTimeout))


class EngineDeadline(msc.SandboxError, RuntimeError):
    """The engine or the frame deadline ran out during an ``exec`` whose own ``timeout`` had
    not: not a ``TimeoutError`` (maf-sandbox reserves that for the caller's bound).
    ``__cause__`` is the client's error."""


def _check_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be str, not {type(value).__name__}")
    return value


def _check_timeout(value: Any, what: str = "timeout") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    return float(value)


class DaemonSandbox:
    """One sandbox maf-sandboxd serves: a ``maf_sandbox.Sandbox``.

    ``freshly_created`` is True exactly when the acquire that returned it created the container
    (from the image: a trusted pre-input baseline); False for a warm one. ``file_plane`` says
    which file plane serves it (``"local"`` or ``"archive"``); ``list_dir`` is served on the
    local one only, and raises ``NotImplementedError`` on the archive one.
    """

    def __init__(self, inner: msc.Sandbox, *, freshly_created: bool,
                 max_output_bytes: int | None = None) -> None:
        self._inner = inner
        self.freshly_created: bool = freshly_created
        self._ceiling = max_output_bytes

    def _max_output_bytes(self) -> int | None:
        """The daemon's ``exec.max_output_bytes`` (``daemon.describe``), when known."""
        return self._ceiling

    @property
    def instance_id(self) -> str:
        return self._inner.instance_id

    @property
    def name(self) -> str:
        """The container's name."""
        return self._inner.name

    @property
    def kind(self) -> str:
        return self._inner.kind

    @property
    def work_dir(self) -> str | None:
        """The storage base ``acquire`` prepared (the spec's ``work_dir``)."""
        return self._inner.work_dir

    @property
    def file_plane(self) -> str | None:
        return self._inner.file_plane

    @property
    def client_sandbox(self) -> msc.Sandbox:
        """The transport's handle (streaming exec, several files in one call...)."""
        return self._inner

    def __repr__(self) -> str:
        return f"DaemonSandbox({self.instance_id[:12]}, kind={self.kind!r})"

    @translated
    async def write_file(self, path: str, content: str | bytes, *,
                         working_directory: str) -> None:
        _check_str(path, "path")
        _check_str(working_directory, "working_directory")
        if not isinstance(content, (str, bytes)):
            raise TypeError(f"content must be str or bytes, not {type(content).__name__}")
        await self._inner.write_file(path, content, working_directory=working_directory)

    async def exec(self, command: str | Sequence[str], *, working_directory: str,
                   timeout: float) -> ms.ExecResult:
        """Runs ``command`` (a sequence is the argv; a string runs under ``sh -c``) as the
        image's user, at most ``timeout`` s: then ``TimeoutError`` and what it started is killed
        (the sandbox stays). Output is bounded by the daemon's ``exec.max_output_bytes`` (8 MiB:
        past it, ``maf_sandbox.SandboxExecOutputLimitExceeded``). Cancelling the call (the task
        awaiting it, an outer ``asyncio.wait_for``) kills the command and what it started the
        same way (``call.cancel``), then ``CancelledError`` propagates. maf-sandbox's protocol
        passes no stdin: the command's is closed."""
        return await self._exec(command, working_directory, timeout, None)

    async def exec_bounded(self, command: str | Sequence[str], *, working_directory: str,
                           timeout: float, max_output_bytes: int) -> ms.ExecResult:
        """``exec`` with a budget for stdout and stderr together (maf-sandbox's
        ``BoundedExec``), counted by the daemon as the output arrives; past it,
        ``maf_sandbox.SandboxExecOutputLimitExceeded`` and nothing of the output. A budget above
        the daemon's own ``exec.max_output_bytes`` is held to that one."""
        if type(max_output_bytes) is not int or max_output_bytes <= 0:
            raise ValueError("max_output_bytes must be a positive integer")
        return await self._exec(command, working_directory, timeout, max_output_bytes)

    async def _exec(self, command: str | Sequence[str], working_directory: str, timeout: float,
                    max_output_bytes: int | None) -> ms.ExecResult:
        _check_str(working_directory, "working_directory")
        timeout = _check_timeout(timeout)
        if max_output_bytes is not None:
            ceiling = self._max_output_bytes()
            if ceiling is not None:
                max_output_bytes = min(max_output_bytes, ceiling)
        try:
            result = await self._inner.exec(command, working_directory=working_directory,
                                            timeout=timeout, max_output_bytes=max_output_bytes)
        except (msc.SandboxFileNotFoundError, msc.SandboxNotADirectoryError) as exc:
            if exc.data.get("field") != "working_directory":
                raise  # already maf-sandbox's vocabulary (a builtin)
            # The daemon refuses a working directory that is not there with a typed error;
            # maf-sandbox's exec answers it with a result (its FILES_IN conformance probes
            # exec in a directory that may not exist), as a shell does for what it cannot
            # run: exit 126, the daemon's reason on stderr (never the runtime's text).
            return ms.ExecResult(stdout_bytes=b"", stderr_bytes=f"{exc.message}\n".encode(),
                                 exit_code=126)
        except msc.SandboxError as exc:
            if _not_the_callers_timeout(exc):
                raise EngineDeadline(exc.message, code=exc.code, type=exc.type,
                                     data=exc.data) from exc
            new = translate(exc)
            if new is exc:
                raise
            raise new from exc
        return ms.ExecResult(stdout_bytes=result.stdout_bytes, stderr_bytes=result.stderr_bytes,
                             exit_code=result.exit_code)

    async def run_code(self, code: str, *, timeout: float) -> ms.ExecResult:
        """Not served: maf-sandboxd never declares ``run_code`` (the router refuses a spec that
        requires it). Write the program with ``write_file`` and ``exec`` it."""
        raise NotImplementedError(
            "maf-sandboxd does not serve run_code (RUN_CODE is not declared): write the program "
            "with write_file and run it with exec")

    @translated
    async def stat_file(self, path: str, *, working_directory: str) -> ms.SandboxEntry | None:
        _check_str(path, "path")
        _check_str(working_directory, "working_directory")
        entry = await self._inner.stat_file(path, working_directory=working_directory)
        return None if entry is None else _entry(entry)

    @translated
    async def read_file(self, path: str, *, working_directory: str, max_bytes: int) -> bytes:
        _check_str(path, "path")
        _check_str(working_directory, "working_directory")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
            raise TypeError(f"max_bytes must be int, not {type(max_bytes).__name__}")
        return await self._inner.read_file(path, working_directory=working_directory,
                                           max_bytes=max_bytes)

    @translated
    async def remove(self, path: str, *, working_directory: str, recursive: bool = False) -> None:
        _check_str(path, "path")
        _check_str(working_directory, "working_directory")
        await self._inner.remove(path, recursive=bool(recursive),
                                 working_directory=working_directory)

    @translated
    async def reclaim(self, directory: str, *, working_directory: str, timeout: float) -> None:
        _check_str(directory, "directory")
        _check_str(working_directory, "working_directory")
        await self._inner.reclaim(directory, working_directory=working_directory,
                                  timeout=_check_timeout(timeout))

    @translated
    async def list_dir(self, path: str, *, working_directory: str) -> tuple[ms.SandboxEntry, ...]:
        _check_str(path, "path")
        _check_str(working_directory, "working_directory")
        entries = await self._inner.list_dir(path, working_directory=working_directory)
        return tuple(_entry(e) for e in entries)

    async def reset(self, *, timeout: float) -> None:
        """Not served: maf-sandboxd never declares ``snapshot``. Dispose of the sandbox and
        acquire a new one."""
        raise NotImplementedError(
            "maf-sandboxd does not serve reset (SNAPSHOT is not declared): dispose of the "
            "sandbox and acquire it again")


def _failure(exc: msc.SandboxError) -> ms.DisposalFailure:
    """A disposal that raised, in maf-sandbox's codes."""
    if isinstance(exc, (msc.ConnectionLost, msc.ShuttingDown)):
        code = "unknown"  # sent, and the answer lost (or the call cancelled): it may have landed
    elif isinstance(exc, (msc.DaemonUnavailable, msc.SandboxEngineUnavailable)):
        code = "unreachable"
    elif isinstance(exc, TimeoutError):
        code = "timeout"
    elif isinstance(exc, msc.SandboxPermissionDenied):
        code = "refused"
    else:
        code = "unknown"
    return ms.DisposalFailure(code, str(exc))  # type: ignore[arg-type]


def _disposal(value: msc.DisposalFailure | None) -> ms.DisposalFailure | None:
    if value is None:
        return None
    code = value.code if value.code in ("unreachable", "timeout", "refused", "unlisted",
                                        "unknown") else "unknown"
    return ms.DisposalFailure(code, value.detail)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ReapResult:
    """What :meth:`DaemonSandboxBackend.reap` did (the shape of maf-sandbox-docker's
    ``DockerReapResult``): counts of what was removed, and every failure that left the sweep
    incomplete as maf-sandbox's ``DisposalFailure``."""

    disposed: int = 0
    proxies_removed: int = 0
    networks_removed: int = 0
    failures: tuple[ms.DisposalFailure, ...] = ()


class DaemonSandboxBackend:
    """A maf-sandbox backend whose sandboxes are maf-sandboxd's Docker containers.

    ``DaemonSandboxBackend()`` talks to the default socket (``$MAF_SANDBOX_SOCKET`` or
    ``/run/maf-sandbox.sock``); ``DaemonSandboxBackend("/path/to.sock")`` to another; an
    existing ``maf_sandbox_client.AsyncClient`` may be passed instead of a path. The plain
    constructor makes no call and declares maf-sandbox's defaults; :meth:`create` (or
    :meth:`refresh`) reads ``daemon.describe`` and declares what the daemon serves.

    It sits on :data:`maf_sandbox.Isolation.CONTAINER`, below the router's default floor: a host
    opts down with ``min_isolation=Isolation.CONTAINER``.
    """

    def __init__(self, socket_path: str | os.PathLike[str] | msc.AsyncClient | None = None, *,
                 name: str = BACKEND_NAME,
                 declarations: ms.BackendDeclarations | None = None) -> None:
        self._owns_client = not isinstance(socket_path, msc.AsyncClient)
        if isinstance(socket_path, msc.AsyncClient):
            client = socket_path
        elif socket_path is None or isinstance(socket_path, (str, os.PathLike)):
            path = None if socket_path is None else os.fspath(socket_path)
            if isinstance(path, bytes):
                raise TypeError("socket_path must be a str path, not bytes")
            if path == "":
                raise ValueError("socket_path is empty: pass the daemon's socket path, or None "
                                 "for the default ($MAF_SANDBOX_SOCKET or /run/maf-sandbox.sock)")
            client = msc.AsyncClient(path, auto_reconnect=True)
        else:
            raise TypeError(
                "DaemonSandboxBackend(socket_path): expected the daemon's socket path (str or "
                "os.PathLike), a maf_sandbox_client.AsyncClient, or None for the default "
                f"socket; got {type(socket_path).__name__} {socket_path!r:.80}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, not {name!r:.80}")
        if declarations is not None and not isinstance(declarations, ms.BackendDeclarations):
            raise TypeError("declarations must be a maf_sandbox.BackendDeclarations, not "
                            f"{type(declarations).__name__}")
        self._client = client
        self._name = name
        self._declarations = declarations if declarations is not None \
            else ms.DEFAULT_BACKEND_DECLARATIONS
        #: ``daemon.describe`` as :meth:`refresh` last read it (``None`` before).
        self.describe: Mapping[str, Any] | None = None

    @classmethod
    async def create(cls, socket_path: str | os.PathLike[str] | msc.AsyncClient | None = None,
                     *, name: str = BACKEND_NAME) -> DaemonSandboxBackend:
        """Connects, reads ``daemon.describe`` once and declares what it says. A daemon that
        cannot be reached raises ``maf_sandbox.SandboxBackendUnavailable``."""
        backend = cls(socket_path, name=name)
        try:
            await backend.refresh()
        except BaseException:
            await backend.aclose()
            raise
        return backend

    async def refresh(self) -> ms.BackendDeclarations:
        """Reads ``daemon.describe`` again (e.g. once the egress proxy's image is ready)."""
        try:
            describe = await self._client.describe()
        except msc.SandboxError as exc:
            raise translate(exc, acquiring=True) from exc
        self.describe = describe
        self._declarations = declarations_from_describe(describe)
        return self._declarations

    @property
    def client(self) -> msc.AsyncClient:
        """The transport (``maf_sandbox_client.AsyncClient``)."""
        return self._client

    @property
    def name(self) -> str:
        return self._name

    @property
    def isolation(self) -> ms.Isolation:
        """``CONTAINER``, unconditionally: no configuration raises it."""
        return ms.Isolation.CONTAINER

    @property
    def declarations(self) -> ms.BackendDeclarations:
        return self._declarations

    async def acquire(self, key: ms.SandboxKey, spec: ms.SandboxSpec) -> DaemonSandbox:
        """Get-or-create by ``(key, spec.kind)`` (the daemon serialises concurrent acquires of
        one key). A refusal raises maf-sandbox's class (``SandboxCapabilityNotSupported``,
        ``SandboxEgressNotEnforced``...); a daemon or engine that cannot be reached before
        anything was made, ``SandboxBackendUnavailable``."""
        if not isinstance(key, ms.SandboxKey):
            raise TypeError(f"key must be a maf_sandbox.SandboxKey, not {type(key).__name__}")
        if not isinstance(spec, ms.SandboxSpec):
            raise TypeError(f"spec must be a maf_sandbox.SandboxSpec, not {type(spec).__name__}")
        wire_key, wire_spec = key_to_wire(key), spec_to_wire(spec)
        if self.describe is not None:
            missing = spec.required_capabilities - self._declarations.capabilities
            if missing:
                raise ms.SandboxCapabilityNotSupported(
                    f"maf-sandboxd does not serve {', '.join(sorted(map(str, missing)))} "
                    f"(it declares {', '.join(sorted(map(str, self._declarations.capabilities)))})")
        try:
            inner = await self._client.acquire(wire_key, wire_spec)
        except msc.SandboxError as exc:
            raise translate(exc, acquiring=True) from exc
        return DaemonSandbox(inner, freshly_created=inner.created,
                             max_output_bytes=self._exec_ceiling())

    def _exec_ceiling(self) -> int | None:
        exec_limits = (self.describe or {}).get("exec")
        value = exec_limits.get("max_output_bytes") if isinstance(exec_limits, Mapping) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
            else None

    async def dispose(self, key: ms.SandboxKey, *, kind: str | None = None,
                      instance_id: str | None = None) -> ms.DisposalFailure | None:
        """Removes the key's sandboxes (one ``kind``'s, or the one ``instance_id`` names within
        the key: a stale or foreign id is a no-op). Never raises for the daemon's failures:
        ``None`` when nothing is known to remain, else why something may."""
        if not isinstance(key, ms.SandboxKey):
            raise TypeError(f"key must be a maf_sandbox.SandboxKey, not {type(key).__name__}")
        try:
            return _disposal(await self._client.dispose(key_to_wire(key), kind=kind,
                                                        sandbox=instance_id))
        except msc.SandboxError as exc:
            return _failure(exc)

    async def dispose_scope(self, scope: str, thread_id: str) -> ms.ScopePurge:
        """Removes every sandbox of a conversation (by label, whichever process made it).
        Never raises for the daemon's failures."""
        _check_str(scope, "scope")
        _check_str(thread_id, "thread_id")
        try:
            purge = await self._client.dispose_scope(scope, thread_id)
        except msc.SandboxError as exc:
            return ms.ScopePurge(0, _failure(exc))
        return ms.ScopePurge(purge.disposed, _disposal(purge.undisposed))

    async def reap(self, older_than: timedelta, *, scope: str | None = None) -> ReapResult:
        """An operator's age-based sweep (root or ``sandbox.admin_group`` only): sandboxes
        created more than ``older_than`` ago, with their proxies and networks. Raises when it
        cannot run (``PermissionError`` for a caller who may not reap)."""
        try:
            done = await self._client.reap(older_than, scope=scope)
        except msc.SandboxError as exc:
            new = translate(exc)
            if new is exc:
                raise
            raise new from exc
        return ReapResult(done.disposed, done.proxies_removed, done.networks_removed,
                          tuple(f for f in map(_disposal, done.failures) if f is not None))

    async def list(self, scope: str | None = None,
                   thread_id: str | None = None) -> list[msc.SandboxInfo]:
        """The caller's sandboxes (every owner's for an administrator), by label."""
        return await self._client.list(scope, thread_id)

    async def aclose(self) -> None:
        """Closes the connection this backend made (a client passed in is the caller's)."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> DaemonSandboxBackend:
        if self.describe is None:
            await self.refresh()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


# BackendUnavailable is re-exported by the package.
_ = BackendUnavailable
