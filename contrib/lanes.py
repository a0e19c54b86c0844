#!/usr/bin/env python3
"""contrib/lanes.py — what each CI lane ran, against what it must run (tests/lanes.txt).

    contrib/lanes.py check MANIFEST [--failures FILE] LANE=LOG[,LOG...] ...

Reads each lane's logs: meson's JSON test logs (DIR/meson-logs/BASE.json, one JSON object a
line) and verdict files (any other name: one line per test, "NAME ok" or "NAME failed", as
tests/fuzz/run.sh writes). Counts, per lane, the tests passed, failed and skipped. A skip is
a test meson reports as SKIP (exit 77), or a line

    MSB-SKIP: <test id>: <reason>

in a test's output: a test skipped inside the program (tests/pyunit.py prints one per Python
unittest skip), named <meson test>::<test id>. Then checks the lanes against MANIFEST, whose
lines (# starts a comment) are

    LANE  TEST  run                    TEST must be in LANE's logs, and must not skip
    LANE  TEST  may-skip  REASON       TEST must be in LANE's logs; it may skip (REASON why)

(TEST is a meson test's name, a verdict file's name, or <meson test>::<test id> for a skip
inside a program, whose meson test must then be in the lane). A problem, each named on its
own line: a required test absent from its lane's logs (a suite removed from a lane, or a lane
that did not run), a skip the manifest does not allow, a test a lane ran that the manifest
does not name (the manifest kept complete), a lane with no line in the manifest, a lane of
the manifest not given.

Prints the failed tests (the end of each one's output; also appended to FILE), every skip
with its reason, one line per lane, then the problems and a last line

    summary: P passed, F failed, S skipped (A allowed), N manifest problem(s)

Exits 0 when nothing failed and there is no problem, 1 otherwise, 2 on a usage or
manifest error. Python's standard library only; tests/check_lanes.py tests it.
"""
import json
import os
import re
import sys

EXPECTS = ("run", "may-skip")
PASSED = ("OK", "EXPECTEDFAIL")
SKIPPED = ("SKIP",)
SKIP_LINE = re.compile(r"MSB-SKIP: (.+?): (.*)$")
TAIL_LINES = 30


class ManifestError(Exception):
    pass


def read_manifest(path):
    """{lane: {test: (expect, reason, line number)}}; ManifestError on a bad line."""
    lanes = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split(None, 3)
            where = f"{path}:{number}"
            if len(fields) < 3 or fields[2] not in EXPECTS:
                raise ManifestError(f"{where}: want 'LANE TEST run' or 'LANE TEST may-skip REASON'")
            lane, test, expect = fields[:3]
            reason = fields[3] if len(fields) > 3 else ""
            if expect == "may-skip" and not reason:
                raise ManifestError(f"{where}: a may-skip line says why (its REASON)")
            if expect == "run" and reason:
                raise ManifestError(f"{where}: a run line has no REASON (did you mean may-skip?)")
            tests = lanes.setdefault(lane, {})
            if test in tests:
                raise ManifestError(f"{where}: {lane} {test} is listed twice "
                                    f"(first on line {tests[test][2]})")
            tests[test] = (expect, reason, number)
    for lane, tests in lanes.items():
        for test, (_, _, number) in tests.items():
            parent = test.split("::", 1)[0]
            if "::" in test and parent not in tests:
                raise ManifestError(f"{path}:{number}: {test}: its meson test {parent} has no "
                                    f"line in lane {lane}")
    return lanes


def read_log(path):
    """[(name, result, output)] of one log; None when the file is not there."""
    if not os.path.exists(path):
        return None
    runs = []
    with open(path, encoding="utf-8", errors="replace") as f:
        if path.endswith(".json"):
            for line in f:
                if not line.strip():
                    continue
                t = json.loads(line)
                output = (t.get("stdout") or "") + (t.get("stderr") or "")
                # "PROJECT:SUITE+SUITE / NAME": the test's own name is the last part
                name = (t.get("name") or "").rsplit(" / ", 1)[-1]
                runs.append((name, t.get("result"), output))
        else:
            for line in f:
                fields = line.split()
                if len(fields) == 2:
                    runs.append((fields[0], "OK" if fields[1] == "ok" else "FAIL", ""))
    return runs


def inner_skips(output):
    """[(test id, reason)] of the MSB-SKIP lines in a test's output."""
    found = []
    for line in output.splitlines():
        m = SKIP_LINE.search(line)
        if m:
            found.append((m.group(1).strip(), m.group(2).strip()))
    return found


