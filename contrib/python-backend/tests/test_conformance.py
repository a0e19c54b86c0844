"""maf-sandbox's own conformance probes (``maf_sandbox.conformance``, at the pinned version)
against real maf-sandboxd daemons through :class:`maf_sandbox_daemon.DaemonSandboxBackend`.

Every suite the module has that this backend's declarations owe is run, on both file planes
(a daemon with ``files.plane=local``, which declares ``files_list``, and one with
``files.plane=archive``, which does not), with a root guest and with a non-root guest (uid
1000: the reach probes are sharp only there). A suite skipped is skipped only because the
daemon does not declare the capability or scope it is gated on, and the test says which.

The egress suite (``assert_egress_conformance``) is in test_egress_conformance.py: it needs a
world for the proxy to reach.
"""

from __future__ import annotations

import asyncio
import dataclasses
import posixpath
import subprocess
import sys
import unittest
from datetime import timedelta
from typing import Any

import maf_sandbox as ms
from maf_sandbox import conformance as mc

import maf_sandbox_daemon as msd
from maf_sandbox_daemon import DaemonSandboxBackend
import daemon_fixture as fx

#: Where the probes root their hostile layout: the spec's storage base.
WORK = "/maf-sandbox/work"
EXEC_TIMEOUT = 60.0

_images: dict[str, str] = {}


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def _nonroot_image(s: fx.Session, base: str) -> str:
    """The session's busybox image with a guest user (uid 1000) as its USER."""
    ref = f"{base}-nonroot"
    script = (
        f"set -e; c=$(docker create {base} true); "
        "t=$(mktemp -d); trap 'rm -rf \"$t\"; docker rm -f \"$c\" >/dev/null' EXIT; "
        "docker export \"$c\" | tar -C \"$t\" -x; "
        "echo 'guest:x:1000:1000:guest:/home/guest:/bin/sh' >> \"$t/etc/passwd\"; "
        "echo 'guest:x:1000:' >> \"$t/etc/group\"; mkdir -p \"$t/home/guest\"; "
        "chown 1000:1000 \"$t/home/guest\"; "
        f"tar -C \"$t\" -c . | docker import -c 'ENV PATH=/bin' -c 'USER 1000:1000' - {ref} "
        ">/dev/null")
    r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120,
                       check=False)
    if r.returncode != 0:
        raise fx.FixtureError(f"cannot make the non-root image: {r.stderr}")
    s.extra_images.append(ref)
    return ref


@dataclasses.dataclass(frozen=True)
class DaemonGuestSubject(mc.PosixGuestSubject):
    """maf-sandbox's PosixGuestSubject, except for a file outside the storage base.

    Inside the base a file is planted exactly as upstream plants it (``write_file`` from the
    file's own parent). Outside it — the probes' sibling ``<base>-outside``, under a root-owned
    ``/maf-sandbox`` that a non-root guest cannot write, and that the local file plane writes
    with the guest's own permissions — the host plants it, as root, through the engine:
    planting is the harness's move, not the backend's (maf_sandbox.conformance,
    ConformanceSubject), and the probes then attack it through the backend as upstream's do.
    Links are planted by the guest (``ln``), as upstream.
    """

    async def plant_file(self, path: str, content: bytes) -> None:
        base = posixpath.normpath(self.working_directory)
        if path.startswith(base + "/"):
            await super().plant_file(path, content)
            return
        r = subprocess.run(
            ["docker", "exec", "-i", "-u", "0:0", self.sandbox.instance_id, "sh", "-c",
             'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', "plant", path],
            input=content, capture_output=True, timeout=60, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"the host could not plant {path!r}: {r.stderr!r}")


def setUpModule() -> None:
    s = fx.session()
    _images["root"] = s.image
    _images["nonroot"] = _nonroot_image(s, s.image)


class _Planes:
    """One daemon per file plane, started on first use, for the whole module."""

    daemons: dict[str, fx.Daemon] = {}

    @classmethod
    def daemon(cls, plane: str) -> fx.Daemon:
        if plane not in cls.daemons:
            cls.daemons[plane] = fx.session().daemon("--set", f"files.plane={plane}")
        return cls.daemons[plane]


def tearDownModule() -> None:
    """Each plane's daemon stops cleanly (exit 0: under the sanitizers, a leak fails it)."""
    daemons, _Planes.daemons = _Planes.daemons, {}
    for daemon in daemons.values():
        fx.check_clean_exit(daemon)


def _container_exists(instance_id: str) -> bool:
    r = _docker("inspect", "--format", "{{.Id}}", instance_id)
    return r.returncode == 0 and r.stdout.strip() == instance_id


