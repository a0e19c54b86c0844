"""maf-sandbox's consumers over :class:`maf_sandbox_daemon.DaemonSandboxBackend`, against
real daemons (``daemon_fixture``) and the engine:

- the router (``maf_sandbox.SandboxRouter``, ``Selection``): its default ``MICROVM`` floor refuses
  the backend at construction, ``min_isolation=Isolation.CONTAINER`` admits it, and it then
  selects and serves it;
- maf-sandbox-codeact: ``execute_code`` end to end through the router, with no model (the tool is
  an ``agent_framework.FunctionTool``; ``invoke(arguments=...)`` is what a model's call does), on
  the Python image of ``tests/integration/pyimage.sh`` (``$MSB_PYIMAGE``);
- maf-sandbox-tui: its control server hosted here over ``DaemonInventoryBackend`` (the inventory
  read from ``sandbox.list``),
  found by ``mst`` through its discovery directory (``MAF_SANDBOX_TUI_RUNTIME_DIR``); ``mst list
  --json`` lists our sandboxes, ``mst delete --yes --json`` disposes one, and the Textual console
  (``App.run_test()``) disposes another; and what maf-sandbox-tui's generic
  ``MonitoredSandboxBackend`` makes of this backend (it can confirm no disposal).

Every sandbox carries the run's label (``LabelledBackend`` adds it: consumers build their own
specs, and codeact's has no labels), and each test disposes its scope at the end; the fixture
removes whatever still carries the label, and the Python image, at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import unittest
import warnings
from pathlib import Path
from typing import Any

import maf_sandbox as ms
from maf_sandbox.maf import list_no_files, make_caller_context

from maf_sandbox_daemon import DaemonInventoryBackend, DaemonSandboxBackend
import daemon_fixture as fx

with warnings.catch_warnings():
    # Both announce themselves as experimental on import.
    warnings.simplefilter("ignore")
    import maf_sandbox_codeact as codeact
    import maf_sandbox_tui as tui

EXEC_TIMEOUT = 60
#: ``mst`` runs as a child process; its experimental warning would go to stderr.
MST = [sys.executable, "-W", "ignore", "-m", "maf_sandbox_tui"]

GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_pyimage: dict[str, str] = {}


def setUpModule() -> None:
    """The Python image (python3 3.11, a user guest uid 1000), made from pyimage.sh's cached
    tarball, and the same root with ``USER 1000:1000``; removed with the session's images."""
    s = fx.session()
    script = os.environ.get("MSB_PYIMAGE")
    if not script:
        raise fx.FixtureError("MSB_PYIMAGE is not set: it names tests/integration/pyimage.sh "
                              "(contrib/python-backend/meson.build sets it)")
    ref = f"msb-py-python:{s.run_id}"
    s.extra_images.append(ref)  # before the import: a half-made one is removed too
    r = subprocess.run(["sh", script, ref], capture_output=True, text=True, timeout=1800,
                       check=False)
    if r.returncode != 0:
        raise fx.FixtureError(f"pyimage.sh {ref} failed: {r.stderr[-4000:]}")
    _pyimage["ref"] = ref
    tarball = subprocess.run(["sh", script, "--tarball"], capture_output=True, text=True,
                             timeout=60, check=True).stdout.strip()
    nonroot = f"{ref}-nonroot"
    s.extra_images.append(nonroot)
    with open(tarball, "rb") as f:
        r = subprocess.run(["docker", "import", "-c", f"ENV PATH={GUEST_PATH}",
                            "-c", "USER 1000:1000", "-", nonroot], stdin=f,
                           capture_output=True, text=True, timeout=600, check=False)
    if r.returncode != 0:
        raise fx.FixtureError(f"cannot import {nonroot}: {r.stderr[-4000:]}")
    _pyimage["nonroot"] = nonroot


class LabelledBackend(DaemonSandboxBackend):
    """The backend under test, unchanged but for the run's label on every sandbox it makes."""

    run_id = ""

    async def acquire(self, key: ms.SandboxKey, spec: ms.SandboxSpec) -> Any:
        spec = dataclasses.replace(spec, labels={**spec.labels, fx.RUN_LABEL: self.run_id})
        return await super().acquire(key, spec)


async def make_backend(cls: type[LabelledBackend] = LabelledBackend) -> LabelledBackend:
    """``cls`` on the shared daemon, declaring what ``daemon.describe`` says."""
    s = fx.session()
    backend = await cls.create(s.shared.sock)
    backend.run_id = s.run_id
    return backend


