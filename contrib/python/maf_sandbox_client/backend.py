"""``DaemonSandboxBackend``: maf-sandbox's backend surface, served by maf-sandboxd.

Fits ``maf_sandbox.SandboxBackend`` (behaviour-core §2.1) without depending on maf_sandbox:
the same members as maf-sandbox-docker's ``DockerSandboxBackend`` — ``name``, ``isolation``,
``declarations``, ``acquire``, ``dispose(key, *, kind=None, instance_id=None)``,
``dispose_scope``, ``reap`` and the async ``create`` factory that reads the declarations from
the daemon. Keys and specs may be maf_sandbox's own dataclasses; what ``acquire`` returns has
the ``maf_sandbox.Sandbox`` methods.

When ``maf_sandbox`` can be imported, ``declarations`` is its own ``BackendDeclarations``
(with its ``SandboxLimits``, ``TransferLimits`` and enum members) and ``isolation`` its
``Isolation.CONTAINER``, since its router refuses declarations of any other type. Without it,
this package's dataclasses and ``StrEnum`` members of the same values stand in.

For maf-sandbox 0.51 itself — its own ``SandboxEntry``, ``ExecResult`` and error classes from
every call — use the ``maf-sandbox-daemon`` package (contrib/python-backend,
``maf_sandbox_daemon.DaemonSandboxBackend``), which is tested against maf-sandbox's conformance
probes. This one stays for hosts that speak the vocabulary without depending on maf-sandbox.
"""

from __future__ import annotations

import enum
import importlib
import os
from collections.abc import Iterable
from datetime import timedelta
from types import ModuleType
from typing import Any

from .client import AsyncClient, Sandbox
from .errors import (
    ConnectionLost,
    DaemonUnavailable,
    SandboxEngineTimeout,
    SandboxEngineUnavailable,
    SandboxError,
)
from .models import (
    BackendDeclarations,
    DisposalFailure,
    Isolation,
    ReapResult,
    ScopePurge,
    TransferLimits,
)

__all__ = ["DaemonSandboxBackend"]

#: The name a backend registers under when none is given.
DEFAULT_BACKEND_NAME = "maf-sandboxd"


def _maf_sandbox() -> ModuleType | None:
    """maf_sandbox when it can be imported (never a requirement of this package)."""
    try:
        return importlib.import_module("maf_sandbox")
    except ImportError:
        return None


def _members(values: Iterable[Any], enum_type: Any) -> frozenset[Any]:
    """``values`` as members of maf_sandbox's ``enum_type``; a value it does not know is left
    out (no spec of that maf_sandbox can ask for it)."""
    out: set[Any] = set()
    for v in values:
        try:
            out.add(enum_type(v.value if isinstance(v, enum.Enum) else v))
        except ValueError:
            pass
    return frozenset(out)


def _seed_declarations(local: BackendDeclarations) -> Any:
    """``local`` as maf_sandbox's own BackendDeclarations, when maf_sandbox is importable and
    has one (0.38+); else ``local`` itself."""
    ms = _maf_sandbox()
    names = ("BackendDeclarations", "SandboxLimits", "TransferLimits", "Capability", "Egress",
             "OsFamily", "IsolationScope")
    if ms is None or not all(hasattr(ms, n) for n in names):
        return local

    def limits(t: TransferLimits) -> Any:
        return ms.TransferLimits(max_bytes_per_file=t.max_bytes_per_file,
                                 max_total_bytes=t.max_total_bytes, max_files=t.max_files)

    return ms.BackendDeclarations(
        capabilities=_members(local.capabilities, ms.Capability),
        limits=ms.SandboxLimits(files_in=limits(local.limits.files_in),
                                files_out=limits(local.limits.files_out)),
        egress_modes=_members(local.egress_modes, ms.Egress),
        os_families=_members(local.os_families, ms.OsFamily),
        isolation_scopes=_members(local.isolation_scopes, ms.IsolationScope),
    )


def _failure(exc: SandboxError) -> DisposalFailure:
    """A disposal that raised, as maf-sandbox's vocabulary reads it."""
    if isinstance(exc, ConnectionLost):
        code = "unknown"  # sent, and the answer lost: it may have landed
    elif isinstance(exc, (DaemonUnavailable, SandboxEngineUnavailable)):
        code = "unreachable"
    elif isinstance(exc, (TimeoutError, SandboxEngineTimeout)):
        code = "timeout"
    else:
        code = "unknown"
    return DisposalFailure(code, str(exc))


