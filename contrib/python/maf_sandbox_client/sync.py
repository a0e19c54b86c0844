"""A blocking client for scripts: :func:`connect` / :class:`Client`.

It runs an :class:`~maf_sandbox_client.AsyncClient` on an event loop of its own, in a daemon
thread, so it works from any thread and inside programs that run their own loop. Callbacks
(``on_output``, ``on_progress``) run on that thread, so they may not call the blocking client
(that would wait for the thread it blocks): such a call raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import builtins
import queue
import threading
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from .client import (
    DEFAULT_EXEC_TIMEOUT_SECONDS,
    AsyncClient,
    EventStream,
    OutputCallback,
    ProgressCallback,
    Sandbox,
)
from .errors import ClientTimeout, DaemonUnavailable
from .models import (
    DisposalFailure,
    ExecResult,
    ReapResult,
    SandboxEntry,
    SandboxEvent,
    SandboxInfo,
    ScopePurge,
)

__all__ = ["Client", "SyncEventStream", "SyncSandbox", "connect"]

T = TypeVar("T")

#: ``_run(..., timeout=_UNBOUNDED)``: no limit, whatever the client's ``timeout``.
_UNBOUNDED: Any = object()


def _settle(future: asyncio.Future[Any], item: Any, exc: BaseException | None) -> None:
    if future.done():
        return  # the exec ended meanwhile: nobody waits for it
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(item)


async def _aiter_from(it: Iterator[bytes]) -> Any:
    """An iterator (maybe blocking: a file, a terminal, a pipe) as an async one, each item
    taken on a daemon thread of its own, on demand. Not the loop's executor: its threads are
    joined when the interpreter exits, so a ``next()`` that blocks for good after the command
    stopped reading (a terminal nobody types into) would hang the program's exit."""
    loop = asyncio.get_running_loop()
    wanted: queue.SimpleQueue[asyncio.Future[Any] | None] = queue.SimpleQueue()
    done = object()

    def pull() -> None:
        while (future := wanted.get()) is not None:
            try:
                item, exc = next(it, done), None
            except BaseException as e:  # handed to the awaiting task
                item, exc = None, e
            try:
                loop.call_soon_threadsafe(_settle, future, item, exc)
            except RuntimeError:
                return  # the loop is closed
            if exc is not None or item is done:
                return

    threading.Thread(target=pull, name="maf-sandbox-stdin", daemon=True).start()
    try:
        while True:
            future = loop.create_future()
            wanted.put(future)
            item = await future
            if item is done:
                return
            yield item
    finally:
        wanted.put(None)


