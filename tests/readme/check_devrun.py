#!/usr/bin/env python3
"""check_devrun.py SOURCE_ROOT BUILD_DIR — the daemon `contrib/dev.sh run` starts serves allowlists.

The README's first set-up command is `contrib/dev.sh run`, as root and without sudo. This runs
it as written, with three differences that keep it off the reader's daemon: MSB_DEV_BUILD_DIR
is BUILD_DIR (built already, so dev.sh neither configures it again nor has anything for ninja
to do), and the daemon gets a socket and an egress state directory of its own (dev.sh passes
its arguments on to maf-sandboxd). Then:

- `daemon.status` says egress is configured: the daemon found the build's egress proxy
  (egress.proxy_binary, which dev.sh sets; the default names the install prefix, where a build
  that is not installed has none, and the daemon would declare `closed` only);
- once status says the proxy image is settled (in the engine, or failed), `daemon.describe`
  declares `allowlist` among its egress modes;
- SIGTERM stops it with exit status 0 (dev.sh execs the daemon: the process is the daemon).

Skipped (exit 77) when not run as root: dev.sh refuses, and says so.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

#: hang guard: dev.sh checks its packages, the engine and the build before it starts the daemon.
START_TIMEOUT_S = 120
#: hang guard: the daemon's exit on SIGTERM (its status is asserted: 0).
STOP_TIMEOUT_S = 30
SKIP = 77


def log_tail(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-4000:]
    except OSError:
        return ""


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n")[0])
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    if os.geteuid() != 0:
        print("skipped: contrib/dev.sh run needs root")
        sys.exit(SKIP)
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.join(source, "contrib", "python"))
    from maf_sandbox_client import SandboxError, connect

    work = tempfile.mkdtemp(prefix="msb-devrun-")
    sock = os.path.join(work, "msb.sock")
    state = os.path.join(work, "state")
    log = os.path.join(work, "dev.log")
    env = dict(os.environ, MSB_DEV_BUILD_DIR=build)
    env.pop("MAF_SANDBOX_SOCKET", None)
    daemon = None
    try:
        with open(log, "wb") as out:
            daemon = subprocess.Popen(
                ["bash", os.path.join(source, "contrib", "dev.sh"), "run",
                 "--socket", sock, "--set", "egress.state_dir=" + state],
                cwd=source, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        # Until daemon.status says where the proxy image stands: allowlist is
        # declared once the image is in the engine (state "ready"). Not
        # configured, or "failed", is the answer too: asserted below.
        deadline = time.monotonic() + START_TIMEOUT_S
        describe = egress = None
        last = None
        while describe is None:
            if daemon.poll() is not None or time.monotonic() > deadline:
                sys.stdout.write(log_tail(log))
                sys.exit(f"contrib/dev.sh run did not serve {sock} with the engine reachable and "
                         f"the proxy image settled within {START_TIMEOUT_S} s "
                         f"(exit status {daemon.poll()}): {last}")
            if os.path.exists(sock):
                try:
                    with connect(sock, timeout=10) as client:
                        status = client.status()
                        egress = status.get("egress") or {}
                        image_state = (egress.get("image") or {}).get("state")
                        last = (status.get("engine"), egress)
                        if not egress.get("configured") or image_state in ("ready", "failed"):
                            describe = client.describe()
                except (SandboxError, OSError) as exc:
                    last = exc
            if describe is None:
                time.sleep(0.1)
        if egress.get("configured") is not True:
            sys.stdout.write(log_tail(log))
            sys.exit(f"daemon.status of the daemon contrib/dev.sh run starts: egress {egress}: "
                     "no egress proxy (egress.proxy_binary)")
        modes = describe.get("egress_modes")
        if "allowlist" not in (modes or []):
            sys.stdout.write(log_tail(log))
            sys.exit(f"the daemon contrib/dev.sh run starts declares egress_modes {modes}, "
                     f"not allowlist (egress {egress})")
        daemon.send_signal(signal.SIGTERM)
        try:
            rc = daemon.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            sys.exit(f"the daemon did not stop on SIGTERM within {STOP_TIMEOUT_S} s")
        if rc != 0:
            sys.stdout.write(log_tail(log))
            sys.exit(f"the daemon exited {rc} on SIGTERM")
        print(f"contrib/dev.sh run: describe declares {modes}; stopped with status 0")
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
