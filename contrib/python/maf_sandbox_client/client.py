"""The asyncio client: :class:`AsyncClient`, :class:`Sandbox` and :class:`EventStream`."""

from __future__ import annotations

import asyncio
import binascii
import builtins
import inspect
import logging
import math
from collections.abc import AsyncIterable, Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any

from .connection import CALL_CANCEL, EXEC_OUTPUT, EXEC_STDIN, PULL_PROGRESS, Connection
from .errors import (
    ClientTimeout,
    InvalidParams,
    SandboxCapabilityNotSupported,
    SandboxError,
    SandboxNotFound,
    SandboxNotServed,
    UnexpectedReply,
)
from .models import (
    Capability,
    DisposalFailure,
    ExecResult,
    ReapResult,
    SandboxEntry,
    SandboxEvent,
    SandboxInfo,
    ScopePurge,
    key_to_wire,
    seconds_from,
    spec_to_wire,
)
from .wire import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_REPLY_BYTES,
    OFFLOAD_BYTES,
    Base64Str,
    plain,
    b64decode_strict,
    b64encode_text,
    default_socket_path,
)

__all__ = [
    "DEFAULT",
    "DEFAULT_CALL_TIMEOUT_SECONDS",
    "DEFAULT_CONNECT_TIMEOUT_SECONDS",
    "DEFAULT_EXEC_TIMEOUT_SECONDS",
    "EXEC_DEADLINE_MARGIN_SECONDS",
    "AsyncClient",
    "EventStream",
    "OutputCallback",
    "ProgressCallback",
    "Sandbox",
]

logger = logging.getLogger("maf_sandbox_client")

#: ``Sandbox.exec``'s default bound on one command (the daemon's ``timeout_seconds``).
DEFAULT_EXEC_TIMEOUT_SECONDS = 60.0
#: The longest ``timeout_seconds`` the daemon accepts for one command.
MAX_EXEC_TIMEOUT_SECONDS = 86400.0
#: How long ``connect()`` waits for the socket to accept.
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10.0
#: How long a call waits for its reply by default (libmaf-sandbox's MSB_DEFAULT_TIMEOUT_MS):
#: a daemon that stops answering (stopped, wedged) fails the call with ClientTimeout.
DEFAULT_CALL_TIMEOUT_SECONDS = 120.0
#: How long past its own ``timeout`` an exec (or a reclaim given a timeout) is waited for, so
#: the daemon's TimeoutError comes first (the CLI's CLI_DAEMON_TIMEOUT_MARGIN_MS).
EXEC_DEADLINE_MARGIN_SECONDS = 5.0
#: Methods waited for without a default deadline: an acquire may pull an image, which the
#: daemon bounds itself (sandbox.pull_timeout_ms), as the CLI waits for it.
_UNBOUNDED_METHODS = frozenset({"sandbox.acquire"})
#: Methods whose ``timeout_seconds`` bounds the call on the daemon's side.
_SELF_BOUNDED_METHODS = frozenset({"sandbox.exec", "files.reclaim"})


class _Default:
    """The type of :data:`DEFAULT`."""

    def __repr__(self) -> str:
        return "DEFAULT"


#: "The client's default deadline for this method" (``timeout=None`` means no deadline).
DEFAULT: Any = _Default()
#: Events an :class:`EventStream` holds unread before it stops reading its connection.
DEFAULT_EVENT_QUEUE = 4096
#: The fewest hex digits of an id prefix ``await client.sandbox(prefix)`` resolves (docker's).
SANDBOX_PREFIX_MIN = 12
#: The most candidates an ambiguous sandbox reference names.
SANDBOX_CANDIDATES_SHOWN = 16

#: ``on_output(stream, data)``: ``stream`` is ``"stdout"`` or ``"stderr"``; may be async.
OutputCallback = Callable[[str, bytes], Awaitable[None] | None]
#: ``on_progress(progress)``: one ``sandbox.pull_progress`` notification's params; may be async.
ProgressCallback = Callable[[Mapping[str, Any]], Awaitable[None] | None]
_Handler = Callable[[str, Mapping[str, Any]], Awaitable[None] | None]