def _docker_has(instance_id: str) -> bool:
    r = subprocess.run(["docker", "inspect", "--format", "{{.Id}}", instance_id],
                       capture_output=True, text=True, timeout=60, check=False)
    return r.returncode == 0


class _Case(unittest.IsolatedAsyncioTestCase):
    """One scope per test, disposed of at the end; the backends made are closed."""

    scope_name = "x"

    async def asyncSetUp(self) -> None:
        self.s = fx.session()
        self.scope = self.s.scope(f"{self.scope_name}-{self._testMethodName[5:20]}")
        self.threads: set[str] = set()
        self.backends: list[DaemonSandboxBackend] = []

    async def backend(self, cls: type[LabelledBackend] = LabelledBackend) -> LabelledBackend:
        b = await make_backend(cls)
        self.backends.append(b)
        return b

    def key(self, thread: str = "t", agent: str = "a") -> ms.SandboxKey:
        self.threads.add(thread)
        return ms.SandboxKey(self.scope, thread, agent)

    async def asyncTearDown(self) -> None:
        cleaner = await DaemonSandboxBackend.create(self.s.shared.sock)
        try:
            for info in await cleaner.list(self.scope):
                self.threads.add(info.key.thread_id)
            for thread in sorted(self.threads):
                await cleaner.dispose_scope(self.scope, thread)
            self.assertEqual(await cleaner.list(self.scope), [], "sandboxes left behind")
        finally:
            await cleaner.aclose()
            for b in self.backends:
                with contextlib.suppress(Exception):
                    await b.aclose()


# --- (a) the router -----------------------------------------------------------------------


class RouterTest(_Case):
    scope_name = "router"

    def spec(self, **extra: Any) -> ms.SandboxSpec:
        return ms.SandboxSpec(kind="router", image=_pyimage["ref"], **extra)

    async def test_floor(self) -> None:
        """The default floor (MICROVM) refuses the backend when the router is built, under
        either selection; CONTAINER admits it."""
        backend = await self.backend()
        self.assertIs(backend.isolation, ms.Isolation.CONTAINER)
        self.assertIn(ms.Capability.HOST_TOOLS, backend.declarations.capabilities)
        self.assertEqual([type(c) for c in backend.declarations.program_channels],
                         [ms.ExecProgramChannel])
        with self.assertRaisesRegex(ms.SandboxBackendNotPermitted, "minimum-isolation floor"):
            ms.SandboxRouter([backend])
        with self.assertRaisesRegex(ms.SandboxBackendNotPermitted, "minimum-isolation floor"):
            ms.SandboxRouter([backend], selection=ms.Selection.PER_SPEC)
        router = ms.SandboxRouter([backend], min_isolation=ms.Isolation.CONTAINER)
        self.assertIs(router.backend, backend)
        self.assertTrue(router.enabled)
        self.assertIs(router.selection, ms.Selection.FIXED)
        per_spec = ms.SandboxRouter([backend], min_isolation=ms.Isolation.CONTAINER,
                                    selection=ms.Selection.PER_SPEC)
        self.assertIsNone(per_spec.backend)
        self.assertTrue(per_spec.enabled)

    async def test_selects_and_serves(self) -> None:
        """Above the floor the router selects the backend for a plain spec (FIXED and PER_SPEC),
        refuses a spec raising the floor to MICROVM, and serves an acquire: python3 runs, and
        the router's dispose removes the container."""
        backend = await self.backend()
        spec = self.spec()
        for selection in (ms.Selection.FIXED, ms.Selection.PER_SPEC):
            router = ms.SandboxRouter([backend], min_isolation=ms.Isolation.CONTAINER,
                                      selection=selection)
            with self.subTest(selection=str(selection)):
                # maf-sandbox 0.51.1's router refuses every spec of a backend declaring
                # HOST_TOOLS (as daemon.describe does) without a program channel serving host
                # tools (_router.py:1432-1437): the backend declares ExecProgramChannel.
                router.ensure_can_serve(spec)
                self.assertIs(router.backend_for(spec), backend)
                raised = self.spec(min_isolation=ms.Isolation.MICROVM)
                with self.assertRaisesRegex(ms.SandboxBackendNotPermitted, "'microvm'"):
                    router.ensure_can_serve(raised)
                self.assertIsNone(router.backend_for(raised))

        router = ms.SandboxRouter([backend], min_isolation=ms.Isolation.CONTAINER)
        key = self.key()
        sandbox = await router.acquire(key, spec)
        result = await sandbox.exec(["python3", "-c", "import sys; print(sys.version_info[:2])"],
                                    working_directory=".", timeout=EXEC_TIMEOUT)
        self.assertEqual((result.exit_code, result.stdout.strip()), (0, "(3, 11)"))
        self.assertTrue(_docker_has(sandbox.instance_id))
        await router.dispose(key)
        self.assertFalse(_docker_has(sandbox.instance_id))
        self.assertEqual(await backend.list(self.scope), [])


