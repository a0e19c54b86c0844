"""The daemon's sandboxes as an operator console's inventory (maf-sandbox-tui).

maf-sandbox-tui's ``HyperlightControl`` asks its backend for ``name``, ``list_sandboxes()`` and
``observe_instance_disposal(key, kind, instance_id)``. Its generic ``MonitoredSandboxBackend``
cannot serve this backend: it lists only what its own router acquired, reads a worker process
handle a daemon sandbox does not have (so every sandbox shows ``failed``), and never confirms a
disposal. :class:`DaemonInventoryBackend` answers from the daemon instead: ``sandbox.list``
(every process's sandboxes of the caller, or every owner's for an administrator), and a
disposal is confirmed when the instance listed before it is no longer listed after it.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import maf_sandbox as ms
import maf_sandbox_client as msc

from ._backend import DaemonSandboxBackend

__all__ = ["DaemonInventoryBackend", "InventoryEntry"]

#: The daemon's container states as the console's.
_STATES = {"running": "ready", "created": "starting", "restarting": "resetting",
           "removing": "disposing"}


@dataclass(frozen=True)
class InventoryEntry:
    """One sandbox, as maf_sandbox_tui.HyperlightControl reads an inventory row."""

    key: ms.SandboxKey
    kind: str
    instance_id: str
    state: str
    created_at: float
    last_activity_at: float
    worker_pid: int | None = None
    execution_contract: str | None = None
    egress_targets: tuple[str, ...] = ()


def _epoch(created: str | None) -> float:
    """The engine's RFC 3339 time (nanoseconds, ``Z`` or an offset) in seconds since the epoch;
    0 when it says nothing usable."""
    if not created:
        return 0.0
    m = re.match(r"(.*?T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$", created)
    if m is None:
        return 0.0
    stamp = m.group(1) + "." + (m.group(2) or "0")[:6].ljust(6, "0") + \
        (m.group(3) or "Z").replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


_Watch = tuple[ms.SandboxKey, "str | None", "str | None", list[int]]


class DaemonInventoryBackend(DaemonSandboxBackend):
    """:class:`DaemonSandboxBackend` plus the inventory an operator console reads.

    ``inventory_scope`` limits the inventory to one scope (``None``: all the caller sees)::

        backend = await DaemonInventoryBackend.create()
        control = maf_sandbox_tui.HyperlightControl(backend, router, source_id="host-1",
                                                    quiesce_instance=..., quiesced_purge=...)
    """

    inventory_scope: str | None = None
    _watch: contextvars.ContextVar[_Watch | None] = contextvars.ContextVar(
        "maf_sandbox_daemon_inventory_watch", default=None)

    async def list_sandboxes(self) -> tuple[InventoryEntry, ...]:
        rows = []
        for info in await self.list(self.inventory_scope):
            stamp = _epoch(info.created)
            rows.append(InventoryEntry(
                key=ms.SandboxKey(info.key.scope, info.key.thread_id, info.key.agent_dir,
                                  info.key.call_id),
                kind=info.kind, instance_id=info.sandbox,
                state=_STATES.get(info.state, "failed"), created_at=stamp,
                last_activity_at=stamp))
        return tuple(rows)

    @contextlib.contextmanager
    def observe_instance_disposal(self, key: ms.SandboxKey, kind: str,
                                  instance_id: str) -> Iterator[list[int]]:
        """While open, a :meth:`dispose` of exactly this instance that removed it appends to
        the yielded list (the console's confirmation)."""
        observed: list[int] = []
        token = self._watch.set((key, kind, instance_id, observed))
        try:
            yield observed
        finally:
            self._watch.reset(token)

    async def dispose(self, key: ms.SandboxKey, *, kind: str | None = None,
                      instance_id: str | None = None) -> ms.DisposalFailure | None:
        """As :meth:`DaemonSandboxBackend.dispose` (never raises for the daemon's failures); a
        watched disposal lists the key's sandboxes before and after (a listing that fails
        leaves the disposal unconfirmed, never failed)."""
        watch = self._watch.get()
        before: set[str] = set()
        if watch is not None and watch[:3] == (key, kind, instance_id):
            with contextlib.suppress(msc.SandboxError):
                before = {i.sandbox for i in await self.list(key.scope, key.thread_id)}
        failure = await super().dispose(key, kind=kind, instance_id=instance_id)
        if watch is not None and failure is None and instance_id in before:
            with contextlib.suppress(msc.SandboxError):
                after = {i.sandbox for i in await self.list(key.scope, key.thread_id)}
                if instance_id not in after:
                    watch[3].append(1)
        return failure
