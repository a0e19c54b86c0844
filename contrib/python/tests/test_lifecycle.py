"""The daemon going away under calls, the blocking client, DaemonSandboxBackend, and the
codeact example — against real daemons and the real engine."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import signal
import subprocess
import sys
import time
import unittest
from datetime import timedelta

import maf_sandbox_client as msb
from tests import daemon_fixture as fx

#: hang guard: a call in flight fails once its daemon is gone (the failure, its class and
#: the client's state are what is asserted, never how soon).
PROMPT_SECONDS = 30.0
#: hang guard: commands seen running in the guest, a killed daemon reaped.
SETTLE_SECONDS = 30.0


async def running(container: str, args: str, n: int) -> None:
    """Until ``n`` processes of the guest run exactly ``args`` (seen with ``ps`` through the
    engine): the calls that started them are in flight. Hang guard: SETTLE_SECONDS."""
    async with asyncio.timeout(SETTLE_SECONDS):  # hang guard
        while True:
            ps = await asyncio.to_thread(subprocess.run,
                                         ["docker", "exec", container, "ps", "-o", "args"],
                                         capture_output=True, text=True, check=False)
            if sum(line.strip() == args for line in ps.stdout.splitlines()) >= n:
                return
            await asyncio.sleep(0.05)


def setUpModule() -> None:
    fx.session().shared  # noqa: B018


def tearDownModule() -> None:
    fx.session().stop_shared()  # SIGTERM: it must exit 0 (a sanitizer's leak report fails it)


class DaemonGoesAway(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.s = fx.session()

    async def test_killed_daemon_fails_calls_in_flight_and_later(self) -> None:
        # The opt-out: without auto_reconnect a lost connection stays lost.
        d = await asyncio.to_thread(self.s.daemon)
        client = msb.AsyncClient(d.sock, auto_reconnect=False)
        await client.connect()
        self.addAsyncCleanup(client.close)
        sb = await client.acquire(self.s.key("killed"), self.s.spec())
        calls = [asyncio.create_task(sb.exec("sleep 31", timeout=60)) for _ in range(3)]
        calls.append(asyncio.create_task(client.call("sandbox.exec", {
            "sandbox": sb.instance_id, "command": "sleep 31", "timeout_seconds": 60})))
        await running(sb.instance_id, "sleep 31", 4)  # all four in flight
        d.signal(signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True),
                                         PROMPT_SECONDS)  # hang guard
        for r in results:
            self.assertIsInstance(r, msb.ConnectionLost)
            self.assertIsInstance(r, ConnectionError)
        self.assertFalse(client.connected)
        # Later calls fail without a new connection (no auto_reconnect): the client stays
        # unconnected, whatever the daemon's process is doing meanwhile.
        async with asyncio.timeout(PROMPT_SECONDS):  # hang guard
            with self.assertRaises(msb.ConnectionLost):
                await sb.exec("true")
            with self.assertRaises(msb.DaemonUnavailable):
                await client.status()
        self.assertFalse(client.connected)
        # Once the process is gone (its listening socket closes with it), a new connection
        # is refused: the socket file is there, nobody listens.
        self.assertIsNotNone(await asyncio.to_thread(d.wait, SETTLE_SECONDS),  # hang guard
                             "the killed daemon lingers")
        with self.assertRaises(msb.DaemonUnavailable) as cm:
            await msb.AsyncClient(d.sock).connect()
        self.assertNotIsInstance(cm.exception, msb.ConnectionLost)

    async def test_stopping_daemon_answers_shutting_down(self) -> None:
        d = await asyncio.to_thread(self.s.daemon, "--set", "shutdown.drain_ms=0")
        client = msb.AsyncClient(d.sock, auto_reconnect=False)
        await client.connect()
        self.addAsyncCleanup(client.close)
        sb = await client.acquire(self.s.key("stopping"), self.s.spec())
        call = asyncio.create_task(sb.exec("sleep 32", timeout=60))
        await running(sb.instance_id, "sleep 32", 1)  # in flight
        d.signal(signal.SIGTERM)
        with self.assertRaises(msb.ShuttingDown) as cm:
            await asyncio.wait_for(call, PROMPT_SECONDS)  # hang guard
        self.assertIsInstance(cm.exception, ConnectionError)
        self.assertEqual(cm.exception.code, 1303)
        # It drains, flushes and exits 0 by itself (no second signal; hang guard).
        self.assertEqual(await asyncio.to_thread(d.wait, fx.STOP_TIMEOUT_SECONDS), 0,
                         d.log_text())
        with self.assertRaises(msb.ConnectionLost):
            await client.status()

    async def test_auto_reconnect_after_a_restart(self) -> None:
        d = await asyncio.to_thread(self.s.daemon)
        client = msb.AsyncClient(d.sock, auto_reconnect=True)
        await client.connect()
        self.addAsyncCleanup(client.close)
        sb = await client.acquire(self.s.key("restart"), self.s.spec())
        await asyncio.to_thread(fx.check_clean_exit, d)
        with self.assertRaises(msb.DaemonUnavailable):
            await client.status()
        d2 = await asyncio.to_thread(self.s.daemon, sock=d.sock)
        self.addCleanup(fx.check_clean_exit, d2)
        # The sandbox outlives the daemon; the same handle works on the new connection.
        self.assertEqual((await sb.exec("echo back")).stdout_text, "back\n")
        self.assertIsNone(await sb.dispose())


class Reconnect(unittest.IsolatedAsyncioTestCase):
    """The default client after a real daemon restart: the first call after it works; a call
    in flight when the daemon went away raises ConnectionLost, and is never sent again."""

    async def asyncSetUp(self) -> None:
        self.s = fx.session()

    async def test_a_restart_between_calls_is_invisible(self) -> None:
        d = await asyncio.to_thread(self.s.daemon)
        client = msb.AsyncClient(d.sock)
        await client.connect()
        self.addAsyncCleanup(client.close)
        sb = await client.acquire(self.s.key("restart-idle"), self.s.spec())
        # Stopped and started again without this loop turning (a script's blocking restart):
        # the client has not seen the close when the next call comes.
        fx.check_clean_exit(d)
        d2 = self.s.daemon(sock=d.sock)
        self.addCleanup(fx.check_clean_exit, d2)
        self.assertTrue((await client.status())["engine"]["reachable"])
        self.assertEqual((await sb.exec("echo back")).stdout_text, "back\n")
        self.assertIsNone(await sb.dispose())

    async def test_a_call_in_flight_fails_and_the_next_one_reconnects(self) -> None:
        d = await asyncio.to_thread(self.s.daemon)
        client = msb.AsyncClient(d.sock)
        await client.connect()
        self.addAsyncCleanup(client.close)
        sb = await client.acquire(self.s.key("restart-mid"), self.s.spec())
        marker = "/tmp/ran-once"
        call = asyncio.create_task(sb.exec(f"echo x >> {marker}; sleep 30", timeout=60))
        # hang guard: until the command runs (seen in the guest)
        async with asyncio.timeout(SETTLE_SECONDS):
            while subprocess.run(["docker", "exec", sb.instance_id, "test", "-e", marker],
                                 check=False).returncode != 0:
                await asyncio.sleep(0.05)
        d.signal(signal.SIGKILL)
        with self.assertRaises(msb.ConnectionLost) as cm:
            await asyncio.wait_for(call, PROMPT_SECONDS)  # hang guard
        self.assertIn("went away mid-call", str(cm.exception))
        self.assertIn("may or may not have run", str(cm.exception))
        self.assertTrue(cm.exception.data.get("in_flight"))
        self.assertIsNotNone(await asyncio.to_thread(d.wait, SETTLE_SECONDS),  # hang guard
                             "the killed daemon lingers")
        d2 = await asyncio.to_thread(self.s.daemon, sock=d.sock)
        self.addCleanup(fx.check_clean_exit, d2)
        # The first call after the restart works, on a new connection.
        self.assertEqual((await sb.exec(f"cat {marker}")).stdout_text, "x\n")  # never replayed
        self.assertTrue(client.connected)
        self.assertIsNone(await sb.dispose())

    def test_the_blocking_client_reconnects_too(self) -> None:
        d = self.s.daemon()
        with msb.connect(d.sock, timeout=30) as client:
            self.assertTrue(client.aio.auto_reconnect)
            client.status()
            fx.check_clean_exit(d)
            d2 = self.s.daemon(sock=d.sock)
            try:
                self.assertTrue(client.status()["engine"]["reachable"])
            finally:
                client.close()
                fx.check_clean_exit(d2)


class SyncClient(unittest.TestCase):
    def test_blocking_client(self) -> None:
        s = fx.session()
        with msb.connect(s.shared.sock) as client:
            self.assertIn("exec", client.describe()["capabilities"])
            self.assertTrue(client.status()["engine"]["reachable"])
            key = msb.SandboxKey(s.scope("sync"), "t", "a")
            sb = client.acquire(key, s.spec())
            self.assertEqual(len(sb.instance_id), 64)
            chunks: list[bytes] = []
            r = sb.exec(["sh", "-c", "echo hi; echo ho >&2; exit 3"],
                        on_output=lambda stream, data: chunks.append(data))
            self.assertEqual((r.exit_code, r.stdout_text, r.stderr_text), (3, "hi\n", "ho\n"))
            self.assertEqual(sorted(chunks), [b"hi\n", b"ho\n"])
            self.assertEqual(sb.write_file("s/x.txt", "x"), 1)
            self.assertEqual(sb.read_file("s/x.txt"), b"x")
            self.assertEqual(sb.stat_file("s/x.txt"), msb.SandboxEntry("s/x.txt", "file", 1))
            sb.remove("s", recursive=True)
            self.assertIsNone(sb.stat_file("s"))
            with self.assertRaises(msb.SandboxTimeoutError):
                sb.exec("sleep 5", timeout=0.3)
            self.assertEqual([i.sandbox for i in client.list(scope=key.scope)], [sb.instance_id])
            with client.events(scope=key.scope) as events:
                # next()'s own timeout is what is checked here, not the daemon: nothing can
                # arrive (this daemon runs no egress proxy, so it has no events to publish).
                self.assertIsNone(events.next(timeout=0.2))
            self.assertIsNone(sb.dispose())
            self.assertEqual(client.dispose_scope(key.scope, "t"), msb.ScopePurge(0, None))
        with self.assertRaises(msb.DaemonUnavailable):
            client.status()

    def test_client_side_deadline(self) -> None:
        s = fx.session()
        with msb.connect(s.shared.sock) as client:
            sb = client.acquire(s.key("sync-deadline"), s.spec())
            # The client's deadline fires (ClientTimeout), not the command's end (it would
            # succeed after 30 s) nor the daemon's deadline (SandboxTimeoutError after 60 s).
            client.timeout = 0.5
            t0 = time.monotonic()
            with self.assertRaises(msb.ClientTimeout):
                sb.exec("sleep 30", timeout=60)
            self.assertGreaterEqual(time.monotonic() - t0, 0.5)  # not early
            with self.assertRaises(msb.ClientTimeout):
                client.call("sandbox.exec", {"sandbox": sb.instance_id, "command": "sleep 30",
                                             "timeout_seconds": 60}, timeout=0.2)
            client.timeout = None
            self.assertEqual(sb.exec("echo still").stdout_text, "still\n")
            self.assertIsNone(sb.dispose())

    def test_sync_stdin_and_a_given_up_call_kills_the_command(self) -> None:
        s = fx.session()
        with msb.connect(s.shared.sock) as client:
            sb = client.acquire(s.key("sync-stdin"), s.spec())
            self.assertEqual(sb.exec("cat", stdin=b"one").stdout_bytes, b"one")
            self.assertEqual(sb.exec("cat", stdin=iter([b"a", b"b", b"c"])).stdout_bytes, b"abc")
            client.timeout = 1.0
            with self.assertRaises(msb.ClientTimeout):
                sb.exec("sleep 307", timeout=60)
            client.timeout = None
            deadline = time.monotonic() + SETTLE_SECONDS  # hang guard
            while True:
                ps = sb.exec(["ps", "-o", "args"]).stdout_text
                alive = [line for line in ps.splitlines() if line.rstrip().endswith("sleep 307")]
                if not alive or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self.assertEqual(alive, [], "the command outlived the call given up")
            self.assertIsNone(sb.dispose())

    def test_connect_failure(self) -> None:
        with self.assertRaises(msb.DaemonUnavailable):
            msb.connect(fx.session().tmp + "/absent.sock")


# maf_sandbox's own shapes (its SandboxKey and SandboxSpec), without importing it.
class _Capability(enum.StrEnum):
    EXEC = "exec"
    FILES_IN = "files_in"
    FILES_OUT = "files_out"
    FILES_DELETE = "files_delete"


class _Egress(enum.StrEnum):
    CLOSED = "closed"


class _IsolationScope(enum.StrEnum):
    CONVERSATION = "conversation"


@dataclasses.dataclass(frozen=True)
class _TransferLimits:
    max_bytes_per_file: int
    max_total_bytes: int
    max_files: int


_DEFAULT_LIMITS = _TransferLimits(8 * 1024 * 1024, 32 * 1024 * 1024, 64)


@dataclasses.dataclass(frozen=True)
class _SeedKey:
    scope: str
    thread_id: str
    agent_dir: str
    call_id: str = ""


@dataclasses.dataclass(frozen=True)
class _SeedSpec:
    kind: str
    image: str | None = None
    image_id: str | None = None
    egress_allow: tuple[str, ...] = ()
    work_dir: str = "/maf-sandbox/work"
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    requires: frozenset[_Capability] = frozenset({_Capability.EXEC, _Capability.FILES_IN})
    min_isolation: str | None = None
    declared_outputs: tuple[object, ...] = ()
    files_in: _TransferLimits = _DEFAULT_LIMITS
    files_out: _TransferLimits = _DEFAULT_LIMITS
    outputs_named_at_call_time: bool = False
    egress: _Egress = _Egress.CLOSED
    requires_os_family: str | None = None
    host_tools: object | None = None
    isolation_scope: _IsolationScope = _IsolationScope.CONVERSATION


class Backend(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.s = fx.session()

    async def test_backend_surface(self) -> None:
        backend = await msb.DaemonSandboxBackend.create(self.s.shared.sock)
        self.addAsyncCleanup(backend.aclose)
        self.assertEqual(backend.name, "maf-sandboxd")
        self.assertEqual(str(backend.isolation), "container")
        decl = backend.declarations
        spec = _SeedSpec(kind="seed", image=self.s.image, labels={fx.RUN_LABEL: self.s.run_id},
                         requires=frozenset({_Capability.EXEC, _Capability.FILES_IN,
                                             _Capability.FILES_OUT, _Capability.FILES_DELETE}))
        # The router's matches, with maf_sandbox-style enum members on the spec's side.
        self.assertLessEqual(spec.requires, decl.capabilities)
        self.assertIn(spec.egress, decl.egress_modes)
        self.assertIn(spec.isolation_scope, decl.isolation_scopes)
        self.assertEqual(decl.os_families, frozenset({"posix"}))
        self.assertTrue(msb.TransferLimits(*dataclasses.astuple(spec.files_in)).within(
            decl.limits.files_in))
        # files_list: declared exactly when the daemon's file plane is the local one.
        listing = "files_list" in (backend.describe or {}).get("capabilities", ())
        self.assertEqual("files_list" in decl.capabilities, listing)

        key = _SeedKey(self.s.scope("backend"), "t", "a")
        sb = await backend.acquire(key, spec)
        # maf_sandbox.Sandbox's signatures.
        await sb.write_file("in/data.txt", "21", working_directory=".")
        r = await sb.exec(["sh", "-c", "echo $(( $(cat in/data.txt) * 2 )) > out.txt; cat out.txt"],
                          working_directory=".", timeout=30)
        self.assertEqual((r.stdout, r.stderr, r.exit_code), ("42\n", "", 0))
        entry = await sb.stat_file("out.txt", working_directory=".")
        self.assertEqual((entry.kind, entry.size_bytes), (msb.EntryKind.FILE, 3))
        self.assertEqual(await sb.read_file("out.txt", working_directory=".", max_bytes=64),
                         b"42\n")
        await sb.remove("in", working_directory=".", recursive=True)
        await sb.write_file("call-9/x", "x", working_directory=".")
        await sb.reclaim("/maf-sandbox/work/call-9", working_directory=".", timeout=10)
        self.assertIsNone(await sb.stat_file("call-9", working_directory="."))
        if listing and sb.file_plane == "local":
            self.assertIn(msb.SandboxEntry("out.txt", msb.EntryKind.FILE, 3),
                          await sb.list_dir(".", working_directory="."))
        else:
            with self.assertRaises(NotImplementedError):
                await sb.list_dir(".", working_directory=".")

        self.assertEqual(await backend.reap(timedelta(hours=1), scope=key.scope),
                         msb.ReapResult(0, 0, 0, ()))
        self.assertIsNone(await backend.dispose(key, kind="seed"))
        self.assertEqual(await backend.client.list(scope=key.scope), [])
        await backend.acquire(key, spec)
        self.assertEqual(await backend.dispose_scope(key.scope, "t"), msb.ScopePurge(1, None))

    async def test_plain_constructor_declares_conservatively(self) -> None:
        backend = msb.DaemonSandboxBackend(socket_path=self.s.shared.sock)
        self.addAsyncCleanup(backend.aclose)
        self.assertEqual(backend.declarations.os_families, frozenset())
        self.assertEqual(backend.declarations.capabilities, frozenset({"exec", "files_in"}))
        await backend.refresh()
        self.assertIn("files_out", backend.declarations.capabilities)

    async def test_disposal_never_raises_and_recovers_after_a_restart(self) -> None:
        d = await asyncio.to_thread(self.s.daemon)
        backend = await msb.DaemonSandboxBackend.create(d.sock)
        self.addAsyncCleanup(backend.aclose)
        key = _SeedKey(self.s.scope("backend-gone"), "t", "a")
        await backend.acquire(key, _SeedSpec(kind="seed", image=self.s.image,
                                             labels={fx.RUN_LABEL: self.s.run_id}))
        await asyncio.to_thread(fx.check_clean_exit, d)
        for _ in range(100):  # hang guard: the client sees the close (or the call finds it)
            if not backend.client.connected:
                break
            await asyncio.sleep(0.02)
        failure = await backend.dispose(key)
        self.assertIsInstance(failure, msb.DisposalFailure)
        self.assertEqual(failure.code, "unreachable")
        purge = await backend.dispose_scope(key.scope, "t")
        self.assertEqual((purge.disposed, purge.undisposed.code), (0, "unreachable"))
        d2 = await asyncio.to_thread(self.s.daemon, sock=d.sock)
        self.addCleanup(fx.check_clean_exit, d2)
        self.assertIsNone(await backend.dispose(key))
        self.assertEqual(await backend.client.list(scope=key.scope), [])


class CodeAct(unittest.TestCase):
    def run_codeact(self, *args: str) -> subprocess.CompletedProcess[str]:
        s = fx.session()
        return subprocess.run(
            [sys.executable, str(fx.CODEACT), "--socket", s.shared.sock, "--image", s.image,
             "--label", f"{fx.RUN_LABEL}={s.run_id}", "--scope", s.scope("codeact"), *args],
            capture_output=True, text=True, timeout=120, check=False)

    def remaining(self) -> list[msb.SandboxInfo]:
        s = fx.session()
        with msb.connect(s.shared.sock) as client:
            return client.list(scope=s.scope("codeact"))

    def test_shell_program(self) -> None:
        p = self.run_codeact("--thread", "sh")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("codeact: sum of the first 10 squares is 385\n", p.stdout)
        self.assertIn('{"n": 10, "sum_of_squares": 385}', p.stdout)
        self.assertEqual(self.remaining(), [])

    def test_disposes_also_when_the_program_fails(self) -> None:
        # busybox has no python3: the program cannot start (exit 126 or 127).
        p = self.run_codeact("--thread", "py", "--python")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"--- exit code 12[67] ---")
        self.assertEqual(self.remaining(), [])


if __name__ == "__main__":
    unittest.main()