# --- (b) maf-sandbox-codeact ----------------------------------------------------------------


PROGRAM = """\
import json
squares = sum(i * i for i in range(11))
print("codeact: sum of the first 10 squares is", squares)
with open("result.json", "w") as f:
    json.dump({"n": 10, "sum_of_squares": squares}, f)
"""


def _texts(contents: Any) -> str:
    return "\n".join(str(getattr(c, "text", "") or "") for c in contents)


class CodeactTest(_Case):
    scope_name = "codeact"

    def context(self, thread: str) -> ms.CallerContext:
        self.threads.add(thread)
        return make_caller_context(list_no_files, lambda: self.scope, lambda: thread)

    async def test_needs_a_program_channel(self) -> None:
        """codeact's default (exec) path asks for a python-portable-v1 program channel; a
        backend declaring none is refused when the tool is built, before anything runs."""
        backend = await self.backend()
        bare = dataclasses.replace(
            backend.declarations, program_channels=(),
            capabilities=backend.declarations.capabilities - {ms.Capability.HOST_TOOLS})
        router = ms.SandboxRouter([LabelledBackend(backend.client, declarations=bare)],
                                  min_isolation=ms.Isolation.CONTAINER)
        with self.assertRaisesRegex(ms.SandboxCapabilityNotSupported,
                                    "no compatible 'python-portable-v1' program channel"):
            codeact.make_codeact_tools(router, "analyst", self.context("t"),
                                       image=_pyimage["ref"])
        # And the run_code runtime instead needs RUN_CODE, which the daemon never declares.
        runtime = codeact.CodeactRuntime(instructions="Python 3.11 statements; print results.")
        with self.assertRaisesRegex(ms.SandboxCapabilityNotSupported, "run_code"):
            codeact.make_codeact_tools(router, "analyst", self.context("t"), runtime=runtime,
                                       image=_pyimage["ref"])

    async def test_execute_code(self) -> None:
        """A program that prints and writes a file, run through the router and the backend
        with no model, as root and as the image's guest (uid 1000): the tool's result carries
        what it printed and an ``ok`` verdict, the declared output lands in the host's sink,
        and core disposes of the sandbox after the call (the router's default cleanup)."""
        backend = await self.backend()
        router = ms.SandboxRouter([backend], min_isolation=ms.Isolation.CONTAINER)
        for user, image in (("root", _pyimage["ref"]), ("guest", _pyimage["nonroot"])):
            with self.subTest(user=user):
                await self._execute_code(backend, router, image, f"t-{user}")

    async def _execute_code(self, backend: LabelledBackend, router: ms.SandboxRouter,
                            image: str, thread: str) -> None:
        sink_dir = Path(self.s.tmp) / f"sink-{self.scope}-{thread}"
        sink_dir.mkdir()
        [tool] = codeact.make_codeact_tools(
            router, "analyst", self.context(thread), image=image,
            output_sink=ms.make_file_system_sink(sink_dir),
            outputs=codeact.CodeactOutputs.DECLARED, exec_timeout_seconds=EXEC_TIMEOUT)
        self.assertEqual(tool.name, codeact.EXECUTE_CODE_TOOL_NAME)

        contents = await tool.invoke(arguments={"code": PROGRAM, "outputs": ["result.json"]})
        text = _texts(contents)
        self.assertIn("codeact: sum of the first 10 squares is 385", text)
        self.assertIn("Result: ok", text)
        self.assertNotIn("exit code", text)
        self.assertEqual(json.loads((sink_dir / "result.json").read_text()),
                         {"n": 10, "sum_of_squares": 385})
        self.assertEqual(await backend.list(self.scope, thread), [], "disposed after the call")

        # A failing program: a verdict of failed, the traceback, the exit code.
        contents = await tool.invoke(arguments={"code": "import sys\nsys.exit('bad input')\n",
                                                "outputs": []})
        text = _texts(contents)
        self.assertIn("Result: failed", text)
        self.assertIn("bad input", text)
        self.assertIn("exit code: 1", text)
        self.assertEqual(await backend.list(self.scope, thread), [])

    async def test_execute_code_busybox_refused_at_acquire(self) -> None:
        """On an image without python3 the channel's probe (ExecProgramChannel.prepare) fails
        at acquire; the tool answers with an error, and the router disposes of the sandbox."""
        backend = await self.backend()
        router = ms.SandboxRouter([backend], min_isolation=ms.Isolation.CONTAINER)
        [tool] = codeact.make_codeact_tools(router, "analyst", self.context("t2"),
                                            image=self.s.image,
                                            exec_timeout_seconds=EXEC_TIMEOUT)
        text = _texts(await tool.invoke(arguments={"code": "print(1)"}))
        self.assertIn("could not be acquired", text)
        self.assertEqual(await backend.list(self.scope), [])


