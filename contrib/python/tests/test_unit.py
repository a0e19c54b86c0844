"""Unit tests that need no daemon: the error table, framing, result views, conversions, and
the connection's id matching against a scripted server on a temporary Unix socket."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import enum
import errno
import json
import os
import inspect
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from unittest import mock

import maf_sandbox_client as msb
from maf_sandbox_client import wire
from maf_sandbox_client.connection import Connection
from maf_sandbox_client.models import key_to_wire, spec_to_wire

PROTOCOL_MD = Path(__file__).resolve().parents[3] / "proto" / "PROTOCOL.md"

#: Every wire code, its data.type, and the builtin a host catches (maf-sandbox's choices).
EXPECTED = [
    (-32700, "ParseError", msb.ParseError, ValueError),
    (-32600, "InvalidRequest", msb.InvalidRequest, ValueError),
    (-32601, "MethodNotFound", msb.MethodNotFound, NotImplementedError),
    (-32602, "InvalidParams", msb.InvalidParams, ValueError),
    (-32603, "InternalError", msb.InternalError, RuntimeError),
    (1000, "EngineUnavailable", msb.SandboxEngineUnavailable, ConnectionError),
    (1001, "EngineError", msb.SandboxEngineError, RuntimeError),
    (1002, "EngineTimeout", msb.SandboxEngineTimeout, TimeoutError),
    (1003, "EngineVersionNotSupported", msb.SandboxEngineVersionNotSupported, RuntimeError),
    (1100, "SandboxCapabilityNotSupported", msb.SandboxCapabilityNotSupported, RuntimeError),
    (1101, "SandboxEgressNotEnforced", msb.SandboxEgressNotEnforced, PermissionError),
    (1102, "SandboxOsFamilyNotSupported", msb.SandboxOsFamilyNotSupported, RuntimeError),
    (1103, "SandboxTransferLimitsNotPermitted", msb.SandboxTransferLimitsNotPermitted,
     PermissionError),
    (1104, "SandboxScopeNotEnforced", msb.SandboxScopeNotEnforced, PermissionError),
    (1105, "SandboxBackendNotPermitted", msb.SandboxBackendNotPermitted, PermissionError),
    (1106, "SandboxConflict", msb.SandboxConflict, RuntimeError),
    (1200, "ConfinementError", msb.SandboxConfinementError, ValueError),
    (1201, "NotADirectoryError", msb.SandboxNotADirectoryError, NotADirectoryError),
    (1202, "FileNotFoundError", msb.SandboxFileNotFoundError, FileNotFoundError),
    (1203, "OSError", msb.SandboxOSError, OSError),
    (1204, "SandboxTransferCapExceeded", msb.SandboxTransferCapExceeded, RuntimeError),
    (1205, "TimeoutError", msb.SandboxTimeoutError, TimeoutError),
    (1206, "SandboxNotFound", msb.SandboxNotFound, LookupError),
    (1207, "SandboxFreezeFailed", msb.SandboxFreezeFailed, RuntimeError),
    (1208, "SandboxExecOutputLimitExceeded", msb.SandboxExecOutputLimitExceeded, ValueError),
    (1209, "Cancelled", msb.SandboxExecCancelled, RuntimeError),
    (1300, "PermissionDenied", msb.SandboxPermissionDenied, PermissionError),
    (1301, "FrameTooLarge", msb.FrameTooLarge, ValueError),
    (1302, "TooManyConnections", msb.TooManyConnections, ConnectionError),
    (1303, "ShuttingDown", msb.ShuttingDown, ConnectionError),
    (1304, "FrameTimeout", msb.FrameTimeout, TimeoutError),
]


def wire_error(code: int, type_name: str | None, message: str = "m", **data: Any) -> dict[str, Any]:
    d: dict[str, Any] = dict(data)
    if type_name is not None:
        d["type"] = type_name
    return {"code": code, "message": message, "data": d}


class ErrorTable(unittest.TestCase):
    def test_every_code_maps_to_its_class_and_builtin(self) -> None:
        for code, type_name, cls, builtin in EXPECTED:
            with self.subTest(code=code):
                exc = msb.error_from_wire(wire_error(code, type_name, path="p"))
                self.assertIs(type(exc), cls)
                self.assertIsInstance(exc, builtin)
                self.assertIsInstance(exc, msb.SandboxError)
                self.assertEqual(exc.code, code)
                self.assertEqual(exc.type, type_name)
                self.assertEqual(cls.wire_type, type_name)

    def test_the_table_is_the_protocol_table(self) -> None:
        """One class per row of PROTOCOL.md's error table, no more, no fewer."""
        rows = re.findall(r"^\| (-?\d+) \| `(\w+)` \|", PROTOCOL_MD.read_text(), re.M)
        self.assertGreater(len(rows), 25, "PROTOCOL.md's error table was not found")
        documented = {int(code): name for code, name in rows}
        self.assertEqual(documented, {c: cls.wire_type for c, cls in msb.ERROR_CLASSES.items()})
        self.assertEqual({c for c, *_ in EXPECTED}, set(msb.ERROR_CLASSES))

    def test_code_wins_over_type_and_message(self) -> None:
        # A message or data.type naming another error never changes the class.
        exc = msb.error_from_wire(wire_error(1202, "ConfinementError",
                                             message="SandboxConfinementError: escapes"))
        self.assertIsInstance(exc, msb.SandboxFileNotFoundError)

    def test_unknown_code_falls_back_to_type_then_base(self) -> None:
        self.assertIsInstance(msb.error_from_wire(wire_error(1999, "SandboxNotFound")),
                              msb.SandboxNotFound)
        exc = msb.error_from_wire(wire_error(1999, "SomethingNew"))
        self.assertIs(type(exc), msb.SandboxError)
        self.assertEqual(exc.code, 1999)
        self.assertEqual(exc.type, "SomethingNew")

    def test_malformed_error_objects(self) -> None:
        for bad in (None, "x", 3, [], {}, {"code": "1200"}, {"code": True, "data": 5}):
            with self.subTest(bad=bad):
                exc = msb.error_from_wire(bad)
                self.assertIs(type(exc), msb.SandboxError)

    def test_data_accessors_and_errno(self) -> None:
        exc = msb.error_from_wire(wire_error(1202, "FileNotFoundError", path="out/x"))
        self.assertEqual(exc.path, "out/x")
        self.assertEqual(exc.errno, errno.ENOENT)
        self.assertEqual(exc.filename, "out/x")
        self.assertEqual(msb.error_from_wire(wire_error(1201, "NotADirectoryError")).errno,
                         errno.ENOTDIR)
        cap = msb.error_from_wire(wire_error(1204, "SandboxTransferCapExceeded", limit=3, size=9))
        self.assertEqual((cap.limit, cap.size), (3, 9))
        bad = msb.error_from_wire(wire_error(-32602, "InvalidParams", field="spec.egress"))
        self.assertEqual(bad.field, "spec.egress")
        self.assertIn("InvalidParams", str(bad))
        self.assertEqual(msb.error_from_wire(wire_error(1001, "EngineError",
                                                        engine_status=409)).engine_status, 409)

    def test_oserror_errno_names(self) -> None:
        # 1203 carries the kernel's errno by name on the local plane: EACCES/EPERM are a
        # PermissionError (what maf-sandbox's file_refusal reads as PERMISSION_DENIED), and
        # every known name sets errno.
        denied = msb.error_from_wire(wire_error(1203, "OSError", path="x", errno="EACCES"))
        self.assertIsInstance(denied, msb.SandboxFilePermissionError)
        self.assertIsInstance(denied, PermissionError)
        self.assertIsInstance(denied, msb.SandboxOSError)
        self.assertEqual(denied.errno, errno.EACCES)
        self.assertIsInstance(msb.error_from_wire(wire_error(1203, "OSError", errno="EPERM")),
                              PermissionError)
        busy = msb.error_from_wire(wire_error(1203, "OSError", errno="EBUSY"))
        self.assertIs(type(busy), msb.SandboxOSError)
        self.assertEqual(busy.errno, errno.EBUSY)
        odd = msb.error_from_wire(wire_error(1203, "OSError", errno="ENOTANERRNO"))
        self.assertIs(type(odd), msb.SandboxOSError)
        self.assertIsNone(odd.errno)

    def test_backend_constructor_types(self) -> None:
        # A socket path where a user passes one; anything else is a TypeError at once (it
        # used to be taken as the client and fail later with AttributeError).
        self.assertEqual(msb.DaemonSandboxBackend("/run/a.sock").client.socket_path,
                         "/run/a.sock")
        import pathlib
        self.assertEqual(msb.DaemonSandboxBackend(pathlib.Path("/run/b.sock"))
                         .client.socket_path, "/run/b.sock")
        client = msb.AsyncClient("/run/c.sock")
        self.assertIs(msb.DaemonSandboxBackend(client).client, client)
        for bad in (5, b"/run/a.sock", object()):
            with self.subTest(bad=bad), self.assertRaises(TypeError):
                msb.DaemonSandboxBackend(bad)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            msb.DaemonSandboxBackend("/run/a.sock", socket_path="/run/b.sock")
        with self.assertRaises(TypeError):
            msb.DaemonSandboxBackend(socket_path=7)  # type: ignore[arg-type]

    def test_seed_families(self) -> None:
        # behaviour-core §2.3: the cap error is of the output family, a RuntimeError (not a
        # ValueError); what a backend does not serve is a NotImplementedError.
        self.assertTrue(issubclass(msb.SandboxTransferCapExceeded, msb.SandboxOutputError))
        self.assertTrue(issubclass(msb.SandboxOutputError, RuntimeError))
        self.assertFalse(issubclass(msb.SandboxTransferCapExceeded, ValueError))
        self.assertTrue(issubclass(msb.SandboxNotServed, NotImplementedError))
        self.assertTrue(issubclass(msb.SandboxNotServed, msb.SandboxError))

    def test_client_side_classes(self) -> None:
        self.assertTrue(issubclass(msb.ConnectionLost, msb.DaemonUnavailable))
        self.assertTrue(issubclass(msb.DaemonUnavailable, ConnectionError))
        self.assertTrue(issubclass(msb.ClientTimeout, TimeoutError))
        self.assertIsNone(msb.ConnectionLost("x").code)