def check(manifest, lane_logs, failures=None, out=sys.stdout):
    """lane_logs: [(lane, [log path...])]. Prints the report; returns the exit status."""
    def say(text=""):
        out.write(text + "\n")

    totals = {"passed": 0, "failed": 0, "skipped": 0, "allowed": 0}
    problems = []
    failed_text = []
    skip_lines = []
    lane_lines = []

    def record_skip(name, why, entry, not_allowed):
        """A skip of name (why: its reason, if any): allowed by entry, or a problem."""
        if entry and entry[0] == "may-skip":
            totals["allowed"] += 1
            skip_lines.append(f"{lane}: {name} skipped{why}; allowed: {entry[1]}")
        else:
            skip_lines.append(f"{lane}: {name} skipped{why}; NOT allowed")
            problems.append(not_allowed)

    for lane, logs in lane_logs:
        want = manifest.get(lane)
        if want is None:
            problems.append(f"{lane}: no line in the manifest names this lane")
            want = {}
        seen = set()
        passed = failed = skipped = 0
        missing_logs = []
        for log in logs:
            runs = read_log(log)
            if runs is None:
                missing_logs.append(log)
                continue
            for name, result, output in runs:
                seen.add(name)
                entry = want.get(name)
                if entry is None:
                    problems.append(f"{lane}: {name} ran, and the manifest has no line "
                                    f"'{lane} {name} run' for it")
                if result in PASSED:
                    passed += 1
                elif result in SKIPPED:
                    skipped += 1
                    record_skip(name, "", entry, f"{lane}: {name} skipped, and the manifest "
                                f"allows no skip of it")
                else:
                    failed += 1
                    tail = output.splitlines()[-TAIL_LINES:]
                    failed_text.append(f"---- {lane}: {name} ({os.path.basename(log)}, {result})")
                    failed_text.extend(tail)
                for test_id, reason in inner_skips(output):
                    inner = f"{name}::{test_id}"
                    skipped += 1
                    record_skip(inner, f" ({reason})", want.get(inner),
                                f"{lane}: {inner} skipped inside {name} ({reason}), and the "
                                f"manifest allows no skip of it")
        for log in missing_logs:
            problems.append(f"{lane}: no log {log} (the lane did not run, or not to its end)")
        absent = [(test, expect, number)
                  for test, (expect, _, number) in sorted(want.items(), key=lambda kv: kv[1][2])
                  if test.split("::", 1)[0] not in seen]
        if absent and not seen:
            problems.append(f"{lane}: none of its {len(absent)} tests in the manifest ran")
        else:
            for test, expect, number in absent:
                problems.append(f"{lane}: {test} is not in the lane's logs, and the manifest (line "
                                f"{number}) says it {'must run' if expect == 'run' else 'runs (it may skip)'}")
        totals["passed"] += passed
        totals["failed"] += failed
        totals["skipped"] += skipped
        lane_lines.append(f"{lane}: {passed} passed, {failed} failed, {skipped} skipped")
    checked = {lane for lane, _ in lane_logs}
    for lane in manifest:
        if lane not in checked:
            problems.append(f"{lane}: a lane of the manifest, not checked (its logs were not "
                            f"given: did the lane stop running?)")
    if failed_text:
        say("==== failed tests (the end of each one's output)")
        for line in failed_text:
            say(line)
        if failures:
            with open(failures, "a", encoding="utf-8") as f:
                f.write("\n".join(failed_text) + "\n")
    if skip_lines:
        say("==== skipped tests")
        for line in skip_lines:
            say(line)
    say("==== lanes")
    for line in lane_lines:
        say(line)
    if problems:
        say("==== manifest problems (tests/lanes.txt, doc/TESTING.md)")
        for line in problems:
            say(line)
    say(f"summary: {totals['passed']} passed, {totals['failed']} failed, "
        f"{totals['skipped']} skipped ({totals['allowed']} allowed), "
        f"{len(problems)} manifest problem{'' if len(problems) == 1 else 's'}")
    return 0 if totals["failed"] == 0 and not problems else 1


def main(argv):
    usage = "usage: contrib/lanes.py check MANIFEST [--failures FILE] LANE=LOG[,LOG...] ..."
    if len(argv) < 3 or argv[1] != "check":
        sys.stderr.write(usage + "\n")
        return 2
    manifest_path = argv[2]
    args = argv[3:]
    failures = None
    if args[:1] == ["--failures"]:
        if len(args) < 2:
            sys.stderr.write(usage + "\n")
            return 2
        failures = args[1]
        args = args[2:]
    lane_logs = []
    for arg in args:
        lane, eq, logs = arg.partition("=")
        if not eq or not lane or not logs:
            sys.stderr.write(f"contrib/lanes.py: {arg!r} is not LANE=LOG[,LOG...]\n{usage}\n")
            return 2
        lane_logs.append((lane, logs.split(",")))
    try:
        manifest = read_manifest(manifest_path)
    except (OSError, ManifestError) as e:
        sys.stderr.write(f"contrib/lanes.py: {e}\n")
        return 2
    return check(manifest, lane_logs, failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
