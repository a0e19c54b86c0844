#!/usr/bin/env python3
"""tests/check_windows.py — no wall-clock window asserted in the tests (doc/TESTING.md).

Every assertion that compares a clock (now_ms(), a monotonic time, an elapsed or waited
count of milliseconds) must be a hang guard or a lower bound that is the behaviour: it says
`hang guard` or `not early` in a comment on its line or the two lines above, or it compares
against a name (a constant, a deadline variable) whose definition says so. Prints each
assertion that does neither and exits 1; with --list, prints every tagged bound instead.

  check_windows.py ROOT [--list]
"""
import os
import re
import sys

TAGS = ("hang guard", "not early")
# The one upper bound left that is the behaviour itself, not a hang guard: a frame's
# deadline runs from its first byte (a deadline renewed as the daemon reads on would
# close the connection a whole frame timeout later), with 3 s of slack on 8 s.
EXCEPTIONS = {("tests/integration/hostile/hostile_server.c", "FAIR_DEADLINE_SLACK_MS")}
SOURCES = ("tests/unit", "tests/integration", "tests/integration/hostile", "tests/readme",
           "contrib/python/tests", "contrib/python-backend/tests")
CLOCK = re.compile(r"now_ms\(\)|now_us\(\)|fair_now_ms\(\)|monotonic\(\)|\.time\(\)|"
                   r"\belapsed\w*|\bwaited\w*|\btook\w*|_ms\s*[<>]=?\s*(?!0\b)\w|[<>]=?\s*\w*_MS\b")
ASSERT_C = re.compile(r"\b(ck_assert\w*|ck_abort_msg|assert)\s*\(")
ASSERT_PY = re.compile(r"\bself\.assert(Less|Greater|LessEqual|GreaterEqual|True|False)\(|\bassert\s")
DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)|^\s*(?:[\w\s\*]+\s)?\**(\w+)\s*=(?!=)")
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def tagged(lines, i, above=2):
    return any(t in l for l in lines[max(0, i - above):i + 1] for t in TAGS)


def statement(lines, i):
    """The assertion starting on line i, to its closing parenthesis (at most 6 lines)."""
    text, depth = "", 0
    for l in lines[i:i + 6]:
        text += l + "\n"
        depth += l.count("(") - l.count(")")
        if depth <= 0:
            break
    return text


def assigned_guarded(lines, i, ident, guarded):
    """ident's last assignment before line i (within 120 lines) is tagged or made of a
    guarded name (a deadline computed from a hang-guard constant)."""
    assign = re.compile(r"\b%s\s*(\+|-)?=(?!=)" % re.escape(ident))
    for j in range(i - 1, max(-1, i - 120), -1):
        if assign.search(lines[j]):
            return tagged(lines, j, 1) or bool(guarded & set(IDENT.findall(lines[j].split("=", 1)[1])))
    return False


def check_file(path, rel):
    lines = open(path, encoding="utf-8").read().split("\n")
    guarded = set()
    for i, l in enumerate(lines):
        m = DEFINE.match(l)
        if m and tagged(lines, i, 1):
            guarded.add(m.group(1) or m.group(2))
    bad, good = [], []
    assertion = ASSERT_PY if path.endswith(".py") else ASSERT_C
    for i, l in enumerate(lines):
        if not assertion.search(l):
            continue
        stmt = statement(lines, i)
        # The condition: up to the message (the first string literal).
        cond = re.split(r'"|\'', stmt, 1)[0]
        if not CLOCK.search(cond):
            continue
        idents = set(IDENT.findall(cond))
        if (tagged(lines, i) or any(t in stmt for t in TAGS) or guarded & idents or
                any((rel, x) in EXCEPTIONS for x in idents) or
                any(assigned_guarded(lines, i, x, guarded) for x in idents)):
            good.append((i + 1, l.strip()))
        else:
            bad.append((i + 1, l.strip()))
    return bad, good


def main(argv):
    root, listing = argv[1], "--list" in argv[2:]
    bad_all = 0
    for d in SOURCES:
        base = os.path.join(root, d)
        for name in sorted(os.listdir(base)):
            if not name.endswith((".c", ".py")):
                continue
            path = os.path.join(base, name)
            bad, good = check_file(path, os.path.join(d, name))
            for n, text in (good if listing else bad):
                print(f"{os.path.join(d, name)}:{n}: {text[:120]}")
            bad_all += len(bad)
    if not listing and bad_all:
        print(f"{bad_all} clock comparison(s) asserted with no `hang guard` or `not early` "
              "(doc/TESTING.md, Hang guards)")
    return 1 if bad_all and not listing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
