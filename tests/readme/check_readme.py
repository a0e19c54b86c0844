#!/usr/bin/env python3
"""check_readme.py SOURCE_ROOT BUILD_DIR — runs README.md's commands as written.

Every ```sh, ```console and ```python block of the README carries a marker on
the line before its fence:

    <!-- ci: run -->                 this test runs it
    <!-- ci: skip: WHY -->           it cannot run here (WHY says what does instead)

A block without a marker fails the test, so no command is left unchecked by
accident. The run blocks execute in README order against a daemon of this
build on a private socket (MAF_SANDBOX_SOCKET), from a directory that looks
like a checkout with `build` being BUILD_DIR: the shell ones (```console:
the lines after "$ ") and Python blocks (each its own program, contrib/python
on PYTHONPATH) from one bash script with -euo pipefail, so a variable set in
one block is seen by the next.

Two words are made this run's own before running, so a run never meets a
user's sandboxes or images and leaves none behind: the scope `demo` and the
image `maf-sandbox-busybox:local`. Whatever carries the run's scope and the
image are removed at the end, also on failure, and on SIGTERM (meson's timeout,
which sends SIGKILL 0.5 s later): the handler kills the daemon and the blocks,
starts the engine cleanup in a session of its own (so it finishes even if this
process is killed), removes the temporary directory and exits at once.

The blocks run once the daemon reports the engine reachable (daemon.status),
and within README_TIMEOUT_S, below meson's 300 s, so a hang is reported here.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MARKER_RE = re.compile(r"^<!--\s*ci:\s*(run|skip:\s*\S.*?)\s*-->\s*$")
FENCE_RE = re.compile(r"^```(\w*)\s*$")
RUNNABLE = ("sh", "console", "python")
#: hang guard: the daemon listens on its socket.
DAEMON_START_TIMEOUT_S = 20
#: hang guard: the daemon reaches the engine before the blocks run.
ENGINE_READY_TIMEOUT_S = 30
#: hang guard, below meson's timeout for this test (300 s), so a hang is reported by this script.
README_TIMEOUT_S = 240
#: hang guard: the daemon's exit on SIGTERM (its status is asserted: 0).
DAEMON_STOP_TIMEOUT_S = 30
#: How long the SIGTERM handler waits for the engine cleanup (meson kills 0.5 s after SIGTERM).
SIGTERM_CLEANUP_WAIT_S = 0.3

#: What the SIGTERM handler must clean up: set by main() as it makes each.
_state = {"daemon": None, "blocks": None, "work": None, "cleanup": None}


def parse(readme):
    """[(line, lang, marker, text)] for each fenced block."""
    lines = open(readme, encoding="utf-8").read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            sys.exit(f"README.md:{start + 1}: unterminated code block")
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mm = MARKER_RE.match(lines[k].strip()) if k >= 0 else None
        blocks.append((start + 1, lang, mm.group(1) if mm else None, "\n".join(lines[start + 1:j])))
        i = j + 1
    return blocks


def console_commands(text):
    return "\n".join(line[2:] for line in text.split("\n") if line.startswith("$ "))


def make_checkout(source, build, where):
    for name in os.listdir(source):
        if name in ("build", ".git"):
            continue
        os.symlink(os.path.join(source, name), os.path.join(where, name))
    os.symlink(os.path.abspath(build), os.path.join(where, "build"))


def start_daemon(build, work, sock):
    log = open(os.path.join(work, "daemon.log"), "wb")
    proxy = os.path.join(build, "daemon", "egress-proxy", "maf-sandbox-egress-proxy")
    state = os.path.join(work, "state")
    os.mkdir(state)
    p = subprocess.Popen([os.path.join(build, "daemon", "maf-sandboxd"), "--socket", sock,
                          "--set", "egress.proxy_binary=" + (proxy if os.path.exists(proxy) else ""),
                          "--set", "egress.state_dir=" + state],
                         stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
    while not os.path.exists(sock):
        if p.poll() is not None or time.monotonic() > deadline:
            sys.stdout.write(open(os.path.join(work, "daemon.log"), errors="replace").read())
            sys.exit("maf-sandboxd did not start")
        time.sleep(0.05)
    return p


def wait_engine_reachable(source, sock, daemon, work):
    """Until daemon.status says the engine is reachable (the client of this checkout)."""
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.join(source, "contrib", "python"))
    from maf_sandbox_client import SandboxError, connect

    deadline = time.monotonic() + ENGINE_READY_TIMEOUT_S
    last = None
    while time.monotonic() < deadline and daemon.poll() is None:
        try:
            with connect(sock, timeout=5) as client:
                status = client.status()
            if status.get("engine", {}).get("reachable"):
                return
            last = status.get("engine")
        except SandboxError as exc:
            last = exc
        time.sleep(0.1)
    sys.stdout.write(open(os.path.join(work, "daemon.log"), errors="replace").read()[-4000:])
    sys.exit(f"the daemon did not reach the engine within {ENGINE_READY_TIMEOUT_S} s: {last}")


def stop_daemon(daemon, work):
    """SIGTERM, and its exit status must be 0: a sanitizer's report at shutdown (or a
    daemon that died while the blocks ran) fails the test."""
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(DAEMON_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
            sys.stdout.write(open(os.path.join(work, "daemon.log"), errors="replace").read()[-4000:])
            sys.exit(f"the daemon did not stop on SIGTERM within {DAEMON_STOP_TIMEOUT_S} s")
    if daemon.returncode != 0:
        sys.stdout.write(open(os.path.join(work, "daemon.log"), errors="replace").read()[-8000:])
        sys.exit(f"the daemon exited with status {daemon.returncode} (SIGTERM after the blocks), not 0")


def sh_quiet(cmd):
    subprocess.run(["sh", "-c", cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def engine_cleanup(scope, image):
    """The shell commands that remove the run's containers and image."""
    return (f"docker ps -aq --filter label=maf-sandbox.scope={scope} | xargs -r docker rm -f; "
            f"docker rmi -f {image}")