class AsyncClient:
    """A connection to maf-sandboxd. Use as ``async with AsyncClient() as client:``.

    ``socket_path`` defaults as the CLI's does (:func:`~maf_sandbox_client.default_socket_path`).
    Every method may be called concurrently from many tasks; they share one connection.
    Cancelling a call (or its ``timeout``) forgets it: the connection stays usable and the
    late reply is dropped — the daemon still finishes the call, since the protocol has no
    cancel.

    ``call_timeout`` is every call's deadline in this process (:class:`ClientTimeout`; 120 s,
    ``None`` for none), except ``exec``, waited for its own ``timeout`` plus 5 s (the daemon
    answers TimeoutError first), ``reclaim`` given a ``timeout`` (the same), and ``acquire``,
    which has none unless given (an image pull can take long; the daemon bounds it).

    Reconnecting (``auto_reconnect``, on by default): a call made after the connection was
    lost (the daemon restarted, was killed, answered ShuttingDown, or ended the connection)
    opens a new one, lazily, on that call. Nothing is replayed: a call that was in flight when
    the daemon went away raises :class:`~maf_sandbox_client.ConnectionLost` saying so
    (``data["in_flight"]``): it may or may not have run. With ``auto_reconnect=False`` a lost
    connection stays lost (every later call raises), as libmaf-sandbox's does, save one the
    daemon closed while nothing was in flight (its ``limits.idle_timeout_ms``, or a restart
    between two calls), which is replaced on the next call in both modes: nothing was lost.
    Event streams are not resumed: each ends with its connection.
    """

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        max_frame_bytes: int | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT_SECONDS,
        auto_reconnect: bool = True,
    ) -> None:
        self.socket_path = socket_path or default_socket_path()
        self._max_frame_bytes = max_frame_bytes
        self._max_reply_bytes = max_reply_bytes
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.auto_reconnect = auto_reconnect
        self._conn: Connection | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._describe: Mapping[str, Any] | None = None
        self._streams: set[EventStream] = set()
        self._closed_by_user = False

    # ---- connection ----------------------------------------------------------------------

    @property
    def max_frame_bytes(self) -> int:
        """The largest request frame sent: as given, else what describe said, else 96 MiB."""
        if self._max_frame_bytes is not None:
            return self._max_frame_bytes
        wire = (self._describe or {}).get("wire")
        limit = wire.get("max_frame_bytes") if isinstance(wire, Mapping) else None
        return limit if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_FRAME_BYTES

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def _new_connection(self, **kwargs: Any) -> Connection:
        return Connection(self.socket_path, max_frame_bytes=self.max_frame_bytes,
                          max_reply_bytes=self._max_reply_bytes, **kwargs)

    async def connect(self) -> AsyncClient:
        """Opens the connection (again, after one was lost); a no-op while it is open."""
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self.connected:
                return self
            conn = self._new_connection()
            await conn.open(self.connect_timeout)
            self._conn = conn
            self._closed_by_user = False
        return self

    async def close(self) -> None:
        """Closes the connection and every event stream opened from this client."""
        self._closed_by_user = True
        for stream in builtins.list(self._streams):
            await stream.aclose()
        if self._conn is not None:
            await self._conn.close()

    async def __aenter__(self) -> AsyncClient:
        return await self.connect()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def _connection(self) -> Connection:
        conn = self._conn
        if conn is not None and not conn.closed and conn.peer_closed():
            # The daemon closed it between two calls (restart, idle timeout) and the reader
            # has not run since: nothing was in flight, so nothing is lost by a new one.
            await conn.close_peer_closed()
        if conn is not None and not conn.closed:
            return conn
        # A connection the daemon closed while idle is replaced whatever auto_reconnect says:
        # nothing was in flight on it, so nothing is lost or sent twice.
        if conn is None or ((self.auto_reconnect or conn.closed_idle) and not self._closed_by_user):
            await self.connect()
            assert self._conn is not None
            return self._conn
        raise conn.closing_error()

    # ---- calls ---------------------------------------------------------------------------

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   timeout: float | None = DEFAULT,
                   on_notification: _Handler | None = None) -> Any:
        """Any method, by name: returns the reply's ``result`` or raises the mapped error.

        ``timeout`` is a deadline in this process (:class:`ClientTimeout`): by default the
        method's (see :class:`AsyncClient`), ``None`` for none. ``on_notification`` receives
        the notifications routed to this call (``exec.output`` for its id).
        """
        if on_notification is not None:
            user = on_notification

            def on_notification(method: str, note: Mapping[str, Any]) -> Awaitable[None] | None:
                return user(method, plain(note))

        return plain(await self._call(method, params, timeout=timeout,
                                      on_notification=on_notification))

    def default_deadline(self, method: str, params: Mapping[str, Any] | None = None) -> float | None:
        """The deadline a call of ``method`` gets when none is given (see the class)."""
        if self.call_timeout is None or method in _UNBOUNDED_METHODS:
            return None
        own = (params or {}).get("timeout_seconds") if method in _SELF_BOUNDED_METHODS else None
        if isinstance(own, (int, float)) and not isinstance(own, bool) and math.isfinite(own):
            return max(0.0, float(own)) + EXEC_DEADLINE_MARGIN_SECONDS
        return self.call_timeout

    async def _call(self, method: str, params: Mapping[str, Any] | None = None, *,
                    timeout: float | None = DEFAULT, on_notification: _Handler | None = None,
                    image: str | None = None,
                    on_id: Callable[[Connection, int], None] | None = None,
                    cancel_on_abort: bool = False) -> Any:
        if timeout is DEFAULT:
            timeout = self.default_deadline(method, params)
        conn = await self._connection()
        told = None if on_id is None else (lambda request_id: on_id(conn, request_id))
        if on_notification is None:
            call = conn.request(method, params, image=image, on_id=told,
                                cancel_on_abort=cancel_on_abort)
        else:
            call = _with_notifications(conn, method, params, on_notification, image,
                                       on_id=told, cancel_on_abort=cancel_on_abort)
        return await _bounded(call, method, timeout)

    # ---- daemon.* ------------------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        """``daemon.describe``: the declarations (capabilities, limits, egress modes, ...)."""
        result = await self._call("daemon.describe")
        if not isinstance(result, dict):
            raise UnexpectedReply(f"daemon.describe: {result!r}")
        self._describe = result
        if self._conn is not None:
            self._conn.max_frame_bytes = self.max_frame_bytes
        return result

    async def status(self) -> dict[str, Any]:
        """``daemon.status``: the daemon's health (engine, connections, requests, egress)."""
        result = await self._call("daemon.status")
        if not isinstance(result, dict):
            raise UnexpectedReply(f"daemon.status: {result!r}")
        return result

    async def engine(self) -> dict[str, Any]:
        """``daemon.engine``: the engine, asked now."""
        result = await self._call("daemon.engine")
        if not isinstance(result, dict):
            raise UnexpectedReply(f"daemon.engine: {result!r}")
        return result

    async def capabilities(self) -> frozenset[str]:
        """The capabilities ``daemon.describe`` declares (asked once, then remembered)."""
        describe = self._describe if self._describe is not None else await self.describe()
        return frozenset(c for c in describe.get("capabilities") or () if isinstance(c, str))

    # ---- sandbox.* -----------------------------------------------------------------------

    async def acquire(self, key: Any, spec: Any, *,
                      on_progress: ProgressCallback | None = None,
                      timeout: float | None = None) -> Sandbox:
        """``sandbox.acquire``: the running sandbox of (key, spec.kind), made if need be.

        ``key``/``spec`` are :class:`SandboxKey`/:class:`SandboxSpec`, dicts, or any objects
        with those attributes. ``on_progress`` receives image pull progress. ``timeout``: a
        deadline in this process (none by default: the daemon bounds a pull itself).
        """
        wire_key = key_to_wire(key)
        wire_spec = spec_to_wire(spec)
        image = wire_spec.get("image_id") or wire_spec.get("image")
        handler: _Handler | None = None
        if on_progress is not None:
            progress = on_progress

            def handler(method: str, params: Mapping[str, Any]) -> Awaitable[None] | None:
                return progress(dict(params)) if method == PULL_PROGRESS else None

        result = await self._call("sandbox.acquire", {"key": wire_key, "spec": wire_spec},
                                  timeout=timeout, on_notification=handler,
                                  image=image if isinstance(image, str) else None)
        if not isinstance(result, Mapping) or not isinstance(result.get("sandbox"), str):
            raise UnexpectedReply(f"sandbox.acquire: {result!r}")
        return Sandbox(self, result, key=wire_key, spec=wire_spec)

    def sandbox(self, instance_id: str, *, key: Any = None, kind: str | None = None) -> Sandbox:
        """A handle on a sandbox known by ``instance_id``.

        ``await client.sandbox(ref)`` resolves ``ref`` — the full 64-hex id, the sandbox's
        name (``ls`` shows it) or a unique id prefix of at least 12 hex digits — through
        ``sandbox.list`` and fills the handle's ``name``, ``kind``, ``key``, ``state`` and
        ``info``: an unknown ref raises :class:`~maf_sandbox_client.SandboxNotFound`, an
        ambiguous one (or a prefix shorter than 12) :class:`~maf_sandbox_client.InvalidParams`
        naming the candidates. Without ``await`` no call is made (the handle as before: the id
        as given, which the daemon resolves the same way on every call; ``key`` and ``kind`` are
        needed only for :meth:`Sandbox.dispose`)."""
        return Sandbox(self, {"sandbox": instance_id, "kind": kind or ""},
                       key=key_to_wire(key) if key is not None else None, spec=None)

    async def dispose(self, key: Any, *, kind: str | None = None,
                      sandbox: str | None = None) -> DisposalFailure | None:
        """``sandbox.dispose``: removes the key's sandboxes (every kind, one kind, or one
        container). ``None`` when nothing is left; a :class:`DisposalFailure` says why
        something may still be there."""
        params: dict[str, Any] = {"key": key_to_wire(key)}
        if kind is not None:
            params["kind"] = kind
        if sandbox is not None:
            params["sandbox"] = sandbox
        return DisposalFailure.from_wire(await self._call("sandbox.dispose", params))

    async def dispose_scope(self, scope: str, thread_id: str) -> ScopePurge:
        """``sandbox.dispose_scope``: removes a conversation's sandboxes, found by label."""
        result = await self._call("sandbox.dispose_scope", {"scope": scope, "thread_id": thread_id})
        if not isinstance(result, Mapping):
            raise UnexpectedReply(f"sandbox.dispose_scope: {result!r}")
        disposed = result.get("disposed")
        return ScopePurge(disposed if isinstance(disposed, int) else 0,
                          DisposalFailure.from_wire(result.get("undisposed")))

    async def reap(self, older_than: timedelta | float, *, scope: str | None = None,
                   dry_run: bool = False) -> ReapResult:
        """``sandbox.reap`` (administrators): removes sandboxes created more than
        ``older_than`` ago (a timedelta or seconds, rounded up to whole seconds), in one scope
        or in all. Age is creation time, not idleness. ``dry_run=True`` removes nothing and
        says what would go (``ReapResult.would_dispose``)."""
        seconds = math.ceil(seconds_from(older_than, "older_than"))
        params: dict[str, Any] = {"older_than_seconds": seconds}
        if scope is not None:
            params["scope"] = scope
        if dry_run:
            params["dry_run"] = True
        return ReapResult.from_wire(await self._call("sandbox.reap", params))

    async def list(self, scope: str | None = None,
                   thread_id: str | None = None) -> builtins.list[SandboxInfo]:
        """``sandbox.list``: the caller's sandboxes (an administrator's: all), optionally of
        one scope and conversation."""
        params: dict[str, Any] = {}
        if scope is not None:
            params["scope"] = scope
        if thread_id is not None:
            params["thread_id"] = thread_id
        result = await self._call("sandbox.list", params)
        if not isinstance(result, builtins.list):
            raise UnexpectedReply(f"sandbox.list: {result!r}")
        return [SandboxInfo.from_wire(e) for e in result if isinstance(e, Mapping)]

    # ---- events.* ------------------------------------------------------------------------

    def events(self, types: Iterable[str] = ("egress.decision",), scope: str | None = None, *,
               replay: bool = False, max_queue: int = DEFAULT_EVENT_QUEUE) -> EventStream:
        """An async iterator of events, on a connection of its own (a subscription lasts
        until its connection closes, and the protocol has no unsubscribe). Close it with
        ``aclose()`` or use it as ``async with client.events([...]) as stream:``."""
        stream = EventStream(self, builtins.list(types), scope, replay, max_queue)
        self._streams.add(stream)
        return stream


