"""The integration fixture: real maf-sandboxd processes on private sockets, the real engine.

Environment (set by contrib/python/meson.build): ``MSB_DAEMON`` (required: without it every
integration test FAILS, so CI cannot pass by skipping), ``MSB_TESTIMAGE`` (testimage.sh),
``MSB_PROXY``, ``MSB_CLI``.

One run id per process. Every sandbox spec carries the label ``msb-it-run=<run id>`` (the
daemon stores it as the container and network label ``maf-sandbox.label.msb-it-run``); at exit
— also after a failure or a SIGINT — the daemons are killed, the containers and networks
carrying the label removed, the test image removed and the temporary directory deleted.

On SIGTERM (meson's timeout, which sends SIGKILL 0.5 s later) the handler does the same at
once, without unwinding: it kills the daemons, starts the engine cleanup in a process of its
own session (so it finishes even if this one is killed), waits for it as long as it may,
removes the temporary directory and exits.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

RUN_LABEL = "msb-it-run"
CONTAINER_LABEL = f"maf-sandbox.label.{RUN_LABEL}"
#: hang guard: a daemon listens, then reaches the engine and lists its containers.
START_TIMEOUT_SECONDS = 15.0
#: How long the SIGTERM handler waits for the engine cleanup (meson kills 0.5 s after SIGTERM).
SIGTERM_CLEANUP_WAIT_SECONDS = 0.35
READY_TIMEOUT_SECONDS = 30.0  # hang guard
STOP_TIMEOUT_SECONDS = 20.0  # hang guard: SIGTERM to exit (then SIGKILL, and the status fails)

CONTRIB_PYTHON = Path(__file__).resolve().parent.parent
REPO = CONTRIB_PYTHON.parent.parent
CODEACT = REPO / "contrib" / "examples" / "codeact" / "codeact.py"

_PR_SET_PDEATHSIG = 1


class FixtureError(AssertionError):
    """The test environment is not usable (reported as a failure, never a skip)."""


def _require(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise FixtureError(
            f"{name} is not set: the integration tests need a built maf-sandboxd "
            "(run them through `meson test --suite integration`, or set MSB_DAEMON, "
            "MSB_TESTIMAGE and MSB_PROXY by hand; see contrib/python/README.md)")
    return value


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _run(cmd: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


class Daemon:
    """One maf-sandboxd on ``<dir>/s.sock``, stderr in ``<dir>/daemon.log``."""

    def __init__(self, session: Session, *args: str, egress: bool = False,
                 sock: str | None = None) -> None:
        self.session = session
        self.dir = tempfile.mkdtemp(prefix="d-", dir=session.tmp)
        self.sock = sock or os.path.join(self.dir, "s.sock")
        self.log = os.path.join(self.dir, "daemon.log")
        proxy = _require("MSB_PROXY") if egress else ""
        self.argv = [session.daemon_binary, "--socket", self.sock,
                     "--set", f"egress.proxy_binary={proxy}",
                     "--set", f"egress.state_dir={os.path.join(self.dir, 'egress')}",
                     # The session's journal of temporaries, not the host's default
                     # every daemon on the machine shares (a test's own wins: last --set).
                     "--set", f"files.journal_dir={os.path.join(session.tmp, 'journal')}", *args]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, wait_ready: bool = True) -> Daemon:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, preexec_fn=_die_with_parent)
        self.session.daemons.append(self)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self._accepts():
            if self.proc.poll() is not None:
                raise FixtureError(f"maf-sandboxd exited at start ({self.proc.returncode}):\n"
                                   f"{self.log_text()}")
            if time.monotonic() > deadline:
                raise FixtureError(f"maf-sandboxd did not listen within {START_TIMEOUT_SECONDS} "
                                   f"s:\n{self.log_text()}")
            time.sleep(0.02)
        if wait_ready:
            self.wait_ready()
        return self

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.sock)
                return True
            except OSError:
                return False

    def wait_ready(self) -> None:
        """Until the engine is reachable and the registry is synchronised (sandbox.list
        answers), with the blocking client."""
        from maf_sandbox_client import SandboxError, connect

        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        last: Exception | None = None
        with connect(self.sock, timeout=10) as client:
            while time.monotonic() < deadline:
                try:
                    client.list(scope=self.session.run_id)
                    return
                except SandboxError as exc:
                    last = exc
                    time.sleep(0.05)
        raise FixtureError(f"maf-sandboxd never became ready: {last}\n{self.log_text()}")

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        """The exit status once the daemon exits by itself within ``timeout`` s, else None."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int | None:
        """SIGTERM, and its exit status once it drained (SIGKILL after STOP_TIMEOUT_SECONDS)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            return Path(self.log).read_text(errors="replace")[-8000:]
        except OSError:
            return "(no log)"


class Session:
    """The run: its id, its test image, its shared daemon, and what cleanup removes."""

    def __init__(self) -> None:
        self.daemon_binary = _require("MSB_DAEMON")
        self.testimage = _require("MSB_TESTIMAGE")
        self.run_id = "py" + secrets.token_hex(4)
        self.image = f"msb-py-busybox:{self.run_id}"
        self.tmp = tempfile.mkdtemp(prefix="msb-py-")
        self.daemons: list[Daemon] = []
        #: More images a test made for this run (removed by cleanup with the test image).
        self.extra_images: list[str] = []
        self._shared: Daemon | None = None
        self._image_made = False
        atexit.register(self.cleanup)
        r = _run(["sh", self.testimage, self.image])
        if r.returncode != 0:
            raise FixtureError(f"testimage.sh {self.image} failed: {r.stderr}")
        self._image_made = True

    @property
    def shared(self) -> Daemon:
        """One daemon for the tests that do not stop theirs (no egress proxy); a module
        stops it with :meth:`stop_shared`, and the next one gets a new one."""
        if self._shared is None:
            self._shared = Daemon(self).start()
        return self._shared

    def stop_shared(self) -> None:
        """Stops the shared daemon with SIGTERM; raises unless it exits 0 (under sanitizers,
        a leak makes it exit otherwise)."""
        daemon, self._shared = self._shared, None
        if daemon is not None:
            check_clean_exit(daemon)

    def daemon(self, *args: str, egress: bool = False, wait_ready: bool = True,
               sock: str | None = None) -> Daemon:
        """A daemon of the caller's own (to stop, kill or configure); ``sock`` reuses the
        socket path of one that is gone (a restart)."""
        return Daemon(self, *args, egress=egress, sock=sock).start(wait_ready=wait_ready)

    def scope(self, test: str) -> str:
        return f"{self.run_id}-{test}"

    def key(self, test: str, thread: str = "t", agent: str = "a", call_id: str = "") -> dict[str, str]:
        return {"scope": self.scope(test), "thread_id": thread, "agent_dir": agent,
                "call_id": call_id}

    def spec(self, kind: str = "k", **extra: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {"kind": kind, "image": self.image,
                                "labels": {RUN_LABEL: self.run_id}}
        spec.update(extra)
        return spec

    def containers(self) -> list[str]:
        r = _run(["docker", "ps", "-aq", "--no-trunc", "--filter",
                  f"label={CONTAINER_LABEL}={self.run_id}"])
        return r.stdout.split()

    def engine_cleanup_script(self) -> str:
        """The shell commands that remove what this run left in the engine: containers, then
        networks (the sandboxes' and the fixtures'), then the test image."""
        label = f"label={CONTAINER_LABEL}={self.run_id}"
        return (f"docker ps -aq --no-trunc --filter '{label}' | xargs -r docker rm -f; "
                f"docker network ls -q --filter '{label}' | xargs -r docker network rm; "
                f"docker rmi -f '{self.image}' "
                + " ".join(f"'{image}'" for image in self.extra_images))

    def cleanup(self) -> None:
        for d in self.daemons:
            try:
                d.signal(signal.SIGKILL)
                if d.proc is not None:
                    d.proc.wait(10)
            except Exception:
                pass
        _run(["sh", "-c", self.engine_cleanup_script() + " >/dev/null 2>&1"])
        self._image_made = False
        shutil.rmtree(self.tmp, ignore_errors=True)

    def cleanup_now(self) -> None:
        """The SIGTERM path: no waiting beyond SIGTERM_CLEANUP_WAIT_SECONDS."""
        for d in self.daemons:
            if d.proc is not None and d.proc.poll() is None:
                try:
                    d.proc.kill()
                except OSError:
                    pass
        try:
            # Its own session: meson's SIGKILL of this process group does not reach it.
            p = subprocess.Popen(["sh", "-c", self.engine_cleanup_script()],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
            p.wait(SIGTERM_CLEANUP_WAIT_SECONDS)
        except (OSError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def check_clean_exit(daemon: Daemon) -> None:
    """Stops ``daemon`` with SIGTERM and fails unless it exits 0 by itself."""
    code = daemon.stop()
    if code != 0:
        raise AssertionError(f"maf-sandboxd exited {code} after SIGTERM (0 expected):\n"
                             f"{daemon.log_text()}")


_session: Session | None = None
_lock = threading.Lock()


def session() -> Session:
    """The run's session, made by the first caller. Raises :class:`FixtureError` (a test
    failure) when MSB_DAEMON or MSB_TESTIMAGE is missing."""
    global _session
    with _lock:
        if _session is None:
            _session = Session()
        return _session


def _on_signal(signum: int, frame: Any) -> None:
    # Meson's timeout: SIGTERM, then SIGKILL 0.5 s later. Clean up here and now rather than
    # unwind (a test blocked in a call would take longer than that to get to atexit).
    if _session is not None:
        try:
            _session.cleanup_now()
        except BaseException:  # noqa: BLE001 - exiting anyway
            pass
    sys.stderr.write(f"daemon_fixture: signal {signum}: cleaned up, exiting\n")
    sys.stderr.flush()
    os._exit(128 + signum)


if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _on_signal)

if str(CONTRIB_PYTHON) not in sys.path:
    sys.path.insert(0, str(CONTRIB_PYTHON))
