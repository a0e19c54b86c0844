"""maf_sandbox_daemon without a daemon: construction, what it declares, what it sends, and the
classes its errors are."""

from __future__ import annotations

import os
import pathlib
import unittest

import maf_sandbox as ms
import maf_sandbox_client as msc

import maf_sandbox_daemon as msd

DESCRIBE = {
    "isolation": "container",
    "capabilities": ["exec", "host_tools", "files_in", "files_out", "files_list",
                     "files_delete", "reclaim", "a_capability_of_a_newer_daemon"],
    "egress_modes": ["allowlist", "closed"],
    "observes_egress": True,
    "isolation_scopes": ["conversation", "call"],
    "os_families": ["posix"],
    "limits": {
        "files_in": {"max_bytes_per_file": 67108864, "max_total_bytes": 268435456,
                     "max_files": 256},
        "files_out": {"max_bytes_per_file": 1, "max_total_bytes": 2, "max_files": 3},
    },
}


class Construction(unittest.TestCase):
    def test_socket_paths_are_accepted(self) -> None:
        for value in ("/run/x.sock", pathlib.Path("/run/x.sock")):
            backend = msd.DaemonSandboxBackend(value)
            self.assertEqual(backend.client.socket_path, "/run/x.sock")
        os.environ.pop("MAF_SANDBOX_SOCKET", None)
        self.assertTrue(msd.DaemonSandboxBackend().client.socket_path)

    def test_a_client_is_accepted(self) -> None:
        client = msc.AsyncClient("/run/y.sock")
        self.assertIs(msd.DaemonSandboxBackend(client).client, client)

    def test_wrong_types_are_refused_at_construction(self) -> None:
        for value in (5, b"/run/x.sock", object(), ["/run/x.sock"], 1.5):
            with self.subTest(value=value), self.assertRaises(TypeError) as caught:
                msd.DaemonSandboxBackend(value)  # type: ignore[arg-type]
            self.assertIn("socket path", str(caught.exception))
        with self.assertRaises(ValueError):
            msd.DaemonSandboxBackend("")
        with self.assertRaises(TypeError):
            msd.DaemonSandboxBackend("/x", name="")
        with self.assertRaises(TypeError):
            msd.DaemonSandboxBackend("/x", name=3)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            msd.DaemonSandboxBackend("/x", declarations={"capabilities": []})  # type: ignore

    def test_the_plain_constructor_declares_maf_sandboxs_defaults(self) -> None:
        backend = msd.DaemonSandboxBackend("/x")
        self.assertIs(backend.declarations, ms.DEFAULT_BACKEND_DECLARATIONS)
        self.assertIs(backend.isolation, ms.Isolation.CONTAINER)
        self.assertEqual(backend.name, msd.BACKEND_NAME)
        self.assertIsInstance(backend, ms.SandboxBackend)


class Declarations(unittest.TestCase):
    def test_from_describe(self) -> None:
        d = msd.declarations_from_describe(DESCRIBE)
        self.assertIsInstance(d, ms.BackendDeclarations)
        self.assertEqual(d.capabilities, frozenset({
            ms.Capability.EXEC, ms.Capability.HOST_TOOLS, ms.Capability.FILES_IN,
            ms.Capability.FILES_OUT, ms.Capability.FILES_LIST, ms.Capability.FILES_DELETE,
            ms.Capability.RECLAIM}))
        for member in d.capabilities | d.egress_modes | d.isolation_scopes | d.os_families:
            self.assertIsInstance(member, (ms.Capability, ms.Egress, ms.IsolationScope,
                                           ms.OsFamily))
        self.assertEqual(d.egress_modes, frozenset({ms.Egress.ALLOWLIST, ms.Egress.CLOSED}))
        self.assertEqual(d.os_families, frozenset({ms.OsFamily.POSIX}))
        self.assertEqual(d.limits.files_out, ms.TransferLimits(1, 2, 3))
        self.assertEqual(d.limits.files_in.max_files, 256)
        # Never more than the backend serves: no ObservesEgress hook, no method tokens.
        self.assertFalse(d.observes_egress)
        self.assertEqual(d.egress_method_tokens, frozenset())
        # Host tools and programs over exec, through maf-sandbox's own channel (the router
        # refuses HOST_TOOLS without one).
        self.assertEqual(len(d.program_channels), 1)
        self.assertIsInstance(d.program_channels[0], ms.ExecProgramChannel)
        without_exec = msd.declarations_from_describe({"capabilities": ["host_tools", "files_in"]})
        self.assertEqual(without_exec.program_channels, ())
        self.assertNotIn(ms.Capability.HOST_TOOLS, without_exec.capabilities)

    def test_silence_is_read_as_silence(self) -> None:
        d = msd.declarations_from_describe({})
        self.assertEqual(d.capabilities, frozenset())
        self.assertEqual(d.egress_modes, frozenset())
        self.assertEqual(d.limits, ms.DEFAULT_SANDBOX_LIMITS)
        bad = msd.declarations_from_describe({"limits": {"files_in": {"max_files": -1,
                                                                      "max_total_bytes": True}}})
        self.assertEqual(bad.limits.files_in, ms.DEFAULT_TRANSFER_LIMITS)

    def test_the_router_admits_it_above_a_container_floor_only(self) -> None:
        describe = {**DESCRIBE, "limits": {"files_in": DESCRIBE["limits"]["files_in"],
                                            "files_out": DESCRIBE["limits"]["files_in"]}}
        backend = msd.DaemonSandboxBackend("/x", declarations=msd.declarations_from_describe(
            describe))
        router = ms.SandboxRouter([backend], min_isolation=ms.Isolation.CONTAINER)
        spec = ms.SandboxSpec(kind="k", image="i")
        router.ensure_can_serve(spec)
        self.assertIs(router.backend_for(spec), backend)
        with self.assertRaises(ms.SandboxCapabilityNotSupported):
            router.ensure_can_serve(ms.SandboxSpec(kind="k", image="i", requires=frozenset(
                {ms.Capability.EXEC, ms.Capability.RUN_CODE})))
        with self.assertRaises(ms.SandboxBackendNotPermitted):
            ms.SandboxRouter([backend])