async def _bounded(call: Awaitable[Any], method: str, timeout: float | None) -> Any:
    """``call`` awaited at most ``timeout`` s (``None``: no bound), else ClientTimeout."""
    if timeout is None:
        return await call
    try:
        async with asyncio.timeout(timeout) as deadline:
            return await call
    except TimeoutError:
        if deadline.expired():
            raise ClientTimeout(f"{method}: no reply within {timeout:g} s (the daemon may "
                                "still carry it out)", data={"timeout": timeout}) from None
        raise


#: Bytes of a streamed stdin one ``exec.stdin`` carries (the daemon takes up to 1 MiB).
STDIN_CHUNK_BYTES = 256 * 1024


async def _feed_stdin(conn: Connection, call_id: int, source: AsyncIterable[bytes]) -> None:
    """Streams ``source`` to the exec ``call_id`` with ``exec.stdin``, one chunk in flight at a
    time (each answered once the daemon handed it to the engine), then the end (``eof``).
    Stops when the command reads no more. An exception of ``source`` cancels the exec
    (``call.cancel``) and is raised by ``Sandbox.exec``."""
    try:
        async for chunk in source:
            data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
            for off in range(0, len(data), STDIN_CHUNK_BYTES):
                part = data[off:off + STDIN_CHUNK_BYTES]
                answer = await conn.request(EXEC_STDIN, {"call": call_id,
                                                         "data_b64": b64encode_text(part)})
                written = answer.get("written") if isinstance(answer, Mapping) else None
                if not isinstance(written, int) or written < len(part):
                    return  # the command reads no more
        await conn.request(EXEC_STDIN, {"call": call_id, "eof": True})
    except SandboxError:
        return  # the exec ended (its own answer says how), or the connection did
    except asyncio.CancelledError:
        raise
    except Exception:
        conn.notify_daemon(CALL_CANCEL, {"id": call_id})
        raise