class DaemonSandboxBackend:
    """A sandbox backend whose sandboxes are maf-sandboxd's.

    The plain constructor makes no call and declares conservatively (maf-sandbox's defaults,
    no OS family); :meth:`create` connects and declares what ``daemon.describe`` says.
    The client reconnects by itself after the daemon restarts.
    """

    def __init__(self, client: AsyncClient | str | os.PathLike[str] | None = None, *,
                 socket_path: str | None = None, name: str = DEFAULT_BACKEND_NAME,
                 declarations: Any = None) -> None:
        if isinstance(client, (str, os.PathLike)) and not isinstance(client, bytes):
            # DaemonSandboxBackend("/run/maf-sandbox.sock"): the path, where a user passes it.
            if socket_path is not None:
                raise TypeError("DaemonSandboxBackend: the socket path is given twice "
                                "(positionally and as socket_path)")
            socket_path, client = os.fspath(client), None
        if client is not None and not isinstance(client, AsyncClient):
            raise TypeError(
                "DaemonSandboxBackend(client): expected a maf_sandbox_client.AsyncClient or the "
                f"daemon's socket path (str or os.PathLike), got {type(client).__name__}")
        if socket_path is not None and not isinstance(socket_path, str):
            raise TypeError(f"socket_path must be str, not {type(socket_path).__name__}")
        self._client = client if client is not None else AsyncClient(socket_path,
                                                                     auto_reconnect=True)
        self._name = name
        self._declarations = (declarations if declarations is not None
                              else _seed_declarations(BackendDeclarations()))
        #: ``daemon.describe`` as :meth:`create` (or :meth:`refresh`) read it.
        self.describe: dict[str, Any] | None = None

    @classmethod
    async def create(cls, socket_path: str | None = None, *, client: AsyncClient | None = None,
                     name: str = DEFAULT_BACKEND_NAME) -> DaemonSandboxBackend:
        """Connects, asks ``daemon.describe`` once, and declares what it answered."""
        backend = cls(client, socket_path=socket_path, name=name)
        await backend.refresh()
        return backend

    async def refresh(self) -> Any:
        """Reads ``daemon.describe`` again (e.g. after the egress proxy's image is ready)."""
        await self._client.connect()
        self.describe = await self._client.describe()
        self._declarations = _seed_declarations(BackendDeclarations.from_describe(self.describe))
        return self._declarations

    @property
    def client(self) -> AsyncClient:
        return self._client

    @property
    def name(self) -> str:
        return self._name

    @property
    def isolation(self) -> Any:
        """``container``, unconditionally (no configuration raises it): maf_sandbox's
        ``Isolation.CONTAINER`` when it is importable, else this package's."""
        ms = _maf_sandbox()
        seed = getattr(ms, "Isolation", None) if ms is not None else None
        return seed(Isolation.CONTAINER.value) if seed is not None else Isolation.CONTAINER

    @property
    def declarations(self) -> Any:
        """maf_sandbox's ``BackendDeclarations`` when it is importable, else this package's
        :class:`~maf_sandbox_client.BackendDeclarations` (the same fields)."""
        return self._declarations

    async def acquire(self, key: Any, spec: Any) -> Sandbox:
        """Get-or-create, keyed by (key, spec.kind). Refusals raise the maf-sandbox classes
        (SandboxCapabilityNotSupported, SandboxEgressNotEnforced, ...)."""
        return await self._client.acquire(key, spec)

    async def dispose(self, key: Any, *, kind: str | None = None,
                      instance_id: str | None = None) -> DisposalFailure | None:
        """Removes every kind's sandbox for ``key``, or one ``kind``'s, or the one container
        ``instance_id`` names (within the key and kind: an id that is stale or not the key's is
        a no-op, never a replacement). Never raises: ``None`` when nothing is left, else why
        something may be."""
        try:
            return await self._client.dispose(key, kind=kind, sandbox=instance_id)
        except SandboxError as exc:
            return _failure(exc)

    async def dispose_scope(self, scope: str, thread_id: str) -> ScopePurge:
        """Removes every sandbox of a conversation, by label. Never raises."""
        try:
            return await self._client.dispose_scope(scope, thread_id)
        except SandboxError as exc:
            return ScopePurge(0, _failure(exc))

    async def reap(self, older_than: timedelta, *, scope: str | None = None) -> ReapResult:
        """An operator's age-based sweep (administrators only): sandboxes created more than
        ``older_than`` ago, with their proxies and networks. Raises when it cannot run."""
        return await self._client.reap(older_than, scope=scope)

    async def aclose(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> DaemonSandboxBackend:
        if self.describe is None:
            await self.refresh()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
