"""AsyncClient against the real daemon and engine: every method, concurrency on one
connection, cancellation, streamed output, events."""

from __future__ import annotations

import asyncio
import os
import time
import unittest
from datetime import timedelta

import maf_sandbox_client as msb
from tests import daemon_fixture as fx


def setUpModule() -> None:
    fx.session().shared  # noqa: B018 - starts the run's image and daemon (or fails)


def tearDownModule() -> None:
    fx.session().stop_shared()  # SIGTERM: it must exit 0 (a sanitizer's leak report fails it)


class ClientTest(unittest.IsolatedAsyncioTestCase):
    """A connected client per test; ``sandbox()`` is the module's warm sandbox."""

    async def asyncSetUp(self) -> None:
        self.s = fx.session()
        self.daemon = self.s.shared
        self.client = msb.AsyncClient(self.daemon.sock)
        await self.client.connect()
        self.addAsyncCleanup(self.client.close)

    async def sandbox(self, test: str = "client", thread: str = "t", **spec: object) -> msb.Sandbox:
        return await self.client.acquire(self.s.key(test, thread), self.s.spec(**spec))


class Daemon(ClientTest):
    async def test_describe_status_engine(self) -> None:
        d = await self.client.describe()
        self.assertEqual(d["protocol_version"], "1")
        self.assertEqual(d["isolation"], "container")
        self.assertIn("exec", d["capabilities"])
        self.assertEqual(self.client.max_frame_bytes, d["wire"]["max_frame_bytes"])
        self.assertIn("exec", await self.client.capabilities())
        st = await self.client.status()
        self.assertTrue(st["engine"]["reachable"])
        self.assertEqual(st["daemon"]["socket"], self.daemon.sock)
        self.assertFalse(st["egress"]["configured"])
        # why allowlist is off, naming the key that turns it on (issue 19)
        self.assertEqual(st["egress"]["modes"], ["closed"])
        self.assertIn("egress.proxy_binary", st["egress"]["allowlist_off_reason"])
        self.assertEqual((await self.client.engine())["os"], "linux")