async def _feeder_end(feeder: asyncio.Task[None] | None) -> BaseException | None:
    """Stops the stdin feeder (if it still runs) and returns its own exception, if any."""
    if feeder is None:
        return None
    if not feeder.done():
        feeder.cancel()
    await asyncio.wait({feeder})
    return None if feeder.cancelled() else feeder.exception()


async def _with_notifications(conn: Connection, method: str, params: Mapping[str, Any] | None,
                              handler: _Handler, image: str | None, *,
                              on_id: Callable[[int], None] | None = None,
                              cancel_on_abort: bool = False) -> Any:
    """One call whose notifications are handed to ``handler`` in order, from a task of their
    own (a slow or failing handler never holds the reader). Returns once every notification
    that came before the reply has been handled; a handler's exception is raised then."""
    queue: asyncio.Queue[tuple[str, Mapping[str, Any]] | None] = asyncio.Queue()

    async def consume() -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            outcome = handler(*item)
            if inspect.isawaitable(outcome):
                await outcome

    consumer = asyncio.get_running_loop().create_task(consume())
    try:
        try:
            result = await conn.request(method, params, image=image,
                                        notify=lambda m, p: queue.put_nowait((m, p)),
                                        on_id=on_id, cancel_on_abort=cancel_on_abort)
        except Exception:
            # Hand over what came before the error (e.g. output before a timeout) first.
            queue.put_nowait(None)
            try:
                await consumer
            except Exception:
                pass
            raise
        queue.put_nowait(None)
        await consumer
        return result
    finally:
        if not consumer.done():
            consumer.cancel()


def _seconds(value: float, what: str, maximum: float | None = None) -> float | int:
    seconds = seconds_from(value, what)
    if maximum is not None and seconds > maximum:
        raise InvalidParams(f"{what} may be at most {maximum} s",
                            data={"field": what, "client_side": True})
    return int(seconds) if float(seconds).is_integer() else seconds


