#!/usr/bin/env python3
"""pybench.py — the maf-sandbox host's view of maf-sandboxd (doc/BENCH.md).

The operations of maf-sandbox-bench, as a maf-sandbox 0.51 host makes them, three ways in one
run, interleaved round by round:

  raw      maf_sandbox_client (contrib/python) directly: dict key and spec, one AsyncClient
           per daemon;
  backend  maf_sandbox_daemon.DaemonSandboxBackend (contrib/python-backend): maf-sandbox's
           SandboxKey, SandboxSpec and its return types, one backend per daemon;
  docker   maf_sandbox_docker.DockerSandboxBackend 0.29 from PyPI (the seed's own code: one
           docker CLI process per step) on the same engine and image, egress CLOSED (no
           proxy, --network none), the image local (no pull).

raw and backend run once per file plane: the bench starts one maf-sandboxd per plane
(``--set files.plane=local`` / ``archive``, ``--set egress.proxy_binary=``), each on a private
socket, sharing one freeze lock file; both serve the same containers. Per level L, each of L
clients has its own sandbox per way (key thread_id ``c<i>``; the daemons' made by the first
plane's raw client and acquired through every other daemon way: the same container). Then N
rounds; in each, every op runs once per client through every way, the ways in an order drawn
afresh for each op of each round (seeded, --seed: no way always follows another), the L
clients of a batch together (asyncio.gather). acquire_cold and dispose run in the first N/2 rounds (at least one), each on a key of its own.

Every call is timed around the await only (the result is checked after); one that raises is an
error, one past its deadline a hang. Per (op, level, way): nearest-rank p50/p95, ops/s (samples
over the summed wall time of their batches). The ratios: docker/backend per plane against the
issue's goals, and what the backend adds over the raw client: the difference of the medians,
and the backend layer's own time measured inside each backend call (its total minus the
client call it makes).

Everything made carries the spec label ``msb-pybench-run=<run id>`` (container label
``maf-sandbox.label.msb-pybench-run``). At the end, and on failure, Ctrl-C or SIGTERM: every
sandbox is disposed through the way that made it (maf-sandbox-docker's through its API), the
daemons are stopped, then whatever still carries the label (or a maf-sandbox-docker name of
this run) is removed with the docker CLI, and the test image. On SIGTERM (meson's timeout,
SIGKILL follows 0.5 s later) a sweeper in a session of its own does the label sweep first.

Run it with the Python of the venv contrib/python-backend/tests/run.sh makes (it has
maf-sandbox, maf-sandbox-docker and this tree's two packages):

    contrib/python-backend/tests/run.sh VENV --script tests/bench/pybench.py [OPTIONS]

Exit status: 0 when no call failed or hung, 1 when some did, 2 on a setup failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import ctypes
import functools
import gc
import json
import math
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", category=UserWarning, module=r"maf_sandbox.*")
warnings.filterwarnings("ignore", message=r"maf_sandbox.* is experimental")

try:
    import maf_sandbox as ms
    import maf_sandbox_client as msc
    import maf_sandbox_daemon as msd
    import maf_sandbox_docker as msdocker
    from maf_sandbox_docker import _backend as msdocker_backend
except ImportError as exc:  # pragma: no cover - the wrong interpreter
    sys.stderr.write(
        f"pybench: {exc}: run it with the venv of contrib/python-backend/tests/run.sh:\n"
        "  contrib/python-backend/tests/run.sh VENV --script tests/bench/pybench.py [OPTIONS]\n")
    sys.exit(2)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_DAEMON = REPO / "build" / "daemon" / "maf-sandboxd"
DEFAULT_TESTIMAGE = REPO / "tests" / "integration" / "testimage.sh"

RUN_LABEL = "msb-pybench-run"
RUN_LABEL_FULL = f"maf-sandbox.label.{RUN_LABEL}"
IMAGE_REPO = "msb-pybench"
KIND = "pybench"
AGENT = "bench"
KIB = 1024
MIB = 1024 * KIB
#: The exec with output: exactly 1 MiB of text on stdout (maf-sandbox-bench's command).
EXEC_1M_CMD = "head -c 1048576 /dev/zero | tr '\\0' a"
EXEC_TIMEOUT_S = 60
#: A read's max_bytes: maf-sandbox's default files_out limit per file.
READ_MAX_BYTES = 8 * MIB
#: The deadlines of one call (a hang past them); lifecycles and setup get more.
DEADLINE_SMALL_S = 60.0
DEADLINE_BIG_S = 300.0
SETUP_TIMEOUT_S = 180.0
#: Cleanup through the APIs, before the label sweep.
CLEANUP_API_TIMEOUT_S = 120.0
DAEMON_START_S = 20.0
DAEMON_STOP_S = 20.0
PLANES = ("local", "archive")
DEFAULT_N = 20
QUICK_N = 2
DEFAULT_LEVELS = "1,4"
QUICK_LEVELS = "1,2"
ERROR_TEXT = 240

#: The issue's goals, docker/backend at least this (median over median); "local": on the
#: local plane only (the archive plane's file calls are the engine's archive calls), "all":
#: on each plane.
BACKEND_OVERHEAD_GOAL_MS = 0.2


@dataclass(frozen=True)
class Op:
    name: str
    deadline: float
    goal: float = 0.0          # docker/backend at least this; 0: no goal
    goal_planes: str = "all"   # "all" or "local"
    lifecycle: bool = False    # acquire_cold and dispose: in the first n_cold rounds


OPS: tuple[Op, ...] = (
    Op("acquire_warm", DEADLINE_SMALL_S, 100),
    Op("exec_true", DEADLINE_SMALL_S, 1.2),
    Op("exec_1m", DEADLINE_SMALL_S, 1.2),
    Op("write_4k", DEADLINE_SMALL_S, 100, "local"),
    Op("write_1m", DEADLINE_SMALL_S, 20, "local"),
    Op("stat", DEADLINE_SMALL_S, 100, "local"),
    Op("read_4k", DEADLINE_SMALL_S, 100, "local"),
    Op("read_1m", DEADLINE_SMALL_S, 20, "local"),
    Op("remove", DEADLINE_SMALL_S),
    Op("acquire_cold", DEADLINE_BIG_S, 1.5, lifecycle=True),
    Op("dispose", DEADLINE_BIG_S, lifecycle=True),
)
OP_BY_NAME = {op.name: op for op in OPS}
#: The files of the file ops, relative to the working directory ("." = the work dir).
FILES = {"write_4k": ("f4k", 4 * KIB), "write_1m": ("f1m", MIB), "stat": ("f4k", 4 * KIB),
         "read_4k": ("f4k", 4 * KIB), "read_1m": ("f1m", MIB)}


class Failed(Exception):
    """A call answered, with a wrong result."""


class Hang(Exception):
    """A call past its deadline."""


def now() -> float:
    return time.perf_counter()


def short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= ERROR_TEXT else text[:ERROR_TEXT - 3] + "..."


def percentile(sorted_ms: list[float], p: float) -> float:
    """Nearest rank, as maf-sandbox-bench's stats.c."""
    if not sorted_ms:
        return math.nan
    rank = max(1, math.ceil(p / 100.0 * len(sorted_ms)))
    return sorted_ms[rank - 1]