class Lifecycle(ClientTest):
    async def test_acquire_cold_then_warm(self) -> None:
        key = msb.SandboxKey(self.s.scope("warm"), "t", "a")
        spec = msb.SandboxSpec(kind="k", image=self.s.image, labels={fx.RUN_LABEL: self.s.run_id})
        first = await self.client.acquire(key, spec)
        self.assertEqual(len(first.instance_id), 64)
        self.assertTrue(first.name.startswith("maf-sandbox-docker-"))
        self.assertEqual((first.kind, first.work_dir, first.state), ("k", "/maf-sandbox/work",
                                                                      "running"))
        self.assertTrue(first.created)
        # The same key and kind, as dicts this time: the same container, warm.
        again = await self.client.acquire(key.to_wire(), spec.to_wire())
        self.assertEqual(again.instance_id, first.instance_id)
        self.assertFalse(again.created)
        # Another kind is another sandbox.
        other = await self.client.acquire(key, msb.SandboxSpec(
            kind="k2", image=self.s.image, labels={fx.RUN_LABEL: self.s.run_id}))
        self.assertNotEqual(other.instance_id, first.instance_id)
        self.assertIsNone(await self.client.dispose(key))
        self.assertEqual(await self.client.list(scope=key.scope), [])

    async def test_list_dispose_and_dispose_scope(self) -> None:
        scope = self.s.scope("purge")
        a = await self.sandbox("purge", "t1")
        b = await self.sandbox("purge", "t1", kind="k2")
        c = await self.sandbox("purge", "t2")
        listed = await self.client.list(scope=scope)
        self.assertEqual({i.sandbox for i in listed}, {a.instance_id, b.instance_id, c.instance_id})
        entry = next(i for i in listed if i.sandbox == a.instance_id)
        self.assertEqual(entry.key, msb.SandboxKey(scope, "t1", "a"))
        self.assertEqual((entry.kind, entry.state, entry.image), ("k", "running", self.s.image))
        self.assertEqual(len(await self.client.list(scope=scope, thread_id="t2")), 1)
        # One container by its id: the other kind of the key stays.
        self.assertIsNone(await a.dispose())
        self.assertEqual({i.sandbox for i in await self.client.list(scope=scope)},
                         {b.instance_id, c.instance_id})
        purge = await self.client.dispose_scope(scope, "t1")
        self.assertEqual(purge, msb.ScopePurge(1, None))
        self.assertEqual([i.sandbox for i in await self.client.list(scope=scope)], [c.instance_id])
        self.assertEqual(await self.client.dispose_scope(scope, "t2"), msb.ScopePurge(1, None))
        self.assertEqual(await self.client.dispose_scope(scope, "t2"), msb.ScopePurge(0, None))

    async def test_names_labels_and_spec_conflicts(self) -> None:
        scope = self.s.scope("names")
        labels = {fx.RUN_LABEL: self.s.run_id, "team": "blue"}
        sb = await self.sandbox("names", labels=labels)
        self.assertEqual(sb.image, self.s.image)
        self.assertTrue(sb.image_id and sb.image_id.startswith("sha256:"), sb.image_id)
        # list() shows the labels given at acquire, never the daemon's own.
        (entry,) = await self.client.list(scope=scope)
        self.assertEqual(entry.labels, labels)
        # A handle by name (with or without the engine's "/") or by 12 hex digits of the id.
        for given in (sb.name, "/" + sb.name, sb.instance_id[:12], sb.instance_id[:12].upper()):
            handle = self.client.sandbox(given)
            self.assertEqual((await handle.exec(["echo", given])).stdout, given + "\n")
        await self.client.sandbox(sb.name).write_file("n.txt", "by name")
        self.assertEqual(await self.client.sandbox(sb.instance_id[:12]).read_file("n.txt"), b"by name")
        with self.assertRaises(msb.SandboxNotFound) as cm:
            await self.client.sandbox("maf-sandbox-docker-000000000000").exec("true")
        self.assertEqual(cm.exception.data["sandbox"], "maf-sandbox-docker-000000000000")
        with self.assertRaises(msb.InvalidParams):
            await self.client.sandbox(sb.instance_id[:11]).exec("true")
        # The same spec by the image's id: served. Other labels: refused, with the difference.
        by_id = self.s.spec(labels=labels, image_id=sb.image_id)
        del by_id["image"]
        again = await self.client.acquire(self.s.key("names"), by_id)
        self.assertEqual(again.instance_id, sb.instance_id)
        with self.assertRaises(msb.SandboxConflict) as cm:
            await self.sandbox("names", labels={fx.RUN_LABEL: self.s.run_id})
        (diff,) = cm.exception.data["differences"]
        self.assertEqual((diff["field"], diff["existing"]), ("labels", labels))
        self.assertIsNone(await self.client.dispose(self.s.key("names"), sandbox=sb.name))
        self.assertEqual(await self.client.list(scope=scope), [])

    async def test_reap_in_one_scope(self) -> None:
        scope = self.s.scope("reap")
        sb = await self.sandbox("reap")
        # Nothing is that old yet.
        self.assertEqual(await self.client.reap(timedelta(hours=1), scope=scope),
                         msb.ReapResult(0, 0, 0, ()))
        await asyncio.sleep(2.1)  # creation times are whole seconds
        dry = await self.client.reap(timedelta(seconds=1), scope=scope, dry_run=True)
        self.assertTrue(dry.dry_run)
        self.assertEqual((dry.disposed, dry.would_dispose_count), (0, 1))
        self.assertEqual([c.name for c in dry.would_dispose], [sb.name])
        self.assertEqual(len(await self.client.list(scope=scope)), 1)   # still there
        result = await self.client.reap(timedelta(seconds=1), scope=scope)
        self.assertEqual((result.disposed, result.failures), (1, ()))
        self.assertEqual(await self.client.list(scope=scope), [])
        with self.assertRaises(msb.SandboxNotFound):
            await sb.exec("true")
        with self.assertRaises(msb.InvalidParams):
            await self.client.reap(timedelta(0), scope=scope)