def _content(content: str | bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    """The wire members of one file's content: text as ``content_text``; bytes, and text
    with a NUL (which no JSON string may carry to the daemon), as ``content_b64``."""
    if isinstance(content, str):
        if "\x00" not in content:
            return {"content_text": content}
        try:
            content = content.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidParams(f"{what}: the content is not valid Unicode (a lone surrogate)",
                                data={"field": "content_text", "client_side": True}) from None
    if isinstance(content, (bytes, bytearray, memoryview)):
        return {"content_b64": b64encode_text(content)}
    raise TypeError(f"{what}: content must be str or bytes, not {type(content).__name__}")


def _mode(value: int | None, what: str) -> int | None:
    """A write's permission bits, checked as the daemon does (0 to 0o777)."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 0o777:
        raise InvalidParams(f"{what} must be permission bits from 0 to 0o777 (e.g. 0o755); "
                            "setuid, setgid and sticky are refused",
                            data={"field": what, "client_side": True})
    return value


def _match_sandbox(ref: str, entries: Sequence[SandboxInfo]) -> SandboxInfo:
    """The entry ``ref`` names: its full id, its name, or a unique id prefix of at least
    :data:`SANDBOX_PREFIX_MIN` hex digits (as ``docker`` takes), as the daemon takes them: hex
    in either case, a name with or without the engine's leading ``/``."""
    given = ref
    if ref and all(c in "0123456789abcdefABCDEF" for c in ref):
        ref = ref.lower()
    for e in entries:
        if e.sandbox == ref:
            return e
    named = [e for e in entries if e.name == (given[1:] if given.startswith("/") else given)]
    if len(named) == 1:
        return named[0]
    if not named and ref and all(c in "0123456789abcdef" for c in ref):
        hits = [e for e in entries if e.sandbox.startswith(ref)]
        if hits and len(ref) < SANDBOX_PREFIX_MIN:
            raise InvalidParams(
                f"sandbox {ref!r}: an id prefix needs at least {SANDBOX_PREFIX_MIN} hex digits",
                data={"field": "sandbox", "client_side": True,
                      "candidates": [e.sandbox for e in hits][:SANDBOX_CANDIDATES_SHOWN]})
        if len(hits) == 1:
            return hits[0]
        named = hits
    if named:
        listed = ", ".join(f"{e.sandbox[:12]} ({e.name})" for e in named[:SANDBOX_CANDIDATES_SHOWN])
        raise InvalidParams(f"sandbox {ref!r} is ambiguous: it names {len(named)} sandboxes "
                            f"({listed}); give more of the id",
                            data={"field": "sandbox", "client_side": True,
                                  "candidates": [e.sandbox for e in named]
                                  [:SANDBOX_CANDIDATES_SHOWN]})
    raise SandboxNotFound(f"no sandbox {ref!r} that this caller may reach (give its full id, its "
                          "name as `maf-sandbox ls` shows it, or 12+ hex digits of its id)",
                          data={"sandbox": ref, "client_side": True})


def _content_size(content: Any) -> int:
    return len(content) if isinstance(content, (str, bytes, bytearray)) else \
        (content.nbytes if isinstance(content, memoryview) else 0)


async def _contents(files: Sequence[tuple[str, Any]]) -> builtins.list[dict[str, Any]]:
    """``[{path, content_*}]``, base64 made on a worker thread when there is much of it."""
    def make() -> builtins.list[dict[str, Any]]:
        return [{"path": p, **_content(c, p)} for p, c in files]

    if sum(_content_size(c) for _, c in files) > OFFLOAD_BYTES:
        return await asyncio.to_thread(make)
    return make()


def _decode_content(value: Any, what: str) -> bytes:
    """Strict base64 (alphabet, padding only at the end), decoded piece by piece; what the
    reader decoded already (a :class:`~maf_sandbox_client.wire.Base64Str`) is taken as is."""
    if not isinstance(value, str):
        raise UnexpectedReply(f"{what}: content_b64 missing")
    if isinstance(value, Base64Str) and value.decoded is not None:
        return value.decoded
    try:
        return b64decode_strict(value)
    except (binascii.Error, ValueError):
        raise UnexpectedReply(f"{what}: content_b64 is not base64") from None


async def _decode_content_async(value: Any, what: str) -> bytes:
    if isinstance(value, str) and len(value) > OFFLOAD_BYTES \
            and not (isinstance(value, Base64Str) and value.decoded is not None):
        return await asyncio.to_thread(_decode_content, value, what)
    return _decode_content(value, what)


class Sandbox:
    """One running sandbox (a container), as ``acquire`` returned it.

    Paths are POSIX and relative to ``working_directory`` (default: the sandbox's ``work_dir``;
    an absolute path inside it is accepted). Methods raise the classes of
    :mod:`maf_sandbox_client.errors`: a path escaping or crossing a link
    :class:`~maf_sandbox_client.SandboxConfinementError` (a ``ValueError``), and so on.
    """

    def __init__(self, client: AsyncClient, acquired: Mapping[str, Any], *,
                 key: Mapping[str, Any] | None, spec: Mapping[str, Any] | None) -> None:
        self.client = client
        #: What every call names the sandbox by: the container's full 64-hex id as acquire
        #: returned it, or, for a handle made by :meth:`AsyncClient.sandbox`, what was given
        #: there (a name or a unique id prefix of 12+ hex digits will do: PROTOCOL.md
        #: "Naming a sandbox").
        self.instance_id: str = str(acquired["sandbox"])
        self.name: str = str(acquired.get("name") or "")
        self.kind: str = str(acquired.get("kind") or (spec or {}).get("kind") or "")
        work_dir = acquired.get("work_dir")
        self.work_dir: str | None = work_dir if isinstance(work_dir, str) else None
        #: Whether this acquire created the container (false: a warm one was reused).
        self.created: bool = bool(acquired.get("created"))
        self.state: str = str(acquired.get("state") or "")
        egress = acquired.get("egress")
        #: For an allowlisted sandbox: network, proxy, proxy_address, proxy_url.
        self.egress: Mapping[str, Any] | None = egress if isinstance(egress, Mapping) else None
        plane = acquired.get("file_plane")
        #: The file plane that served the acquire: ``"local"`` (no freeze; ``list_dir``
        #: served) or ``"archive"``; ``None`` when not known (a handle made by
        #: :meth:`AsyncClient.sandbox`, or a daemon before the local plane).
        self.file_plane: str | None = plane if isinstance(plane, str) else None
        self.key: Mapping[str, Any] | None = key
        self.spec: Mapping[str, Any] | None = spec
        image = acquired.get("image")
        image_id = acquired.get("image_id")
        #: The image reference the container was made from, and its id where the engine said
        #: (``None`` for a handle made by :meth:`AsyncClient.sandbox`).
        self.image: str | None = image if isinstance(image, str) else None
        self.image_id: str | None = image_id if isinstance(image_id, str) else None
        self.raw: Mapping[str, Any] = dict(acquired)
        #: What the handle was made with (``client.sandbox(ref)``): resolve() looks it up.
        self._ref: str = self.instance_id
        #: The ``sandbox.list`` entry, once resolved.
        self.info: SandboxInfo | None = None
        #: Why ``async with`` could not dispose it (``None``: disposed, or not yet).
        self.disposal: DisposalFailure | None = None

    @property
    def id(self) -> str:
        return self.instance_id

    def __repr__(self) -> str:
        return f"Sandbox({self.instance_id[:12]}, name={self.name!r}, kind={self.kind!r})"

    def _params(self, working_directory: str | None, **extra: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"sandbox": self.instance_id}
        if working_directory is not None:
            params["working_directory"] = working_directory
        params.update({k: v for k, v in extra.items() if v is not None})
        return params

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout: float = DEFAULT_EXEC_TIMEOUT_SECONDS,
        working_directory: str | None = None,
        env: Mapping[str, str] | None = None,
        max_output_bytes: int | None = None,
        on_output: OutputCallback | None = None,
        stdin: bytes | str | AsyncIterable[bytes] | None = None,
    ) -> ExecResult:
        """``sandbox.exec``: runs ``command`` (a string under ``sh -c``; a sequence is the argv
        itself, never joined) as the image's user and waits for it, at most ``timeout`` s
        (then :class:`~maf_sandbox_client.SandboxTimeoutError`, a ``TimeoutError``, whose
        ``stdout``/``stderr`` hold what came before; what the command started is killed, the
        sandbox stays). A non-zero exit is a result.

        ``on_output(stream, data)`` receives the output as it arrives (``"stdout"`` or
        ``"stderr"``, raw bytes, in order), all of it before this returns.

        ``stdin``: the command's input. ``bytes`` (or ``str``, as UTF-8) go whole with the
        request (``stdin_b64``, bounded by the frame); an async iterable of ``bytes`` is
        streamed (``stdin_stream``: ``exec.stdin`` requests of at most
        :data:`STDIN_CHUNK_BYTES`, each sent once the daemon has handed the last to the engine,
        then the end); ``None`` (the default): the command's stdin is closed. Iteration stops
        when the command no longer reads (it ended or closed its stdin).

        Cancelling the task that awaits this (``task.cancel()``, ``asyncio.wait_for``, a
        client ``timeout``) cancels the command: ``call.cancel`` is sent, and the daemon kills
        it and every process it started, as on its deadline; ``CancelledError`` (or the
        timeout's error) propagates here.
        """
        if isinstance(command, str):
            wire_command: str | builtins.list[str] = command
        elif isinstance(command, (bytes, bytearray)):
            raise TypeError("command must be str or a sequence of str, not bytes")
        else:
            wire_command = builtins.list(command)
            if not wire_command or not all(isinstance(a, str) for a in wire_command):
                raise TypeError("an argv command must be a non-empty sequence of str")
        params = self._params(working_directory, command=wire_command,
                              timeout_seconds=_seconds(timeout, "timeout", MAX_EXEC_TIMEOUT_SECONDS))
        if env is not None:
            params["env"] = dict(env)
        if max_output_bytes is not None:
            params["max_output_bytes"] = max_output_bytes
        handler: _Handler | None = None
        if on_output is not None:
            params["stream"] = True
            output = on_output

            def handler(method: str, note: Mapping[str, Any]) -> Awaitable[None] | None:
                if method != EXEC_OUTPUT:
                    return None
                stream = note.get("stream")
                data = _decode_content(note.get("data_b64"), "exec.output")
                return output(stream if isinstance(stream, str) else "stdout", data)

        source: AsyncIterable[bytes] | None = None
        if stdin is None:
            pass
        elif isinstance(stdin, str):
            params["stdin_b64"] = b64encode_text(stdin.encode())
        elif isinstance(stdin, (bytes, bytearray, memoryview)):
            params["stdin_b64"] = b64encode_text(stdin)
        elif hasattr(stdin, "__aiter__"):
            params["stdin_stream"] = True
            source = stdin
        else:
            raise TypeError("stdin must be bytes, str, an async iterable of bytes, or None")
        feeder: asyncio.Task[None] | None = None

        def on_id(conn: Connection, request_id: int) -> None:
            nonlocal feeder
            if source is not None:
                feeder = asyncio.get_running_loop().create_task(
                    _feed_stdin(conn, request_id, source))

        try:
            result = await self.client._call("sandbox.exec", params, on_notification=handler,
                                             on_id=on_id, cancel_on_abort=True)
        except SandboxError:
            # A source that failed cancelled the exec: its own exception says why.
            failure = await _feeder_end(feeder)
            if failure is not None:
                raise failure from None
            raise
        except BaseException:
            await _feeder_end(feeder)
            raise
        failure = await _feeder_end(feeder)
        if failure is not None:
            raise failure
        return ExecResult.from_wire(result)

    async def run_code(self, code: str, *, timeout: float) -> ExecResult:
        """Not served (the daemon never declares ``run_code``): raises
        :class:`~maf_sandbox_client.SandboxNotServed`, a ``NotImplementedError``."""
        raise SandboxNotServed(
            "maf-sandboxd does not serve run_code (RUN_CODE is not declared): write the program "
            "with write_file and exec it",
            data={"missing": [Capability.RUN_CODE.value], "client_side": True})

    async def reset(self, *, timeout: float | None = None) -> None:
        """Not served (the daemon never declares ``snapshot``): raises
        :class:`~maf_sandbox_client.SandboxNotServed`, a ``NotImplementedError``."""
        raise SandboxNotServed(
            "maf-sandboxd does not serve reset (SNAPSHOT is not declared): dispose the sandbox "
            "instead", data={"missing": [Capability.SNAPSHOT.value], "client_side": True})

    async def write_file(self, path: str, content: str | bytes, *,
                         working_directory: str | None = None, mode: int | None = None) -> int:
        """``files.write``: writes (replaces) one file; ``str`` as UTF-8, ``bytes`` as given.
        Missing parent directories are made. ``mode``: the file's permission bits (e.g.
        ``0o755`` to run it as ``./path``; 0 to ``0o777``, setuid/setgid/sticky are refused;
        default ``0o644``), set with the content, never after. Returns the bytes written."""
        entry = (await _contents([(path, content)]))[0]
        params = self._params(working_directory, **entry, mode=_mode(mode, "mode"))
        result = await self.client._call("files.write", params)
        return int(result.get("bytes", 0)) if isinstance(result, Mapping) else 0

    async def write_files(self, files: Mapping[str, str | bytes], *,
                          working_directory: str | None = None,
                          modes: Mapping[str, int] | None = None) -> int:
        """``files.write`` of several files in one freeze (at most 256). ``modes`` maps a
        path of ``files`` to its permission bits (as ``write_file``'s ``mode``; the others get
        ``0o644``). Returns the bytes."""
        entries = await _contents(builtins.list(files.items()))
        for path, bits in (modes or {}).items():
            if path not in files:
                raise InvalidParams(f"modes names {path!r}, which files does not hold",
                                    data={"field": "modes", "client_side": True})
        for entry in entries:
            if modes and entry["path"] in modes:
                entry["mode"] = _mode(modes[entry["path"]], "modes")
        result = await self.client._call("files.write",
                                         self._params(working_directory, files=entries))
        return int(result.get("bytes", 0)) if isinstance(result, Mapping) else 0

    async def read_file(self, path: str, *, working_directory: str | None = None,
                        max_bytes: int | None = None) -> bytes:
        """``files.read``: one regular file, whole. A larger file than ``max_bytes`` is refused
        (:class:`~maf_sandbox_client.SandboxTransferCapExceeded`), never truncated."""
        result = await self.client._call(
            "files.read", self._params(working_directory, path=path, max_bytes=max_bytes))
        if not isinstance(result, Mapping):
            raise UnexpectedReply(f"files.read: {result!r}")
        return await _decode_content_async(result.get("content_b64"), "files.read")

    async def read_files(self, paths: Sequence[str], *, working_directory: str | None = None,
                         max_bytes: int | None = None) -> dict[str, bytes]:
        """``files.read`` of several files in one freeze, in the given order."""
        result = await self.client._call(
            "files.read", self._params(working_directory, paths=builtins.list(paths),
                                       max_bytes=max_bytes))
        files = result.get("files") if isinstance(result, Mapping) else None
        if not isinstance(files, builtins.list):
            raise UnexpectedReply(f"files.read: {result!r}")
        return {str(f.get("path")): await _decode_content_async(f.get("content_b64"), "files.read")
                for f in files if isinstance(f, Mapping)}

    async def stat_file(self, path: str, *,
                        working_directory: str | None = None) -> SandboxEntry | None:
        """``files.stat``: the final component, not followed; ``None`` when nothing is there."""
        result = await self.client._call("files.stat", self._params(working_directory, path=path))
        return None if result is None else SandboxEntry.from_wire(result)

    async def remove(self, path: str, recursive: bool = False, *,
                     working_directory: str | None = None) -> None:
        """``files.remove``: as the guest's user; absent is success; a directory needs
        ``recursive``; a link is unlinked, never followed."""
        await self.client._call("files.remove", self._params(
            working_directory, path=path, recursive=True if recursive else None))

    async def reclaim(self, directory: str, *, working_directory: str | None = None,
                      timeout: float | None = None) -> None:
        """``files.reclaim``: removes a directory made for one call (``rm -rf`` as the guest);
        absent is success. ``timeout`` is rounded up to whole seconds."""
        seconds = None if timeout is None else max(1, math.ceil(seconds_from(timeout, "timeout")))
        await self.client._call("files.reclaim", self._params(
            working_directory, directory=directory, timeout_seconds=seconds))

    async def list_dir(self, path: str, *,
                       working_directory: str | None = None) -> tuple[SandboxEntry, ...]:
        """``files.list``: the direct children of the directory ``path``, sorted by path,
        each a :class:`~maf_sandbox_client.SandboxEntry` as ``stat_file`` gives it (``path``
        relative to the working directory; a link is named ``SYMLINK``, never followed).

        Served on the daemon's local file plane only. Where the daemon does not declare
        ``files_list`` (its plane is the archive one), and for a sandbox it serves on the
        archive plane (the daemon's 1100, ``data["file_plane"] == "archive"``), this raises
        :class:`~maf_sandbox_client.SandboxNotServed`, a ``NotImplementedError`` as
        maf-sandbox-docker's. A link on the way is
        :class:`~maf_sandbox_client.SandboxConfinementError`, a file in place of the
        directory :class:`~maf_sandbox_client.SandboxNotADirectoryError`, an absent one
        :class:`~maf_sandbox_client.SandboxFileNotFoundError`; more entries than the
        daemon's ``files.list_max_entries`` is
        :class:`~maf_sandbox_client.SandboxTransferCapExceeded` (never a truncated list).
        """
        declared = await self.client.capabilities()
        if Capability.FILES_LIST not in declared:
            raise SandboxNotServed(
                "maf-sandboxd does not serve list_dir here (FILES_LIST is not declared: its "
                "file plane is the archive one): name outputs in advance and stat them",
                data={"missing": [Capability.FILES_LIST.value], "declared": sorted(declared),
                      "client_side": True})
        try:
            result = await self.client._call("files.list",
                                             self._params(working_directory, path=path))
        except SandboxCapabilityNotSupported as exc:
            # This sandbox is on the archive plane (its init could not be pinned).
            data = {"missing": [Capability.FILES_LIST.value], **exc.data}
            raise SandboxNotServed(exc.message, code=exc.code, type=exc.type, data=data) from exc
        entries = result.get("entries") if isinstance(result, Mapping) else None
        if not isinstance(entries, builtins.list):
            raise UnexpectedReply(f"files.list: {result!r}")
        return tuple(SandboxEntry.from_wire(e) for e in entries)

    async def dispose(self) -> DisposalFailure | None:
        """Removes this container (only this one: ``sandbox.dispose`` with its id)."""
        if self.key is None:
            raise InvalidParams("this handle has no key: use AsyncClient.dispose(key, ...)",
                                data={"field": "key", "client_side": True})
        return await self.client.dispose(self.key, kind=self.kind or None,
                                         sandbox=self.instance_id)

    # ---- resolving a handle, and `async with` ----------------------------------------------

    async def resolve(self) -> Sandbox:
        """Looks this handle's reference up in ``sandbox.list`` (see
        :meth:`AsyncClient.sandbox`) and fills ``instance_id``, ``name``, ``kind``, ``key``
        (when the handle had none), ``state`` and ``info``. Returns the handle."""
        info = _match_sandbox(self._ref, await self.client.list())
        self.instance_id = info.sandbox
        self.name = info.name
        self.kind = info.kind
        self.state = info.state
        if self.key is None and isinstance(info.raw.get("key"), Mapping):
            self.key = dict(info.raw["key"])
        self.info = info
        return self

    def __await__(self) -> Generator[Any, None, Sandbox]:
        return self.resolve().__await__()

    async def __aenter__(self) -> Sandbox:
        """``async with sandbox:`` (an acquired one, or ``client.sandbox(ref)``, resolved here
        when it has no key or kind yet); the sandbox is disposed at the end of the block."""
        if self.key is None or not self.kind:
            await self.resolve()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        """Disposes the sandbox (``sandbox.dispose`` of this container only). A failure to
        dispose is kept in ``disposal`` and logged; it is raised only when the block itself
        raised nothing (:class:`~maf_sandbox_client.SandboxError`, ``data["disposal"]``)."""
        self.disposal = await self.dispose()
        if self.disposal is not None:
            logger.warning("sandbox %s may still be there: %s", self.instance_id[:12],
                           self.disposal)
            if exc is None:
                raise SandboxError(f"sandbox {self.instance_id[:12]} was not disposed: "
                                   f"{self.disposal}",
                                   data={"disposal": {"code": self.disposal.code,
                                                      "detail": self.disposal.detail}})