class Client:
    """The blocking twin of :class:`~maf_sandbox_client.AsyncClient` (same methods).

    ``timeout`` bounds every call in this process (:class:`ClientTimeout`; the call is then
    forgotten, the connection stays usable); it does not bound waiting for events (the
    event stream's ``next(timeout)`` does). The :class:`AsyncClient`'s own deadlines
    (``call_timeout=`` among ``kwargs``) apply as well. Use as ``with connect() as client:``.
    """

    def __init__(self, socket_path: str | None = None, *, timeout: float | None = None,
                 **kwargs: Any) -> None:
        self.timeout = timeout
        self._closed = False
        # Made first: bad arguments fail here, before there is a thread to leak.
        self.aio = AsyncClient(socket_path, **kwargs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="maf-sandbox-client", daemon=True)
        self._thread.start()
        try:
            self._run(self.aio.connect())
        except BaseException:
            self.close()
            raise

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs ``coro`` on the client's loop and waits for it: at most ``timeout`` s, else
        the client's ``timeout``; ``_UNBOUNDED``: as long as it takes."""
        if self._closed:
            coro.close()
            raise DaemonUnavailable("the client is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking maf-sandbox client call from the client's own thread "
                               "(e.g. an on_output or on_progress callback) would wait forever; "
                               "use client.aio from an async callback instead")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        limit = None if timeout is _UNBOUNDED else (timeout if timeout is not None
                                                      else self.timeout)
        try:
            return future.result(limit)
        except TimeoutError:
            if future.done():
                raise  # the call's own TimeoutError (e.g. the daemon's 1205)
            future.cancel()
            raise ClientTimeout(f"no reply within {limit} s") from None
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt: the call is forgotten
            raise

    def close(self) -> None:
        if self._closed:
            return
        if threading.current_thread() is self._thread:
            raise RuntimeError("close() from the client's own thread (a callback)")
        try:
            if self._thread.is_alive():
                asyncio.run_coroutine_threadsafe(self.aio.close(), self._loop).result(10)
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return not self._closed and self.aio.connected

    @property
    def max_frame_bytes(self) -> int:
        return self.aio.max_frame_bytes

    def connect(self) -> Client:
        """Opens the connection again after one was lost (a no-op while it is open)."""
        self._run(self.aio.connect())
        return self

    def default_deadline(self, method: str, params: Mapping[str, Any] | None = None) -> float | None:
        return self.aio.default_deadline(method, params)

    def call(self, method: str, params: Mapping[str, Any] | None = None, *,
             timeout: float | None = None) -> Any:
        """Any method by name; ``timeout`` overrides the client's for this call."""
        return self._run(self.aio.call(method, params), timeout)

    def capabilities(self) -> frozenset[str]:
        return self._run(self.aio.capabilities())

    def describe(self) -> dict[str, Any]:
        return self._run(self.aio.describe())

    def status(self) -> dict[str, Any]:
        return self._run(self.aio.status())

    def engine(self) -> dict[str, Any]:
        return self._run(self.aio.engine())

    def acquire(self, key: Any, spec: Any, *, on_progress: ProgressCallback | None = None,
                timeout: float | None = None) -> SyncSandbox:
        return SyncSandbox(self, self._run(self.aio.acquire(key, spec, on_progress=on_progress,
                                                            timeout=timeout)))

    def sandbox(self, instance_id: str, *, key: Any = None, kind: str | None = None) -> SyncSandbox:
        return SyncSandbox(self, self.aio.sandbox(instance_id, key=key, kind=kind))

    def dispose(self, key: Any, *, kind: str | None = None,
                sandbox: str | None = None) -> DisposalFailure | None:
        return self._run(self.aio.dispose(key, kind=kind, sandbox=sandbox))

    def dispose_scope(self, scope: str, thread_id: str) -> ScopePurge:
        return self._run(self.aio.dispose_scope(scope, thread_id))

    def reap(self, older_than: timedelta | float, *, scope: str | None = None,
             dry_run: bool = False) -> ReapResult:
        return self._run(self.aio.reap(older_than, scope=scope, dry_run=dry_run))

    def list(self, scope: str | None = None,
             thread_id: str | None = None) -> builtins.list[SandboxInfo]:
        return self._run(self.aio.list(scope, thread_id))

    def events(self, types: Iterable[str] = ("egress.decision",), scope: str | None = None, *,
               replay: bool = False, **kwargs: Any) -> SyncEventStream:
        """Subscribes now (bounded by the client's ``timeout``); see :class:`SyncEventStream`."""
        stream = self.aio.events(types, scope, replay=replay, **kwargs)
        try:
            self._run(stream.start())
        except BaseException:
            self._run(stream.aclose(), _UNBOUNDED)
            raise
        return SyncEventStream(self, stream)