class Exec(ClientTest):
    async def test_string_argv_env_and_bytes(self) -> None:
        sb = await self.sandbox()
        r = await sb.exec("echo out; echo err >&2; exit 7")
        self.assertEqual((r.exit_code, r.stdout_text, r.stderr_text), (7, "out\n", "err\n"))
        self.assertFalse(r.ok)
        self.assertIsInstance(r.duration_ms, int)
        r = await sb.exec(["printf", "%s|%s", "a b", "$(x)"])
        self.assertEqual(r.stdout, "a b|$(x)")
        r = await sb.exec("printf '%s' \"$GREETING\"", env={"GREETING": "héllo"})
        self.assertEqual(r.stdout_text, "héllo")
        r = await sb.exec("pwd", working_directory="/tmp")
        self.assertEqual(r.stdout_text, "/tmp\n")
        r = await sb.exec("pwd")
        self.assertEqual(r.stdout_text, "/maf-sandbox/work\n")
        r = await sb.exec(["printf", "\\377\\000x"])
        self.assertEqual(r.stdout_bytes, b"\xff\x00x")
        self.assertEqual(r.stdout_text, "\ufffd\x00x")
        with self.assertRaises(msb.InvalidParams):
            await sb.exec("true", timeout=0)
        with self.assertRaises(TypeError):
            await sb.exec([])

    async def test_many_calls_in_flight_on_one_connection(self) -> None:
        sb = await self.sandbox()
        n = 20
        conn = self.client._conn
        assert conn is not None
        in_flight = 0

        async def watch() -> None:
            nonlocal in_flight
            while True:
                in_flight = max(in_flight, conn.in_flight)
                await asyncio.sleep(0.01)

        # A barrier in the guest: each command says it started, then waits until all n have,
        # so every one can end only if all n run at once. Served one after another, the first
        # would wait for good, and its deadline (a hang guard) would fail the test.
        started = f"/tmp/started-{os.urandom(4).hex()}"  # the sandbox is the module's: a new file
        barrier = (f"echo s >> {started}; "
                   f"until [ $(wc -l < {started}) -ge {n} ]; do sleep 0.05; done")
        watcher = asyncio.create_task(watch())
        try:
            async with asyncio.timeout(150):  # hang guard: the n calls' 120 s deadlines, and a margin
                results = await asyncio.gather(*(
                    sb.exec(["sh", "-c", f"{barrier}; echo {i}; echo e{i} >&2"], timeout=120)  # hang guard
                    for i in range(n)))
        except TimeoutError:
            self.fail(f"{n} calls in flight on one connection had not all ended after 150 s")
        finally:
            watcher.cancel()
        self.assertEqual([r.exit_code for r in results], [0] * n)
        self.assertEqual([r.stdout_text for r in results], [f"{i}\n" for i in range(n)])
        self.assertEqual([r.stderr_text for r in results], [f"e{i}\n" for i in range(n)])
        # On one connection: the client had more than half of them outstanding at once.
        self.assertGreater(in_flight, n // 2)
        # Mixed methods, too.
        got = await asyncio.gather(self.client.status(), sb.write_file("g.txt", "g"),
                                   sb.exec("echo x"), self.client.describe(),
                                   sb.stat_file("g.txt"))
        self.assertEqual(got[2].stdout_text, "x\n")
        self.assertEqual(got[4], msb.SandboxEntry("g.txt", msb.EntryKind.FILE, 1))

    async def test_cancel_mid_flight_then_use_the_connection(self) -> None:
        sb = await self.sandbox()
        slow = asyncio.create_task(sb.exec("sleep 1.5; echo late", timeout=10))
        await asyncio.sleep(0.3)
        slow.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await slow
        # A call timed out in this process is forgotten the same way.
        with self.assertRaises(msb.ClientTimeout):
            await self.client.call("sandbox.exec", {"sandbox": sb.instance_id,
                                                    "command": "sleep 1.5; echo late2",
                                                    "timeout_seconds": 10}, timeout=0.3)
        # The connection serves new calls at once, and after the late replies have come: the
        # daemon has nothing in flight but the status asking (their replies, on this same
        # connection, were sent before it; hang guard: 30 s).
        r = await sb.exec("echo now")
        self.assertEqual(r.stdout_text, "now\n")
        async with asyncio.timeout(30):  # hang guard
            while (await self.client.status())["requests"]["in_flight"] > 1:
                await asyncio.sleep(0.05)
        results = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(5)))
        self.assertEqual([r.stdout_text for r in results], [f"{i}\n" for i in range(5)])
        self.assertTrue(self.client.connected)

    # ---- stdin and cancel (issue 19) ------------------------------------------------------

    async def _procs(self, sb: msb.Sandbox, suffix: str) -> int:
        r = await sb.exec(["ps", "-o", "args"])
        return sum(1 for line in r.stdout_text.splitlines() if line.rstrip().endswith(suffix))

    async def _await_proc(self, sb: msb.Sandbox, suffix: str) -> None:
        deadline = time.monotonic() + 30  # hang guard
        while await self._procs(sb, suffix) == 0:
            self.assertLess(time.monotonic(), deadline, f"'{suffix}' never ran")
            await asyncio.sleep(0.1)

    async def _assert_gone(self, sb: msb.Sandbox, suffix: str) -> None:
        deadline = time.monotonic() + 30  # hang guard
        while (n := await self._procs(sb, suffix)) > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.assertEqual(n, 0, f"'{suffix}' survived the cancel")

    async def test_stdin_bytes_str_and_stream(self) -> None:
        sb = await self.sandbox()
        r = await sb.exec("cat", stdin=b"a\x00b\xff\n")
        self.assertEqual(r.stdout_bytes, b"a\x00b\xff\n")
        r = await sb.exec("cat", stdin="héllo")
        self.assertEqual(r.stdout_text, "héllo")
        r = await sb.exec("cat")  # no stdin: closed, as before
        self.assertEqual(r.stdout_bytes, b"")

        blob = bytes(range(256)) * 8192  # 2 MiB

        async def pieces():
            for off in range(0, len(blob), 300_000):
                yield blob[off:off + 300_000]

        r = await sb.exec("sha256sum | cut -c1-64", stdin=pieces())
        import hashlib
        self.assertEqual(r.stdout_text.strip(), hashlib.sha256(blob).hexdigest())

        # A command that reads nothing: the stream stops, the exec answers.
        async def endless():
            while True:
                yield b"x" * 65536

        r = await sb.exec("true", stdin=endless())
        self.assertEqual(r.exit_code, 0)

    async def test_task_cancellation_kills_the_command(self) -> None:
        sb = await self.sandbox()
        task = asyncio.create_task(sb.exec("setsid env -i sleep 305 & sleep 303", timeout=60))
        await self._await_proc(sb, "sleep 303")
        await self._await_proc(sb, "sleep 305")
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        await self._assert_gone(sb, "sleep 303")
        await self._assert_gone(sb, "sleep 305")
        # An asyncio deadline (what asyncio.wait_for uses) does the same: it fires once the
        # command runs (seen in the guest by the task beside it).
        with self.assertRaises(TimeoutError):
            async with asyncio.timeout(None) as deadline:
                async def fire_once_running() -> None:
                    await self._await_proc(sb, "sleep 304")
                    deadline.reschedule(asyncio.get_running_loop().time())

                await asyncio.gather(sb.exec("sleep 304", timeout=60), fire_once_running())
        await self._assert_gone(sb, "sleep 304")

    async def test_timeout_and_cancel_carry_the_partial_output(self) -> None:
        sb = await self.sandbox()
        with self.assertRaises(msb.SandboxTimeoutError) as cm:
            await sb.exec("echo before; echo warn >&2; sleep 30", timeout=1)
        self.assertEqual((cm.exception.stdout, cm.exception.stderr), (b"before\n", b"warn\n"))
        # call.cancel by hand (another task of the same client: the same connection).
        conn = self.client._conn
        assert conn is not None
        ids: list[int] = []
        call = asyncio.create_task(conn.request("sandbox.exec", {
            "sandbox": sb.instance_id, "command": "echo part; sleep 306", "timeout_seconds": 60},
            on_id=ids.append))
        await self._await_proc(sb, "sleep 306")
        self.assertEqual(await self.client.call("call.cancel", {"id": ids[0]}), {"cancelled": True})
        with self.assertRaises(msb.SandboxExecCancelled) as cancelled:
            await call
        self.assertEqual(cancelled.exception.code, 1209)
        self.assertEqual(cancelled.exception.stdout, b"part\n")
        self.assertEqual(await self.client.call("call.cancel", {"id": ids[0]}), {"cancelled": False})
        await self._assert_gone(sb, "sleep 306")

    async def test_working_directory_that_is_not_there(self) -> None:
        sb = await self.sandbox()
        with self.assertRaises(msb.SandboxFileNotFoundError) as cm:
            await sb.exec("pwd", working_directory="no/such/dir")
        self.assertEqual(cm.exception.data.get("path"), "/maf-sandbox/work/no/such/dir")
        self.assertIsInstance(cm.exception, FileNotFoundError)

    async def test_streamed_output(self) -> None:
        sb = await self.sandbox()
        chunks: list[tuple[str, bytes]] = []
        got_one = asyncio.Event()

        def on_output(stream: str, data: bytes) -> None:
            chunks.append((stream, data))
            if data.startswith(b"one"):
                got_one.set()

        go_file = f"/tmp/go-{os.urandom(4).hex()}"  # the sandbox is the module's: a new file

        async def go_once_one_arrived() -> None:
            await got_one.wait()
            await sb.exec(f"touch {go_file}")

        # The command goes on only once its first output reached us: streamed while it runs,
        # or it waits for good (its deadline, a hang guard, fails the test).
        go = asyncio.create_task(go_once_one_arrived())
        try:
            r = await sb.exec(f"echo one; until [ -e {go_file} ]; do sleep 0.05; done; "
                              "echo two >&2; echo three", on_output=on_output, timeout=60)  # hang guard
            await go
        finally:
            go.cancel()  # a no-op once it ended; else it does not outlive a failed call
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(b"".join(d for s, d in chunks if s == "stdout"), r.stdout_bytes)
        self.assertEqual(b"".join(d for s, d in chunks if s == "stderr"), b"two\n")
        self.assertEqual(r.stdout_bytes, b"one\nthree\n")

        seen: list[bytes] = []

        async def slow_consumer(stream: str, data: bytes) -> None:
            await asyncio.sleep(0.05)
            seen.append(data)

        r = await sb.exec("for i in 1 2 3; do echo $i; sleep 0.1; done", on_output=slow_consumer)
        self.assertEqual(b"".join(seen), b"1\n2\n3\n")

        # Output before a timeout is still handed over, then the TimeoutError. The command
        # outlives its timeout by far (sleep 60), and the timeout leaves exec's create and
        # start ample time (not early: 10 s): what is observed is "before" arriving, then the
        # SandboxTimeoutError, in that order.
        events: list[str] = []
        early: list[bytes] = []

        def on_early(stream: str, data: bytes) -> None:
            events.append("output")
            early.append(data)

        try:
            await sb.exec("echo before; sleep 60", timeout=10,  # not early
                          on_output=on_early)
        except msb.SandboxTimeoutError:
            events.append("timeout")
        self.assertEqual(b"".join(early), b"before\n")
        self.assertEqual(events[-1], "timeout", events)
        self.assertIn("output", events[:-1])