class Wire(unittest.TestCase):
    def test_key(self) -> None:
        key = ms.SandboxKey("tenant", "conversation", "agent", "call-7")
        self.assertEqual(msd.key_to_wire(key), {"scope": "tenant", "thread_id": "conversation",
                                                "agent_dir": "agent", "call_id": "call-7"})

    def test_spec_sends_what_the_daemon_takes(self) -> None:
        spec = ms.SandboxSpec(kind="k", image="img:1", egress=ms.Egress.ALLOWLIST,
                              egress_allow=("pypi.org", ms.EgressRule("files.pythonhosted.org")),
                              labels={"a": "b"}, work_dir="/w",
                              isolation_scope=ms.IsolationScope.CALL,
                              exclusive_admission=True)
        wire = msd.spec_to_wire(spec)
        self.assertEqual(wire["kind"], "k")
        self.assertEqual(wire["egress"], "allowlist")
        self.assertEqual(wire["egress_allow"], ["pypi.org", "files.pythonhosted.org"])
        self.assertEqual(wire["isolation_scope"], "call")
        self.assertEqual(wire["labels"], {"a": "b"})
        self.assertEqual(sorted(wire["requires"]), ["exec", "files_in"])
        self.assertEqual(wire["files_in"], {"max_bytes_per_file": 8388608,
                                            "max_total_bytes": 33554432, "max_files": 64})
        for host_side in ("exclusive_admission", "program", "execution_contract",
                          "max_identity_scope", "max_identity_retention_seconds"):
            self.assertNotIn(host_side, wire)

    def test_a_narrowed_egress_rule_is_refused_not_widened(self) -> None:
        for rule in (ms.EgressRule("api.example.com", methods=("GET",)),
                     ms.EgressRule("api.example.com", paths=("/v1/*",))):
            spec = ms.SandboxSpec(kind="k", image="i", egress=ms.Egress.ALLOWLIST,
                                  egress_allow=(rule,))
            with self.subTest(rule=str(rule)), \
                    self.assertRaises(ms.SandboxCapabilityNotSupported):
                msd.spec_to_wire(spec)


class Errors(unittest.TestCase):
    def wire(self, code: int, type_: str, **data: object) -> msc.SandboxError:
        return msc.error_from_wire({"code": code, "message": "m", "data": {"type": type_,
                                                                            **data}})

    def test_maf_sandboxs_classes(self) -> None:
        for code, type_, theirs in (
                (1204, "SandboxTransferCapExceeded", ms.SandboxTransferCapExceeded),
                (1208, "SandboxExecOutputLimitExceeded", ms.SandboxExecOutputLimitExceeded),
                (1100, "SandboxCapabilityNotSupported", ms.SandboxCapabilityNotSupported),
                (1101, "SandboxEgressNotEnforced", ms.SandboxEgressNotEnforced)):
            exc = self.wire(code, type_)
            if not isinstance(exc, msc.SandboxError) or exc.code != code:
                self.skipTest(f"code {code} is not {type_} in this client")
            new = msd.translate(exc)
            with self.subTest(type_):
                self.assertIsInstance(new, theirs)
                self.assertIsInstance(new, type(exc))      # the client's class too
                self.assertEqual(new.code, code)           # the wire's code and data kept
                self.assertEqual(new.type, type_)

    def test_builtins_stay_as_they_are(self) -> None:
        for exc in (self.wire(1200, "SandboxConfinementError"),
                    self.wire(1202, "FileNotFoundError")):
            self.assertIs(msd.translate(exc), exc)
        self.assertIsInstance(self.wire(1200, "SandboxConfinementError"), ValueError)

    def test_unavailable_only_before_anything_was_made(self) -> None:
        down = msc.DaemonUnavailable("no socket")
        made = msd.translate(down, acquiring=True)
        self.assertIsInstance(made, ms.SandboxBackendUnavailable)
        lost = msc.ConnectionLost("the answer was lost")
        self.assertNotIsInstance(msd.translate(lost, acquiring=True),
                                 ms.SandboxBackendUnavailable)
        self.assertNotIsInstance(msd.translate(down), ms.SandboxBackendUnavailable)


if __name__ == "__main__":
    unittest.main()
