"""maf-sandbox's egress conformance (``assert_egress_conformance``) through the backend: an
allowlisted sandbox reaches a host on its ``egress_allow`` and not one off it, with the guest's
own ``curl`` over HTTPS through the daemon's egress proxy.

The world the proxy reaches is made here, never the internet: an outbound bridge network with
a subnet picked here (10.219.R.0/24, labelled with the run so cleanup removes it), on it one
upstream container answering as ``allowed.test`` and ``denied.test`` (network aliases the engine
resolves for the proxy) with ``openssl s_server -www`` on 443 (a 200 page for any GET), its
certificate signed by a CA made here and written into the sandbox's trust bundle before the
probes (planting, the harness's move). The daemon allows the subnet's addresses
(``egress.private_allow``). Both URLs answer 2xx when reached, as the probes require, so the
deny probe can only pass by the proxy's refusal.

The guest image is tests/integration/pyimage.sh's Debian root (curl, openssl, python3).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
import unittest

import maf_sandbox as ms
from maf_sandbox import conformance as mc

import daemon_fixture as fx
from maf_sandbox_daemon import DaemonSandboxBackend

OUT_NET_PREFIX = "10.219"
OUT_NET_TRIES = 16
UPSTREAM_HOST = 10
PROXY_READY_SECONDS = 60.0  # hang guard: the proxy image ready
LISTEN_SECONDS = 30.0  # hang guard: the upstream listens
TRUST_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

_world: dict[str, str] = {}


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False, **kw)


def _python_image(s: fx.Session) -> str:
    script = os.environ.get("MSB_PYIMAGE")
    if not script:
        raise fx.FixtureError("MSB_PYIMAGE is not set (tests/integration/pyimage.sh): run through "
                              "`meson test python_backend`")
    ref = f"msb-py-debian:{s.run_id}"
    r = _run(["sh", script, ref])
    if r.returncode != 0:
        raise fx.FixtureError(f"pyimage.sh {ref} failed: {r.stderr}")
    s.extra_images.append(ref)
    return ref


def _certificates(directory: str) -> None:
    """A CA, and a server certificate for allowed.test and denied.test it signs."""
    steps = [
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=maf-sandbox test CA", "-keyout", "ca.key", "-out", "ca.pem"],
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=allowed.test",
         "-keyout", "server.key", "-out", "server.csr"],
    ]
    for step in steps:
        r = _run(step, cwd=directory)
        if r.returncode != 0:
            raise fx.FixtureError(f"{' '.join(step[:2])}: {r.stderr}")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:allowed.test,DNS:denied.test\n")
    r = _run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
              "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem"],
             cwd=directory)
    if r.returncode != 0:
        raise fx.FixtureError(f"openssl x509: {r.stderr}")


def _outbound_network(s: fx.Session) -> tuple[str, str]:
    name = f"msb-py-egress-out-{s.run_id}"
    errors = []
    for i in range(OUT_NET_TRIES):
        r = (os.getpid() + i * 41) % 250 + 1
        prefix = f"{OUT_NET_PREFIX}.{r}"
        p = _run(["docker", "network", "create", "--subnet", f"{prefix}.0/24",
                  "--label", f"{fx.CONTAINER_LABEL}={s.run_id}", name])
        if p.returncode == 0:
            return name, prefix
        errors.append(p.stderr.strip())
    raise fx.FixtureError(f"cannot make the outbound network: {errors}")


def setUpModule() -> None:
    if not os.environ.get("MSB_PROXY"):
        raise fx.FixtureError("MSB_PROXY is not set: the egress proxy is not built")
    s = fx.session()
    image = _python_image(s)
    certs = tempfile.mkdtemp(prefix="certs-", dir=s.tmp)
    _certificates(certs)
    net, prefix = _outbound_network(s)
    upstream = f"msb-py-egress-upstream-{s.run_id}"
    r = _run(["docker", "run", "-d", "--name", upstream,
              "--label", f"{fx.CONTAINER_LABEL}={s.run_id}", "--network", net,
              "--ip", f"{prefix}.{UPSTREAM_HOST}", "--network-alias", "allowed.test",
              "--network-alias", "denied.test", "-v", f"{certs}:/certs:ro", image,
              "openssl", "s_server", "-quiet", "-www", "-accept", "443",
              "-cert", "/certs/server.pem", "-key", "/certs/server.key"])
    if r.returncode != 0:
        raise fx.FixtureError(f"cannot start the upstream: {r.stderr}")
    deadline = time.monotonic() + LISTEN_SECONDS
    while "LISTEN" not in _run(["docker", "exec", upstream, "sh", "-c",
                                "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | "
                                "awk '$2 ~ /:01BB$/ && $4 == \"0A\" {print \"LISTEN\"}'"]).stdout:
        if time.monotonic() > deadline:
            raise fx.FixtureError("the upstream never listened on 443: "
                                  + _run(["docker", "logs", upstream]).stderr)
        time.sleep(0.2)
    daemon = s.daemon("--set", f"egress.outbound_network={net}",
                      "--set", f"egress.private_allow={prefix}.0/24", egress=True)
    _world.update(image=image, sock=daemon.sock, ca=os.path.join(certs, "ca.pem"))
    _daemons.append(daemon)


_daemons: list[fx.Daemon] = []


def tearDownModule() -> None:
    """The daemon stops cleanly (exit 0: under the sanitizers, a leak fails it)."""
    while _daemons:
        fx.check_clean_exit(_daemons.pop())


class Egress(unittest.IsolatedAsyncioTestCase):
    async def test_allowlist_is_enforced(self) -> None:
        s = fx.session()
        backend = await DaemonSandboxBackend.create(_world["sock"])
        self.addAsyncCleanup(backend.aclose)
        deadline = time.monotonic() + PROXY_READY_SECONDS
        while ms.Egress.ALLOWLIST not in backend.declarations.egress_modes:
            self.assertLess(time.monotonic(), deadline, "the egress proxy never became ready")
            await asyncio.sleep(0.2)
            await backend.refresh()
        key = ms.SandboxKey(s.scope("egress-conformance"), "thread", "agent")
        self.addAsyncCleanup(self.dispose, backend, key)
        spec = ms.SandboxSpec(kind="egress", image=_world["image"], egress=ms.Egress.ALLOWLIST,
                              egress_allow=("allowed.test",),
                              labels={fx.RUN_LABEL: s.run_id})
        sandbox = await backend.acquire(key, spec)
        with open(_world["ca"], "rb") as f:
            ca = f.read()
        await sandbox.write_file(TRUST_BUNDLE, ca, working_directory="/etc/ssl/certs")
        subject = mc.PosixGuestSubject(sandbox=sandbox, working_directory="/maf-sandbox/work",
                                       capabilities=backend.declarations.capabilities,
                                       exec_timeout=30.0)
        results = await mc.assert_egress_conformance(
            subject, allowed_url="https://allowed.test/", denied_url="https://denied.test/")
        self.assertEqual([r.skipped for r in results], [None, None])

    async def dispose(self, backend: DaemonSandboxBackend, key: ms.SandboxKey) -> None:
        self.assertIsNone(await backend.dispose(key))


if __name__ == "__main__":
    unittest.main()
