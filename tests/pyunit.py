#!/usr/bin/env python3
"""pyunit.py [--cd DIR] UNITTEST-ARGS... — `python -m unittest UNITTEST-ARGS...` (from DIR when
given, else from the current directory, first on sys.path as with -m), which also prints, for
each test skipped (skipTest, @skip, SkipTest in a setUpModule or setUpClass), one line on
stdout:

    MSB-SKIP: <test id>: <reason>

contrib/lanes.py counts these lines as skips of the meson test that ran this (named
<meson test>::<test id>) and fails CI on one tests/lanes.txt does not allow (doc/TESTING.md).
The Python suites run through it (contrib/python/meson.build, contrib/python-backend/meson.build),
so a skip inside them is no longer a pass. Standard library only (Python 3.11 to 3.14)."""
import os
import sys
import unittest


def one_line(text):
    return " ".join(str(text).split())


class Result(unittest.TextTestResult):
    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        # "<id>: <reason>" is split at the first ": ", and tests/lanes.txt
        # splits its lines at white space: neither in the id (a module's or a
        # subTest's id has spaces: "setUpModule (test_egress)", "t.A.c (i=1)").
        test_id = "".join(one_line(test.id()).split()).replace(": ", ":")
        sys.stdout.write(f"MSB-SKIP: {test_id}: {one_line(reason)}\n")
        sys.stdout.flush()


class Runner(unittest.TextTestRunner):
    resultclass = Result


def main(args):
    if args[:1] == ["--cd"]:
        if len(args) < 2:
            sys.exit("pyunit.py: --cd needs a directory")
        os.chdir(args[1])
        args = args[2:]
    # As python -m unittest: the current directory first, not this script's.
    sys.path[0] = os.getcwd()
    unittest.main(module=None, argv=["python -m unittest"] + args, testRunner=Runner)


if __name__ == "__main__":
    main(sys.argv[1:])