class SyncSandbox:
    """The blocking twin of :class:`~maf_sandbox_client.Sandbox`; ``aio`` is the async one."""

    def __init__(self, client: Client, sandbox: Sandbox) -> None:
        self._client = client
        self.aio = sandbox

    def __getattr__(self, name: str) -> Any:
        # The data: instance_id, id, name, kind, work_dir, created, state, egress, key, spec,
        # raw, client. Never a method of the async sandbox (its coroutine would never run).
        value = getattr(self.aio, name)
        if callable(value):
            raise AttributeError(f"SyncSandbox has no method {name!r}")
        return value

    def __repr__(self) -> str:
        return f"Sync{self.aio!r}"

    def exec(self, command: str | Sequence[str], *, timeout: float = DEFAULT_EXEC_TIMEOUT_SECONDS,
             working_directory: str | None = None, env: Mapping[str, str] | None = None,
             max_output_bytes: int | None = None,
             on_output: OutputCallback | None = None,
             stdin: bytes | str | Iterable[bytes] | None = None) -> ExecResult:
        """As :meth:`Sandbox.exec`; ``stdin`` may also be an iterable of ``bytes`` (e.g. a file
        opened ``rb``), read on a worker thread as the command takes it. A call given up here
        (``KeyboardInterrupt``, the client's ``timeout``) cancels the command: the daemon kills
        it."""
        wire_stdin: Any = stdin
        if stdin is not None and not isinstance(stdin, (bytes, bytearray, memoryview, str)) \
                and not hasattr(stdin, "__aiter__"):
            wire_stdin = _aiter_from(iter(stdin))
        return self._client._run(self.aio.exec(
            command, timeout=timeout, working_directory=working_directory, env=env,
            max_output_bytes=max_output_bytes, on_output=on_output, stdin=wire_stdin))

    def write_file(self, path: str, content: str | bytes, *,
                   working_directory: str | None = None, mode: int | None = None) -> int:
        return self._client._run(self.aio.write_file(path, content,
                                                     working_directory=working_directory,
                                                     mode=mode))

    def write_files(self, files: Mapping[str, str | bytes], *,
                    working_directory: str | None = None,
                    modes: Mapping[str, int] | None = None) -> int:
        return self._client._run(self.aio.write_files(files, working_directory=working_directory,
                                                      modes=modes))

    def read_file(self, path: str, *, working_directory: str | None = None,
                  max_bytes: int | None = None) -> bytes:
        return self._client._run(self.aio.read_file(path, working_directory=working_directory,
                                                    max_bytes=max_bytes))

    def read_files(self, paths: Sequence[str], *, working_directory: str | None = None,
                   max_bytes: int | None = None) -> dict[str, bytes]:
        return self._client._run(self.aio.read_files(paths, working_directory=working_directory,
                                                     max_bytes=max_bytes))

    def stat_file(self, path: str, *, working_directory: str | None = None) -> SandboxEntry | None:
        return self._client._run(self.aio.stat_file(path, working_directory=working_directory))

    def remove(self, path: str, recursive: bool = False, *,
               working_directory: str | None = None) -> None:
        self._client._run(self.aio.remove(path, recursive, working_directory=working_directory))

    def reclaim(self, directory: str, *, working_directory: str | None = None,
                timeout: float | None = None) -> None:
        self._client._run(self.aio.reclaim(directory, working_directory=working_directory,
                                           timeout=timeout))

    def list_dir(self, path: str, *,
                 working_directory: str | None = None) -> tuple[SandboxEntry, ...]:
        return self._client._run(self.aio.list_dir(path, working_directory=working_directory))

    def run_code(self, code: str, *, timeout: float) -> ExecResult:
        return self._client._run(self.aio.run_code(code, timeout=timeout))

    def reset(self, *, timeout: float | None = None) -> None:
        self._client._run(self.aio.reset(timeout=timeout))

    def dispose(self) -> DisposalFailure | None:
        return self._client._run(self.aio.dispose())

    def resolve(self) -> SyncSandbox:
        """Looks the handle's reference (full id, name, or a unique 12+ hex id prefix) up in
        ``sandbox.list`` and fills ``name``, ``kind``, ``key``, ``state``, ``info``: the
        blocking ``await client.sandbox(ref)``."""
        self._client._run(self.aio.resolve())
        return self

    def __enter__(self) -> SyncSandbox:
        """``with sandbox:`` disposes the sandbox at the end (see ``Sandbox.__aexit__``)."""
        self._client._run(self.aio.__aenter__())
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._client._run(self.aio.__aexit__(exc_type, exc, tb))


class SyncEventStream:
    """Blocking events: ``next(timeout)`` or iteration; ``close()`` ends the subscription."""

    def __init__(self, client: Client, stream: EventStream) -> None:
        self._client = client
        self.aio = stream

    @property
    def closed(self) -> bool:
        return self.aio.closed

    @property
    def subscription(self) -> Mapping[str, Any] | None:
        return self.aio.subscription

    def next(self, timeout: float | None = None) -> SandboxEvent | None:
        """The next event, or ``None`` when ``timeout`` s pass without one (``None``: waits
        as long as it takes; the client's ``timeout`` does not apply)."""
        return self._client._run(self.aio.next(timeout), _UNBOUNDED)

    def __iter__(self) -> Iterator[SandboxEvent]:
        """Every event as it comes, however long apart (the client's ``timeout`` does not
        apply), until :meth:`close` or the connection ends."""
        while True:
            try:
                yield self._client._run(self.aio.__anext__(), _UNBOUNDED)
            except StopAsyncIteration:
                return

    def close(self) -> None:
        self._client._run(self.aio.aclose(), _UNBOUNDED)

    def __enter__(self) -> SyncEventStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def connect(socket_path: str | None = None, *, timeout: float | None = None,
            **kwargs: Any) -> Client:
    """A connected blocking :class:`Client`."""
    return Client(socket_path, timeout=timeout, **kwargs)
