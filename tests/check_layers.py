#!/usr/bin/env python3
"""tests/check_layers.py — the source tree's layers and its module graph (doc/TESTING.md, Layers).

Reads every quoted include (`#include "..."`) of every .c and .h file under ROOT (angle
includes are the system's), resolves it to a file of the tree, and fails on:
  - an include it cannot resolve, or that names two files of the tree (file:line);
  - a file in no layer (its folder is in no row of LAYERS below);
  - an include that crosses a layer the wrong way:
        domain/files/fileop.c:12: includes daemon/server.h: domain may include only domain, engine, util, proto
  - a cycle of modules (a module is a folder and a file stem: foo.c and foo.h in one folder
    are one; A → B when a file of A includes a header of B), one cycle printed per tangle:
        cycle: daemon/rpc → daemon/server → daemon/rpc
Prints every problem, then exits 1; with none, prints one line and exits 0.
tests/, contrib/ and the other folders of SKIP_TOP, and meson build trees, are not checked.

  check_layers.py ROOT          check the tree at ROOT
  check_layers.py --self-test   run the checker on fixture trees and check what it says
Standard library only; suite 'packaging' (no engine, no build needed)."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

# The layers, innermost first: name → (the folders it owns, the layers its files may
# include). A file belongs to the layer owning the longest folder that holds it, so a
# subfolder can be made a layer of its own (e.g. "domain/files") by adding a row.
LAYERS = {
    "proto": (["proto"], ["proto"]),
    "util": (["util"], ["util", "proto"]),
    "engine": (["engine"], ["engine", "util", "proto"]),
    "domain": (["domain"], ["domain", "engine", "util", "proto"]),
    "egress-proxy": (["egress-proxy"], ["egress-proxy", "proto"]),
    "daemon": (["daemon"], ["daemon", "domain", "engine", "util", "proto"]),
    "client": (["client"], ["client", "proto"]),
}
# Top-level folders not checked: the tests and the tools may include anything.
SKIP_TOP = ("tests", "contrib", "packaging", "debian", "doc")
# Headers made at build time (meson configure_file), includable from anywhere.
GENERATED = {"msb-build.h"}
SOURCE_EXT = (".c", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def skipped_dir(root, rel_dir, name):
    """A folder the walk does not enter: hidden ones and meson build trees anywhere (the
    package build's is obj-<triplet>/, with meson's own .c files in it); at the top, build*
    and SKIP_TOP."""
    if name.startswith(".") or os.path.isdir(os.path.join(root, rel_dir, name, "meson-private")):
        return True
    return rel_dir == "" and (name.startswith("build") or name in SKIP_TOP)


def walk(root):
    """Every checked .c and .h file, as a path relative to root with '/' separators."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        dirnames[:] = sorted(d for d in dirnames if not skipped_dir(root, rel_dir, d))
        for name in sorted(filenames):
            if name.endswith(SOURCE_EXT):
                files.append(f"{rel_dir}/{name}" if rel_dir else name)
    return files


def layer_of(rel):
    """The layer owning the file at rel (the longest owning folder), or None."""
    best, best_len = None, -1
    for layer, (folders, _) in LAYERS.items():
        for folder in folders:
            folder = folder.strip("/")
            if rel.startswith(folder + "/") and len(folder) > best_len:
                best, best_len = layer, len(folder)
    return best


def module_of(rel):
    """A module: the folder and the file's stem (foo.c and foo.h in one folder are one)."""
    return os.path.splitext(rel)[0]