def _strings(value: Any) -> list[Any]:
    """Every string value (not key) in a decoded frame."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


class Framing(unittest.TestCase):
    def test_request_frame(self) -> None:
        frame = wire.encode_request(7, "files.write", {"path": "a b", "content_text": "é\n"})
        self.assertTrue(frame.endswith(b"\n"))
        self.assertEqual(frame.count(b"\n"), 1, "a raw newline inside a frame")
        self.assertNotIn(b": ", frame)
        self.assertEqual(json.loads(frame), {"jsonrpc": "2.0", "id": 7, "method": "files.write",
                                             "params": {"path": "a b", "content_text": "é\n"}})
        self.assertNotIn("params", json.loads(wire.encode_request(1, "daemon.status", None)))

    def test_values_that_cannot_travel_are_refused_before_sending(self) -> None:
        for params, field in (({"path": "a\x00b"}, "params.path"),
                              ({"env": {"A": "\ud800"}}, "params.env.A"),
                              ({"timeout_seconds": float("nan")}, "params.timeout_seconds"),
                              ({"command": ["ok", "x\x00"]}, "params.command[1]"),
                              ({"max_bytes": 2**63}, "params.max_bytes"),
                              ({"n": [-(2**63) - 1]}, "params.n[0]"),
                              ({"x": 2**70}, "params.x")):
            with self.subTest(params=params):
                with self.assertRaises(msb.InvalidParams) as cm:
                    wire.encode_request(1, "sandbox.exec", params)
                self.assertEqual(cm.exception.field, field)
                self.assertTrue(cm.exception.data["client_side"])

    def test_int64_bounds_travel(self) -> None:
        frame = wire.encode_request(1, "m", {"a": 2**63 - 1, "b": -(2**63), "c": True})
        self.assertEqual(json.loads(frame)["params"], {"a": 2**63 - 1, "b": -(2**63), "c": True})

    def test_frames_are_ascii(self) -> None:
        frame = wire.encode_request(1, "files.write", {"content_text": "é\u2028😀"})
        self.assertTrue(frame.isascii())
        self.assertEqual(json.loads(frame)["params"]["content_text"], "é\u2028😀")

    def test_base64_text_is_spliced_in(self) -> None:
        data = os.urandom(wire.B64_CHUNK_BYTES * 2 + 7)
        text = wire.b64encode_text(data)
        self.assertEqual(text.data, base64.b64encode(data))
        params = {"files": [{"path": "a", "content_b64": text},
                            {"path": "é", "content_b64": wire.b64encode_text(b"xy")}]}
        frame = wire.encode_request(4, "files.write", params)
        self.assertTrue(frame.endswith(b"\n") and frame.count(b"\n") == 1)
        got = json.loads(frame)["params"]["files"]
        self.assertEqual([base64.b64decode(f["content_b64"]) for f in got], [data, b"xy"])
        self.assertEqual(got[1]["path"], "é")
        with self.assertRaises(msb.FrameTooLarge):
            wire.encode_request(4, "files.write", params, max_frame_bytes=len(text) - 1)
        self.assertGreater(wire.approx_size(params), len(text))

    def test_frame_over_the_limit(self) -> None:
        params = {"content_text": "x" * 5000}
        with self.assertRaises(msb.FrameTooLarge) as cm:
            wire.encode_request(1, "files.write", params, max_frame_bytes=4096)
        self.assertEqual(cm.exception.limit, 4096)
        self.assertTrue(cm.exception.data["client_side"])
        # The LF is not counted.
        exact = wire.encode_request(1, "m", None)
        wire.encode_request(1, "m", None, max_frame_bytes=len(exact) - 1)

    def test_decode(self) -> None:
        self.assertEqual(wire.decode_frame(b'{"a":1}\r\n'), {"a": 1})
        self.assertEqual(wire.decode_frame(b'{"a":1}\n'), {"a": 1})
        self.assertIsNone(wire.decode_frame(b"\r\n"))
        self.assertIsNone(wire.decode_frame(b"  \n"))
        with self.assertRaises(ValueError):
            wire.decode_frame(b"{nope\n")

    def test_decode_long_base64_members(self) -> None:
        """Long *_b64 strings skip json.loads's walk: the same value, already decoded."""
        big, mid = os.urandom(wire.B64_DECODE_CHUNK), os.urandom(5000)
        b64 = base64.b64encode(big).decode()
        frames = [
            {"jsonrpc": "2.0", "id": 3, "result": {"content_b64": b64, "size": len(big)}},
            {"jsonrpc": "2.0", "id": 4, "result": {"exit_code": 0, "stdout_b64": b64,
                                                   "stderr_b64": "eHk=", "duration_ms": 9}},
            {"jsonrpc": "2.0", "id": 5, "result": {"files": [
                {"path": "a\"_b64", "content_b64": b64},
                {"path": "é", "content_b64": base64.b64encode(mid).decode()}]}},
        ]
        for doc in frames:
            line = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
            with self.subTest(id=doc["id"]):
                got = wire.decode_frame(line)
                self.assertEqual(got, doc)
                self.assertEqual(got, json.loads(line))
                blobs = [v for v in _strings(got) if isinstance(v, wire.Base64Str)]
                self.assertEqual(len(blobs), 2 if doc["id"] == 5 else 1)
                for v in blobs:
                    self.assertEqual(v.decoded, base64.b64decode(v))
        result = wire.decode_frame(json.dumps(frames[1], separators=(",", ":")).encode())
        self.assertIs(msb.ExecResult.from_wire(result["result"]).stdout_bytes,
                      result["result"]["stdout_b64"].decoded)

    def test_decode_falls_back_to_json_loads(self) -> None:
        """What is not a compact member of strict base64 is json.loads's, errors included."""
        b64 = base64.b64encode(os.urandom(6000)).decode()
        texts = [
            '{"result":{"content_b64":"%s\\n"}}' % b64,          # an escape: not base64
            '{"result":{"content_b64":"%s!"}}' % b64,            # outside the alphabet
            '{"result":{"content_b64":"=%s"}}' % b64[1:],        # padding in the middle
            '{"result":{"content_b64": "%s"}}' % b64,            # not compact: not looked at
            '{"result":{"x_b64":"%s"}}' % b64,                   # any *_b64 member
            '{"result":{"%s_b64":"%s"}}' % (b64, b64),           # a long key too
            '["x_b64\\":\\"%s"]' % b64,                          # inside another string
            '{"result":{"stdout_text":"%s"}}' % b64,             # not a *_b64 member
        ]
        for text in texts:
            with self.subTest(text=text[:40]):
                line = text.encode() + b"\r\n"
                self.assertEqual(wire.decode_frame(line), json.loads(text))
        for text in ('{"result":{"content_b64":"%s"}' % b64,      # not closed
                     '{"result":{"content_b64":"%s"}}}' % b64,    # extra data
                     '{"result":{"content_b64":"%s"' % b64,       # no closing quote
                     '{"result":{"content_b64":"%s"},}' % b64):
            with self.subTest(text=text[-12:]):
                with self.assertRaises(ValueError):
                    json.loads(text)
                with self.assertRaises(ValueError):
                    wire.decode_frame(text.encode() + b"\n")
        self.assertIsNone(wire.decode_frame(b" " * 5000 + b"\n"))

    def test_b64decode_strict(self) -> None:
        data = os.urandom(wire.B64_DECODE_CHUNK + 11)
        text = base64.b64encode(data).decode()
        self.assertEqual(wire.b64decode_strict(text), data)
        self.assertEqual(wire.b64decode_strict(text.encode()), data)
        framed = b"xx" + text.encode() + b"yy"
        self.assertEqual(wire.b64decode_strict(framed, 2, len(framed) - 2), data)
        for bad in ("eHk", "eH=k", "eHk=eHk=", "eHk\n", "e Hk="):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                wire.b64decode_strict(bad)

    def test_encode_work_counts_base64_as_a_copy(self) -> None:
        text = wire.b64encode_text(os.urandom(3 * 1024 * 1024))
        self.assertLess(wire.encode_work({"content_b64": text}), len(text) // 4)
        self.assertGreater(wire.encode_work({"content_text": "x" * 100}), 100)

    def test_default_socket_path(self) -> None:
        with mock.patch.dict(os.environ, {"MAF_SANDBOX_SOCKET": "/x/s.sock"}):
            self.assertEqual(wire.default_socket_path(), "/x/s.sock")
        runtime = tempfile.mkdtemp(prefix="msb-py-xdg-")
        self.addCleanup(shutil.rmtree, runtime)
        own = os.path.join(runtime, "maf-sandbox.sock")
        env = {k: v for k, v in os.environ.items() if k != "MAF_SANDBOX_SOCKET"}
        env["XDG_RUNTIME_DIR"] = runtime
        with mock.patch.dict(os.environ, env, clear=True):
            # No daemon of the user's own: the system daemon's socket.
            with mock.patch("os.geteuid", return_value=1000):
                self.assertEqual(wire.default_socket_path(), "/run/maf-sandbox.sock")
            with open(own, "w"):  # a regular file is not a daemon
                pass
            with mock.patch("os.geteuid", return_value=1000):
                self.assertEqual(wire.default_socket_path(), "/run/maf-sandbox.sock")
            os.unlink(own)
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(own)
            sock.close()
            with mock.patch("os.geteuid", return_value=0):
                self.assertEqual(wire.default_socket_path(), "/run/maf-sandbox.sock")
            with mock.patch("os.geteuid", return_value=1000):
                self.assertEqual(wire.default_socket_path(), own)
            del os.environ["XDG_RUNTIME_DIR"]
            with mock.patch("os.geteuid", return_value=1000):
                self.assertEqual(wire.default_socket_path(), "/run/maf-sandbox.sock")


class Results(unittest.TestCase):
    def test_exec_result_views(self) -> None:
        raw = {"exit_code": 2, "stdout_b64": base64.b64encode(b"ok\xff\x00z").decode(),
               "stderr_b64": "", "stdout_text": "ignored", "duration_ms": 41}
        r = msb.ExecResult.from_wire(raw)
        self.assertEqual(r.stdout_bytes, b"ok\xff\x00z")
        self.assertEqual(r.stdout_text, "ok\ufffd\x00z")
        self.assertEqual(r.stdout, r.stdout_text)
        self.assertEqual(r.stderr, "")
        self.assertEqual((r.exit_code, r.duration_ms, r.ok), (2, 41, False))
        self.assertEqual(r.raw["stdout_text"], "ignored")
        with self.assertRaises(msb.UnexpectedReply):
            msb.ExecResult.from_wire({"exit_code": 0, "stdout_b64": "!!"})
        with self.assertRaises(msb.UnexpectedReply):
            msb.ExecResult.from_wire({"stdout_b64": ""})

    def test_entries(self) -> None:
        self.assertEqual(msb.SandboxEntry.from_wire({"path": "f", "kind": "file", "size": 3}),
                         msb.SandboxEntry("f", msb.EntryKind.FILE, 3))
        e = msb.SandboxEntry.from_wire({"path": "d", "kind": "whiteout", "size": None})
        self.assertEqual((e.kind, e.size_bytes), (msb.EntryKind.OTHER, None))

    def test_reap_and_disposal(self) -> None:
        r = msb.ReapResult.from_wire({"disposed": 2, "proxies_removed": 1, "networks_removed": 1,
                                      "failures": [{"code": "refused", "detail": "busy"}]})
        self.assertEqual(r.failures, (msb.DisposalFailure("refused", "busy"),))
        self.assertEqual(str(r.failures[0]), "refused: busy")
        self.assertIsNone(msb.DisposalFailure.from_wire(None))
        self.assertFalse(r.dry_run)
        dry = msb.ReapResult.from_wire({
            "disposed": 0, "proxies_removed": 0, "networks_removed": 0, "failures": [],
            "dry_run": True, "would_dispose_count": 70, "would_remove_proxies": 1,
            "would_remove_networks": 2,
            "would_dispose": [{"sandbox": "a" * 64, "name": "maf-sandbox-docker-000000000001",
                               "scope": "s", "created": "2026-12-01T00:00:00Z"}]})
        self.assertTrue(dry.dry_run)
        self.assertEqual(dry.would_dispose_count, 70)
        self.assertEqual(dry.would_dispose[0].name, "maf-sandbox-docker-000000000001")
        self.assertEqual((dry.would_remove_proxies, dry.would_remove_networks), (1, 2))

    def test_declarations(self) -> None:
        d = msb.BackendDeclarations.from_describe({
            "capabilities": ["exec", "files_in", "future_cap"], "egress_modes": ["closed"],
            "isolation_scopes": ["conversation", "call"], "os_families": ["posix"],
            "limits": {"files_in": {"max_bytes_per_file": 1, "max_total_bytes": 2, "max_files": 3}}})
        self.assertIn(msb.Capability.EXEC, d.capabilities)
        self.assertIn("future_cap", d.capabilities)
        self.assertEqual(d.limits.files_in, msb.TransferLimits(1, 2, 3))
        self.assertEqual(d.limits.files_out, msb.DEFAULT_TRANSFER_LIMITS)
        self.assertEqual(d.os_families, frozenset({"posix"}))


class _Cap(enum.StrEnum):
    EXEC = "exec"
    FILES_OUT = "files_out"


@dataclasses.dataclass(frozen=True)
class _Limits:
    max_bytes_per_file: int
    max_total_bytes: int
    max_files: int


@dataclasses.dataclass(frozen=True)
class _ForeignKey:  # the shape of maf_sandbox.SandboxKey
    scope: str
    thread_id: str
    agent_dir: str
    call_id: str = ""


@dataclasses.dataclass(frozen=True)
class _ForeignKeyV42:  # maf_sandbox.SandboxKey from 0.42 on
    scope: str
    thread_id: str
    agent_id: str
    call_id: str = ""


@dataclasses.dataclass(frozen=True)
class _ForeignSpecV21:  # maf-sandbox before 0.38: identities was a field
    kind: str
    identities: frozenset[str] = frozenset({"app"})


@dataclasses.dataclass(frozen=True)
class _ForeignSpec:  # the shape of maf_sandbox.SandboxSpec (a subset)
    kind: str
    image: str | None = None
    requires: frozenset[_Cap] = frozenset({_Cap.EXEC, _Cap.FILES_OUT})
    egress_allow: tuple[str, ...] = ()
    files_in: _Limits = _Limits(1, 2, 3)
    min_isolation: str | None = None


class Conversions(unittest.TestCase):
    def test_keys(self) -> None:
        self.assertEqual(key_to_wire(msb.SandboxKey("s", "t", "a")),
                         {"scope": "s", "thread_id": "t", "agent_dir": "a", "call_id": ""})
        self.assertEqual(key_to_wire(_ForeignKey("s", "t", "a", "c"))["call_id"], "c")
        self.assertEqual(key_to_wire({"scope": "s", "agent_id": "x"}), {"scope": "s", "agent_id": "x"})
        with self.assertRaises(TypeError):
            key_to_wire(object())
        # maf-sandbox 0.42+ names the field agent_id.
        self.assertEqual(key_to_wire(_ForeignKeyV42("s", "t", "x")),
                         {"scope": "s", "thread_id": "t", "agent_dir": "x", "call_id": ""})

    def test_specs(self) -> None:
        self.assertEqual(spec_to_wire(msb.SandboxSpec(kind="k", image="i", labels={"a": "b"})),
                         {"kind": "k", "image": "i", "labels": {"a": "b"}})
        wire_spec = spec_to_wire(_ForeignSpec(kind="k", image="i"))
        self.assertEqual(wire_spec, {"kind": "k", "image": "i", "requires": ["exec", "files_out"],
                                     "egress_allow": [], "files_in": {"max_bytes_per_file": 1,
                                                                      "max_total_bytes": 2,
                                                                      "max_files": 3}})
        json.dumps(wire_spec)
        with self.assertRaises(TypeError):
            spec_to_wire("kind")
        # A field only the host uses (maf-sandbox before 0.38) is not sent.
        self.assertEqual(spec_to_wire(_ForeignSpecV21(kind="k")), {"kind": "k"})


# ---- the connection against a scripted server ------------------------------------------

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> dict[str, Any]:
    line = await reader.readline()
    if not line:
        raise ConnectionError("client went away")
    msg = json.loads(line)
    assert isinstance(msg, dict)
    return msg


def _send(writer: asyncio.StreamWriter, msg: dict[str, Any]) -> None:
    # Compact, as the daemon sends: long *_b64 members then take the reader's fast path.
    writer.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")


def _send_raw(writer: asyncio.StreamWriter, text: str) -> None:
    writer.write(text.encode() + b"\n")


class ScriptedServer(unittest.IsolatedAsyncioTestCase):
    """A test that serves a script on a temporary Unix socket, on its own loop."""

    async def asyncSetUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="msb-py-unit-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sock = os.path.join(self.dir, "s.sock")

    async def serve(self, script: Script, *, limit: int = 2 ** 16) -> None:
        server = await asyncio.start_unix_server(
            lambda r, w: self._run(script, r, w), path=self.sock, limit=limit)
        self.addAsyncCleanup(self._stop, server)

    async def _run(self, script: Script, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            await script(r, w)
        except ConnectionError:
            pass
        finally:
            w.close()

    async def _stop(self, server: asyncio.Server) -> None:
        server.close()
        await server.wait_closed()


class ConnectionBehaviour(ScriptedServer):
    async def test_replies_out_of_order_are_matched_by_id(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            reqs = [await _read_request(r) for _ in range(5)]
            for req in reversed(reqs):
                _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": req["params"]["n"]})
            await w.drain()
            await r.read()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            results = await asyncio.gather(*(client.call("x", {"n": i}) for i in range(5)))
        self.assertEqual(results, [0, 1, 2, 3, 4])

    async def test_notifications_go_to_their_call_and_unknown_ones_are_skipped(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            a = await _read_request(r)
            b = await _read_request(r)
            _send(w, {"jsonrpc": "2.0", "method": "future.thing", "params": {"id": a["id"]}})
            for req, text in ((a, b"A1"), (b, b"B1"), (a, b"A2")):
                _send(w, {"jsonrpc": "2.0", "method": "exec.output",
                          "params": {"id": req["id"], "stream": "stdout",
                                     "data_b64": base64.b64encode(text).decode()}})
            _send(w, {"jsonrpc": "2.0", "method": "exec.output",
                      "params": {"id": 999, "stream": "stdout", "data_b64": "eA=="}})
            for req in (a, b):
                _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": {}})
            await w.drain()
            await r.read()

        await self.serve(script)
        seen: dict[str, list[bytes]] = {"a": [], "b": []}
        async with msb.AsyncClient(self.sock) as client:
            await asyncio.gather(
                client.call("x", on_notification=lambda m, p: seen["a"].append(
                    base64.b64decode(p["data_b64"])) if m == "exec.output" else None),
                client.call("y", on_notification=lambda m, p: seen["b"].append(
                    base64.b64decode(p["data_b64"]))))
        self.assertEqual(seen, {"a": [b"A1", b"A2"], "b": [b"B1"]})

    async def test_a_cancelled_call_is_forgotten_and_the_connection_stays_usable(self) -> None:
        first_seen = asyncio.Event()

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            slow = await _read_request(r)
            first_seen.set()
            fast = await _read_request(r)
            # The cancelled call's reply comes late, and before the live one's.
            _send(w, {"jsonrpc": "2.0", "id": slow["id"], "result": "late"})
            _send(w, {"jsonrpc": "2.0", "id": fast["id"], "result": "fresh"})
            await w.drain()
            await r.read()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            task = asyncio.create_task(client.call("slow"))
            await first_seen.wait()
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertEqual(await client.call("fast"), "fresh")
            with self.assertRaises(msb.ClientTimeout):
                await client.call("never", timeout=0.05)
            self.assertTrue(client.connected)

    async def test_a_connection_ending_error_fails_every_call(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await _read_request(r)
            await _read_request(r)
            _send(w, {"jsonrpc": "2.0", "id": None, "error": wire_error(
                1301, "FrameTooLarge", limit=4096)})
            await w.drain()

        await self.serve(script)
        async with msb.AsyncClient(self.sock, auto_reconnect=False) as client:
            results = await asyncio.gather(client.call("a"), client.call("b"),
                                           return_exceptions=True)
            for r in results:
                self.assertIsInstance(r, msb.FrameTooLarge)
            with self.assertRaises(msb.FrameTooLarge):
                await client.call("c")

    async def test_end_of_stream_fails_calls_with_connection_lost(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await _read_request(r)

        await self.serve(script)
        async with msb.AsyncClient(self.sock, auto_reconnect=False) as client:
            with self.assertRaises(msb.ConnectionLost):
                await client.call("a")
            with self.assertRaises(msb.ConnectionLost):
                await client.call("b")

    async def test_a_call_in_flight_is_lost_never_replayed_and_the_next_reconnects(self) -> None:
        # By default: the call in flight when the daemon went away raises ConnectionLost
        # saying so; the next call opens a new connection; nothing is sent twice.
        seen: list[list[str]] = []

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            mine: list[str] = []
            seen.append(mine)
            req = await _read_request(r)
            mine.append(req["method"])
            if len(seen) == 1:
                return  # gone mid-call
            _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": len(seen)})
            await w.drain()
            await r.read()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            self.assertTrue(client.auto_reconnect)
            with self.assertRaises(msb.ConnectionLost) as cm:
                await client.call("first")
            self.assertIn("went away mid-call", str(cm.exception))
            self.assertIn("may or may not have run", str(cm.exception))
            self.assertTrue(cm.exception.data.get("in_flight"))
            self.assertEqual(cm.exception.data.get("method"), "first")
            self.assertEqual(await client.call("second"), 2)
        self.assertEqual(seen, [["first"], ["second"]])

    async def test_a_close_the_reader_has_not_seen_yet_is_replaced(self) -> None:
        # A restart between two calls with no loop turn in between (a blocking wait): the
        # next call finds the daemon's close by a peek and goes on a new connection, also
        # with auto_reconnect off (nothing was in flight). The server is a thread, so it
        # closes while this loop does not run.
        for auto in (True, False):
            seen: list[str] = []
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            path = os.path.join(self.dir, f"thread-{auto}.sock")
            listener.bind(path)
            listener.listen(2)
            first_closed = threading.Event()
            may_close = threading.Event()

            def serve() -> None:
                for n in (1, 2):
                    conn, _ = listener.accept()
                    with conn, conn.makefile("rb") as f:
                        req = json.loads(f.readline())
                        seen.append(req["method"])
                        conn.sendall(json.dumps({"jsonrpc": "2.0", "id": req["id"],
                                                 "result": n}).encode() + b"\n")
                        if n == 1:
                            may_close.wait(30)  # hang guard
                            conn.shutdown(socket.SHUT_RDWR)
                        else:
                            f.readline()
                    if n == 1:
                        first_closed.set()

            thread = threading.Thread(target=serve, daemon=True)
            thread.start()
            async with msb.AsyncClient(path, auto_reconnect=auto) as client:
                self.assertEqual(await client.call("a"), 1)
                may_close.set()
                # hang guard; blocking: this loop's reader sleeps
                self.assertTrue(first_closed.wait(30))
                self.assertTrue(client.connected)     # the reader has not seen the close
                self.assertEqual(await client.call("b"), 2)
            thread.join(30)  # hang guard
            listener.close()
            self.assertEqual(seen, ["a", "b"])

    async def test_an_idle_close_is_replaced_on_the_next_call(self) -> None:
        # The daemon closes a connection idle for limits.idle_timeout_ms: the next call opens
        # a new one (without auto_reconnect) and is sent once, on it.
        seen: list[list[str]] = []
        closed = asyncio.Event()

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            mine: list[str] = []
            seen.append(mine)
            req = await _read_request(r)
            mine.append(req["method"])
            _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": len(seen)})
            await w.drain()
            if len(seen) == 1:
                closed.set()
                return  # idle: nothing in flight, the server closes
            await r.read()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            self.assertEqual(await client.call("a"), 1)
            await closed.wait()
            async with asyncio.timeout(5):
                while client.connected:
                    await asyncio.sleep(0.01)
            self.assertEqual(await client.call("b"), 2)
        self.assertEqual(seen, [["a"], ["b"]])

    async def test_a_reply_over_the_reply_limit_ends_the_connection(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            req = await _read_request(r)
            _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": "x" * 100000})
            await w.drain()
            await r.read()

        await self.serve(script)
        client = msb.AsyncClient(self.sock, max_reply_bytes=1000)
        async with client:
            with self.assertRaises(msb.ConnectionLost) as cm:
                await client.call("a")
            self.assertIn("exceeded", str(cm.exception))

    async def test_a_null_id_error_with_one_call_in_flight_answers_it(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await _read_request(r)
            _send(w, {"jsonrpc": "2.0", "id": None, "error": wire_error(-32700, "ParseError")})
            await w.drain()
            await r.read()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            with self.assertRaises(msb.ParseError):
                await client.call("a")

    async def test_pull_progress_goes_to_the_acquires_of_that_image(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            reqs = [await _read_request(r) for _ in range(2)]
            for image, status in (("img:1", "Pulling"), ("img:2", "Other"), ("img:1", "Done")):
                _send(w, {"jsonrpc": "2.0", "method": "sandbox.pull_progress",
                          "params": {"name": "n", "image": image, "status": status}})
            for req in reqs:
                _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": {
                    "sandbox": "f" * 64, "name": "n", "kind": req["params"]["spec"]["kind"],
                    "work_dir": "/w", "created": True, "state": "running"}})
            await w.drain()
            await r.read()

        await self.serve(script)
        seen: list[str] = []

        async def progress(p: Any) -> None:
            seen.append(p["status"])

        async with msb.AsyncClient(self.sock) as client:
            key = msb.SandboxKey("s", "t", "a")
            a, b = await asyncio.gather(
                client.acquire(key, msb.SandboxSpec(kind="a", image="img:1"), on_progress=progress),
                client.acquire(key, {"kind": "b", "image_id": "img:3", "image": "img:2"},
                               on_progress=lambda p: seen.append("wrong")))
        self.assertEqual(seen, ["Pulling", "Done"])
        self.assertEqual((a.kind, b.kind, a.work_dir, a.created), ("a", "b", "/w", True))

    async def test_events_arrive_in_order_then_the_end_is_raised(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            req = await _read_request(r)
            assert req["method"] == "events.subscribe" and req["params"]["replay"] is True
            event = {"type": "egress.decision", "key": {"scope": "s", "thread_id": "t",
                                                        "agent_dir": "a", "call_id": ""},
                     "kind": "k", "sandbox": "n", "decision": "ALLOW", "host": "h",
                     "port": 443, "time": "2026-01-01T00:00:00.000000001Z"}
            _send(w, {"jsonrpc": "2.0", "method": "events.event", "params": event})
            _send(w, {"jsonrpc": "2.0", "id": req["id"],
                      "result": {"types": ["egress.decision"], "scope": "s"}})
            for decision in ("DENY", "UNREACHABLE"):
                # the DENY of a plain-HTTP request carries its reason
                extra = {"reason": "not_connect"} if decision == "DENY" else {}
                _send(w, {"jsonrpc": "2.0", "method": "events.event",
                          "params": dict(event, decision=decision, **extra)})
            # a coalesced one: 2980 identical decisions from first_time to time
            _send(w, {"jsonrpc": "2.0", "method": "events.event",
                      "params": dict(event, decision="DENY", count=2980,
                                     first_time="2025-12-31T23:59:59.5Z")})
            await w.drain()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            stream = client.events(["egress.decision"], "s", replay=True, max_queue=1)
            got = []
            with self.assertRaises(msb.ConnectionLost):
                async for event in stream:
                    got.append(event)
            self.assertEqual([e.decision for e in got], ["ALLOW", "DENY", "UNREACHABLE", "DENY"])
            self.assertEqual(got[0].key, msb.SandboxKey("s", "t", "a"))
            self.assertEqual((got[0].port, got[0].host), (443, "h"))
            self.assertEqual((got[0].count, got[0].first_time), (1, got[0].time))
            self.assertEqual([e.reason for e in got], [None, "not_connect", None, None])
            self.assertEqual((got[3].count, got[3].first_time, got[3].time),
                             (2980, "2025-12-31T23:59:59.5Z", "2026-01-01T00:00:00.000000001Z"))
            self.assertEqual(stream.subscription, {"types": ["egress.decision"], "scope": "s"})
            await stream.aclose()

    async def test_connect_failure(self) -> None:
        with self.assertRaises(msb.DaemonUnavailable) as cm:
            await msb.AsyncClient(os.path.join(self.dir, "absent.sock")).connect()
        self.assertNotIsInstance(cm.exception, msb.ConnectionLost)
        conn = Connection(os.path.join(self.dir, "absent.sock"))
        with self.assertRaises(msb.DaemonUnavailable):
            await conn.open(1)



# ---- deadlines, large frames, NUL text, events: scripted servers ------------------------


def _never_answer() -> Script:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read()  # reads every request, answers none (a stopped or wedged daemon)
    return script


def _event(decision: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "events.event",
            "params": {"type": "egress.decision", "decision": decision}}


class Deadlines(ScriptedServer):
    async def test_every_call_has_a_deadline_by_default(self) -> None:
        self.assertEqual(msb.DEFAULT_CALL_TIMEOUT_SECONDS, 120)
        await self.serve(_never_answer())
        async with msb.AsyncClient(self.sock, call_timeout=0.3) as client:
            t0 = asyncio.get_running_loop().time()
            with self.assertRaises(msb.ClientTimeout):
                await client.status()
            # hang guard: ClientTimeout is the behaviour; far below the 120 s default.
            self.assertLess(asyncio.get_running_loop().time() - t0, 30)
            # exec: its own timeout plus the margin (the daemon's TimeoutError comes first).
            with mock.patch("maf_sandbox_client.client.EXEC_DEADLINE_MARGIN_SECONDS", 0.2):
                t0 = asyncio.get_running_loop().time()
                with self.assertRaises(msb.ClientTimeout):
                    await client.sandbox("0" * 64).exec("true", timeout=0.4)
                # not early: the exec's 0.4 s plus the 0.2 s margin (less the loop's slack).
                self.assertGreater(asyncio.get_running_loop().time() - t0, 0.55)
            # acquire: none unless given (an image pull may take long).
            key, spec = msb.SandboxKey("s", "t", "a"), msb.SandboxSpec(kind="k", image="i")
            pending = asyncio.ensure_future(client.acquire(key, spec))
            await asyncio.sleep(0.6)
            self.assertFalse(pending.done(), "acquire got the call deadline")
            pending.cancel()
            with self.assertRaises(msb.ClientTimeout):
                await client.acquire(key, spec, timeout=0.1)
            with self.assertRaises(msb.ClientTimeout):
                await client.call("daemon.status", timeout=0.1)
            self.assertTrue(client.connected)

    def test_default_deadlines(self) -> None:
        client = msb.AsyncClient("/nonexistent.sock")
        margin = msb.EXEC_DEADLINE_MARGIN_SECONDS
        self.assertEqual(margin, 5)
        self.assertEqual(client.default_deadline("daemon.status"), 120)
        self.assertEqual(client.default_deadline("files.write", {"path": "x"}), 120)
        self.assertIsNone(client.default_deadline("sandbox.acquire", {}))
        self.assertEqual(client.default_deadline("sandbox.exec", {"timeout_seconds": 300}),
                         300 + margin)
        self.assertEqual(client.default_deadline("files.reclaim", {"timeout_seconds": 2}),
                         2 + margin)
        self.assertEqual(client.default_deadline("files.reclaim", {}), 120)
        client.call_timeout = None
        self.assertIsNone(client.default_deadline("sandbox.exec", {"timeout_seconds": 3}))


class StdinAndCancel(ScriptedServer):
    """exec's stdin and its cancel as frames: what the daemon is sent, and when."""

    async def test_a_cancelled_exec_sends_call_cancel_for_its_id(self) -> None:
        got: list[dict[str, Any]] = []
        done = asyncio.Event()

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            got.append(await _read_request(r))   # the exec, never answered
            got.append(await _read_request(r))   # call.cancel, a notification
            done.set()
            await r.read()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            task = asyncio.create_task(client.sandbox("0" * 64).exec("sleep 9", timeout=30))
            await asyncio.sleep(0.2)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(done.wait(), 30)  # hang guard
        self.assertEqual(got[0]["method"], "sandbox.exec")
        self.assertEqual(got[1], {"jsonrpc": "2.0", "method": "call.cancel",
                                  "params": {"id": got[0]["id"]}})

    async def test_a_plain_call_cancelled_sends_nothing_more(self) -> None:
        got: list[dict[str, Any]] = []

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            got.append(await _read_request(r))
            nxt = await _read_request(r)   # the next call, not a cancel
            got.append(nxt)
            _send(w, {"jsonrpc": "2.0", "id": nxt["id"], "result": {}})
            await w.drain()
            await r.read()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            task = asyncio.create_task(client.call("files.stat", {"path": "x"}))
            await asyncio.sleep(0.1)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await client.call("daemon.status")
        self.assertEqual([m["method"] for m in got], ["files.stat", "daemon.status"])

    async def test_stdin_bytes_go_whole_and_a_stream_one_chunk_at_a_time(self) -> None:
        got: list[dict[str, Any]] = []

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            first = await _read_request(r)
            got.append(first)
            _send(w, {"jsonrpc": "2.0", "id": first["id"],
                      "result": {"exit_code": 0, "stdout_b64": "", "stderr_b64": ""}})
            await w.drain()
            exec_req = await _read_request(r)
            got.append(exec_req)
            while True:
                chunk = await _read_request(r)
                got.append(chunk)
                # Answered only now: the client must not have sent the next one yet.
                self.assertFalse(r._buffer, "a chunk was sent before the last was answered")
                data = base64.b64decode(chunk["params"].get("data_b64", ""))
                _send(w, {"jsonrpc": "2.0", "id": chunk["id"], "result": {"written": len(data)}})
                await w.drain()
                if chunk["params"].get("eof"):
                    break
            _send(w, {"jsonrpc": "2.0", "id": exec_req["id"],
                      "result": {"exit_code": 0, "stdout_b64": "", "stderr_b64": ""}})
            await w.drain()
            await r.read()

        async def source():
            yield b"a" * 300_000
            yield b"b"

        await self.serve(script, limit=1 << 20)
        async with msb.AsyncClient(self.sock) as client:
            sb = client.sandbox("0" * 64)
            await sb.exec("cat", stdin=b"\x00hi")
            await sb.exec("cat", stdin=source())
        self.assertEqual(base64.b64decode(got[0]["params"]["stdin_b64"]), b"\x00hi")
        self.assertNotIn("stdin_stream", got[0]["params"])
        self.assertIs(got[1]["params"]["stdin_stream"], True)
        chunks = got[2:]
        self.assertTrue(all(c["method"] == "exec.stdin" and c["params"]["call"] == got[1]["id"]
                            for c in chunks))
        sizes = [len(base64.b64decode(c["params"].get("data_b64", ""))) for c in chunks]
        self.assertEqual(sizes, [262144, 300_000 - 262144, 1, 0])
        self.assertEqual([c["params"].get("eof", False) for c in chunks], [False, False, False, True])
        with self.assertRaises(TypeError):
            await client.sandbox("0" * 64).exec("cat", stdin=123)  # type: ignore[arg-type]

    async def test_sync_stdin_blocked_after_the_exec_ended_keeps_no_exit_waiting(self) -> None:
        """The blocking client reads an iterable stdin on a daemon thread: one ``next()`` that
        blocks for good once the command stopped reading (a terminal nobody types into) must
        not be a thread the interpreter joins at exit (the loop's executor's are)."""
        entered, gate = threading.Event(), threading.Event()

        def source():
            yield b"x"
            entered.set()
            gate.wait(30)   # "blocks for good" (released at the end)
            yield b"y"

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            exec_req = await _read_request(r)
            chunk = await _read_request(r)
            _send(w, {"jsonrpc": "2.0", "id": chunk["id"], "result": {"written": 1}})
            await w.drain()
            # The client now waits in next() for its second item: the command ends.
            self.assertTrue(await asyncio.to_thread(entered.wait, 10))
            _send(w, {"jsonrpc": "2.0", "id": exec_req["id"],
                      "result": {"exit_code": 0, "stdout_b64": "", "stderr_b64": ""}})
            await w.drain()
            await r.read()

        def blocking_reader() -> list[threading.Thread]:
            with msb.connect(self.sock) as client:
                client.sandbox("0" * 64).exec("head -c1", stdin=source())
            code = source.__code__
            readers = []
            for tid, frame in sys._current_frames().items():
                f = frame
                while f is not None and f.f_code is not code:
                    f = f.f_back
                if f is not None:
                    readers.append(threading._active[tid])  # type: ignore[attr-defined]
            return readers

        await self.serve(script)
        try:
            readers = await asyncio.to_thread(blocking_reader)
            self.assertEqual(len(readers), 1, "no thread is blocked reading stdin")
            # An executor's worker is joined at exit (concurrent.futures registers them all),
            # daemon or not.
            import concurrent.futures.thread as cft
            self.assertNotIn(readers[0], cft._threads_queues,  # type: ignore[attr-defined]
                             f"{readers[0].name} would hold the interpreter's exit")
            self.assertTrue(readers[0].daemon, f"{readers[0].name} would hold the exit")
        finally:
            gate.set()

    def test_partial_output_of_a_timeout_and_a_cancel(self) -> None:
        for code, cls in ((1205, msb.SandboxTimeoutError), (1209, msb.SandboxExecCancelled)):
            exc = msb.error_from_wire({"code": code, "message": "m", "data": {
                "type": cls.wire_type, "stdout_b64": "b3V0", "stderr_b64": "ZXJy"}})
            self.assertIsInstance(exc, cls)
            self.assertEqual((exc.stdout, exc.stderr), (b"out", b"err"))
        bare = msb.error_from_wire({"code": 1205, "message": "m", "data": {"type": "TimeoutError"}})
        self.assertEqual((bare.stdout, bare.stderr), (b"", b""))


class Files(ScriptedServer):
    async def test_text_with_nul_and_large_content(self) -> None:
        stored: dict[str, bytes] = {}
        sent: list[dict[str, Any]] = []

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while True:
                req = await _read_request(r)
                params = req["params"]
                sent.append(params)
                if req["method"] == "files.write":
                    total = 0
                    for f in params.get("files", [params]):
                        data = (f["content_text"].encode() if "content_text" in f
                                else base64.b64decode(f["content_b64"], validate=True))
                        stored[f["path"]] = data
                        total += len(data)
                    result: Any = {"files": 1, "bytes": total}
                else:
                    result = {"content_b64": base64.b64encode(stored[params["path"]]).decode(),
                              "size": len(stored[params["path"]])}
                _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": result})
                await w.drain()

        server = await asyncio.start_unix_server(
            lambda r, w: self._run(script, r, w), path=self.sock, limit=64 * 1024 * 1024)
        self.addAsyncCleanup(self._stop, server)
        big = os.urandom(3 * 1024 * 1024 + 1)
        async with msb.AsyncClient(self.sock) as client:
            sb = client.sandbox("0" * 64)
            self.assertEqual(await sb.write_file("nul.txt", "a\x00b"), 3)
            self.assertNotIn("content_text", sent[-1])
            self.assertEqual(stored["nul.txt"], b"a\x00b")
            self.assertEqual(await sb.write_file("plain.txt", "é"), 2)
            self.assertEqual(sent[-1]["content_text"], "é")
            self.assertEqual(await sb.write_file("big", big), len(big))  # encoded off the loop
            self.assertEqual(await sb.read_file("big"), big)              # decoded off the loop
            self.assertEqual(await sb.write_files({"m/1": big, "m/2": "x\x00"}), len(big) + 2)
            self.assertEqual(await sb.read_file("m/2"), b"x\x00")
            with self.assertRaises(msb.InvalidParams):
                await sb.write_file("s.txt", "\x00\ud800")


class ReplyFastPath(ScriptedServer):
    """Long *_b64 members decoded outside json.loads (wire.decode_frame), end to end: what the
    methods return, the refusal of text that is not base64, and what the public call hands out
    (plain str, never the reader's Base64Str)."""

    async def test_through_the_methods(self) -> None:
        big = os.urandom(300 * 1024)
        b64 = base64.b64encode(big).decode()
        bad = b64[:-8] + "!!!!!!!!"
        replies = [
            '{"jsonrpc":"2.0","id":%d,"result":{"content_b64":"' + b64 + '","size":1}}',
            '{"jsonrpc":"2.0","id":%d,"result":{"content_b64":"' + bad + '","size":1}}',
            '{"jsonrpc":"2.0","id":%d,"result":{"files":[{"path":"a","content_b64":"' + b64
            + '"},{"path":"b","content_b64":"' + b64 + '"}]}}',
            # Duplicate keys: json.loads keeps the last; so must the reader.
            '{"jsonrpc":"2.0","id":%d,"result":{"content_b64":"' + b64
            + '","content_b64":"eHk="}}',
            '{"jsonrpc":"2.0","id":%d,"result":{"content_b64":"' + b64 + '"}}',
        ]

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            for reply in replies:
                req = await _read_request(r)
                if req["method"] == "sandbox.exec":
                    _send_raw(w, '{"jsonrpc":"2.0","method":"exec.output","params":{"id":%d,'
                              '"stream":"stdout","data_b64":"%s"}}' % (req["id"], b64))
                    _send_raw(w, '{"jsonrpc":"2.0","id":%d,"result":{"exit_code":0,'
                              '"stdout_b64":"%s","stderr_b64":""}}' % (req["id"], b64))
                else:
                    _send_raw(w, reply % req["id"])
                await w.drain()

        server = await asyncio.start_unix_server(
            lambda r, w: self._run(script, r, w), path=self.sock, limit=16 * 1024 * 1024)
        self.addAsyncCleanup(self._stop, server)
        async with msb.AsyncClient(self.sock) as client:
            sb = client.sandbox("0" * 64)
            self.assertEqual(await sb.read_file("x"), big)
            with self.assertRaises(msb.UnexpectedReply):
                await sb.read_file("bad")
            self.assertEqual(await sb.read_files(["a", "b"]), {"a": big, "b": big})
            self.assertEqual(await sb.read_file("dup"), b"xy")
            got = await client.call("files.read", {"sandbox": "0" * 64, "path": "x"})
            self.assertIs(type(got["content_b64"]), str)          # plain, no bytes attached
            self.assertEqual(got["content_b64"], b64)
            chunks: list[bytes] = []

            async def on_output(stream: str, data: bytes) -> None:
                chunks.append(data)

            result = await sb.exec("x", timeout=5, on_output=on_output)
            self.assertEqual((chunks, result.stdout_bytes), ([big], big))
            self.assertIs(type(result.raw["stdout_b64"]), str)

    def test_offload_decision(self) -> None:
        # On the loop: small frames, and up to 4 MiB when all but 1 MiB is long base64.
        self.assertTrue(wire.decode_on_loop(b"{}"))
        b64 = b"A" * (3 * 1024 * 1024)
        self.assertTrue(wire.decode_on_loop(b'{"result":{"content_b64":"' + b64 + b'"}}'))
        # A frame over 1 MiB with no base64 to take out goes to a worker thread.
        entries = b'{"result":{"entries":[' + b'{"path":"p","kind":"file"},' * 60000 + b'{}]}}'
        self.assertGreater(len(entries), wire.OFFLOAD_BYTES)
        self.assertFalse(wire.decode_on_loop(entries))
        self.assertFalse(wire.decode_on_loop(b'{"a":"' + b"A" * (5 * 1024 * 1024) + b'"}'))

    def test_plain(self) -> None:
        blob = wire.Base64Str("eHk=")
        blob.decoded = b"xy"
        value = {"a": [blob, {"b": blob}], "c": blob, "d": "s"}
        out = wire.plain(value)
        self.assertEqual(out, {"a": ["eHk=", {"b": "eHk="}], "c": "eHk=", "d": "s"})
        self.assertIs(type(out["c"]), str)
        self.assertIs(type(out["a"][0]), str)
        self.assertIs(type(out["a"][1]["b"]), str)
        with self.assertRaises(AttributeError):
            blob.other = 1  # type: ignore[attr-defined]  # __slots__: no dict per string


#: files.list replies of the scripted daemon below, by the path asked for.
LISTINGS: dict[str, dict[str, Any]] = {
    "out": {"result": {"entries": [
        {"path": "out/a.txt", "kind": "file", "size": 3},
        {"path": "out/link", "kind": "symlink", "size": None},
        {"path": "out/sub", "kind": "directory", "size": None},
        {"path": "out/weird", "kind": "whiteout", "size": None},
    ]}},
    "empty": {"result": {"entries": []}},
    "archived": {"error": wire_error(1100, "SandboxCapabilityNotSupported", "archive plane",
                                     capability="files_list", file_plane="archive")},
    "plain": {"error": wire_error(1201, "NotADirectoryError", path="plain")},
    "absent": {"error": wire_error(1202, "FileNotFoundError", path="absent")},
    "linked": {"error": wire_error(1200, "ConfinementError", path="linked")},
    "huge": {"error": wire_error(1204, "SandboxTransferCapExceeded", limit=10000)},
    "bare-list": {"result": []},
    "no-entries": {"result": {"files": []}},
}


class ListDir(ScriptedServer):
    async def serve_listing(self, capabilities: list[str]) -> list[dict[str, Any]]:
        """A daemon whose describe declares capabilities and whose files.list answers from
        LISTINGS; returns the requests it got, in order."""
        got: list[dict[str, Any]] = []

        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while True:
                req = await _read_request(r)
                got.append(req)
                if req["method"] == "daemon.describe":
                    reply: dict[str, Any] = {"result": {"capabilities": capabilities}}
                elif req["method"] == "sandbox.acquire":
                    reply = {"result": {"sandbox": "a" * 64, "name": "n", "kind": "k",
                                        "file_plane": "local"}}
                else:
                    reply = LISTINGS[req["params"]["path"]]
                _send(w, {"jsonrpc": "2.0", "id": req["id"], **reply})
                await w.drain()

        await self.serve(script)
        return got

    async def test_request_and_entries(self) -> None:
        got = await self.serve_listing(["exec", "files_list"])
        async with msb.AsyncClient(self.sock) as client:
            sb = client.sandbox("0" * 64)
            entries = await sb.list_dir("out", working_directory="/w")
            self.assertEqual(got[-1]["method"], "files.list")
            self.assertEqual(got[-1]["params"],
                             {"sandbox": "0" * 64, "path": "out", "working_directory": "/w"})
            self.assertIsInstance(entries, tuple)
            self.assertEqual(entries, (
                msb.SandboxEntry("out/a.txt", msb.EntryKind.FILE, 3),
                msb.SandboxEntry("out/link", msb.EntryKind.SYMLINK, None),
                msb.SandboxEntry("out/sub", msb.EntryKind.DIRECTORY, None),
                msb.SandboxEntry("out/weird", msb.EntryKind.OTHER, None),
            ))
            self.assertEqual(await sb.list_dir("empty"), ())
            self.assertNotIn("working_directory", got[-1]["params"])
            # describe is asked once, not before every listing.
            self.assertEqual([g["method"] for g in got].count("daemon.describe"), 1)

    async def test_not_declared_is_refused_without_a_call(self) -> None:
        got = await self.serve_listing(["exec", "files_in"])
        async with msb.AsyncClient(self.sock) as client:
            with self.assertRaises(NotImplementedError) as cm:
                await client.sandbox("0" * 64).list_dir("out")
        self.assertIsInstance(cm.exception, msb.SandboxNotServed)
        self.assertEqual(cm.exception.data["missing"], ["files_list"])
        self.assertTrue(cm.exception.data["client_side"])
        self.assertNotIn("files.list", [g["method"] for g in got])

    async def test_a_sandbox_on_the_archive_plane_is_not_served(self) -> None:
        await self.serve_listing(["files_list"])
        async with msb.AsyncClient(self.sock) as client:
            with self.assertRaises(NotImplementedError) as cm:
                await client.sandbox("0" * 64).list_dir("archived")
        exc = cm.exception
        self.assertIsInstance(exc, msb.SandboxNotServed)
        self.assertIsInstance(exc.__cause__, msb.SandboxCapabilityNotSupported)
        self.assertEqual((exc.code, exc.type), (1100, "SandboxCapabilityNotSupported"))
        self.assertEqual(exc.data["file_plane"], "archive")
        self.assertEqual(exc.data["missing"], ["files_list"])
        self.assertNotIn("client_side", exc.data)

    async def test_errors_map_as_for_the_other_file_methods(self) -> None:
        await self.serve_listing(["files_list"])
        rows: list[tuple[str, type[msb.SandboxError], type[BaseException]]] = [
            ("plain", msb.SandboxNotADirectoryError, NotADirectoryError),
            ("absent", msb.SandboxFileNotFoundError, FileNotFoundError),
            ("linked", msb.SandboxConfinementError, ValueError),
            ("huge", msb.SandboxTransferCapExceeded, RuntimeError),
            ("bare-list", msb.UnexpectedReply, RuntimeError),
            ("no-entries", msb.UnexpectedReply, RuntimeError),
        ]
        async with msb.AsyncClient(self.sock) as client:
            sb = client.sandbox("0" * 64)
            for path, cls, builtin in rows:
                with self.subTest(path=path):
                    with self.assertRaises(cls) as cm:
                        await sb.list_dir(path)
                    self.assertIsInstance(cm.exception, builtin)
                    self.assertNotIsInstance(cm.exception, msb.SandboxNotServed)
            with self.assertRaises(msb.SandboxTransferCapExceeded) as cm:
                await sb.list_dir("huge")
            self.assertEqual(cm.exception.limit, 10000)
            with self.assertRaises(msb.SandboxFileNotFoundError) as cm:
                await sb.list_dir("absent")
            self.assertEqual(cm.exception.filename, "absent")
            self.assertTrue(client.connected)

    async def test_acquire_says_which_plane(self) -> None:
        await self.serve_listing(["files_list"])
        async with msb.AsyncClient(self.sock) as client:
            sb = await client.acquire(msb.SandboxKey("s", "t", "a"), msb.SandboxSpec(kind="k"))
            self.assertEqual(sb.file_plane, "local")
            self.assertIsNone(client.sandbox("0" * 64).file_plane)

    def test_declarations_carry_files_list_only_when_described(self) -> None:
        local = msb.BackendDeclarations.from_describe({"capabilities": ["exec", "files_list"]})
        self.assertIn(msb.Capability.FILES_LIST, local.capabilities)
        archive = msb.BackendDeclarations.from_describe({"capabilities": ["exec"]})
        self.assertNotIn(msb.Capability.FILES_LIST, archive.capabilities)


class Events(ScriptedServer):
    async def test_replay_longer_than_the_queue(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            req = await _read_request(r)
            for i in range(5):  # kept events, then the reply, then live ones
                _send(w, _event(f"R{i}"))
            _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": {"types": ["egress.decision"]}})
            for i in range(3):
                _send(w, _event(f"L{i}"))
            await w.drain()
            await r.read()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            stream = client.events(replay=True, max_queue=2)
            await asyncio.wait_for(stream.start(), 30)  # hang guard
            got = [(await stream.next(timeout=30)).decision for _ in range(8)]  # hang guard
            self.assertEqual(got, ["R0", "R1", "R2", "R3", "R4", "L0", "L1", "L2"])
            await stream.aclose()

    async def test_a_timed_out_next_keeps_the_stream(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            req = await _read_request(r)
            await asyncio.sleep(0.3)  # a slow subscribe
            _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": {"types": ["egress.decision"]}})
            await asyncio.sleep(0.3)
            _send(w, _event("ALLOW"))
            await w.drain()
            await r.read()

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            stream = client.events()
            self.assertIsNone(await stream.next(timeout=0.1))  # while subscribing
            self.assertIsNone(await stream.next(timeout=0.3))  # subscribed, nothing yet
            self.assertFalse(stream.closed)
            event = await stream.next(timeout=30)  # hang guard
            self.assertEqual(event.decision, "ALLOW")
            self.assertEqual(stream.subscription, {"types": ["egress.decision"]})
            await stream.aclose()

    async def test_ended_streams_are_dropped(self) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            req = await _read_request(r)
            _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": {"types": ["egress.decision"]}})
            _send(w, _event("DENY"))
            await w.drain()  # then the daemon goes away

        await self.serve(script)
        async with msb.AsyncClient(self.sock) as client:
            for _ in range(3):  # a host's reconnect loop
                with self.assertRaises(msb.ConnectionLost):
                    async for _event_ in client.events():
                        pass
            self.assertEqual(len(client._streams), 0)
            kept = client.events()
            self.assertIn(kept, client._streams)  # not ended: closed with the client


# ---- maf_sandbox's own declarations, when it is importable -----------------------------

FAKE_MAF_SANDBOX = """
import dataclasses, enum

class Isolation(enum.StrEnum):
    CONTAINER = "container"
    MICROVM = "microvm"

class Capability(enum.StrEnum):
    EXEC = "exec"
    FILES_IN = "files_in"
    FILES_OUT = "files_out"

class Egress(enum.StrEnum):
    CLOSED = "closed"
    ALLOWLIST = "allowlist"

class OsFamily(enum.StrEnum):
    POSIX = "posix"

class IsolationScope(enum.StrEnum):
    CONVERSATION = "conversation"
    CALL = "call"

@dataclasses.dataclass(frozen=True)
class TransferLimits:
    max_bytes_per_file: int
    max_total_bytes: int
    max_files: int

DEFAULT_TRANSFER_LIMITS = TransferLimits(8 << 20, 32 << 20, 64)

@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    files_in: TransferLimits = DEFAULT_TRANSFER_LIMITS
    files_out: TransferLimits = DEFAULT_TRANSFER_LIMITS

@dataclasses.dataclass(frozen=True)
class BackendDeclarations:
    capabilities: frozenset = frozenset({Capability.EXEC, Capability.FILES_IN})
    limits: SandboxLimits = SandboxLimits()
    egress_modes: frozenset = frozenset()
    os_families: frozenset = frozenset()
    isolation_scopes: frozenset = frozenset({IsolationScope.CONVERSATION})
    observes_egress: bool = False
    egress_method_tokens: frozenset | None = frozenset()
"""

DESCRIBE = {
    "capabilities": ["exec", "files_in", "files_out", "future_cap"],
    "egress_modes": ["allowlist", "closed"], "isolation_scopes": ["conversation", "call"],
    "os_families": ["posix"], "isolation": "container",
    "limits": {"files_in": {"max_bytes_per_file": 1, "max_total_bytes": 2, "max_files": 3},
               "files_out": {"max_bytes_per_file": 4, "max_total_bytes": 5, "max_files": 6}},
    "wire": {"max_frame_bytes": 100663296},
}


class BackendSurface(ScriptedServer):
    async def serve_backend(self, calls: list[dict[str, Any]]) -> None:
        async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while True:
                req = await _read_request(r)
                calls.append(req)
                result = DESCRIBE if req["method"] == "daemon.describe" else None
                _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": result})
                await w.drain()

        await self.serve(script)

    def install_fake_maf_sandbox(self) -> Any:
        where = os.path.join(self.dir, "site")
        os.makedirs(os.path.join(where, "maf_sandbox"))
        Path(where, "maf_sandbox", "__init__.py").write_text(FAKE_MAF_SANDBOX)
        sys.path.insert(0, where)
        self.addCleanup(sys.path.remove, where)
        self.addCleanup(sys.modules.pop, "maf_sandbox", None)
        sys.modules.pop("maf_sandbox", None)
        import maf_sandbox  # type: ignore[import-not-found]
        return maf_sandbox

    async def test_builds_maf_sandboxs_own_declarations(self) -> None:
        ms = self.install_fake_maf_sandbox()
        calls: list[dict[str, Any]] = []
        await self.serve_backend(calls)
        plain = msb.DaemonSandboxBackend(socket_path=self.sock)
        self.addAsyncCleanup(plain.aclose)
        self.assertIs(type(plain.declarations), ms.BackendDeclarations)
        self.assertEqual(plain.declarations, ms.BackendDeclarations())
        self.assertIs(type(plain.isolation), ms.Isolation)
        self.assertIs(plain.isolation, ms.Isolation.CONTAINER)

        backend = await msb.DaemonSandboxBackend.create(self.sock)
        self.addAsyncCleanup(backend.aclose)
        d = backend.declarations
        self.assertIs(type(d), ms.BackendDeclarations)
        self.assertIs(type(d.limits), ms.SandboxLimits)
        self.assertIs(type(d.limits.files_in), ms.TransferLimits)
        self.assertEqual(d.limits.files_in, ms.TransferLimits(1, 2, 3))
        self.assertEqual(d.limits.files_out, ms.TransferLimits(4, 5, 6))
        # Its own enum members; a value it does not know is left out.
        self.assertEqual(d.capabilities, frozenset({ms.Capability.EXEC, ms.Capability.FILES_IN,
                                                    ms.Capability.FILES_OUT}))
        self.assertTrue(all(type(c) is ms.Capability for c in d.capabilities))
        self.assertEqual(d.egress_modes, frozenset({ms.Egress.CLOSED, ms.Egress.ALLOWLIST}))
        self.assertTrue(all(type(c) is ms.Egress for c in d.egress_modes))
        self.assertEqual(d.os_families, frozenset({ms.OsFamily.POSIX}))
        self.assertEqual(d.isolation_scopes, frozenset(ms.IsolationScope))
        self.assertFalse(d.observes_egress)

    async def test_without_maf_sandbox_the_local_classes(self) -> None:
        calls: list[dict[str, Any]] = []
        await self.serve_backend(calls)
        with mock.patch.dict(sys.modules, {"maf_sandbox": None}):  # import raises ImportError
            backend = await msb.DaemonSandboxBackend.create(self.sock)
            self.addAsyncCleanup(backend.aclose)
            self.assertIs(type(backend.declarations), msb.BackendDeclarations)
            self.assertIs(backend.isolation, msb.Isolation.CONTAINER)
        self.assertEqual(backend.declarations.limits.files_in, msb.TransferLimits(1, 2, 3))
        self.assertIn(msb.Capability.FILES_OUT, backend.declarations.capabilities)

    async def test_dispose_takes_instance_id(self) -> None:
        calls: list[dict[str, Any]] = []
        await self.serve_backend(calls)
        backend = msb.DaemonSandboxBackend(socket_path=self.sock)
        self.addAsyncCleanup(backend.aclose)
        key = msb.SandboxKey("s", "t", "a")
        self.assertIsNone(await backend.dispose(key, kind="k", instance_id="f" * 64))
        self.assertIsNone(await backend.dispose(key))
        self.assertEqual([c["params"] for c in calls if c["method"] == "sandbox.dispose"], [
            {"key": key.to_wire(), "kind": "k", "sandbox": "f" * 64}, {"key": key.to_wire()}])


# ---- the blocking client ------------------------------------------------------------------


class ThreadServer:
    """A scripted server on an event loop of its own thread (the blocking client's calls
    would block a test's own loop)."""

    def __init__(self, script: Script, path: str) -> None:
        self.script, self.path = script, path
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                await self.script(r, w)
            except ConnectionError:
                pass
            finally:
                w.close()

        server = await asyncio.start_unix_server(handler, path=self.path)
        self._ready.set()
        await self._stop.wait()
        server.close()

    def __enter__(self) -> ThreadServer:
        self._thread.start()
        self._ready.wait(30)  # hang guard
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)  # hang guard


def _echo_daemon() -> Script:
    """exec streams one chunk then answers; events.subscribe answers; anything else {}."""
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            req = await _read_request(r)
            if req["method"] == "sandbox.exec":
                _send(w, {"jsonrpc": "2.0", "method": "exec.output", "params": {
                    "id": req["id"], "stream": "stdout", "data_b64": "aGk="}})
                result: Any = {"exit_code": 0, "stdout_b64": "aGk=", "stderr_b64": ""}
            elif req["method"] == "events.subscribe":
                result = {"types": ["egress.decision"]}
            else:
                result = {}
            _send(w, {"jsonrpc": "2.0", "id": req["id"], "result": result})
            await w.drain()
    return script


class Blocking(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="msb-py-unit-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sock = os.path.join(self.dir, "s.sock")
        server = ThreadServer(_echo_daemon(), self.sock).__enter__()
        self.addCleanup(server.__exit__)

    def test_a_blocking_call_from_a_callback_raises(self) -> None:
        client = msb.connect(self.sock, timeout=10)
        self.addCleanup(client.close)
        sb = client.sandbox("0" * 64)
        seen: list[BaseException] = []

        def on_output(stream: str, data: bytes) -> None:
            try:
                client.status()
            except RuntimeError as exc:
                seen.append(exc)
                raise

        box: list[Any] = []

        def run() -> None:
            try:
                box.append(sb.exec("echo hi", on_output=on_output))
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                box.append(exc)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(30)  # hang guard
        self.assertFalse(t.is_alive(), "the blocking call from the callback deadlocked")
        self.assertEqual(len(seen), 1)
        self.assertIsInstance(box[0], RuntimeError)
        self.assertNotIsInstance(box[0], msb.SandboxError)
        self.assertEqual(client.status(), {})  # still usable

    def test_event_waits_ignore_the_client_timeout(self) -> None:
        with msb.connect(self.sock, timeout=0.2) as client:
            with client.events() as events:
                t0 = time.monotonic()
                # None (no ClientTimeout at the client's 0.2 s): the wait ran its own 0.6 s.
                self.assertIsNone(events.next(timeout=0.6))
                # not early (0.05: the loop's clock)
                self.assertGreater(time.monotonic() - t0, 0.55)

    def test_a_failed_client_leaves_no_thread(self) -> None:
        before = set(threading.enumerate())
        for kwargs in ({"bogus": 1}, {}):
            with self.assertRaises((TypeError, msb.DaemonUnavailable)):
                msb.connect(os.path.join(self.dir, "absent.sock"), **kwargs)
        self.assertEqual(set(threading.enumerate()) - before, set())

    def test_same_surface_as_the_async_client(self) -> None:
        with msb.connect(self.sock) as client:
            sb = client.sandbox("0" * 64)
            with client.events() as events:
                pairs = ((client.aio, client), (sb.aio, sb), (events.aio, events))
                for aio, sync in pairs:
                    for name, member in vars(type(aio)).items():
                        if name.startswith("_") or name in ("aclose", "start"):
                            continue
                        with self.subTest(cls=type(sync).__name__, name=name):
                            self.assertTrue(hasattr(sync, name), f"{type(sync).__name__}.{name}")
                            if callable(member):  # a method, never a coroutine function
                                self.assertFalse(inspect.iscoroutinefunction(getattr(sync, name)))
            for call in (lambda: sb.run_code("print(1)", timeout=5), lambda: sb.reset(timeout=5)):
                with self.assertRaises(NotImplementedError) as cm:
                    call()
                self.assertIsInstance(cm.exception, msb.SandboxNotServed)
            with self.assertRaises(AttributeError):
                sb.nonexistent  # noqa: B018
            self.assertEqual(sb.instance_id, "0" * 64)
            self.assertTrue(client.connected)
            self.assertEqual(client.max_frame_bytes, msb.DEFAULT_MAX_FRAME_BYTES)


class SandboxReferences(unittest.TestCase):
    """``await client.sandbox(ref)``: full id, name, or a unique 12+ hex prefix."""

    @staticmethod
    def entries() -> list[msb.SandboxInfo]:
        def one(sid: str, name: str) -> msb.SandboxInfo:
            return msb.SandboxInfo.from_wire({"sandbox": sid, "name": name, "kind": "k",
                                              "key": {"scope": "s", "thread_id": "t",
                                                      "agent_dir": "a", "call_id": ""}})
        return [one("abcdef012345" + "0" * 52, "maf-sandbox-docker-aaaa"),
                one("abcdef012346" + "1" * 52, "maf-sandbox-docker-bbbb"),
                one("abcdef0123467" + "2" * 51, "maf-sandbox-docker-cccc")]

    def test_full_id_name_and_prefix(self) -> None:
        from maf_sandbox_client.client import _match_sandbox
        e = self.entries()
        self.assertIs(_match_sandbox(e[0].sandbox, e), e[0])
        self.assertIs(_match_sandbox("maf-sandbox-docker-bbbb", e), e[1])
        self.assertIs(_match_sandbox("abcdef012345", e), e[0])
        self.assertIs(_match_sandbox("abcdef0123461", e), e[1])

    def test_case_and_slash_as_the_daemon_takes_them(self) -> None:
        from maf_sandbox_client.client import _match_sandbox
        e = self.entries()
        self.assertIs(_match_sandbox(e[0].sandbox.upper(), e), e[0])
        self.assertIs(_match_sandbox("ABCDEF012345", e), e[0])
        self.assertIs(_match_sandbox("/maf-sandbox-docker-bbbb", e), e[1])

    def test_unknown_ambiguous_and_short(self) -> None:
        from maf_sandbox_client.client import _match_sandbox
        e = self.entries()
        with self.assertRaises(msb.SandboxNotFound) as nf:
            _match_sandbox("nothere", e)
        self.assertIn("nothere", str(nf.exception))
        with self.assertRaises(msb.InvalidParams) as amb:
            _match_sandbox("abcdef012346", e)
        self.assertIn("ambiguous", str(amb.exception))
        self.assertEqual(sorted(amb.exception.data["candidates"]),
                         sorted([e[1].sandbox, e[2].sandbox]))
        with self.assertRaises(msb.InvalidParams) as short:
            _match_sandbox("abcdef", e)
        self.assertIn("at least 12", str(short.exception))
        with self.assertRaises(msb.SandboxNotFound):
            _match_sandbox("ffffffffffff", e)

    def test_mode_is_checked_client_side(self) -> None:
        from maf_sandbox_client.client import _mode
        self.assertEqual(_mode(0o755, "mode"), 0o755)
        self.assertIsNone(_mode(None, "mode"))
        for bad in (0o4755, 0o1777, -1, True, "755", 0o1000):
            with self.assertRaises(msb.InvalidParams):
                _mode(bad, "mode")  # type: ignore[arg-type]


if __name__ == "__main__":
    unittest.main()
