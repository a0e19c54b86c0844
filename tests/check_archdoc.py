#!/usr/bin/env python3
"""check_archdoc.py — doc/ARCHITECTURE.md names only what exists.

Every file the page names (a word ending .c, .h, .md, .py, .sh, .txt, .scd or
.build, with or without its folder) must be in the tree: with a folder, at
that path; without one, somewhere in the checked folders. Every folder it
names in backquotes (`domain/files/`) must exist: at that path, or as the
last part of a folder's path (`unit/` for tests/unit/). A name it is unsure of,
marked "(?)", fails too, and so does a C name it gives (`fileop_enter`,
`acq_enter(...)`: a word with an underscore, in backquotes or before a
parenthesis) that no .c or .h file of the tree has: the page describes
the code as it is.

  check_archdoc.py SOURCE_ROOT           check the tree's page
  check_archdoc.py --self-test           run the checker on fixture trees
"""
import os
import re
import subprocess
import sys
import tempfile

DOC = os.path.join("doc", "ARCHITECTURE.md")
FILE_RE = re.compile(r"(?<![\w/.\"-])((?:[\w.-]+/)*[\w-]+\.(?:c|h|md|py|sh|txt|scd|build))(?![\w/-])")
DIR_RE = re.compile(r"`((?:[\w.-]+/)+)`")
IDENT_RE = re.compile(r"`([a-z][a-z0-9]*_[a-z0-9_]+)`|\b([a-z][a-z0-9]*_[a-z0-9_]+)\(")
SKIP_DIRS = {".git", "obj", "venv"}


def tree_files(root):
    """Every file under root (build trees and .git left out), as relative paths."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")
                   and not x.startswith("obj-") and not x.startswith(".")
                   and not os.path.exists(os.path.join(d, x, "meson-private"))]
        for f in files:
            out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def check(root):
    path = os.path.join(root, DOC)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        print(f"{DOC}: cannot read: {e.strerror}")
        return 1
    files = tree_files(root)
    names = {os.path.basename(f) for f in files}
    dirs = {os.path.dirname(f) for f in files}
    words = set()
    for f in files:
        if f.endswith((".c", ".h")):
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as src:
                words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", src.read()))
    dir_tails = {"/".join(d.split("/")[i:]) + "/" for d in dirs for i in range(len(d.split("/")))}
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        if "(?)" in line:
            problems.append(f"{DOC}:{n}: a name marked unsure, (?): say what the code has")
        for m in FILE_RE.finditer(line):
            name = m.group(1)
            if name.startswith("http") or name.startswith("."):
                continue
            if "/" in name:
                if not os.path.isfile(os.path.join(root, name)):
                    problems.append(f"{DOC}:{n}: names {name}, which is not in the tree")
            elif name not in names:
                problems.append(f"{DOC}:{n}: names {name}, which no folder holds")
        for m in IDENT_RE.finditer(line):
            name = m.group(1) or m.group(2)
            if name not in words:
                problems.append(f"{DOC}:{n}: names {name}, which no .c or .h file has")
        for m in DIR_RE.finditer(line):
            name = m.group(1)
            if not os.path.isdir(os.path.join(root, name)) and name not in dir_tails:
                problems.append(f"{DOC}:{n}: names the folder {name}, which is not in the tree")
    for p in problems:
        print(p)
    if problems:
        print(f"archdoc: {len(problems)} problem(s): doc/ARCHITECTURE.md must describe the code as it is")
        return 1
    print(f"archdoc: {DOC}: every file, folder and C name it gives is in the tree")
    return 0


def self_test():
    cases = [
        ("clean", "domain/files/fileop.c names `domain/files/` and fileop.h\n", 0, "is in the tree"),
        ("missing path", "see domain/dispose.c\n", 1, "names domain/dispose.c, which is not in the tree"),
        ("missing name", "see follower.c\n", 1, "names follower.c, which no folder holds"),
        ("missing dir", "see `domain/net/`\n", 1, "names the folder domain/net/, which is not in the tree"),
        ("unsure", "fileop.c (?)\n", 1, "marked unsure"),
        ("missing function", "`fileop_enter` calls fop_gone()\n", 1, "names fop_gone, which no .c or .h file has"),
    ]
    failed = 0
    for name, doc, want_rc, want in cases:
        with tempfile.TemporaryDirectory() as t:
            os.makedirs(os.path.join(t, "doc"))
            os.makedirs(os.path.join(t, "domain", "files"))
            for f in ("fileop.c", "fileop.h"):
                with open(os.path.join(t, "domain", "files", f), "w") as src:
                    src.write("void fileop_enter(void);\n")
            with open(os.path.join(t, DOC), "w") as f:
                f.write(doc)
            r = subprocess.run([sys.executable, __file__, t], capture_output=True, text=True)
            if r.returncode != want_rc or want not in r.stdout:
                print(f"self-test {name}: exit {r.returncode} (want {want_rc}), output:\n{r.stdout}")
                failed += 1
    print(f"archdoc self-test: {len(cases) - failed} of {len(cases)} cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-2:], file=sys.stderr)
        sys.exit(2)
    sys.exit(check(sys.argv[1]))