def resolve(root, rel, target, index, by_suffix):
    """(resolved path or None, problem or None) for an include of target in file rel.

    First relative to the including file's folder, as the compiler does; else any checked
    file whose path ends with target (for "foo.h", its basename), which must be one."""
    here = os.path.dirname(rel)
    near = os.path.normpath(os.path.join(here, target)).replace(os.sep, "/")
    if near in index:
        return near, None
    if not near.startswith("../") and os.path.isfile(os.path.join(root, near)):
        return None, (f'includes "{target}", which is {near}, outside the checked folders: '
                      "production code includes only production code")
    tail = "/".join(p for p in target.split("/") if p not in ("", ".", ".."))
    found = by_suffix.get(tail, [])
    if len(found) == 1:
        return found[0], None
    if not found:
        return None, (f'includes "{target}": no such file in the checked tree (neither beside '
                      f"{rel} nor anywhere by that name); fix the name, or, if the build makes "
                      "it, add it to GENERATED in tests/check_layers.py")
    return None, (f'includes "{target}": ambiguous, {len(found)} files have that name '
                  f"({', '.join(found)}); include it by a path that names one, or rename one")


def suffix_index(files):
    """Every trailing part of every path ("a/b/c.h" → "c.h", "b/c.h", "a/b/c.h") → paths."""
    index = {}
    for rel in files:
        parts = rel.split("/")
        for i in range(len(parts)):
            index.setdefault("/".join(parts[i:]), []).append(rel)
    return index


def read_includes(path):
    """[(line number, quoted include)] of the file at path."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                out.append((n, m.group(1)))
    return out


def sccs(graph):
    """The strongly connected components of graph (node → set of nodes), Tarjan's
    algorithm without recursion."""
    index, low, on_stack, stack, comps, counter = {}, {}, set(), [], [], 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                comps.append(sorted(comp))
    return comps


def one_cycle(graph, comp):
    """The shortest cycle through comp's first module, inside comp (breadth first)."""
    members, start = set(comp), comp[0]
    came_from, frontier = {}, [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start] + path[::-1][1:] + [start]
                if child not in came_from:
                    came_from[child] = node
                    nxt.append(child)
        frontier = nxt
    return [start, start]  # not reached: a component of two or more has a cycle


def check(root):
    """(problems, cycles, counts): problems are lines; cycles are lists of lines."""
    files = walk(root)
    index, by_suffix = set(files), suffix_index(files)
    problems, graph, why = [], {}, {}
    n_includes = 0
    for rel in files:
        if layer_of(rel) is None:
            problems.append((rel, 0, f"{rel}: in no layer: add its folder to LAYERS in "
                             "tests/check_layers.py (or move the file into a layer's folder)"))
        graph.setdefault(module_of(rel), set())
    for rel in files:
        layer = layer_of(rel)
        for n, target in read_includes(os.path.join(root, rel)):
            n_includes += 1
            if os.path.basename(target) in GENERATED:
                continue
            dest, problem = resolve(root, rel, target, index, by_suffix)
            if problem:
                problems.append((rel, n, f"{rel}:{n}: {problem}"))
                continue
            to_layer = layer_of(dest)
            if layer and to_layer and to_layer not in LAYERS[layer][1]:
                problems.append((rel, n, f"{rel}:{n}: includes {dest}: {layer} may include "
                                 f"only {', '.join(LAYERS[layer][1])}"))
            a, b = module_of(rel), module_of(dest)
            if a != b:
                graph[a].add(b)
                why.setdefault((a, b), f"{rel}:{n} includes {dest}")
    cycles = []
    for comp in sccs(graph):
        if len(comp) < 2:
            continue
        cycle = one_cycle(graph, comp)
        lines = ["cycle: " + " → ".join(cycle)]
        lines += [f"  {why[(x, y)]}" for x, y in zip(cycle, cycle[1:])]
        if len(comp) > len(cycle) - 1:
            lines.append(f"  (one cycle of a tangle of {len(comp)} modules: {', '.join(comp)})")
        cycles.append(lines)
    problems.sort()
    return [p[2] for p in problems], cycles, (len(files), n_includes, len(graph))