# --- (b') the program channel, host tools and bounded exec ---------------------------------


class ProgramChannelTest(_Case):
    """maf-sandbox's own ``assert_program_channel_conformance`` over the channel the backend
    declares (ExecProgramChannel: the portable Python profile, host tools over exec's detached
    launcher, authority revoked after a run), on both file planes and for both guests; and
    ``exec_bounded`` (maf-sandbox's BoundedExec) holding its budget."""

    scope_name = "pc"

    async def backend_on(self, plane: str) -> LabelledBackend:
        s = fx.session()
        sock = s.shared.sock
        if plane == "archive":
            sock = _archive_daemon().sock
        b = await LabelledBackend.create(sock)
        b.run_id = s.run_id
        self.backends.append(b)
        return b

    async def test_channel_conformance(self) -> None:
        from maf_sandbox import conformance as mc

        for plane in ("local", "archive"):
            for guest in ("ref", "nonroot"):
                with self.subTest(plane=plane, guest=guest):
                    backend = await self.backend_on(plane)
                    [channel] = backend.declarations.program_channels
                    self.assertTrue(channel.host_tools)
                    key = self.key(f"{plane}-{guest}")
                    sandbox = await backend.acquire(key, ms.SandboxSpec(
                        kind="program", image=_pyimage[guest],
                        requires=frozenset({ms.Capability.EXEC, ms.Capability.FILES_IN,
                                            ms.Capability.FILES_OUT})))
                    self.assertEqual(sandbox.file_plane, plane)
                    await mc.assert_program_channel_conformance(
                        sandbox, channel, guest_call_path="calls/run-1", timeout=EXEC_TIMEOUT)
                    # The run's directories are the guest's: it removes them itself.
                    await sandbox.reclaim("calls", working_directory=".", timeout=EXEC_TIMEOUT)
                    self.assertIsNone(await sandbox.stat_file("calls", working_directory="."))
                    self.assertIsNone(await backend.dispose(key))

    async def test_exec_bounded(self) -> None:
        backend = await self.backend()
        sandbox = await backend.acquire(self.key("bounded"), ms.SandboxSpec(
            kind="bounded", image=self.s.image))
        self.assertIsInstance(sandbox, ms.BoundedExec)
        ok = await sandbox.exec_bounded(["sh", "-c", "printf 0123456789"], working_directory=".",
                                        timeout=EXEC_TIMEOUT, max_output_bytes=10)
        self.assertEqual(ok.stdout_bytes, b"0123456789")
        with self.assertRaises(ms.SandboxExecOutputLimitExceeded):
            await sandbox.exec_bounded(["sh", "-c", "printf 0123456789x"],
                                       working_directory=".", timeout=EXEC_TIMEOUT,
                                       max_output_bytes=10)
        # A budget above the daemon's own ceiling is held to that one, not refused.
        big = await sandbox.exec_bounded(["sh", "-c", "head -c 100000 /dev/zero"],
                                         working_directory=".", timeout=EXEC_TIMEOUT,
                                         max_output_bytes=1 << 40)
        self.assertEqual(len(big.stdout_bytes), 100000)
        for bad in (0, -1, 1.5, True):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                await sandbox.exec_bounded(["true"], working_directory=".",
                                           timeout=EXEC_TIMEOUT,
                                           max_output_bytes=bad)  # type: ignore[arg-type]

    async def test_a_cancelled_exec_kills_the_command(self) -> None:
        """Cancelling the task awaiting a backend exec (asyncio.wait_for included) kills the
        command in the guest (the client sends call.cancel), not only the wait."""
        backend = await self.backend()
        sandbox = await backend.acquire(self.key("cancel"), ms.SandboxSpec(
            kind="cancel", image=self.s.image))

        async def count(suffix: str) -> int:
            ps = await sandbox.exec(["ps", "-o", "args"], working_directory=".",
                                    timeout=EXEC_TIMEOUT)
            return sum(1 for line in ps.stdout_bytes.decode().splitlines()
                       if line.rstrip().endswith(suffix))

        task = asyncio.create_task(sandbox.exec(["sh", "-c", "setsid env -i sleep 309 & sleep 308"],
                                                working_directory=".", timeout=EXEC_TIMEOUT))
        for _ in range(300):  # hang guard: the command runs
            if await count("sleep 308") and await count("sleep 309"):
                break
            await asyncio.sleep(0.1)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        for _ in range(300):  # hang guard: polled until gone, then asserted
            left = await count("sleep 308") + await count("sleep 309")
            if not left:
                break
            await asyncio.sleep(0.1)
        self.assertEqual(left, 0, "the cancelled command lives on in the guest")