class ConformanceCase(unittest.IsolatedAsyncioTestCase):
    """The suites for one plane and one guest; subclasses name both."""

    plane = "local"
    guest = "root"

    async def asyncSetUp(self) -> None:
        self.s = fx.session()
        daemon = _Planes.daemon(self.plane)
        self.backend = await DaemonSandboxBackend.create(daemon.sock)
        self.addAsyncCleanup(self.backend.aclose)
        self.caps = self.backend.declarations.capabilities
        self.keys: list[ms.SandboxKey] = []

    async def asyncTearDown(self) -> None:
        for key in self.keys:
            failure = await self.backend.dispose(key)
            self.assertIsNone(failure, f"disposing {key}: {failure}")

    def key(self, name: str, call_id: str = "") -> ms.SandboxKey:
        key = ms.SandboxKey(self.s.scope(f"{self.plane}-{self.guest}-{name}"), "thread",
                            "agent", call_id)
        self.keys.append(key)
        return key

    def spec(self, kind: str = "conformance", **extra: Any) -> ms.SandboxSpec:
        fields: dict[str, Any] = {
            "kind": kind, "image": _images[self.guest],
            "labels": {fx.RUN_LABEL: self.s.run_id},
            "requires": frozenset({ms.Capability.EXEC, ms.Capability.FILES_IN}),
        }
        fields.update(extra)
        return ms.SandboxSpec(**fields)

    async def subject(self, name: str, **spec: Any) -> DaemonGuestSubject:
        sandbox = await self.backend.acquire(self.key(name), self.spec(**spec))
        return DaemonGuestSubject(sandbox=sandbox, working_directory=WORK,
                                    capabilities=self.caps, exec_timeout=EXEC_TIMEOUT)

    def assertDeclared(self, capability: ms.Capability) -> None:
        """The daemon declares ``capability`` on this plane (else the suite is owed nothing,
        and the test fails: every capability tested here is one the daemon claims)."""
        self.assertIn(capability, self.caps,
                      f"the {self.plane} plane's daemon no longer declares {capability}")

    def held(self, suite: str, results: tuple[mc.ProbeResult, ...]) -> None:
        """A suite's results (it raised if any probe failed): every probe passed, or was
        skipped for a capability this backend does not declare; the counts go to the log."""
        skipped = [r for r in results if r.skipped is not None]
        for r in skipped:
            self.assertTrue(r.skipped.startswith("backend does not declare "),
                            f"{suite} {r.probe.name} skipped: {r.skipped}")
            for name in r.skipped.removeprefix("backend does not declare ").split(", "):
                self.assertNotIn(ms.Capability(name), self.caps,
                                 f"{suite} {r.probe.name} skipped although {name} is declared")
        self.assertGreater(len(results) - len(skipped), 0, f"{suite}: no probe ran")
        sys.stderr.write(f"{type(self).__name__} {suite}: {len(results) - len(skipped)} passed, "
                         f"{len(skipped)} skipped ({'; '.join(sorted({r.skipped or '' for r in skipped}))})\n")

    # ---- the suites -----------------------------------------------------------------------

    async def test_declarations(self) -> None:
        """What the backend declares is the daemon's describe, in maf-sandbox's types."""
        d = self.backend.declarations
        self.assertIsInstance(d, ms.BackendDeclarations)
        self.assertIs(self.backend.isolation, ms.Isolation.CONTAINER)
        for cap in (ms.Capability.EXEC, ms.Capability.FILES_IN, ms.Capability.FILES_OUT,
                    ms.Capability.FILES_DELETE, ms.Capability.RECLAIM):
            self.assertIn(cap, d.capabilities)
        self.assertEqual(ms.Capability.FILES_LIST in d.capabilities, self.plane == "local")
        self.assertNotIn(ms.Capability.RUN_CODE, d.capabilities)
        self.assertNotIn(ms.Capability.SNAPSHOT, d.capabilities)
        self.assertIn(ms.Egress.CLOSED, d.egress_modes)
        self.assertEqual(d.os_families, frozenset({ms.OsFamily.POSIX}))
        self.assertIn(ms.IsolationScope.CALL, d.isolation_scopes)
        self.assertFalse(d.observes_egress)
        self.assertIsInstance(d.limits.files_in, ms.TransferLimits)

    async def test_reap_by_scope(self) -> None:
        """An operator's sweep through the backend: maf-sandbox's types, this scope only."""
        key = self.key("reap")
        sandbox = await self.backend.acquire(key, self.spec())
        # Older than the sweep's age: the engine's clock says when it was made.
        [info] = await self.backend.list(key.scope)
        self.assertEqual(info.sandbox, sandbox.instance_id)
        await asyncio.sleep(1.5)  # not early: past the sweep's 1 s age
        result = await self.backend.reap(timedelta(seconds=1), scope=key.scope)
        self.assertIsInstance(result, msd.ReapResult)
        self.assertEqual((result.disposed, result.failures), (1, ()))
        self.assertEqual(await self.backend.list(key.scope), [])
        self.assertFalse(_container_exists(sandbox.instance_id))

    async def test_storage_base(self) -> None:
        """assert_storage_base_conformance, with the default base and an explicit one."""
        for name, extra in (("base-default", {}), ("base-explicit", {"work_dir": "/srv/base"})):
            with self.subTest(name):
                sandbox = await self.backend.acquire(self.key(name), self.spec(**extra))
                await mc.assert_storage_base_conformance(sandbox, self.caps)

    async def test_fresh_acquire(self) -> None:
        key, spec = self.key("fresh"), self.spec()
        sandbox = await self.backend.acquire(key, spec)
        await mc.assert_fresh_acquire_conformance(sandbox,
                                                  lambda: self.backend.acquire(key, spec))

    async def test_instance_disposal(self) -> None:
        key = self.key("instances")
        target = await self.backend.acquire(key, self.spec("first"))
        sibling = await self.backend.acquire(key, self.spec("second"))
        other = await self.backend.acquire(self.key("instances-other"), self.spec("first"))

        async def exists(instance_id: str) -> bool:
            return _container_exists(instance_id)

        await mc.assert_instance_disposal_conformance(
            self.backend, key, "first", target.instance_id,
            [sibling.instance_id, other.instance_id], exists)

    async def test_files_out(self) -> None:
        self.assertDeclared(ms.Capability.FILES_OUT)
        self.held("FILES_OUT", await mc.assert_files_out_conformance(await self.subject("files-out")))

    async def test_files_in(self) -> None:
        self.assertDeclared(ms.Capability.FILES_IN)
        self.held("FILES_IN", await mc.assert_files_in_conformance(await self.subject("files-in")))

    async def test_files_delete(self) -> None:
        self.assertDeclared(ms.Capability.FILES_DELETE)
        self.held("FILES_DELETE", await mc.assert_files_delete_conformance(await self.subject("files-delete")))

    async def test_reach(self) -> None:
        self.held("REACH", await mc.assert_reach_conformance(await self.subject("reach")))

    async def test_reclaim(self) -> None:
        self.assertDeclared(ms.Capability.RECLAIM)
        self.held("RECLAIM", await mc.assert_reclaim_conformance(await self.subject("reclaim")))

    async def test_exec(self) -> None:
        """Last on its own sandbox: the suite ends with the TimeoutError probe."""
        self.assertDeclared(ms.Capability.EXEC)
        self.held("EXEC", await mc.assert_exec_conformance(await self.subject("exec")))

    async def test_call_scope(self) -> None:
        self.assertIn(ms.IsolationScope.CALL, self.backend.declarations.isolation_scopes)
        spec = self.spec(isolation_scope=ms.IsolationScope.CALL)
        first_key, other_key = self.key("call", "call-1"), self.key("call", "call-2")
        first = await self.backend.acquire(first_key, spec)
        subject = DaemonGuestSubject(sandbox=first, working_directory=WORK,
                                       capabilities=self.caps, exec_timeout=EXEC_TIMEOUT)

        async def acquire_another() -> mc.ConformanceSubject:
            other = await self.backend.acquire(other_key, spec)
            return DaemonGuestSubject(sandbox=other, working_directory=WORK,
                                        capabilities=self.caps, exec_timeout=EXEC_TIMEOUT)

        async def dispose(key: ms.SandboxKey) -> None:
            failure = await self.backend.dispose(key, kind=spec.kind)
            if failure is not None:
                raise AssertionError(f"disposal failed: {failure}")

        self.held("CALL_SCOPE", await mc.assert_call_scope_conformance(
            subject, acquire_another, lambda: dispose(first_key), lambda: dispose(other_key)))


class LocalRoot(ConformanceCase):
    plane, guest = "local", "root"


class LocalNonRoot(ConformanceCase):
    plane, guest = "local", "nonroot"


class ArchiveRoot(ConformanceCase):
    plane, guest = "archive", "root"


class ArchiveNonRoot(ConformanceCase):
    plane, guest = "archive", "nonroot"


del ConformanceCase  # the base names no plane: only the four above run

if __name__ == "__main__":
    unittest.main()
