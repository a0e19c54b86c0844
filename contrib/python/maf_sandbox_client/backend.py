"""``DaemonSandboxBackend``: maf-sandbox's backend surface, served by maf-sandboxd.

Duck-typed against ``maf_sandbox.SandboxBackend`` (nothing here imports maf_sandbox): the
same members as maf-sandbox-docker's ``DockerSandboxBackend`` — ``name``, ``isolation``,
``declarations``, ``acquire``, ``dispose``, ``dispose_scope``, ``reap`` and the async
``create`` factory that reads the declarations from the daemon. Keys and specs may be
maf_sandbox's own dataclasses; what ``acquire`` returns has the ``maf_sandbox.Sandbox`` methods.

Values are plain strings or this package's ``StrEnum`` members, which compare and hash equal
to maf_sandbox's enum members of the same value.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .client import AsyncClient, Sandbox
from .errors import (
    ConnectionLost,
    DaemonUnavailable,
    SandboxEngineTimeout,
    SandboxEngineUnavailable,
    SandboxError,
)
from .models import BackendDeclarations, DisposalFailure, Isolation, ReapResult, ScopePurge

__all__ = ["DaemonSandboxBackend"]

#: The name a backend registers under when none is given.
DEFAULT_BACKEND_NAME = "maf-sandboxd"


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

    def __init__(self, client: AsyncClient | None = None, *, socket_path: str | None = None,
                 name: str = DEFAULT_BACKEND_NAME,
                 declarations: BackendDeclarations | None = None) -> None:
        self._client = client if client is not None else AsyncClient(socket_path,
                                                                     auto_reconnect=True)
        self._name = name
        self._declarations = declarations if declarations is not None else BackendDeclarations()
        #: ``daemon.describe`` as :meth:`create` (or :meth:`refresh`) read it.
        self.describe: dict[str, Any] | None = None

    @classmethod
    async def create(cls, socket_path: str | None = None, *, client: AsyncClient | None = None,
                     name: str = DEFAULT_BACKEND_NAME) -> DaemonSandboxBackend:
        """Connects, asks ``daemon.describe`` once, and declares what it answered."""
        backend = cls(client, socket_path=socket_path, name=name)
        await backend.refresh()
        return backend

    async def refresh(self) -> BackendDeclarations:
        """Reads ``daemon.describe`` again (e.g. after the egress proxy's image is ready)."""
        await self._client.connect()
        self.describe = await self._client.describe()
        self._declarations = BackendDeclarations.from_describe(self.describe)
        return self._declarations

    @property
    def client(self) -> AsyncClient:
        return self._client

    @property
    def name(self) -> str:
        return self._name

    @property
    def isolation(self) -> Isolation:
        """``container``, unconditionally (no configuration raises it)."""
        return Isolation.CONTAINER

    @property
    def declarations(self) -> BackendDeclarations:
        return self._declarations

    async def acquire(self, key: Any, spec: Any) -> Sandbox:
        """Get-or-create, keyed by (key, spec.kind). Refusals raise the maf-sandbox classes
        (SandboxCapabilityNotSupported, SandboxEgressNotEnforced, ...)."""
        return await self._client.acquire(key, spec)

    async def dispose(self, key: Any, *, kind: str | None = None) -> DisposalFailure | None:
        """Removes every kind's sandbox for ``key`` (or one ``kind``'s). Never raises:
        ``None`` when nothing is left, else why something may be."""
        try:
            return await self._client.dispose(key, kind=kind)
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
