"""The daemon's errors as maf-sandbox's own classes.

maf_sandbox_client raises one class per wire error code, each deriving from the builtin that
maf-sandbox's vocabulary uses for the same condition (``ValueError`` for a path that escapes,
``FileNotFoundError``, ``TimeoutError``...). Where maf-sandbox has a class of its own for the
condition — a transfer cap, an exec output limit, an unserved capability, an egress rule the
backend cannot enforce — the error raised here is a class deriving from **both** maf-sandbox's
class and the client's, so ``except maf_sandbox.SandboxTransferCapExceeded`` catches it and the
wire's ``code``, ``type`` and ``data`` stay readable on it.

A failed first acquire that the daemon answered before creating anything (it is not running,
or the engine is unreachable) is ``maf_sandbox.SandboxBackendUnavailable``, the one class that
lets a router fall back to another backend.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

import maf_sandbox as ms
import maf_sandbox_client as msc

__all__ = ["translate", "translated", "BOTH"]

P = ParamSpec("P")
R = TypeVar("R")


def _both(ours: type[msc.SandboxError], theirs: type[BaseException]) -> type[msc.SandboxError]:
    """A class that is maf-sandbox's ``theirs`` and the client's ``ours`` at once."""
    return type(ours.__name__, (theirs, ours), {
        "__module__": "maf_sandbox_daemon",
        "__doc__": f"maf_sandbox.{theirs.__name__}, raised for the daemon's "
                   f"{ours.wire_type or ours.__name__}; also maf_sandbox_client.{ours.__name__} "
                   "(``code``, ``type``, ``data`` as the daemon sent them).",
    })


#: The client's class → the class this package raises instead (deriving from both).
BOTH: dict[type[msc.SandboxError], type[msc.SandboxError]] = {
    ours: _both(ours, theirs) for ours, theirs in (
        (msc.SandboxTransferCapExceeded, ms.SandboxTransferCapExceeded),
        (msc.SandboxOutputError, ms.SandboxOutputError),
        (msc.SandboxExecOutputLimitExceeded, ms.SandboxExecOutputLimitExceeded),
        (msc.SandboxCapabilityNotSupported, ms.SandboxCapabilityNotSupported),
        (msc.SandboxEgressNotEnforced, ms.SandboxEgressNotEnforced),
        (msc.SandboxOsFamilyNotSupported, ms.SandboxOsFamilyNotSupported),
        (msc.SandboxTransferLimitsNotPermitted, ms.SandboxTransferLimitsNotPermitted),
        (msc.SandboxScopeNotEnforced, ms.SandboxScopeNotEnforced),
        (msc.SandboxBackendNotPermitted, ms.SandboxBackendNotPermitted),
    )
}

#: Acquire failures that happened before the daemon made anything: a router may fall back
#: (maf-sandbox: "Only this classification permits fallback. A backend must clean partial
#: acquisition before raising it; ... uncertain cleanup failures do not qualify"). The socket
#: refused or absent, or the daemon's refusal of the connection (TooManyConnections): nothing
#: was asked of it. Not a lost connection or a shutdown that cancelled the call (the daemon may
#: have been making the container), and not the engine's unavailability (the daemon may have
#: made a container it could not remove).
_UNAVAILABLE = (msc.DaemonUnavailable,)
_UNCERTAIN = (msc.ConnectionLost, msc.ShuttingDown)
BackendUnavailable = type("SandboxBackendUnavailable",
                          (ms.SandboxBackendUnavailable, msc.SandboxError), {
                              "__module__": "maf_sandbox_daemon",
                              "__doc__": "maf_sandbox.SandboxBackendUnavailable: the daemon "
                                         "or its engine could not be reached, and nothing was "
                                         "made. ``__cause__`` is the client's error."})


def _rebuild(cls: type[msc.SandboxError], exc: msc.SandboxError) -> msc.SandboxError:
    new = cls.__new__(cls, exc.message)
    new.args = exc.args
    new.__dict__.update(exc.__dict__)
    return new


def translate(exc: msc.SandboxError, *, acquiring: bool = False) -> BaseException:
    """The exception to raise for the client's ``exc`` (``exc`` itself where the client's class
    already is maf-sandbox's vocabulary: a builtin such as ``ValueError``).

    ``ConnectionLost`` or ``ShuttingDown`` during an acquire is never "unavailable": the call
    was sent, and the daemon may have made the sandbox."""
    if acquiring and isinstance(exc, _UNAVAILABLE) and not isinstance(exc, _UNCERTAIN):
        new = _rebuild(BackendUnavailable, exc)  # type: ignore[arg-type]
        return new
    for klass in type(exc).__mro__:
        both = BOTH.get(klass)  # type: ignore[arg-type]
        if both is not None:
            return _rebuild(both, exc)
    return exc


def translated(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorates an async method: the client's errors leave it as :func:`translate` says."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except msc.SandboxError as exc:
            new = translate(exc)
            if new is exc:
                raise
            raise new from exc

    return wrapper