def on_sigterm(signum, frame):
    for name in ("blocks", "daemon"):
        p = _state[name]
        if p is not None and p.poll() is None:
            try:
                if name == "blocks":
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.kill()
            except OSError:
                pass
    if _state["cleanup"]:
        try:
            # Its own session: meson's SIGKILL of this process group does not reach it.
            subprocess.Popen(["sh", "-c", _state["cleanup"]], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True).wait(SIGTERM_CLEANUP_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
    if _state["work"]:
        shutil.rmtree(_state["work"], ignore_errors=True)
    sys.stderr.write(f"check_readme: signal {signum}: cleaned up, exiting\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n")[0])
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    blocks = parse(os.path.join(source, "README.md"))
    unmarked = [f"README.md:{line}: a ```{lang} block has no <!-- ci: run --> or <!-- ci: skip: ... --> marker"
                for line, lang, marker, _ in blocks if lang in RUNNABLE and marker is None]
    if unmarked:
        sys.exit("\n".join(unmarked))
    run = [(line, lang, text) for line, lang, marker, text in blocks if lang in RUNNABLE and marker == "run"]
    if not run:
        sys.exit("README.md has no runnable block: the test would prove nothing")

    scope = f"readme{os.getpid()}"
    image = f"msb-readme-busybox:{os.getpid()}"
    work = tempfile.mkdtemp(prefix="msb-readme-")
    _state.update(work=work, cleanup=engine_cleanup(scope, image))
    signal.signal(signal.SIGTERM, on_sigterm)
    daemon = None
    try:
        checkout = os.path.join(work, "checkout")
        os.mkdir(checkout)
        make_checkout(source, build, checkout)
        sock = os.path.join(work, "msb.sock")
        daemon = start_daemon(build, work, sock)
        _state["daemon"] = daemon
        wait_engine_reachable(source, sock, daemon, work)
        env = dict(os.environ, MAF_SANDBOX_SOCKET=sock,
                   PYTHONPATH=os.path.join(checkout, "contrib", "python"))

        def own(text):
            return re.sub(r"\bdemo\b", scope, text.replace("maf-sandbox-busybox:local", image))

        # One bash script, in README order, so a variable set in one block is
        # seen by the next; a Python block is a program it runs.
        script = ["set -euo pipefail"]
        for n, (line, lang, text) in enumerate(run):
            script.append(f"echo '=== README.md:{line}'")
            if lang == "python":
                path = os.path.join(work, f"block{n}.py")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(own(text) + "\n")
                script.append(f"python3 '{path}'")
            else:
                script.append(own(console_commands(text) if lang == "console" else text))
        # A process group of its own, so a timeout (or SIGTERM) kills every command of it.
        # Standard input is empty, as a reader's would be for a command it gives none (exec
        # passes a stdin that is not a terminal on to the command).
        runner = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=checkout, env=env,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        _state["blocks"] = runner
        try:
            returncode = runner.wait(README_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
            sys.stdout.write(open(os.path.join(work, "daemon.log"), errors="replace").read()[-4000:])
            sys.exit(f"the README's commands did not finish within {README_TIMEOUT_S} s; the last "
                     "'=== README.md:N' above names the block")
        if returncode != 0:
            sys.stdout.write(open(os.path.join(work, "daemon.log"), errors="replace").read()[-4000:])
            sys.exit(f"the README's commands failed (exit {returncode}); the last '=== README.md:N' "
                     "above names the block")
        stop_daemon(daemon, work)
        print(f"README: {len(run)} block(s) ran; the daemon stopped with status 0", flush=True)
    finally:
        if daemon and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(DAEMON_STOP_TIMEOUT_S)   # hang guard
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()   # reaped: SIGKILL ends it
        sh_quiet(engine_cleanup(scope, image))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
