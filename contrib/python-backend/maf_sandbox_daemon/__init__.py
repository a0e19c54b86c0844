"""maf-sandboxd as a maf-sandbox backend.

```
app  ->  maf_sandbox (router)  ->  maf_sandbox_daemon  ->  maf-sandboxd  ->  the container
```

:class:`DaemonSandboxBackend` implements :class:`maf_sandbox.SandboxBackend` over the daemon's
Unix socket (the transport is the standard-library ``maf_sandbox_client``)::

    from maf_sandbox import Isolation, SandboxKey, SandboxRouter, SandboxSpec
    from maf_sandbox_daemon import DaemonSandboxBackend

    backend = await DaemonSandboxBackend.create()          # /run/maf-sandbox.sock
    sandbox = await backend.acquire(SandboxKey("tenant", "conversation-1", "coder"),
                                    SandboxSpec(kind="shell", image="debian:12"))
    print((await sandbox.exec(["echo", "hello"], working_directory=".", timeout=30)).stdout)

It declares :data:`maf_sandbox.Isolation.CONTAINER`; a router admits it only with
``min_isolation=Isolation.CONTAINER``. Its declarations are the daemon's ``daemon.describe``.
"""

from ._backend import (
    BACKEND_NAME,
    DaemonSandbox,
    DaemonSandboxBackend,
    EngineDeadline,
    ReapResult,
    declarations_from_describe,
    key_to_wire,
    spec_to_wire,
)
from ._errors import BOTH, BackendUnavailable, translate
from ._inventory import DaemonInventoryBackend, InventoryEntry

__all__ = [
    "BACKEND_NAME",
    "BOTH",
    "BackendUnavailable",
    "DaemonSandbox",
    "DaemonInventoryBackend",
    "DaemonSandboxBackend",
    "EngineDeadline",
    "InventoryEntry",
    "ReapResult",
    "declarations_from_describe",
    "key_to_wire",
    "spec_to_wire",
    "translate",
]
