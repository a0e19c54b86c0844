"""An allowlisted sandbox through a daemon of its own with the egress proxy (MSB_PROXY): what
acquire says of its egress, and the ``egress.decision`` event a refused CONNECT makes — live,
and again by replay.

The proxy's way out is a network this module makes: ``--internal`` (no route off this
machine) on a 10.218.R.0/24 subnet of its own, labelled with the run so cleanup removes it.
Nothing here sends a packet anywhere: the only request is refused by the proxy itself.
Skipped when the egress proxy is not built (MSB_PROXY unset), as check_egress is.
"""

from __future__ import annotations

import os
import subprocess
import time
import unittest

import maf_sandbox_client as msb
from tests import daemon_fixture as fx

OUT_NET_PREFIX = "10.218"
OUT_NET_TRIES = 16
#: hang guard: the daemon makes the proxy's image from the binary when it starts.
PROXY_READY_SECONDS = 60.0
#: hang guard: a decision reaching a subscriber.
EVENT_WAIT_SECONDS = 30.0
#: A CONNECT to a host the allowlist does not name, sent to the proxy the workload's
#: HTTPS_PROXY names; prints the proxy's answer.
PROBE = ("p=${HTTPS_PROXY#http://}; p=${p%/}; "
         "(printf 'CONNECT denied.test:443 HTTP/1.1\\r\\nHost: denied.test:443\\r\\n\\r\\n'; "
         "sleep 1) | timeout 5 nc ${p%:*} ${p##*:}")

_daemon: fx.Daemon | None = None


def _outbound_network(s: fx.Session) -> str:
    name = f"msb-py-out-{s.run_id}"
    errors = []
    for i in range(OUT_NET_TRIES):
        r = (os.getpid() + i * 37) % 250 + 1
        p = subprocess.run(
            ["docker", "network", "create", "--internal", "--subnet",
             f"{OUT_NET_PREFIX}.{r}.0/24", "--label", f"{fx.CONTAINER_LABEL}={s.run_id}", name],
            capture_output=True, text=True, check=False)
        if p.returncode == 0:
            return name
        errors.append(p.stderr.strip())
    raise fx.FixtureError(f"cannot make the outbound network: {errors}")


def setUpModule() -> None:
    global _daemon
    if not os.environ.get("MSB_PROXY"):
        raise unittest.SkipTest("MSB_PROXY is not set (no egress proxy built)")
    s = fx.session()
    net = _outbound_network(s)
    _daemon = s.daemon("--set", f"egress.outbound_network={net}", egress=True)
    deadline = time.monotonic() + PROXY_READY_SECONDS
    with msb.connect(_daemon.sock, timeout=10) as client:
        while "allowlist" not in client.describe()["egress_modes"]:
            if time.monotonic() > deadline:
                raise fx.FixtureError(f"the egress proxy image was not ready within "
                                      f"{PROXY_READY_SECONDS} s:\n{_daemon.log_text()}")
            time.sleep(0.1)


def tearDownModule() -> None:
    if _daemon is not None:
        fx.check_clean_exit(_daemon)


class Allowlist(unittest.IsolatedAsyncioTestCase):
    async def test_acquire_egress_and_decision_events(self) -> None:
        s = fx.session()
        assert _daemon is not None
        client = msb.AsyncClient(_daemon.sock)
        await client.connect()
        self.addAsyncCleanup(client.close)
        describe = await client.describe()
        self.assertTrue(describe["observes_egress"])
        self.assertEqual((await client.status())["egress"]["configured"], True)

        key = msb.SandboxKey(s.scope("egress"), "t", "a")
        live = client.events(["egress.decision"], key.scope)
        await live.start()
        self.addAsyncCleanup(live.aclose)
        sb = await client.acquire(key, s.spec(egress="allowlist", egress_allow=["allowed.test"]))
        egress = sb.egress
        self.assertIsNotNone(egress)
        assert egress is not None
        self.assertEqual(set(egress), {"network", "proxy", "proxy_address", "proxy_url"})
        self.assertEqual(egress["proxy_url"], f"http://{egress['proxy_address']}:3128")
        self.assertEqual(egress["proxy"], f"{sb.name}-proxy")
        self.assertEqual(egress["network"], f"{sb.name}-net")

        r = await sb.exec(PROBE, timeout=20)
        self.assertIn("403", r.stdout_text, r)

        event = await live.next(timeout=EVENT_WAIT_SECONDS)
        self.assertIsNotNone(event, "no egress.decision event came")
        assert event is not None
        self.assertEqual((event.type, event.decision, event.host, event.port),
                         ("egress.decision", "DENY", "denied.test", 443))
        self.assertEqual((event.key, event.kind, event.sandbox), (key, "k", sb.name))

        # A subscriber that comes later gets it by replay, before the subscribe reply.
        async with client.events(["egress.decision"], key.scope, replay=True) as replayed:
            again = await replayed.next(timeout=EVENT_WAIT_SECONDS)
            self.assertIsNotNone(again)
            assert again is not None
            self.assertEqual((again.decision, again.host, again.time),
                             ("DENY", "denied.test", event.time))
            # Once, not twice: the replay comes whole before the subscribe reply, so a
            # second copy would be queued already (looked at without waiting).
            self.assertIsNone(await replayed.next(timeout=0))

        self.assertIsNone(await sb.dispose())
        self.assertEqual(await client.list(scope=key.scope), [])


if __name__ == "__main__":
    unittest.main()