class Files(ClientTest):
    async def test_write_read_stat_remove_reclaim(self) -> None:
        sb = await self.sandbox()
        self.assertEqual(await sb.write_file("f/a.txt", "héllo"), 6)
        self.assertEqual(await sb.write_file("f/b.bin", b"\x00\xff"), 2)
        self.assertEqual(await sb.read_file("f/a.txt"), "héllo".encode())
        self.assertEqual(await sb.read_file("/maf-sandbox/work/f/b.bin"), b"\x00\xff")
        self.assertEqual(await sb.stat_file("f/a.txt"),
                         msb.SandboxEntry("f/a.txt", msb.EntryKind.FILE, 6))
        self.assertEqual((await sb.stat_file("f")).kind, msb.EntryKind.DIRECTORY)
        self.assertIsNone(await sb.stat_file("absent"))
        await sb.exec("ln -sf /etc f/link")
        self.assertEqual((await sb.stat_file("f/link")).kind, msb.EntryKind.SYMLINK)
        self.assertEqual(await sb.write_files({"m/1": "one", "m/2": b"two"}), 6)
        self.assertEqual(await sb.read_files(["m/2", "m/1"]), {"m/2": b"two", "m/1": b"one"})
        self.assertEqual(await sb.read_file("1", working_directory="m"), b"one")
        await sb.remove("f/a.txt")
        self.assertIsNone(await sb.stat_file("f/a.txt"))
        await sb.remove("f/a.txt")  # absent is success
        await sb.remove("f", recursive=True)
        self.assertIsNone(await sb.stat_file("f"))
        await sb.write_file("call-1/x", "x")
        await sb.reclaim("/maf-sandbox/work/call-1", timeout=10)
        self.assertIsNone(await sb.stat_file("call-1"))
        await sb.reclaim("call-1")  # absent is success

    async def test_list_dir(self) -> None:
        # files.list: served on the local file plane only (a daemon run by root).
        if "files_list" not in await self.client.capabilities():
            self.skipTest("the daemon's file plane is the archive one: no files_list")
        sb = await self.sandbox(thread="list")
        self.assertEqual(sb.file_plane, "local")
        await sb.remove("ls", recursive=True)
        await sb.write_files({"ls/b.txt": "four", "ls/a/inner": "x"})
        await sb.exec("ln -s /etc ls/link && mkfifo ls/fifo")
        self.assertEqual(await sb.list_dir("ls"), (
            msb.SandboxEntry("ls/a", msb.EntryKind.DIRECTORY, None),
            msb.SandboxEntry("ls/b.txt", msb.EntryKind.FILE, 4),
            msb.SandboxEntry("ls/fifo", msb.EntryKind.OTHER, None),
            msb.SandboxEntry("ls/link", msb.EntryKind.SYMLINK, None),
        ))
        self.assertEqual(await sb.list_dir(".", working_directory="ls/a"),
                         (msb.SandboxEntry("inner", msb.EntryKind.FILE, 1),))
        with self.assertRaises(msb.SandboxConfinementError):
            await sb.list_dir("ls/link")       # never followed
        with self.assertRaises(msb.SandboxNotADirectoryError):
            await sb.list_dir("ls/b.txt")
        with self.assertRaises(msb.SandboxFileNotFoundError):
            await sb.list_dir("ls/absent")
        await sb.remove("ls", recursive=True)

    async def test_what_the_daemon_does_not_serve(self) -> None:
        # As maf-sandbox-docker: NotImplementedError, naming the capability.
        sb = await self.sandbox()
        if "files_list" not in await self.client.capabilities():
            with self.assertRaises(msb.SandboxNotServed) as cm:
                await sb.list_dir(".")
            self.assertIsInstance(cm.exception, NotImplementedError)
            self.assertEqual(cm.exception.data["missing"], ["files_list"])
        with self.assertRaises(NotImplementedError) as cm:
            await sb.run_code("print(1)", timeout=5)
        self.assertEqual(cm.exception.data["missing"], ["run_code"])
        with self.assertRaises(NotImplementedError) as cm:
            await sb.reset(timeout=5)
        self.assertEqual(cm.exception.data["missing"], ["snapshot"])


