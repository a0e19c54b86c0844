"""The error mapping, provoked from the real daemon: each reachable wire error arrives as its
class (and its builtin). The codes no client can provoke (ParseError, InvalidRequest,
InternalError, EngineError/Timeout/VersionNotSupported, SandboxScopeNotEnforced, FrameTimeout)
are covered by test_unit's table test."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import subprocess
import unittest
from collections.abc import Awaitable, Callable
from typing import Any

import maf_sandbox_client as msb
from tests import daemon_fixture as fx

NO_SUCH_SANDBOX = "0" * 64


def setUpModule() -> None:
    fx.session().shared  # noqa: B018


def tearDownModule() -> None:
    fx.session().stop_shared()  # SIGTERM: it must exit 0 (a sanitizer's leak report fails it)


@contextlib.contextmanager
def host_lock(daemon_binary: str, container_id: str):  # type: ignore[no-untyped-def]
    """Holds ``container_id``'s byte of the daemons' host freeze lock (freeze.lock_file;
    domain/hostlock.h: the offset is the id's first 15 hex digits), as a live
    maf-sandboxd's freeze does. A POSIX record lock conflicts with the daemons' OFD locks."""
    conf = subprocess.run([daemon_binary, "--check-config"], check=True, capture_output=True,
                          text=True).stdout
    path = next(line.split(" = ", 1)[1] for line in conf.splitlines()
                if line.startswith("freeze.lock_file = "))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, int(container_id[:15], 16), os.SEEK_SET)
        yield
    finally:
        os.close(fd)  # the lock goes with it


class ErrorTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.s = fx.session()
        self.client = msb.AsyncClient(self.s.shared.sock)
        await self.client.connect()
        self.addAsyncCleanup(self.client.close)

    async def check(self, call: Callable[[], Awaitable[Any]], cls: type[msb.SandboxError],
                    builtin: type[BaseException], code: int | None = None) -> msb.SandboxError:
        with self.assertRaises(cls) as cm:
            await call()
        exc = cm.exception
        self.assertIsInstance(exc, builtin)
        self.assertEqual(exc.code, cls.wire_code if code is None else code)
        self.assertEqual(exc.type, cls.wire_type)
        self.assertNotIn("client_side", exc.data, "raised before the daemon was asked")
        return exc

    async def daemon(self, *args: str, wait_ready: bool = True) -> fx.Daemon:
        """A daemon of the test's own; at the test's end (after its clients, closed by
        cleanups added later) SIGTERM, and it must exit 0 (a sanitizer's report fails it)."""
        d = await asyncio.to_thread(self.s.daemon, *args, wait_ready=wait_ready)
        self.addAsyncCleanup(asyncio.to_thread, fx.check_clean_exit, d)
        return d


class FromTheSharedDaemon(ErrorTest):
    async def test_request_and_param_errors(self) -> None:
        exc = await self.check(lambda: self.client.call("no.such.method"), msb.MethodNotFound,
                               NotImplementedError)
        self.assertEqual(exc.data["method"], "no.such.method")
        exc = await self.check(lambda: self.client.call("daemon.status", {"bogus": 1}),
                               msb.InvalidParams, ValueError)
        exc = await self.check(lambda: self.client.acquire(
            self.s.key("errors"), self.s.spec(egress_allow=["example.com"])),
            msb.InvalidParams, ValueError)
        self.assertEqual(exc.field, "spec.egress_allow")
        exc = await self.check(lambda: self.client.acquire(
            self.s.key("errors", call_id="c1"), self.s.spec()), msb.InvalidParams, ValueError)
        self.assertEqual(exc.field, "key")

    async def test_router_refusals(self) -> None:
        key = self.s.key("errors", "refusals")
        rows: list[tuple[dict[str, Any], type[msb.SandboxError], type[BaseException]]] = [
            ({"egress": "allowlist", "egress_allow": ["example.com"]},
             msb.SandboxEgressNotEnforced, PermissionError),
            ({"requires_os_family": "windows"}, msb.SandboxOsFamilyNotSupported, RuntimeError),
            ({"files_in": {"max_bytes_per_file": 1 << 40, "max_total_bytes": 1 << 40,
                           "max_files": 1}}, msb.SandboxTransferLimitsNotPermitted,
             PermissionError),
            ({"min_isolation": "microvm"}, msb.SandboxBackendNotPermitted, PermissionError),
        ]
        for extra, cls, builtin in rows:
            with self.subTest(cls=cls.__name__):
                await self.check(lambda: self.client.acquire(key, self.s.spec(**extra)), cls,
                                 builtin)
        # files_list is declared on the local file plane only: a daemon on the archive plane
        # (its own, when the shared one serves the local plane) refuses a spec requiring it.
        client = self.client
        if "files_list" in await self.client.capabilities():
            d = await self.daemon("--set", "files.plane=archive")
            client = msb.AsyncClient(d.sock)
            await client.connect()
            self.addAsyncCleanup(client.close)
        self.assertNotIn("files_list", await client.capabilities())
        exc = await self.check(lambda: client.acquire(
            key, self.s.spec(requires=["exec", "files_list"])),
            msb.SandboxCapabilityNotSupported, RuntimeError)
        self.assertIn("files_list", exc.data["missing"])
        # Refused before anything was made.
        self.assertEqual(await self.client.list(scope=key["scope"], thread_id="refusals"), [])

    async def test_sandbox_surface_errors(self) -> None:
        key = self.s.key("errors", "surface")
        sb = await self.client.acquire(key, self.s.spec())
        await sb.write_file("plain", "x")
        await sb.write_file("dir/big", "0123456789")
        rows: list[tuple[str, Callable[[], Awaitable[Any]], type[msb.SandboxError],
                         type[BaseException]]] = [
            ("escape", lambda: sb.write_file("../escape", "x"), msb.SandboxConfinementError,
             ValueError),
            ("backslash", lambda: sb.read_file("a\\b"), msb.SandboxConfinementError, ValueError),
            ("through a file", lambda: sb.write_file("plain/child", "x"),
             msb.SandboxNotADirectoryError, NotADirectoryError),
            ("absent", lambda: sb.read_file("absent"), msb.SandboxFileNotFoundError,
             FileNotFoundError),
            ("a directory", lambda: sb.read_file("dir"), msb.SandboxOSError, OSError),
            ("a directory, not recursive", lambda: sb.remove("dir"), msb.SandboxOSError, OSError),
            ("over max_bytes", lambda: sb.read_file("dir/big", max_bytes=4),
             msb.SandboxTransferCapExceeded, RuntimeError),
            ("exec deadline", lambda: sb.exec("sleep 5", timeout=0.3), msb.SandboxTimeoutError,
             TimeoutError),
            ("output cap", lambda: sb.exec("yes | head -c 100000", max_output_bytes=1000),
             msb.SandboxExecOutputLimitExceeded, ValueError),
            ("no such sandbox", lambda: self.client.sandbox(NO_SUCH_SANDBOX).exec("true"),
             msb.SandboxNotFound, LookupError),
            ("bad env name", lambda: sb.exec("true", env={"1A": "x"}), msb.InvalidParams,
             ValueError),
        ]
        for name, call, cls, builtin in rows:
            with self.subTest(name):
                await self.check(call, cls, builtin)
        cap = await self.check(lambda: sb.read_file("dir/big", max_bytes=4),
                               msb.SandboxTransferCapExceeded, msb.SandboxOutputError)
        self.assertEqual((cap.limit, cap.size), (4, 10))
        nf = await self.check(lambda: sb.read_file("absent"), msb.SandboxFileNotFoundError,
                              FileNotFoundError)
        self.assertEqual(nf.path, "absent")
        # The sandbox is still usable after its command timed out.
        self.assertEqual((await sb.exec("echo ok")).stdout_text, "ok\n")

    async def test_conflict(self) -> None:
        key = self.s.key("errors", "conflict")
        await self.client.acquire(key, self.s.spec())
        exc = await self.check(lambda: self.client.acquire(key, self.s.spec(work_dir="/srv")),
                               msb.SandboxConflict, RuntimeError)
        self.assertEqual(exc.type, "SandboxConflict")

    async def test_freeze_failed_on_a_container_paused_by_someone_else(self) -> None:
        sb = await self.client.acquire(self.s.key("errors", "paused"), self.s.spec())
        # Someone else's live freeze: the container's host lock held (hostlock.h), so no
        # maf-sandboxd starting on this shared engine thaws it as a dead daemon's orphan.
        with host_lock(self.s.daemon_binary, sb.instance_id):
            subprocess.run(["docker", "pause", sb.instance_id], check=True, capture_output=True)
            try:
                await self.check(lambda: sb.exec("true", timeout=5), msb.SandboxFreezeFailed,
                                 RuntimeError)
            finally:
                subprocess.run(["docker", "unpause", sb.instance_id], capture_output=True)


class FromDaemonsOfTheirOwn(ErrorTest):
    async def test_engine_unavailable(self) -> None:
        d = await self.daemon("-e", "unix:///nonexistent/docker.sock", wait_ready=False)
        async with msb.AsyncClient(d.sock) as client:
            await self.check(client.engine, msb.SandboxEngineUnavailable, ConnectionError)
            self.assertFalse((await client.status())["engine"]["reachable"])

    async def test_too_many_connections(self) -> None:
        d = await self.daemon("--set", "limits.max_connections=1", wait_ready=False)
        async with msb.AsyncClient(d.sock) as first:
            for _ in range(50):  # until the fixture's probe connection is gone
                try:
                    await first.status()
                    break
                except msb.TooManyConnections:
                    await first.close()
                    await asyncio.sleep(0.05)
                    await first.connect()
            second = msb.AsyncClient(d.sock)
            await second.connect()
            try:
                await self.check(second.status, msb.TooManyConnections, ConnectionError)
                await self.check(second.status, msb.TooManyConnections, ConnectionError)
            finally:
                await second.close()
            self.assertIn("daemon", await first.status())

    async def test_frame_too_large(self) -> None:
        d = await self.daemon("--set", "limits.max_frame_bytes=4096", wait_ready=False)
        big = "x" * 10000
        # Told nothing about the limit, the client sends; the daemon refuses and hangs up.
        async with msb.AsyncClient(d.sock, auto_reconnect=False) as naive:
            exc = await self.check(lambda: naive.sandbox(NO_SUCH_SANDBOX).write_file("f", big),
                                   msb.FrameTooLarge, ValueError)
            self.assertEqual(exc.limit, 4096)
            await self.check(naive.status, msb.FrameTooLarge, ValueError)
        # By default, the next call goes on a new connection (the refused one is not resent).
        async with msb.AsyncClient(d.sock) as naive:
            await self.check(lambda: naive.sandbox(NO_SUCH_SANDBOX).write_file("f", big),
                             msb.FrameTooLarge, ValueError)
            self.assertIn("daemon", await naive.status())
        # After describe, the client knows the limit and refuses before sending.
        async with msb.AsyncClient(d.sock) as aware:
            await aware.describe()
            self.assertEqual(aware.max_frame_bytes, 4096)
            with self.assertRaises(msb.FrameTooLarge) as cm:
                await aware.sandbox(NO_SUCH_SANDBOX).write_file("f", big)
            self.assertTrue(cm.exception.data["client_side"])
            self.assertIn("daemon", await aware.status())

    async def test_permission_denied(self) -> None:
        if os.geteuid() != 0:
            # Not root and not in sandbox.admin_group: reap is refused as it is.
            await self.check(lambda: self.client.reap(3600), msb.SandboxPermissionDenied,
                             PermissionError)
            return
        d = await self.daemon("--set", "socket.mode=0666")
        for path in (self.s.tmp, d.dir):
            os.chmod(path, 0o711)
        client = msb.AsyncClient(d.sock)
        os.seteuid(65534)  # the peer credentials are taken at connect
        try:
            await client.connect()
        finally:
            os.seteuid(0)
        async with client:
            await self.check(lambda: client.reap(3600), msb.SandboxPermissionDenied,
                             PermissionError)
            self.assertEqual(await client.list(), [])


if __name__ == "__main__":
    unittest.main()
