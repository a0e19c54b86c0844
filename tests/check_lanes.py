#!/usr/bin/env python3
"""check_lanes.py SOURCE_ROOT BUILD_DIR — contrib/lanes.py, the check CI's summary rests on,
against fake lanes; and tests/lanes.txt against this build.

Each case writes a small manifest and fake meson JSON logs (one object a line, as meson test
writes them) and fuzz-style verdict files, runs contrib/lanes.py check on them, and asserts its
exit status and the lines it prints: a clean run passes; a required test missing from its
lane's log (a suite removed from a lane), a skip the manifest does not allow (meson's SKIP, or
an MSB-SKIP line inside a program), an allowed skip whose test did not run, a test the manifest
does not name, a lane not checked, and a failed test each fail it. Then tests/lanes.txt must
parse, and every test this build defines in the unit, packaging and integration suites must be
named by some lane there (a new test not yet given a lane fails here, long before CI's end).
Standard library only; suite 'packaging' (no engine)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = BUILD = ""


def lanes_py():
    return os.path.join(SOURCE, "contrib", "lanes.py")


class Fake:
    """A directory of fake logs and a manifest."""

    def __init__(self, tmp):
        self.tmp = tmp

    def manifest(self, text):
        path = os.path.join(self.tmp, "lanes.txt")
        with open(path, "w") as f:
            f.write(text)
        return path

    def meson_log(self, name, tests):
        """tests: [(name, result, stdout)]"""
        path = os.path.join(self.tmp, name + ".json")
        with open(path, "w") as f:
            for test, result, stdout in tests:
                f.write(json.dumps({"name": f"maf-sandbox:unit+density / {test}",
                                    "project": "maf-sandbox", "result": result,
                                    "suite": ["maf-sandbox:unit"], "duration": 0.1,
                                    "returncode": 77 if result == "SKIP" else 0,
                                    "stdout": stdout, "command": [test]}) + "\n")
        return path

    def verdicts(self, name, lines):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        return path


MANIFEST = """\
# a comment
unit      frame         run
unit      plane_local   run
unit      python        run
unit      python::t.A.test_x   may-skip  the archive plane has no files_list
slow      frame         run
slow      plane_local   may-skip  valgrind 3.19 has no openat2
fuzz      frame         run
"""


class Check(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.fake = Fake(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def run_check(self, manifest, lanes):
        p = subprocess.run([sys.executable, lanes_py(), "check", manifest] +
                           [f"{lane}={','.join(logs)}" for lane, logs in lanes],
                           capture_output=True, text=True, timeout=60)  # hang guard
        return p.returncode, p.stdout, p.stderr

    def good_lanes(self, unit=None, slow=None, fuzz=None):
        f = self.fake
        unit = unit if unit is not None else [
            ("frame", "OK", ""), ("plane_local", "OK", ""), ("python", "OK", "")]
        slow = slow if slow is not None else [("frame", "OK", ""), ("plane_local", "SKIP", "")]
        fuzz = fuzz if fuzz is not None else ["frame ok"]
        return [("unit", [f.meson_log("unit", unit)]),
                ("slow", [f.meson_log("slow", slow)]),
                ("fuzz", [f.verdicts("results", fuzz)])]

    def assert_problem(self, rc, out, *words):
        self.assertEqual(rc, 1, out)
        problems = out.split("==== manifest problems", 1)
        self.assertEqual(len(problems), 2, out)
        for w in words:
            self.assertIn(w, problems[1], out)

    def last_line(self, out):
        return out.strip().splitlines()[-1]

    def test_clean_run_passes_and_counts_each_lane(self):
        rc, out, err = self.run_check(self.fake.manifest(MANIFEST), self.good_lanes())
        self.assertEqual(rc, 0, out + err)
        self.assertIn("unit: 3 passed, 0 failed, 0 skipped\n", out)
        self.assertIn("slow: 1 passed, 0 failed, 1 skipped\n", out)
        self.assertIn("fuzz: 1 passed, 0 failed, 0 skipped\n", out)
        self.assertIn("slow: plane_local skipped; allowed: valgrind 3.19 has no openat2", out)
        self.assertNotIn("==== manifest problems", out)
        self.assertEqual(self.last_line(out),
                         "summary: 5 passed, 0 failed, 1 skipped (1 allowed), 0 manifest problems")

    def test_required_test_missing_from_its_lane_fails(self):
        lanes = self.good_lanes(unit=[("frame", "OK", ""), ("python", "OK", "")])
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), lanes)
        self.assert_problem(rc, out, "unit: plane_local is not in the lane's logs")
        self.assertTrue(self.last_line(out).endswith("1 manifest problem"), out)

    def test_unlisted_skip_fails(self):
        lanes = self.good_lanes(unit=[("frame", "SKIP", ""), ("plane_local", "OK", ""),
                                      ("python", "OK", "")])
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), lanes)
        self.assert_problem(rc, out, "unit: frame skipped, and the manifest allows no skip")
        self.assertIn("unit: 2 passed, 0 failed, 1 skipped", out)
        self.assertIn("2 skipped (1 allowed), 1 manifest problem", self.last_line(out))

    def test_skip_allowed_in_one_lane_only(self):
        lanes = self.good_lanes(unit=[("frame", "OK", ""), ("plane_local", "SKIP", ""),
                                      ("python", "OK", "")])
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), lanes)
        self.assert_problem(rc, out, "unit: plane_local skipped")

    def test_allowed_skip_whose_test_is_missing_fails(self):
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST),
                                    self.good_lanes(slow=[("frame", "OK", "")]))
        self.assert_problem(rc, out, "slow: plane_local is not in the lane's logs")

    def test_skip_inside_a_program(self):
        allowed = "noise\nMSB-SKIP: t.A.test_x: the daemon's plane: archive\n"
        lanes = self.good_lanes(unit=[("frame", "OK", ""), ("plane_local", "OK", ""),
                                      ("python", "OK", allowed)])
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), lanes)
        self.assertEqual(rc, 0, out)
        self.assertIn("unit: 3 passed, 0 failed, 1 skipped", out)
        self.assertIn("unit: python::t.A.test_x skipped (the daemon's plane: archive); allowed: "
                      "the archive plane has no files_list", out)
        unlisted = "MSB-SKIP: t.B.test_y (i=1): no reason\n"
        lanes = self.good_lanes(unit=[("frame", "OK", ""), ("plane_local", "OK", ""),
                                      ("python", "OK", unlisted)])
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), lanes)
        self.assert_problem(rc, out, "unit: python::t.B.test_y (i=1) skipped inside python")

    def test_test_not_in_the_manifest_fails(self):
        lanes = self.good_lanes(fuzz=["frame ok", "tarball ok"])
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), lanes)
        self.assert_problem(rc, out, "fuzz: tarball ran, and the manifest has no line")

    def test_lane_not_checked_or_without_log_fails(self):
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), self.good_lanes()[:2])
        self.assert_problem(rc, out, "fuzz: a lane of the manifest, not checked")
        lanes = self.good_lanes()
        lanes[2] = ("fuzz", [os.path.join(self.fake.tmp, "absent")])
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), lanes)
        self.assert_problem(rc, out, "fuzz: no log", "fuzz: none of its 1 tests")

    def test_failed_test_fails_and_shows_its_output(self):
        lanes = self.good_lanes(unit=[("frame", "FAIL", "line one\nthe assertion\n"),
                                      ("plane_local", "TIMEOUT", ""), ("python", "OK", "")])
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), lanes)
        self.assertEqual(rc, 1, out)
        self.assertIn("---- unit: frame (unit.json, FAIL)\nline one\nthe assertion\n", out)
        self.assertIn("unit: 1 passed, 2 failed, 0 skipped", out)
        self.assertEqual(self.last_line(out),
                         "summary: 3 passed, 2 failed, 1 skipped (1 allowed), 0 manifest problems")
        lanes = self.good_lanes(fuzz=["frame failed"])
        rc, out, _ = self.run_check(self.fake.manifest(MANIFEST), lanes)
        self.assertEqual(rc, 1, out)
        self.assertIn("fuzz: 0 passed, 1 failed, 0 skipped", out)

    def test_bad_manifest_lines_are_refused(self):
        for text in ("unit frame maybe\n", "unit frame may-skip\n", "unit frame run because\n",
                     "unit frame run\nunit frame run\n", "unit x::y may-skip why\n"):
            rc, _, err = self.run_check(self.fake.manifest(text), self.good_lanes())
            self.assertEqual(rc, 2, text)
            self.assertIn("lanes.txt:", err)


class Manifest(unittest.TestCase):
    """tests/lanes.txt against this build's tests."""

    def test_every_test_of_this_build_has_a_lane(self):
        sys.path.insert(0, os.path.join(SOURCE, "contrib"))
        import lanes
        manifest = lanes.read_manifest(os.path.join(SOURCE, "tests", "lanes.txt"))
        named = {test.split("::", 1)[0] for tests in manifest.values() for test in tests}
        with open(os.path.join(BUILD, "meson-info", "intro-tests.json")) as f:
            defined = json.load(f)
        suites = {"unit", "packaging", "integration"}
        missing = sorted({t["name"] for t in defined
                          if suites & {s.split(":")[-1] for s in t["suite"]}} - named)
        self.assertEqual(missing, [], "tests/lanes.txt names no lane for these tests: add a line "
                         "per lane that must run each (doc/TESTING.md)")


if __name__ == "__main__":
    SOURCE, BUILD = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1] + ["-v"])