class Events(ClientTest):
    async def test_subscribe_then_time_out_cleanly(self) -> None:
        scope = self.s.scope("events")
        async with self.client.events(["egress.decision"], scope, replay=True) as stream:
            self.assertEqual(stream.subscription, {"types": ["egress.decision"], "scope": scope})
            self.assertIsNone(await stream.next(timeout=0.3))
            # The client's own connection is not the stream's.
            self.assertEqual((await self.client.status())["connections"]["current"], 2)
        with self.assertRaises(StopAsyncIteration):
            await stream.__anext__()
        # Iterating subscribes by itself.
        stream = self.client.events(scope=scope)
        self.assertIsNone(await stream.next(timeout=0.2))
        self.assertIsNotNone(stream.subscription)
        await self.client.close()  # closes the stream too
        with self.assertRaises(StopAsyncIteration):
            await stream.__anext__()

    async def test_bad_subscription(self) -> None:
        with self.assertRaises(msb.InvalidParams) as cm:
            await self.client.events(["no.such.event"]).start()
        self.assertEqual(cm.exception.field, "types")
        with self.assertRaises(msb.InvalidParams):
            await self.client.events([]).start()



class Handles(ClientTest):
    """``await client.sandbox(ref)`` and ``async with sandbox``."""

    async def test_sandbox_by_id_name_and_prefix(self) -> None:
        sb = await self.sandbox("handles")
        for ref in (sb.instance_id, sb.name, sb.instance_id[:12]):
            found = await self.client.sandbox(ref)
            self.assertEqual(found.instance_id, sb.instance_id, ref)
            self.assertEqual((found.name, found.kind), (sb.name, "k"), ref)
            self.assertEqual(found.state, "running")
            self.assertIsNotNone(found.info)
            self.assertEqual(dict(found.key or {}), dict(sb.key or {}))
            self.assertEqual((await found.exec("echo hi")).stdout_text, "hi\n")
        # Without await: the handle as before, no call made.
        plain = self.client.sandbox(sb.instance_id)
        self.assertEqual((plain.name, plain.kind), ("", ""))
        with self.assertRaises(msb.SandboxNotFound) as cm:
            await self.client.sandbox("maf-sandbox-docker-nosuchname")
        self.assertIn("maf-sandbox-docker-nosuchname", str(cm.exception))
        with self.assertRaises(msb.InvalidParams):
            await self.client.sandbox(sb.instance_id[:6])
        # The blocking client: resolve().
        with msb.connect(self.daemon.sock, timeout=30) as blocking:
            h = blocking.sandbox(sb.name).resolve()
            self.assertEqual((h.instance_id, h.kind), (sb.instance_id, "k"))

    async def test_async_with_disposes(self) -> None:
        async with await self.sandbox("with-acquired") as sb:
            self.assertEqual((await sb.exec("echo in")).stdout_text, "in\n")
        self.assertIsNone(sb.disposal)
        ids = [e.sandbox for e in await self.client.list(scope=self.s.scope("with-acquired"))]
        self.assertNotIn(sb.instance_id, ids)
        # A handle by name resolves on entry (it needs the key to dispose).
        other = await self.sandbox("with-named")
        async with self.client.sandbox(other.name) as by_name:
            self.assertEqual(by_name.instance_id, other.instance_id)
        ids = [e.sandbox for e in await self.client.list(scope=self.s.scope("with-named"))]
        self.assertNotIn(other.instance_id, ids)
        # Also when the block raises: the block's error comes out, the sandbox is gone.
        third = await self.sandbox("with-raises")
        with self.assertRaises(RuntimeError):
            async with third:
                raise RuntimeError("boom")
        ids = [e.sandbox for e in await self.client.list(scope=self.s.scope("with-raises"))]
        self.assertNotIn(third.instance_id, ids)
        # The blocking client's `with`.
        fourth = await self.sandbox("with-sync")
        with msb.connect(self.daemon.sock, timeout=60) as blocking:
            with blocking.sandbox(fourth.name) as h:
                self.assertEqual(h.exec("echo s").stdout_text, "s\n")
        ids = [e.sandbox for e in await self.client.list(scope=self.s.scope("with-sync"))]
        self.assertNotIn(fourth.instance_id, ids)


