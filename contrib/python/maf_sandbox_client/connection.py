"""One Unix-socket connection to maf-sandboxd: requests in flight matched by ``id``.

A reader task reads frames as they come and resolves each request's future by its ``id``, so
any number of calls share the connection (the daemon serves up to ``max_inflight`` at once and
applies back-pressure beyond). Notifications are routed to the call that asked for them:
``exec.output`` by its ``id`` (the request's), ``sandbox.pull_progress`` to the acquires in
flight for the same image (it carries no request id), ``events.event`` to the connection's
event sink. Unknown notifications are skipped, as PROTOCOL.md asks.

A call whose caller stopped waiting (cancelled, timed out) is forgotten: its late reply and
notifications are dropped. PROTOCOL.md defines no cancel method, so the daemon finishes it.

A call in flight when the connection ends (the daemon stopped, restarted or was killed) fails
with :class:`ConnectionLost` saying so: it may or may not have run, and it is never sent again.
Before a call is sent on a connection with nothing in flight, :meth:`Connection.peer_closed`
asks the socket whether the daemon already closed it (a restart the reader has not seen yet,
because the loop did not run since), so that call goes on a new connection instead of failing.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .errors import (
    CONNECTION_ENDING_CODES,
    ConnectionLost,
    DaemonUnavailable,
    SandboxError,
    error_from_wire,
)
from .wire import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_REPLY_BYTES,
    OFFLOAD_BYTES,
    decode_frame,
    decode_on_loop,
    encode_notification,
    encode_request,
    encode_work,
)

__all__ = ["Connection", "NotificationHandler"]

logger = logging.getLogger("maf_sandbox_client")

#: Called (synchronously, from the reader) with a notification's method and params.
NotificationHandler = Callable[[str, Mapping[str, Any]], None]

#: Notifications the daemon sends (PROTOCOL.md, "Notifications from the daemon").
EXEC_OUTPUT = "exec.output"
#: Requests about a call in flight (PROTOCOL.md ``call.cancel``, ``exec.stdin``).
CALL_CANCEL = "call.cancel"
EXEC_STDIN = "exec.stdin"
PULL_PROGRESS = "sandbox.pull_progress"
EVENTS_EVENT = "events.event"

#: After a failed write, how long the reader gets to deliver what the daemon said before it
#: closed (e.g. FrameTooLarge) before the connection is dropped.
WRITE_FAILURE_GRACE_SECONDS = 5.0
#: ShuttingDown: the daemon is stopping, so the close that follows is not an idle close.
SHUTTING_DOWN_CODE = 1303
#: Bytes asked of one recv().
READ_CHUNK_BYTES = 256 * 1024


class _Pending:
    __slots__ = ("method", "future", "notify", "image")

    def __init__(self, method: str, future: asyncio.Future[Any], notify: NotificationHandler | None,
                 image: str | None) -> None:
        self.method = method
        self.future = future
        self.notify = notify
        self.image = image


class Connection:
    """The transport of :class:`~maf_sandbox_client.AsyncClient` (not meant to be used alone).

    Plain non-blocking socket I/O on the running loop: one writer task sends the queued frames
    whole and in order (a caller cancelled while its frame is being sent never leaves half a
    frame behind), one reader task splits what arrives into frames. A failed write does not
    close the read side, so what the daemon said before it hung up (``TooManyConnections``,
    ``FrameTooLarge``) is still read and delivered.

    ``event_sink`` is awaited from the reader for each ``events.event`` (so a slow sink holds
    the reader: back-pressure, which the daemon bounds by disconnecting); ``on_close`` is called
    once when the connection ends, with the exception its calls get.
    """

    def __init__(
        self,
        path: str,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        event_sink: Callable[[Mapping[str, Any]], Awaitable[None]] | None = None,
        on_close: Callable[[SandboxError], None] | None = None,
    ) -> None:
        self.path = path
        #: The largest request frame sent (updated by the client when describe says more).
        self.max_frame_bytes = max_frame_bytes
        self.max_reply_bytes = max_reply_bytes
        self._event_sink = event_sink
        self._on_close = on_close
        self._sock: socket.socket | None = None
        self._outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._reader_task: asyncio.Task[None] | None = None
        self._writer_task: asyncio.Task[None] | None = None
        self._pending: dict[int, _Pending] = {}
        self._next_id = 1
        self._closed = False
        self._close_reason = "not connected"
        self._write_error: str | None = None
        self._grace: asyncio.TimerHandle | None = None
        #: The error object of a connection-ending error (1301, 1302, 1304), if one came.
        self._fatal: Mapping[str, Any] | None = None
        self._eof_between_frames = False
        self._closed_idle = False
        #: The daemon answered ShuttingDown (1303): its close that follows is no idle close.
        self._saw_shutdown = False
        #: The reader holds part of a frame (an EOF now would cut it).
        self._rx_partial = False
        #: peer_closed() found the daemon's close before the reader did.
        self._peer_gone = False

    # ---- life cycle ----------------------------------------------------------------------

    async def open(self, timeout: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(timeout):
                await loop.sock_connect(sock, self.path)
        except TimeoutError:
            sock.close()
            self._closed = True
            raise DaemonUnavailable(f"cannot connect to {self.path}: timed out") from None
        except OSError as exc:
            sock.close()
            self._closed = True
            raise DaemonUnavailable(f"cannot connect to {self.path}: {exc.strerror or exc}",
                                    data={"errno": exc.errno}) from exc
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._reader_task = loop.create_task(self._read_loop(),
                                             name=f"maf-sandbox-reader:{self.path}")
        self._writer_task = loop.create_task(self._write_loop(),
                                             name=f"maf-sandbox-writer:{self.path}")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def closed_idle(self) -> bool:
        """The daemon closed the connection while it was idle (its ``limits.idle_timeout_ms``):
        no call in flight, nothing said, no partial frame, no event subscription. A new
        connection then loses nothing, so the client opens one for the next call."""
        return self._closed_idle

    def peer_closed(self) -> bool:
        """Whether the daemon closed this connection while nothing was in flight, though the
        reader has not seen it yet (the loop did not run since: a restart between two calls).
        Asked before a call is sent: a peek, never a read, so nothing the daemon said is lost.
        """
        if self._closed or self._sock is None or self._pending or self._rx_partial \
                or self._fatal is not None or self._write_error:
            return False
        try:
            data = self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            data = b""  # reset by the peer: gone as well
        return not data

    async def close_peer_closed(self) -> None:
        """Ends a connection :meth:`peer_closed` found closed by the daemon, as the reader
        would have at its EOF: with nothing in flight, it counts as closed while idle."""
        if not self._closed:
            self._eof_between_frames = True
            self._close_reason = "the daemon closed the connection"
            self._peer_gone = True
        await self.close()

    async def close(self) -> None:
        """Closes the connection; calls still waiting get :class:`ConnectionLost`."""
        if not self._closed and not self._peer_gone:
            self._close_reason = "closed by the client"
        tasks = [t for t in (self._reader_task, self._writer_task)
                 if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                # Our own cancellation of the task, unless this task is being cancelled too.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        self._finish(self._close_reason)

    # ---- requests ------------------------------------------------------------------------

    def closing_error(self) -> SandboxError:
        """A fresh exception saying why this connection cannot serve calls."""
        if self._fatal is not None:
            return error_from_wire(self._fatal)
        reason = self._close_reason if self._closed else (self._write_error or "closing")
        return ConnectionLost(f"the connection to the daemon at {self.path} ended: {reason}")

    async def request(self, method: str, params: Mapping[str, Any] | None = None, *,
                      notify: NotificationHandler | None = None,
                      image: str | None = None,
                      on_id: Callable[[int], None] | None = None,
                      cancel_on_abort: bool = False) -> Any:
        """Sends one request and waits for its reply; returns ``result`` or raises the error.

        ``notify`` receives the notifications routed to this call; ``image`` makes it a
        receiver of ``sandbox.pull_progress`` for that image reference. ``on_id`` is told the
        request's id once it is queued (``exec.stdin`` names the exec by it). With
        ``cancel_on_abort``, a wait that ends without the reply (the awaiting task cancelled,
        a client deadline) sends ``call.cancel`` for it (the daemon kills a cancelled exec).
        """
        if self._closed or self._sock is None or self._fatal is not None or self._write_error:
            raise self.closing_error()
        request_id = self._next_id
        self._next_id += 1
        if params is not None and encode_work(params) > OFFLOAD_BYTES:
            frame = await asyncio.to_thread(encode_request, request_id, method, params,
                                            self.max_frame_bytes)
            if self._closed or self._fatal is not None or self._write_error:
                raise self.closing_error()
        else:
            frame = encode_request(request_id, method, params, self.max_frame_bytes)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = _Pending(method, future, notify, image)
        try:
            self._outbox.put_nowait(frame)
            if on_id is not None:
                on_id(request_id)
            return await future
        except asyncio.CancelledError:
            if cancel_on_abort and (future.cancelled() or not future.done()):
                self.notify_daemon(CALL_CANCEL, {"id": request_id})
            raise
        finally:
            self._pending.pop(request_id, None)

    def notify_daemon(self, method: str, params: Mapping[str, Any]) -> None:
        """Queues a notification to the daemon (a request without ``id``: nothing answers it);
        dropped when the connection cannot send."""
        if self._closed or self._sock is None or self._fatal is not None or self._write_error:
            return
        self._outbox.put_nowait(encode_notification(method, params))

    async def _write_loop(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        while True:
            frame = await self._outbox.get()
            try:
                await loop.sock_sendall(self._sock, frame)
            except OSError as exc:
                # The daemon may have said why before it hung up (FrameTooLarge,
                # TooManyConnections): the reader delivers that, or ConnectionLost at the end
                # of the stream; if the stream does not end, the connection is dropped.
                self._write_error = f"write failed: {exc.strerror or exc}"
                logger.debug("%s: %s", self.path, self._write_error)
                self._grace = loop.call_later(WRITE_FAILURE_GRACE_SECONDS, self._abort,
                                              self._write_error)
                return

    # ---- the reader ----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        reason = "the daemon closed the connection"
        buf = bytearray()
        scanned = 0  # bytes of buf known to hold no LF
        try:
            while True:
                try:
                    chunk = await loop.sock_recv(self._sock, READ_CHUNK_BYTES)
                except OSError as exc:
                    reason = f"read failed: {exc.strerror or exc}"
                    break
                if not chunk:
                    self._eof_between_frames = not buf
                    break
                buf += chunk
                self._rx_partial = True
                while True:
                    end = buf.find(b"\n", scanned)
                    if end < 0:
                        scanned = len(buf)
                        break
                    if end > self.max_reply_bytes:
                        reason = f"a frame from the daemon exceeded {self.max_reply_bytes} bytes"
                        return
                    if end + 1 == len(buf):  # the usual case: one copy, not two
                        line = bytes(buf)
                        buf.clear()
                    else:
                        line = bytes(buf[:end + 1])
                        del buf[:end + 1]
                    scanned = 0
                    try:
                        if decode_on_loop(line):
                            msg = decode_frame(line)
                        else:
                            msg = await asyncio.to_thread(decode_frame, line)
                    except (ValueError, UnicodeDecodeError):
                        reason = "the daemon sent a frame that is not JSON"
                        return
                    if isinstance(msg, dict):
                        await self._dispatch(msg)
                    elif msg is not None:
                        logger.warning("skipping a frame that is not an object: %.80r", msg)
                self._rx_partial = bool(buf)
                if len(buf) > self.max_reply_bytes:
                    reason = f"a frame from the daemon exceeded {self.max_reply_bytes} bytes"
                    break
        except asyncio.CancelledError:
            reason = self._close_reason
            raise
        except Exception as exc:  # a bug here must not leave every call hanging
            logger.exception("maf-sandbox reader failed")
            reason = f"client error: {exc!r}"
        finally:
            self._finish(reason)

    async def _dispatch(self, msg: dict[str, Any]) -> None:
        error = msg.get("error")
        if isinstance(error, Mapping) and error.get("code") == SHUTTING_DOWN_CODE:
            self._saw_shutdown = True
        if "id" not in msg:
            method = msg.get("method")
            params = msg.get("params")
            if isinstance(method, str):
                await self._notification(method, params if isinstance(params, Mapping) else {})
            return
        request_id = msg["id"]
        if request_id is None:
            self._null_id(msg)
            return
        pending = (self._pending.get(request_id)
                   if isinstance(request_id, int) and not isinstance(request_id, bool) else None)
        if pending is None or pending.future.done():
            logger.debug("dropping the reply to %r (nobody waits for it)", request_id)
            return
        if "error" in msg:
            pending.future.set_exception(error_from_wire(msg["error"]))
        else:
            pending.future.set_result(msg.get("result"))

    async def _notification(self, method: str, params: Mapping[str, Any]) -> None:
        if method == EXEC_OUTPUT:
            call_id = params.get("id")
            pending = self._pending.get(call_id) if isinstance(call_id, int) else None
            if pending is not None and pending.notify is not None and not pending.future.done():
                pending.notify(method, params)
        elif method == PULL_PROGRESS:
            image = params.get("image")
            for pending in list(self._pending.values()):
                if pending.image and pending.image == image and pending.notify is not None:
                    pending.notify(method, params)
        elif method == EVENTS_EVENT:
            if self._event_sink is not None:
                await self._event_sink(params)
        else:
            logger.debug("skipping notification %s", method)

    def _null_id(self, msg: Mapping[str, Any]) -> None:
        """An error that answers no particular request (PROTOCOL.md: ``id`` null)."""
        error = msg.get("error")
        code = error.get("code") if isinstance(error, Mapping) else None
        if code in CONNECTION_ENDING_CODES:
            # The daemon closes the connection right after: every call in flight ends with it.
            self._fatal = error if isinstance(error, Mapping) else None
            self._fail_all()
            return
        waiting = [p for p in self._pending.values() if not p.future.done()]
        if len(waiting) == 1:
            waiting[0].future.set_exception(error_from_wire(error))
        else:
            logger.warning("maf-sandboxd sent an error for no request: %r", error)

    # ---- the end -------------------------------------------------------------------------

    def _lost_mid_call(self, method: str) -> SandboxError:
        """What a call in flight gets when the connection ends under it."""
        if self._fatal is not None:
            return error_from_wire(self._fatal)
        reason = self._close_reason if self._closed else (self._write_error or "closing")
        return ConnectionLost(
            f"{method}: the daemon at {self.path} went away mid-call ({reason}): the call may or "
            "may not have run, and it is not sent again",
            data={"method": method, "in_flight": True})

    def _fail_all(self) -> None:
        for pending in list(self._pending.values()):
            if not pending.future.done():
                pending.future.set_exception(self._lost_mid_call(pending.method))

    def _abort(self, reason: str) -> None:
        if self._closed:
            return
        self._close_reason = reason
        if self._reader_task is not None and not self._reader_task.done():
            self._reader_task.cancel()  # its finally calls _finish
        else:
            self._finish(reason)

    def _finish(self, reason: str) -> None:
        first = not self._closed
        if first:
            self._closed = True
            self._close_reason = reason
            self._closed_idle = (self._eof_between_frames and self._fatal is None
                                 and not self._saw_shutdown
                                 and self._write_error is None and self._event_sink is None
                                 and not any(not p.future.done() for p in self._pending.values()))
            if self._grace is not None:
                self._grace.cancel()
            current = asyncio.current_task()
            for task in (self._reader_task, self._writer_task):
                if task is not None and task is not current and not task.done():
                    task.cancel()
            if self._sock is not None:
                self._sock.close()
        self._fail_all()
        if first and self._on_close is not None:
            try:
                self._on_close(self.closing_error())
            except Exception:
                logger.exception("on_close callback failed")