_END = object()


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Marks a background task's exception as seen (its awaiters got it, or nobody waits)."""
    if not task.cancelled():
        task.exception()


class EventStream:
    """Events on a connection of their own: ``async for event in stream``.

    ``subscription`` holds the daemon's reply (types and scope) once subscribed. With
    ``replay``, kept events come first (before the reply), all of them queued whatever
    ``max_queue``; after the reply, at most ``max_queue`` events wait unread before the stream
    stops reading its connection (the daemon disconnects a subscriber 4 MiB behind).
    Iteration ends after :meth:`aclose`; a lost connection raises
    :class:`~maf_sandbox_client.ConnectionLost`. A :meth:`next` that times out leaves the
    stream as it was (a subscription under way goes on).
    """

    def __init__(self, client: AsyncClient, types: builtins.list[str], scope: str | None,
                 replay: bool, max_queue: int) -> None:
        self._client = client
        self.types = types
        self.scope = scope
        self.replay = replay
        self._max_queue = max(1, max_queue)
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._room = asyncio.Event()
        self._conn: Connection | None = None
        self._start_task: asyncio.Task[None] | None = None
        #: The subscribe reply came: from here on, a full queue holds the reader.
        self._live = False
        self._end: SandboxError | None = None
        self._closed = False
        self.subscription: Mapping[str, Any] | None = None

    @property
    def closed(self) -> bool:
        """Closed by :meth:`aclose`, or its connection ended."""
        return self._closed or (self._conn is not None and self._conn.closed)

    async def start(self) -> EventStream:
        """Opens the stream's connection and subscribes (done by the first ``__anext__``).
        The subscription runs as a task of its own: cancelling the caller (a timeout) does
        not end it. Raises what subscribing raised."""
        if self._start_task is None:
            if self._closed:
                return self
            task = asyncio.get_running_loop().create_task(self._subscribe(),
                                                          name="maf-sandbox-subscribe")
            task.add_done_callback(_retrieve)
            self._start_task = task
        await asyncio.shield(self._start_task)
        return self

    async def _subscribe(self) -> None:
        conn = self._client._new_connection(event_sink=self._on_event, on_close=self._on_close)
        try:
            await conn.open(self._client.connect_timeout)
            self._conn = conn
            params: dict[str, Any] = {"types": self.types}
            if self.scope is not None:
                params["scope"] = self.scope
            if self.replay:
                params["replay"] = True
            self.subscription = await _bounded(conn.request("events.subscribe", params),
                                               "events.subscribe", self._client.call_timeout)
        except BaseException:
            await self.aclose()
            raise
        self._live = True
        self._room.set()

    async def _on_event(self, params: Mapping[str, Any]) -> None:
        # Replayed events come before the reply: holding the reader for them would keep the
        # reply from ever being read.
        while self._live and self._queue.qsize() >= self._max_queue:
            self._room.clear()
            await self._room.wait()
        self._queue.put_nowait(SandboxEvent.from_wire(params))

    def _on_close(self, error: SandboxError) -> None:
        self._end = error
        self._queue.put_nowait(_END)
        self._client._streams.discard(self)

    async def next(self, timeout: float | None = None) -> SandboxEvent | None:
        """The next event, or ``None`` when ``timeout`` s pass without one."""
        try:
            async with asyncio.timeout(timeout) as deadline:
                return await self.__anext__()
        except TimeoutError:
            if deadline.expired():
                return None
            raise

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> SandboxEvent:
        await self.start()
        item = await self._queue.get()
        self._room.set()
        if item is _END:
            self._queue.put_nowait(_END)  # every later call ends too
            if self._closed or self._end is None:
                raise StopAsyncIteration
            raise self._end
        assert isinstance(item, SandboxEvent)
        return item

    async def aclose(self) -> None:
        """Ends the subscription (closes its connection)."""
        self._closed = True
        self._client._streams.discard(self)
        task = self._start_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        if self._conn is not None:
            await self._conn.close()
        else:
            self._queue.put_nowait(_END)

    async def __aenter__(self) -> EventStream:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()