def median(values: list[float]) -> float:
    return percentile(sorted(values), 50)


# ---- the backend layer's own time ---------------------------------------------------------

#: Per timed call (each gathered task has its own context): seconds spent inside the
#: maf_sandbox_client calls the backend made.
_inner_s: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("inner", default=None)


def _timed_inner(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        acc = _inner_s.get()
        t0 = now()
        try:
            return await method(*args, **kwargs)
        finally:
            if acc is not None:
                acc.append(now() - t0)
    return wrapper


def instrument(obj: Any, names: tuple[str, ...]) -> None:
    """Shadows obj's bound methods with timed ones (instance attributes)."""
    for name in names:
        setattr(obj, name, _timed_inner(getattr(obj, name)))


SANDBOX_METHODS = ("exec", "write_file", "read_file", "stat_file", "remove")


# ---- the ways -----------------------------------------------------------------------------

class Way:
    """One way of making the calls. ``handle`` objects all take maf-sandbox's calling
    convention (``working_directory=``, ``timeout=``, ``max_bytes=``)."""

    kind: str = ""
    plane: str | None = None
    measures_layer = False

    @property
    def tag(self) -> str:
        return f"{self.kind}-{self.plane}" if self.plane else self.kind

    async def acquire(self, key: ms.SandboxKey, *, cold: bool) -> Any:
        raise NotImplementedError

    async def dispose(self, key: ms.SandboxKey, kind: str | None = KIND) -> None:
        raise NotImplementedError

    def check_acquired(self, sb: Any, *, cold: bool) -> None:
        """Raises Failed when the acquire's result is not what the op expects."""


def _check_daemon_acquire(way: Way, sb: Any, created: bool, cold: bool) -> None:
    if sb.file_plane != way.plane:
        raise Failed(f"the sandbox is served by the {sb.file_plane} plane, not {way.plane}")
    if created != cold:
        raise Failed(f"acquire: created is {created}, expected {cold}")


class RawWay(Way):
    kind = "raw"

    def __init__(self, plane: str, client: msc.AsyncClient, wire_spec: dict[str, Any]) -> None:
        self.plane = plane
        self.client = client
        self.wire_spec = wire_spec
        self.wire_keys: dict[ms.SandboxKey, dict[str, str]] = {}

    def wire_key(self, key: ms.SandboxKey) -> dict[str, str]:
        # What a host of the raw client holds: its key as a dict, made once.
        wk = self.wire_keys.get(key)
        if wk is None:
            wk = self.wire_keys[key] = msd.key_to_wire(key)
        return wk

    async def acquire(self, key: ms.SandboxKey, *, cold: bool) -> msc.Sandbox:
        return await self.client.acquire(self.wire_key(key), self.wire_spec)

    def check_acquired(self, sb: msc.Sandbox, *, cold: bool) -> None:
        _check_daemon_acquire(self, sb, sb.created, cold)

    async def dispose(self, key: ms.SandboxKey, kind: str | None = KIND) -> None:
        failure = await self.client.dispose(self.wire_key(key), kind=kind)
        if failure is not None:
            raise Failed(f"dispose: {failure}")


class BackendWay(Way):
    kind = "backend"
    measures_layer = True

    def __init__(self, plane: str, backend: msd.DaemonSandboxBackend, spec: ms.SandboxSpec) -> None:
        self.plane = plane
        self.backend = backend
        self.spec = spec
        instrument(backend.client, ("acquire", "dispose"))

    async def acquire(self, key: ms.SandboxKey, *, cold: bool) -> msd.DaemonSandbox:
        return await self.backend.acquire(key, self.spec)

    def check_acquired(self, sb: msd.DaemonSandbox, *, cold: bool) -> None:
        _check_daemon_acquire(self, sb, sb.freshly_created, cold)

    async def dispose(self, key: ms.SandboxKey, kind: str | None = KIND) -> None:
        failure = await self.backend.dispose(key, kind=kind)
        if failure is not None:
            raise Failed(f"dispose: {failure}")


class DockerWay(Way):
    kind = "docker"

    def __init__(self, backend: msdocker.DockerSandboxBackend, spec: ms.SandboxSpec) -> None:
        self.backend = backend
        self.spec = spec

    async def acquire(self, key: ms.SandboxKey, *, cold: bool) -> Any:
        return await self.backend.acquire(key, self.spec)

    async def dispose(self, key: ms.SandboxKey, kind: str | None = KIND) -> None:
        failure = await self.backend.dispose(key, kind=kind)
        if failure is not None:
            raise Failed(f"dispose: {failure}")


# ---- results ------------------------------------------------------------------------------

@dataclass
class Row:
    op: str
    level: int
    way: str
    plane: str | None
    samples_ms: list[float] = field(default_factory=list)
    layer_ms: list[float] = field(default_factory=list)  # backend: its own time per call
    wall_s: float = 0.0
    errors: int = 0
    hangs: int = 0
    first_error: str = ""

    def summary(self) -> dict[str, Any]:
        s = sorted(self.samples_ms)
        lay = sorted(self.layer_ms)
        return {
            "op": self.op, "level": self.level, "way": self.way, "plane": self.plane,
            "n": len(s), "p50_ms": percentile(s, 50), "p95_ms": percentile(s, 95),
            "p99_ms": percentile(s, 99),
            "ops_per_s": len(s) / self.wall_s if self.wall_s > 0 and s else math.nan,
            "layer_p50_ms": percentile(lay, 50) if lay else None,
            "layer_p95_ms": percentile(lay, 95) if lay else None,
            "errors": self.errors, "hangs": self.hangs,
            "first_error": self.first_error or None,
        }


@dataclass
class Client:
    idx: int
    key: ms.SandboxKey
    docker_key: ms.SandboxKey
    boxes: dict[str, Any] = field(default_factory=dict)  # way tag -> handle
    box_id: str = ""


# ---- the run ------------------------------------------------------------------------------

def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_cmd(argv: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.run_id = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.scope = f"msb-pybench-{self.run_id}"
        self.docker_scope = f"msb-pybench-{self.run_id}-docker"
        self.dir = tempfile.mkdtemp(prefix="msb-pybench-")
        self.image = args.image or f"{IMAGE_REPO}:run-{self.run_id}"
        self.image_built = False
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.daemon_status: dict[str, int | None] = {}
        self.ways: list[Way] = []
        self.rows: dict[tuple[str, int, str], Row] = {}
        self.payload = random.Random(0x5EED).randbytes(MIB)
        self.spec = ms.SandboxSpec(
            kind=KIND, image=self.image, labels={RUN_LABEL: self.run_id},
            requires=frozenset({ms.Capability.EXEC, ms.Capability.FILES_IN,
                                ms.Capability.FILES_OUT, ms.Capability.FILES_DELETE}))
        self.wire_spec = msd.spec_to_wire(self.spec)
        self.raw_clients: list[msc.AsyncClient] = []
        self.backends: list[msd.DaemonSandboxBackend] = []
        self.docker: msdocker.DockerSandboxBackend | None = None
        #: Every key a way acquired, for the cleanup: (way, key).
        self.acquired: list[tuple[Way, ms.SandboxKey]] = []
        self.disposed: set[tuple[str, ms.SandboxKey]] = set()
        self.machine: dict[str, Any] = {}
        self.cleaned = False
        self.left_after_api = -1
        self.profile = None
        if args.profile:
            import cProfile
            self.profile = cProfile.Profile()

    def log(self, msg: str) -> None:
        print(f"pybench: {msg}", file=sys.stderr, flush=True)

    # ---- setup ----------------------------------------------------------------------------

    def build_image(self) -> None:
        self.image_built = True  # a half-made one is removed too
        r = run_cmd(["sh", str(self.args.testimage), self.image], timeout=300)
        if r.returncode != 0:
            raise SetupError(f"testimage.sh {self.image} failed: {r.stderr.strip()}")

    def start_daemon(self, plane: str) -> str:
        sock = os.path.join(self.dir, f"{plane}.sock")
        log = os.path.join(self.dir, f"daemon-{plane}.log")
        argv = [str(self.args.daemon), "--socket", sock,
                "--set", "egress.proxy_binary=",
                "--set", f"freeze.lock_file={self.dir}/freeze.lock",
                "--set", f"egress.state_dir={self.dir}/egress-{plane}",
                "--set", f"files.plane={plane}"]
        for kv in self.args.set or ():
            argv += ["--set", kv]
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    preexec_fn=_die_with_parent)
        self.daemons[plane] = proc
        deadline = time.monotonic() + DAEMON_START_S
        while True:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(sock)
                    break
                except OSError:
                    pass
            if proc.poll() is not None:
                raise SetupError(f"maf-sandboxd ({plane} plane) exited at start "
                                 f"({proc.returncode}):\n{self.log_tail(plane)}")
            if time.monotonic() > deadline:
                raise SetupError(f"maf-sandboxd ({plane} plane) did not listen within "
                                 f"{DAEMON_START_S:g} s:\n{self.log_tail(plane)}")
            time.sleep(0.02)
        return sock

    def log_tail(self, plane: str) -> str:
        try:
            text = Path(self.dir, f"daemon-{plane}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-30:])

    async def daemon_ready(self, plane: str, client: msc.AsyncClient) -> None:
        """Until the daemon serves its plane with the engine reachable."""
        deadline = time.monotonic() + DAEMON_START_S
        while True:
            try:
                st = await client.status()
            except msc.SandboxError as exc:
                st = {"error": str(exc)}
            served = st.get("file_plane")
            if served is not None and served != plane:
                raise SetupError(f"the daemon started with files.plane={plane} serves the "
                                 f"{served} plane ({st.get('file_plane_reason')})")
            engine = st.get("engine") or {}
            if served == plane and engine.get("state") == "reachable":
                self.machine.setdefault("engine_api", engine.get("api_version"))
                return
            if time.monotonic() > deadline:
                raise SetupError(f"the {plane}-plane daemon does not reach the engine: {st}\n"
                                 f"{self.log_tail(plane)}")
            await asyncio.sleep(0.05)

    def machine_info(self) -> None:
        m = self.machine
        m["kernel"] = platform.release()
        m["nproc"] = os.cpu_count()
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal:"):
                    m["mem_total_kib"] = int(line.split()[1])
        except OSError:
            pass
        r = run_cmd([self.args.docker, "version", "--format",
                     "{{.Server.Version}} {{.Server.APIVersion}} {{.Client.Version}}"], 30)
        parts = r.stdout.split()
        if r.returncode == 0 and len(parts) == 3:
            m["engine_version"], m["engine_api_server"], m["docker_cli"] = parts
        m["python"] = platform.python_version()
        from importlib.metadata import PackageNotFoundError, version
        for dist in ("maf-sandbox", "maf-sandbox-docker", "maf-sandbox-client",
                     "maf-sandbox-daemon"):
            try:
                m[dist] = version(dist)
            except PackageNotFoundError:
                m[dist] = None
        r = run_cmd(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], 10)
        m["commit"] = r.stdout.strip() if r.returncode == 0 else None
        m["daemon"] = str(self.args.daemon)
        m["load_start"] = loadavg()

    async def setup(self) -> None:
        if not self.args.image:
            self.build_image()
        planes = self.args.planes
        ways: list[Way] = []
        if "raw" in self.args.ways or "backend" in self.args.ways:
            for plane in planes:
                sock = self.start_daemon(plane)
                raw = msc.AsyncClient(sock)
                await raw.connect()
                self.raw_clients.append(raw)
                await self.daemon_ready(plane, raw)
                backend = await msd.DaemonSandboxBackend.create(sock)
                self.backends.append(backend)
                if "raw" in self.args.ways:
                    ways.append(RawWay(plane, raw, self.wire_spec))
                if "backend" in self.args.ways:
                    ways.append(BackendWay(plane, backend, self.spec))
        if "docker" in self.args.ways:
            config = msdocker.DockerSandboxConfig(docker_path=self.args.docker)
            self.docker = await msdocker.DockerSandboxBackend.create(config)
            if ms.Egress.ALLOWLIST in self.docker.declarations.egress_modes:
                raise SetupError("maf-sandbox-docker declares ALLOWLIST: it was given a proxy")
            ways.append(DockerWay(self.docker, self.spec))
        self.ways = ways
        self.machine_info()

    # ---- one call -------------------------------------------------------------------------

    async def call(self, way: Way, op: Op, client: Client, rnd: int, level: int,
                   cold: dict[tuple[str, int], ms.SandboxKey]) -> tuple[float | None, float | None,
                                                                         str | None, bool]:
        """One timed call: (ms, layer ms, error text, hang)."""
        key = client.docker_key if way.kind == "docker" else client.key
        sb = client.boxes.get(way.tag)
        inner: list[float] = []
        token = _inner_s.set(inner)
        check: Callable[[Any], None] | None = None
        try:
            if op.name == "acquire_warm":
                coro = way.acquire(key, cold=False)

                def check(res: Any) -> None:
                    way.check_acquired(res, cold=False)
                    if res.instance_id != sb.instance_id:
                        raise Failed(f"acquire_warm: another sandbox ({res.instance_id[:12]})")
            elif op.name == "acquire_cold":
                base = client.docker_key if way.kind == "docker" else client.key
                ckey = ms.SandboxKey(base.scope, f"cold-{way.tag}-L{level}-c{client.idx}-r{rnd}",
                                     AGENT)
                cold[(way.tag, client.idx)] = ckey
                self.acquired.append((way, ckey))
                coro = way.acquire(ckey, cold=True)

                def check(res: Any) -> None:
                    way.check_acquired(res, cold=True)
            elif op.name == "dispose":
                ckey = cold.pop((way.tag, client.idx), None)
                if ckey is None:
                    return None, None, None, False  # its acquire failed: nothing to time
                self.disposed.add((way.tag, ckey))
                coro = way.dispose(ckey)
            elif op.name == "exec_true":
                coro = sb.exec(["true"], working_directory=".", timeout=EXEC_TIMEOUT_S)

                def check(res: Any) -> None:
                    if res.exit_code != 0:
                        raise Failed(f"exec true: exit {res.exit_code}")
            elif op.name == "exec_1m":
                coro = sb.exec(EXEC_1M_CMD, working_directory=".", timeout=EXEC_TIMEOUT_S)

                def check(res: Any) -> None:
                    if res.exit_code != 0 or len(res.stdout_bytes) != MIB \
                            or res.stdout_bytes.strip(b"a"):
                        raise Failed(f"exec 1 MiB: exit {res.exit_code}, "
                                     f"{len(res.stdout_bytes)} bytes of output")
            elif op.name in ("write_4k", "write_1m"):
                path, size = FILES[op.name]
                coro = sb.write_file(path, self.payload[:size], working_directory=".")
            elif op.name == "stat":
                path, size = FILES[op.name]
                coro = sb.stat_file(path, working_directory=".")

                def check(res: Any) -> None:
                    if res is None or res.size_bytes != size:
                        raise Failed(f"stat: {res!r}, expected a file of {size} bytes")
            elif op.name in ("read_4k", "read_1m"):
                path, size = FILES[op.name]
                coro = sb.read_file(path, working_directory=".", max_bytes=READ_MAX_BYTES)

                def check(res: Any) -> None:
                    if res != self.payload[:size]:
                        raise Failed(f"read: {len(res)} bytes, not the {size} written")
            elif op.name == "remove":
                coro = sb.remove(rm_name(way, rnd), working_directory=".")
            else:
                raise AssertionError(op.name)
            profile = self.profile if way.kind != "docker" else None
            try:
                async with asyncio.timeout(op.deadline) as cm:
                    if profile is not None:
                        profile.enable()
                    t0 = now()
                    try:
                        res = await coro
                    finally:
                        t1 = now()
                        if profile is not None:
                            profile.disable()
            except TimeoutError:
                if cm.expired():
                    return None, None, f"no answer within {op.deadline:g} s", True
                raise
            if check is not None:
                check(res)
            layer = (t1 - t0 - sum(inner)) * 1000 if way.measures_layer and inner else None
            return (t1 - t0) * 1000, layer, None, False
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return None, None, short(exc), False
        finally:
            _inner_s.reset(token)

    async def batch(self, way: Way, op: Op, clients: list[Client], rnd: int, level: int,
                    cold: dict[tuple[str, int], ms.SandboxKey]) -> None:
        row = self.rows.setdefault((op.name, level, way.tag),
                                   Row(op.name, level, way.kind, way.plane))
        t0 = now()
        outs = await asyncio.gather(*(self.call(way, op, c, rnd, level, cold) for c in clients))
        wall = now() - t0
        timed = False
        for ms_, layer, err, hang in outs:
            if ms_ is not None:
                row.samples_ms.append(ms_)
                timed = True
                if layer is not None:
                    row.layer_ms.append(layer)
            elif hang:
                row.hangs += 1
            elif err is not None:
                row.errors += 1
            if err and not row.first_error:
                row.first_error = err
        if timed:
            row.wall_s += wall
        if self.args.verbose or err_of(outs):
            self.log(f"  L={level} r={rnd} {op.name:<12} {way.tag:<15} "
                     + " ".join(f"{o[0]:.2f}" if o[0] is not None else "ERR" for o in outs)
                     + (f"  {err_of(outs)}" if err_of(outs) else ""))

    # ---- a level --------------------------------------------------------------------------

    async def untimed(self, what: str, coro: Awaitable[Any]) -> Any:
        try:
            async with asyncio.timeout(SETUP_TIMEOUT_S):
                return await coro
        except Exception as exc:
            raise SetupError(f"{what}: {short(exc)}") from exc

    async def make_boxes(self, clients: list[Client]) -> None:
        """Each client's sandbox through every way (the daemons' ways all the same one)."""
        for way in self.ways:
            async def one(c: Client, way: Way = way) -> None:
                key = c.docker_key if way.kind == "docker" else c.key
                self.acquired.append((way, key))
                sb = await self.untimed(f"{way.tag}: acquire {key.thread_id}",
                                        way.acquire(key, cold=False))
                if way.kind != "docker":
                    if sb.file_plane != way.plane:
                        raise SetupError(f"{way.tag}: served by the {sb.file_plane} plane")
                    if c.box_id and sb.instance_id != c.box_id:
                        raise SetupError(f"{way.tag}: sandbox {sb.instance_id[:12]} for "
                                         f"{key.thread_id}, the first daemon way's {c.box_id[:12]}")
                    c.box_id = sb.instance_id
                if isinstance(way, BackendWay):
                    # Untimed: the backend's calls time the client calls they make.
                    instrument(sb.client_sandbox, SANDBOX_METHODS)
                c.boxes[way.tag] = sb
            await asyncio.gather(*(one(c) for c in clients))

    async def prepare_files(self, clients: list[Client], n: int) -> None:
        """What the reads, stat and remove need, through each way (untimed)."""
        for way in self.ways:
            names = [rm_name(way, r) for r in range(n)]

            async def one(c: Client, way: Way = way) -> None:
                sb = c.boxes[way.tag]
                await self.untimed(f"{way.tag}: write f4k", sb.write_file(
                    "f4k", self.payload[:4 * KIB], working_directory="."))
                await self.untimed(f"{way.tag}: write f1m", sb.write_file(
                    "f1m", self.payload, working_directory="."))
                if "remove" in self.args.ops:
                    res = await self.untimed(f"{way.tag}: touch", sb.exec(
                        ["touch", *names], working_directory=".", timeout=EXEC_TIMEOUT_S))
                    if res.exit_code != 0:
                        raise SetupError(f"{way.tag}: touch exited {res.exit_code}")
            await asyncio.gather(*(one(c) for c in clients))

    async def run_level(self, level: int) -> None:
        n = self.args.n
        n_cold = max(1, n // 2)
        clients = [Client(i, ms.SandboxKey(self.scope, f"L{level}-c{i}", AGENT),
                          ms.SandboxKey(self.docker_scope, f"L{level}-c{i}", AGENT))
                   for i in range(level)]
        t0 = now()
        await self.make_boxes(clients)
        await self.prepare_files(clients, n)
        self.log(f"level {level}: {level} client(s), sandboxes ready in {now() - t0:.1f} s")
        ops = [OP_BY_NAME[o] for o in self.args.ops]
        steady = [op for op in ops if not op.lifecycle]
        lifecycle = [op for op in ops if op.lifecycle]
        rng = random.Random(f"{self.args.seed}-{level}")
        for rnd in range(n):
            t_round = now()
            for op in steady:
                # A fresh order for each op of each round: no way always follows another (a
                # way run right after the docker CLI's processes pays for them).
                order = rng.sample(self.ways, len(self.ways))
                for way in order:
                    await self.batch(way, op, clients, rnd, level, {})
            order = rng.sample(self.ways, len(self.ways))
            if lifecycle and rnd < n_cold:
                cold: dict[tuple[str, int], ms.SandboxKey] = {}
                acquire = OP_BY_NAME["acquire_cold"]
                dispose = OP_BY_NAME["dispose"]
                for way in order:
                    await self.batch(way, acquire, clients, rnd, level, cold)
                for way in order:
                    if "dispose" in self.args.ops:
                        await self.batch(way, dispose, clients, rnd, level, cold)
                    else:  # untimed: the cold sandboxes go
                        for (tag, idx), ckey in list(cold.items()):
                            if tag == way.tag:
                                cold.pop((tag, idx))
                                self.disposed.add((tag, ckey))
                                await self.untimed(f"{tag}: dispose", way.dispose(ckey))
            self.log(f"level {level}: round {rnd + 1}/{n} in {now() - t_round:.1f} s")

    # ---- run, report ----------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        assert main is not None

        def on_signal(sig: signal.Signals) -> None:
            self.log(f"{sig.name}: disposing of the run's sandboxes and stopping")
            if sig != signal.SIGINT:
                self.spawn_sweeper()
            main.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, on_signal, sig)
        t0 = now()
        try:
            await self.setup()
            self.log(f"run {self.run_id}, image {self.image}, N={self.args.n}, levels "
                     f"{self.args.levels}, ways {' '.join(w.tag for w in self.ways)} "
                     f"(set up in {now() - t0:.1f} s)")
            gc.collect()
            for level in self.args.levels:
                await self.run_level(level)
        finally:
            await self.dispose_all()
        self.machine["load_end"] = loadavg()
        self.log(f"measured in {now() - t0:.1f} s")
        return 0

    async def dispose_all(self) -> None:
        """Every sandbox through the way that made it (maf-sandbox-docker's through its API)."""
        todo: dict[tuple[str, ms.SandboxKey], Way] = {}
        for way, key in self.acquired:
            if (way.tag, key) not in self.disposed:
                todo[(way.tag, key)] = way
        # One daemon disposes a container for every daemon way: the first daemon way of each
        # key does; a daemon that did not make a container still removes it by its key.
        seen_daemon_keys: set[ms.SandboxKey] = set()
        try:
            async with asyncio.timeout(CLEANUP_API_TIMEOUT_S):
                for (tag, key), way in todo.items():
                    if way.kind != "docker":
                        if key in seen_daemon_keys:
                            continue
                        seen_daemon_keys.add(key)
                    try:
                        await way.dispose(key, kind=None)
                    except Exception as exc:
                        self.log(f"cleanup: {tag}: dispose {key.thread_id}: {short(exc)}")
        except TimeoutError:
            self.log("cleanup: the disposals took too long; the label sweep removes the rest")
        for raw in self.raw_clients:
            await raw.close()
        for backend in self.backends:
            await backend.aclose()

    def sweep_argv(self) -> str:
        """A shell line removing what carries the run label or one of the run's names."""
        names = set()
        for way, key in self.acquired:
            if way.kind == "docker":
                names.add(msdocker_backend._container_name(key, KIND))
        name_rm = " ".join(names)
        label = f"label={RUN_LABEL_FULL}={self.run_id}"
        d = self.args.docker
        script = (f"ids=$({d} ps -aq --filter {label}); "
                  f"[ -z \"$ids\" ] || {d} rm -f $ids >/dev/null; ")
        if name_rm:
            script += f"{d} rm -f {name_rm} >/dev/null 2>&1; "
        script += (f"nets=$({d} network ls -q --filter {label}); "
                   f"[ -z \"$nets\" ] || {d} network rm $nets >/dev/null; ")
        if self.image_built:
            script += f"{d} rmi -f {self.image} >/dev/null 2>&1; "
        return script + "true"

    def spawn_sweeper(self) -> None:
        """The label sweep in a session of its own: it finishes even if this process is
        killed (meson sends SIGKILL 0.5 s after SIGTERM). Twice, 5 s apart, for a container
        a call in flight was creating."""
        script = self.sweep_argv()
        try:
            subprocess.Popen(["sh", "-c", f"{script}; sleep 5; {script}"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            pass

    def cleanup(self) -> None:
        """Once: the daemons stopped, what is left removed by label and name, the image, the
        private directory."""
        if self.cleaned:
            return
        self.cleaned = True
        for plane, proc in self.daemons.items():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(DAEMON_STOP_S)
                except subprocess.TimeoutExpired:
                    self.log(f"maf-sandboxd ({plane} plane) did not stop on SIGTERM; killed")
                    proc.kill()
                    proc.wait()
            self.daemon_status[plane] = proc.returncode
            if proc.returncode != 0:
                self.log(f"maf-sandboxd ({plane} plane) exited with status {proc.returncode}:\n"
                         f"{self.log_tail(plane)}")
        r = run_cmd([self.args.docker, "ps", "-aq", "--filter",
                     f"label={RUN_LABEL_FULL}={self.run_id}"], 60)
        self.left_after_api = len(r.stdout.split()) if r.returncode == 0 else -1
        if self.left_after_api:
            self.log(f"cleanup: {self.left_after_api} container(s) left after the disposals; "
                     "removing them by label")
        r = run_cmd(["sh", "-c", self.sweep_argv()], 300)
        if r.returncode != 0:
            self.log(f"cleanup: the label sweep failed: {r.stderr.strip()}; look for "
                     f"label {RUN_LABEL_FULL}={self.run_id}")
        if self.args.keep_logs:
            for plane in self.daemons:
                src = Path(self.dir, f"daemon-{plane}.log")
                if src.exists():
                    shutil.copy(src, f"{self.args.keep_logs}.{plane}")
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- tables ---------------------------------------------------------------------------

    def summaries(self) -> list[dict[str, Any]]:
        order = {op.name: i for i, op in enumerate(OPS)}
        way_order = {w.tag: i for i, w in enumerate(self.ways)}
        rows = sorted(self.rows.values(),
                      key=lambda r: (r.level, order[r.op],
                                     way_order.get(f"{r.way}-{r.plane}" if r.plane else r.way, 99)))
        return [r.summary() for r in rows]

    def find(self, op: str, level: int, way: str, plane: str | None) -> dict[str, Any] | None:
        row = self.rows.get((op, level, f"{way}-{plane}" if plane else way))
        return row.summary() if row else None

    def ratios(self) -> list[dict[str, Any]]:
        out = []
        for level in self.args.levels:
            for op in OPS:
                if op.name not in self.args.ops:
                    continue
                for plane in self.args.planes:
                    b = self.find(op.name, level, "backend", plane)
                    r = self.find(op.name, level, "raw", plane)
                    d = self.find(op.name, level, "docker", None)
                    entry: dict[str, Any] = {"op": op.name, "level": level, "plane": plane}
                    ratio = usable_ratio(d, b)
                    goal = op.goal if op.goal and (op.goal_planes == "all" or plane == "local") \
                        else None
                    entry["docker_over_backend"] = ratio
                    entry["goal"] = goal
                    entry["goal_met"] = (None if goal is None or ratio is None
                                         else ratio >= goal and b["errors"] == 0
                                         and b["hangs"] == 0)
                    entry["backend_minus_raw_ms"] = (
                        b["p50_ms"] - r["p50_ms"] if usable(b) and usable(r) else None)
                    layer = b.get("layer_p50_ms") if b else None
                    entry["layer_p50_ms"] = layer
                    entry["layer_p95_ms"] = b.get("layer_p95_ms") if b else None
                    entry["overhead_goal_met"] = (None if layer is None
                                                  else layer <= BACKEND_OVERHEAD_GOAL_MS)
                    out.append(entry)
        return out

    def print_tables(self, out: Any) -> None:
        m = self.machine
        a = self.args
        print(f"\nMachine: kernel {m.get('kernel')}, {m.get('nproc')} CPU(s), MemTotal "
              f"{m.get('mem_total_kib')} kB, Docker {m.get('engine_version', '?')} (API "
              f"{m.get('engine_api', '?')}), docker CLI {m.get('docker_cli', '?')}, Python "
              f"{m.get('python')}", file=out)
        print(f"Packages: maf-sandbox {m.get('maf-sandbox')}, maf-sandbox-docker "
              f"{m.get('maf-sandbox-docker')}; tree {m.get('commit')}; daemon {m.get('daemon')}",
              file=out)
        print(f"Load average: {m.get('load_start')} at the start, {m.get('load_end')} at the end",
              file=out)
        print(f"Run: N={a.n} rounds (acquire_cold/dispose {max(1, a.n // 2)}), levels "
              f"{','.join(map(str, a.levels))}, image {self.image}; ways interleaved round by "
              f"round (order seed {a.seed}); raw and backend through one daemon per file "
              "plane\n", file=out)
        print(f"{'op':<13} {'level':>5} {'way':<8} {'plane':<8} {'n':>4} {'p50 ms':>10} "
              f"{'p95 ms':>10} {'ops/s':>9} {'errors':>6} {'hangs':>5}", file=out)
        for s in self.summaries():
            print(f"{s['op']:<13} {s['level']:>5} {s['way']:<8} {s['plane'] or '-':<8} "
                  f"{s['n']:>4} {fmt(s['p50_ms'], 2):>10} {fmt(s['p95_ms'], 2):>10} "
                  f"{fmt(s['ops_per_s'], 1):>9} {s['errors']:>6} {s['hangs']:>5}", file=out)
        print("\nRatios of medians: docker/backend against the goal (file ops: on the local "
              "plane); what the backend adds over the raw client: backend p50 - raw p50, and "
              f"the backend layer's own time per call (p50, p95) against <= "
              f"{BACKEND_OVERHEAD_GOAL_MS} ms:", file=out)
        print(f"{'op':<13} {'level':>5} {'plane':<8} {'docker/backend':>14} {'goal':>6} "
              f"{'met':<4} {'backend-raw':>11} {'layer p50':>9} {'layer p95':>9} {'met':<4}",
              file=out)
        for e in self.ratios():
            goal = f">={e['goal']:g}" if e["goal"] else "-"
            print(f"{e['op']:<13} {e['level']:>5} {e['plane']:<8} "
                  f"{fmt(e['docker_over_backend'], 1):>14} {goal:>6} "
                  f"{met(e['goal_met']):<4} {fmt(e['backend_minus_raw_ms'], 3):>11} "
                  f"{fmt(e['layer_p50_ms'], 3):>9} {fmt(e['layer_p95_ms'], 3):>9} "
                  f"{met(e['overhead_goal_met']):<4}", file=out)
        fails = [s for s in self.summaries() if s["errors"] or s["hangs"]]
        if fails:
            print("\nFailures (the first of each row):", file=out)
            for s in fails:
                print(f"  {s['op']} level {s['level']} {s['way']}"
                      f"{' ' + s['plane'] if s['plane'] else ''}: {s['errors']} error(s), "
                      f"{s['hangs']} hang(s): {s['first_error']}", file=out)
        print(f"\nTotal: {self.total('errors')} error(s), {self.total('hangs')} hang(s); "
              f"daemons exited with {self.daemon_status or '-'}; containers left after the "
              f"disposals: {self.left_after_api}", file=out)

    def total(self, what: str) -> int:
        return sum(getattr(r, what) for r in self.rows.values())

    def write_json(self, path: str) -> None:
        a = self.args
        doc = {"machine": self.machine,
               "config": {"n": a.n, "n_cold": max(1, a.n // 2), "levels": a.levels,
                          "planes": a.planes, "ways": a.ways, "ops": a.ops, "image": self.image,
                          "seed": a.seed,
                          "quick": a.quick, "run_id": self.run_id},
               "results": self.summaries(), "ratios": self.ratios(),
               "errors": self.total("errors"), "hangs": self.total("hangs"),
               "daemon_exit_status": self.daemon_status,
               "containers_left_after_disposals": self.left_after_api}
        with open(path, "w") as f:
            json.dump(no_nan(doc), f, indent=2, sort_keys=True, default=lambda v: None)
            f.write("\n")


class SetupError(Exception):
    pass


def rm_name(way: Way, rnd: int) -> str:
    return f"rm-{way.tag}-{rnd}"


def err_of(outs: list[tuple[Any, Any, str | None, bool]]) -> str | None:
    return next((o[2] for o in outs if o[2]), None)


def usable(s: dict[str, Any] | None) -> bool:
    return bool(s) and s["n"] > 0 and not math.isnan(s["p50_ms"])


def usable_ratio(num: dict[str, Any] | None, den: dict[str, Any] | None) -> float | None:
    if not usable(num) or not usable(den) or den["p50_ms"] <= 0:
        return None
    return num["p50_ms"] / den["p50_ms"]


def fmt(v: float | None, prec: int) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{prec}f}"


def met(v: bool | None) -> str:
    return "-" if v is None else "yes" if v else "NO"


def no_nan(v: Any) -> Any:
    """v with every NaN as None (JSON has no NaN)."""
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {k: no_nan(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [no_nan(x) for x in v]
    return v


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="pybench.py",
        description="maf-sandboxd as a maf-sandbox host sees it: the ops through the raw "
                    "Python client, through maf_sandbox_daemon (per file plane) and through "
                    "maf-sandbox-docker, interleaved round by round.")
    p.add_argument("-n", "--iterations", dest="n", type=int, default=None,
                   help=f"rounds per level (default {DEFAULT_N}; acquire_cold/dispose: N/2)")
    p.add_argument("-l", "--levels", default=None,
                   help=f"concurrent clients per batch, comma-separated (default {DEFAULT_LEVELS})")
    p.add_argument("-o", "--ops", default=",".join(op.name for op in OPS),
                   help="ops, comma-separated (default all)")
    p.add_argument("--ways", default="raw,backend,docker", help="default raw,backend,docker")
    p.add_argument("-p", "--planes", default=",".join(PLANES), help="default local,archive")
    p.add_argument("-q", "--quick", action="store_true",
                   help=f"a smoke run: N={QUICK_N}, levels {QUICK_LEVELS}")
    p.add_argument("-j", "--json", help="also write the results as JSON")
    p.add_argument("--daemon", default=os.environ.get("MSB_DAEMON") or str(DEFAULT_DAEMON),
                   help="maf-sandboxd (default $MSB_DAEMON, else the build's)")
    p.add_argument("--testimage", default=os.environ.get("MSB_TESTIMAGE") or str(DEFAULT_TESTIMAGE))
    p.add_argument("--image", help="use this local image (default: a busybox one, built)")
    p.add_argument("--docker", default="docker", help="the docker CLI (maf-sandbox-docker's too)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a daemon config override for every daemon (not files.plane)")
    p.add_argument("--keep-logs", metavar="PREFIX", help="keep the daemons' logs as PREFIX.<plane>")
    p.add_argument("--profile", metavar="FILE",
                   help="cProfile the raw and backend calls (only them) into FILE (pstats)")
    p.add_argument("--seed", type=int, default=1, help="the ways' order in each round (default 1)")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    if a.n is None:
        a.n = QUICK_N if a.quick else DEFAULT_N
    if a.n < 1:
        p.error("-n wants at least 1")
    try:
        a.levels = [int(x) for x in (a.levels or (QUICK_LEVELS if a.quick else DEFAULT_LEVELS))
                    .split(",")]
    except ValueError:
        p.error("--levels: comma-separated integers")
    if any(level < 1 or level > 64 for level in a.levels):
        p.error("--levels: 1 to 64")
    a.ops = [o for o in a.ops.split(",") if o]
    for o in a.ops:
        if o not in OP_BY_NAME:
            p.error(f"no op {o!r} (one of {', '.join(OP_BY_NAME)})")
    if "dispose" in a.ops and "acquire_cold" not in a.ops:
        p.error("dispose disposes of what acquire_cold made: name both")
    a.ways = [w for w in a.ways.split(",") if w]
    if not a.ways or any(w not in ("raw", "backend", "docker") for w in a.ways):
        p.error("--ways: raw, backend, docker")
    a.planes = [x for x in a.planes.split(",") if x]
    if not a.planes or any(x not in PLANES for x in a.planes) or len(set(a.planes)) != len(a.planes):
        p.error("--planes: local and/or archive, each once")
    for kv in a.set or ():
        if "=" not in kv or kv.startswith("files.plane="):
            p.error("--set KEY=VALUE (files.plane is --planes's)")
    if not os.access(a.daemon, os.X_OK):
        p.error(f"no maf-sandboxd at {a.daemon} (--daemon, or build it: ninja -C build)")
    return a


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    rc = 0
    try:
        rc = asyncio.run(bench.run())
    except SetupError as exc:
        bench.log(f"setup failed: {exc}")
        rc = 2
    except (asyncio.CancelledError, KeyboardInterrupt):
        bench.log("interrupted")
        rc = 130
    except BaseException as exc:
        bench.log(f"failed: {short(exc)}")
        rc = 2
        if not isinstance(exc, Exception):
            raise
    finally:
        bench.cleanup()
    if bench.profile is not None:
        bench.profile.dump_stats(args.profile)
        bench.log(f"profile of the raw and backend calls in {args.profile}")
    if bench.rows:
        bench.print_tables(sys.stdout)
        if args.json:
            bench.write_json(args.json)
    if rc == 0 and (bench.total("errors") or bench.total("hangs")
                    or any(s not in (0, None) for s in bench.daemon_status.values())):
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