def main(argv):
    if len(argv) != 2 or argv[1].startswith("-") and argv[1] != "--self-test":
        print("usage: check_layers.py ROOT | check_layers.py --self-test", file=sys.stderr)
        return 2
    if argv[1] == "--self-test":
        return self_test()
    root = argv[1]
    if not os.path.isdir(root):
        print(f"check_layers.py: {root}: no such folder (give the source tree's root)",
              file=sys.stderr)
        return 2
    problems, cycles, (n_files, n_includes, n_modules) = check(root)
    if n_files == 0:
        print(f"check_layers.py: {root}: no .c or .h file to check (is it the source tree's "
              "root?)", file=sys.stderr)
        return 1
    for line in problems:
        print(line)
    for lines in cycles:
        print("\n".join(lines))
    if problems or cycles:
        print(f"layers: {len(problems)} include problem(s), {len(cycles)} cycle(s) "
              "(doc/TESTING.md, Layers)")
        return 1
    print(f"layers: {n_files} files, {n_includes} includes, {n_modules} modules checked: "
          f"every include within its layers, no cycle")
    return 0


# ---- self-test: the checker run, as a program, on fixture trees.

CLEAN = {
    "proto/frame.h": '#include <stdint.h>\n#include "msb-limits.h"\n',
    "proto/frame.c": '#include "frame.h"\n#include "msb-build.h"\n',
    "proto/msb-limits.h": "",
    "util/log.h": '#include "frame.h"\n',
    "util/log.c": '#include "log.h"\n',
    "engine/engine.h": '#include "log.h"\n',
    "engine/engine.c": '#include "engine.h"\n#include "frame.h"\n',
    "domain/sandbox.h": '#include "engine.h"\n',
    "domain/files/fileop.h": '#include "../sandbox.h"\n',
    "domain/files/fileop.c": '#include "fileop.h"\n#include "plane.h"\n#include "log.h"\n',
    "domain/files/plane.h": "",
    "domain/egress/egress.c": '#include "files/fileop.h"\n#include "msb-build.h"\n',
    "egress-proxy/proxy.c": '#include "frame.h"\n',
    "daemon/server.h": '#include "fileop.h"\n',
    "daemon/server.c": '#include "server.h"\n#include "engine.h"\n#include "log.h"\n',
    "daemon/main.c": '#include "server.h"\n',
    "client/msb.h": '#include "frame.h"\n',
    "client/cli.c": '#include "msb.h"\n',
    # Not checked: these would fail every rule.
    "tests/unit/check_x.c": '#include "server.h"\n#include "nowhere.h"\n',
    "contrib/tool.c": '#include "nowhere.h"\n',
    "build/gen.c": '#include "nowhere.h"\n',
    "build-asan/gen.c": '#include "nowhere.h"\n',
    "obj-x86_64-linux-gnu/meson-private/sanitycheckc.c": '#include "nowhere.h"\n',
}


def fixture(tmp, files):
    for rel, text in files.items():
        path = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return tmp


class SelfTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self._tmp.cleanup()

    def run_checker(self, files):
        root = fixture(self._tmp.name, files)
        p = subprocess.run([sys.executable, os.path.abspath(__file__), root],
                           capture_output=True, text=True, timeout=60)  # hang guard
        return p.returncode, p.stdout + p.stderr

    def assert_fails(self, files, *lines):
        rc, out = self.run_checker(files)
        self.assertEqual(rc, 1, out)
        for line in lines:
            self.assertIn(line + "\n", out)
        return out

    def test_clean_tree_passes(self):
        rc, out = self.run_checker(CLEAN)
        self.assertEqual(rc, 0, out)
        self.assertEqual(out, "layers: 18 files, 23 includes, 13 modules checked: every "
                         "include within its layers, no cycle\n")

    def test_domain_including_a_daemon_header_fails(self):
        files = dict(CLEAN)
        files["domain/files/fileop.c"] += '#include "daemon/server.h"\n'
        out = self.assert_fails(files, "domain/files/fileop.c:4: includes daemon/server.h: "
                                "domain may include only domain, engine, util, proto")
        # The include also closes a cycle (daemon/server.h includes fileop.h).
        self.assertIn("cycle: daemon/server → domain/files/fileop → daemon/server\n", out)
        self.assertTrue(out.endswith("layers: 1 include problem(s), 1 cycle(s) "
                                     "(doc/TESTING.md, Layers)\n"), out)

    def test_engine_including_a_domain_header_fails(self):
        files = dict(CLEAN)
        files["engine/engine.c"] += '#include "sandbox.h"\n'
        self.assert_fails(files, "engine/engine.c:3: includes domain/sandbox.h: "
                          "engine may include only engine, util, proto")

    def test_other_wrong_way_includes_fail(self):
        files = dict(CLEAN)
        files["egress-proxy/proxy.c"] += '#include "log.h"\n'
        files["client/cli.c"] += '#include "engine.h"\n'
        files["proto/frame.c"] += '#include "log.h"\n'
        self.assert_fails(files,
                          "client/cli.c:2: includes engine/engine.h: client may include only "
                          "client, proto",
                          "egress-proxy/proxy.c:2: includes util/log.h: egress-proxy may "
                          "include only egress-proxy, proto",
                          "proto/frame.c:3: includes util/log.h: proto may include only proto")

    def test_two_module_cycle_fails_and_is_printed(self):
        files = dict(CLEAN)
        files["domain/exec/run.h"] = '#include "kill.h"\n'
        files["domain/exec/kill.c"] = '#include "kill.h"\n#include "run.h"\n'
        files["domain/exec/kill.h"] = ""
        out = self.assert_fails(files, "cycle: domain/exec/kill → domain/exec/run → "
                                "domain/exec/kill",
                                "  domain/exec/kill.c:2 includes domain/exec/run.h",
                                "  domain/exec/run.h:1 includes domain/exec/kill.h")
        self.assertTrue(out.endswith("layers: 0 include problem(s), 1 cycle(s) "
                                     "(doc/TESTING.md, Layers)\n"), out)

    def test_each_tangle_prints_one_cycle(self):
        files = dict(CLEAN)
        files["util/a.h"] = '#include "b.h"\n'
        files["util/b.h"] = '#include "c.h"\n'
        files["util/c.h"] = '#include "a.h"\n#include "b.h"\n'
        files["client/x.h"] = '#include "y.h"\n'
        files["client/y.h"] = '#include "x.h"\n'
        out = self.assert_fails(files, "cycle: client/x → client/y → client/x",
                                "cycle: util/a → util/b → util/c → util/a")
        self.assertEqual(out.count("cycle: "), 2, out)

    def test_unresolvable_and_ambiguous_includes_fail(self):
        files = dict(CLEAN)
        files["daemon/server.c"] += '#include "nowhere.h"\n'
        files["domain/egress/plane.h"] = ""
        files["daemon/main.c"] += '#include "plane.h"\n'
        files["daemon/config.c"] = '#include "../tests/unit/check_x.c"\n'
        out = self.assert_fails(files)
        self.assertIn('daemon/server.c:4: includes "nowhere.h": no such file', out)
        self.assertIn('daemon/main.c:2: includes "plane.h": ambiguous, 2 files have that name '
                      "(domain/egress/plane.h, domain/files/plane.h)", out)
        self.assertIn('daemon/config.c:1: includes "../tests/unit/check_x.c", which is '
                      "tests/unit/check_x.c, outside the checked folders", out)
        # Beside the including file wins: fileop.c's "plane.h" is still domain/files/plane.h.
        self.assertNotIn("domain/files/fileop.c", out)

    def test_file_in_no_layer_fails(self):
        files = dict(CLEAN)
        files["backend/docker.c"] = '#include "engine.h"\n'
        self.assert_fails(files, "backend/docker.c: in no layer: add its folder to LAYERS in "
                          "tests/check_layers.py (or move the file into a layer's folder)")

    def test_empty_tree_fails(self):
        rc, out = self.run_checker({"doc/x.md": ""})
        self.assertEqual(rc, 1, out)
        self.assertIn("no .c or .h file to check", out)


def self_test():
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