class FileErrorsAndModes(ClientTest):
    async def test_errors_name_the_path_and_the_fix(self) -> None:
        sb = await self.sandbox("file-errors")
        with self.assertRaises(msb.SandboxFileNotFoundError) as nf:
            await sb.read_file("nothere.txt")
        self.assertIsInstance(nf.exception, FileNotFoundError)
        self.assertIn("nothere.txt (resolved in /maf-sandbox/work)", str(nf.exception))
        self.assertEqual(nf.exception.path, "nothere.txt")
        self.assertEqual(nf.exception.working_directory, "/maf-sandbox/work")
        with self.assertRaises(msb.SandboxConfinementError) as conf:
            await sb.read_file("/etc/passwd")
        self.assertIn("/etc/passwd", str(conf.exception))
        self.assertIn('working_directory "/"', str(conf.exception))
        self.assertIn(b"root:", await sb.read_file("/etc/passwd", working_directory="/"))
        await sb.exec("mkdir -p adir/inner")
        with self.assertRaises(msb.SandboxOSError) as isdir:
            await sb.write_file("adir", "x")
        self.assertIn("adir (resolved in /maf-sandbox/work)", str(isdir.exception))
        self.assertIn("a directory cannot be replaced by a file", str(isdir.exception))
        await sb.write_file("plain.txt", "p")
        with self.assertRaises(msb.SandboxNotADirectoryError) as notdir:
            await sb.write_file("plain.txt/x", "x")
        self.assertIn("plain.txt/x (resolved in /maf-sandbox/work)", str(notdir.exception))

    async def test_write_file_mode(self) -> None:
        sb = await self.sandbox("file-modes")
        await sb.write_file("run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
        self.assertEqual((await sb.exec("./run.sh")).stdout_text, "ran\n")
        self.assertEqual((await sb.exec("stat -c %a run.sh")).stdout_text, "755\n")
        await sb.write_files({"bin/tool": "#!/bin/sh\necho tool\n", "bin/data": "d"},
                             modes={"bin/tool": 0o700})
        self.assertEqual((await sb.exec("stat -c %a bin/tool bin/data")).stdout_text,
                         "700\n644\n")
        self.assertEqual((await sb.exec("./bin/tool")).stdout_text, "tool\n")
        with self.assertRaises(msb.InvalidParams):
            await sb.write_file("suid", "x", mode=0o4755)
        with self.assertRaises(msb.InvalidParams) as wire:
            await self.client.call("files.write", {"sandbox": sb.instance_id, "path": "suid",
                                                   "content_text": "x", "mode": 0o4755})
        self.assertEqual(wire.exception.field, "mode")
        self.assertIsNone(await sb.stat_file("suid"))


if __name__ == "__main__":
    unittest.main()