_archive: list[fx.Daemon] = []


def tearDownModule() -> None:
    """The daemons stop cleanly (exit 0: under the sanitizers, a leak fails it). Every one
    is stopped and checked, then the failures, if any, are raised together."""
    failures: list[str] = []
    try:
        fx.session().stop_shared()
    except AssertionError as e:
        failures.append(str(e))
    while _archive:
        try:
            fx.check_clean_exit(_archive.pop())
        except AssertionError as e:
            failures.append(str(e))
    if failures:
        raise AssertionError("\n\n".join(failures))


def _archive_daemon() -> fx.Daemon:
    """One daemon on the archive file plane for the module (the shared one is local)."""
    if not _archive:
        _archive.append(fx.session().daemon("--set", "files.plane=archive"))
    return _archive[0]


# --- (c) maf-sandbox-tui ------------------------------------------------------------------


class DaemonInventory(LabelledBackend, DaemonInventoryBackend):
    """The package's inventory backend (``sandbox.list``; a disposal confirmed by listing),
    labelling what it makes with the run's label."""


@contextlib.asynccontextmanager
async def _no_calls_to_drain(_key: ms.SandboxKey) -> Any:
    # The host's quiescence boundary: this test runs no calls while it disposes.
    yield


async def _mst(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``mst ARGS`` as a child process; the loop keeps serving the control server meanwhile."""
    proc = await asyncio.create_subprocess_exec(
        *MST, *args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class TuiTest(_Case):
    scope_name = "tui"

    async def test_mst_lists_and_disposes(self) -> None:
        backend = await self.backend(DaemonInventory)
        backend.inventory_scope = self.scope
        router = ms.SandboxRouter([backend], min_isolation=ms.Isolation.CONTAINER)
        spec = ms.SandboxSpec(kind="tui", image=self.s.image)
        made = {}
        for thread in ("t1", "t2", "t3"):
            made[thread] = (await router.acquire(self.key(thread), spec)).instance_id

        async def purge(scope: str, thread_id: str) -> ms.ScopePurge:
            return await router.dispose_scope(scope, thread_id)

        source = f"msb-it-{self.s.run_id}"
        control = tui.HyperlightControl(backend, router, source_id=source,
                                        quiesce_instance=_no_calls_to_drain,
                                        quiesced_purge=purge)
        runtime = Path(self.s.tmp) / f"mst-{self.scope}"  # the server makes it, mode 0700
        env = {**os.environ, "MAF_SANDBOX_TUI_RUNTIME_DIR": str(runtime), "NO_COLOR": "1"}
        async with tui.SandboxControlServer(control, source_id=source,
                                            manifest_directory=runtime) as server:
            self.assertTrue(server.endpoint.startswith("http://127.0.0.1:"))

            # Discovery and the inventory, headless.
            code, out, err = await _mst("hosts", "--json", env=env)
            self.assertEqual(code, 0, err)
            self.assertIn(source, out)
            code, out, err = await _mst("list", "--json", env=env)
            self.assertEqual(code, 0, err)
            records = {r["instance_id"]: r for r in json.loads(out)}
            self.assertEqual(set(records), set(made.values()))
            r1 = records[made["t1"]]
            self.assertEqual((r1["source_id"], r1["backend"], r1["scope"], r1["thread_id"],
                              r1["agent_id"], r1["kind"], r1["state"]),
                             (source, backend.name, self.scope, "t1", "a", "tui", "ready"))

            # Exact disposal: the one instance named, the others kept.
            code, out, err = await _mst("delete", made["t1"], "--yes", "--json", env=env)
            self.assertEqual(code, 0, out + err)
            self.assertEqual(json.loads(out)["status"], "disposed")
            self.assertFalse(_docker_has(made["t1"]))
            self.assertTrue(_docker_has(made["t2"]))
            code, out, err = await _mst("delete", made["t1"], "--yes", "--json", env=env)
            self.assertEqual(code, 3, out + err)  # absent now

            # The console, driven by Textual's pilot: select t2, dispose it, confirm. No
            # periodic refresh (a refresh worker still running when the app exits fails the
            # test): it refreshes when mounted, on `r`, and after a disposal.
            console = tui.SandboxConsole(await tui.discover_controls(runtime),
                                         refresh_interval=3600)
            async with console.run_test(size=(140, 40)) as pilot:
                await self._until(pilot, lambda: len(console.records) == 2)
                table = console.query_one("#sandboxes")
                row = next(i for i, r in enumerate(console.records.values())
                           if r.instance_id == made["t2"])
                table.move_cursor(row=row)  # type: ignore[attr-defined]
                await pilot.pause()
                await pilot.press("d")
                await pilot.pause()
                await pilot.click("#dispose")
                await self._until(pilot, lambda: not _docker_has(made["t2"]))
                await self._until(pilot, lambda: len(console.records) == 1)
                await pilot.press("r")
                await pilot.pause()
                await console.workers.wait_for_complete()
                self.assertEqual([r.instance_id for r in console.records.values()],
                                 [made["t3"]])
            self.assertTrue(_docker_has(made["t3"]))

            # purge-thread goes through the host's quiesced purge (router.dispose_scope).
            code, out, err = await _mst("purge-thread", "--scope", self.scope, "--thread", "t3",
                                        "--yes", "--json", env=env)
            self.assertEqual(code, 0, out + err)
            self.assertEqual(json.loads(out)["status"], "purged")
            self.assertFalse(_docker_has(made["t3"]))
        self.assertEqual(list(runtime.glob("*.json")), [], "discovery withdrawn")

    async def _until(self, pilot: Any, predicate: Any, timeout: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            if asyncio.get_running_loop().time() > deadline:
                self.fail("timed out waiting in the console")
            await pilot.pause(0.2)

    async def test_generic_monitor(self) -> None:
        """What maf-sandbox-tui's own MonitoredSandboxBackend makes of this backend, as it is:
        it lists only what this process's router acquired, reports each as ``failed`` (it
        reads ``sandbox.worker.process.poll()``, which a DaemonSandbox has not), and never
        confirms a disposal: the container goes, the record stays and the answer is FAILED."""
        backend = await self.backend()
        monitored = tui.MonitoredSandboxBackend(backend)
        router = tui.MonitoredSandboxRouter([monitored], min_isolation=ms.Isolation.CONTAINER)
        sandbox = await router.acquire(self.key("m"), ms.SandboxSpec(kind="tui",
                                                                      image=self.s.image))
        control = tui.HyperlightControl(monitored, router, source_id="generic",
                                        quiesce_instance=_no_calls_to_drain)
        [record] = await control.list_sandboxes()
        self.assertEqual(record.instance_id, sandbox.instance_id)
        self.assertIs(record.state, tui.SandboxState.FAILED)
        self.assertIsNone(record.process_id)
        result = await control.dispose_sandbox(sandbox.instance_id)
        self.assertIs(result.status, tui.DisposalStatus.FAILED)
        self.assertIn("not confirmed", result.message)
        self.assertFalse(_docker_has(sandbox.instance_id))  # gone all the same
        self.assertEqual(len(await control.list_sandboxes()), 1)  # and still listed


if __name__ == "__main__":
    unittest.main()
