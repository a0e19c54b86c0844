#!/usr/bin/env python3
"""codeact: an agent host runs model-written code in a maf-sandbox sandbox.

It acquires the conversation's sandbox (the key comes from the command line, as a host takes it
from its request context — never from the model), writes the "model-written" program into a
directory of its own for this call, runs it with a deadline, reads back the result file the
program wrote, prints the program's output and the result, and disposes of the sandbox — also
when something fails.

    python3 codeact.py --socket /run/maf-sandbox.sock --image maf-sandbox-busybox:local
    python3 codeact.py --python --image python:3.12-slim

The default program is a POSIX shell script (the offline test image is busybox); ``--python``
runs the same program written in Python, for an image that has ``python3``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

try:
    import maf_sandbox_client as msb
except ImportError:  # run from a source tree: contrib/python holds the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import maf_sandbox_client as msb

#: The environment variable giving the default image.
IMAGE_ENV = "MAF_SANDBOX_CODEACT_IMAGE"

#: What "the model" wrote: the sum of the first n squares, printed and written to a file.
SHELL_PROGRAM = """\
#!/bin/sh
set -eu
n=10
total=0
i=1
while [ "$i" -le "$n" ]; do
	total=$((total + i * i))
	i=$((i + 1))
done
echo "codeact: sum of the first $n squares is $total"
mkdir -p out
printf '{"n": %d, "sum_of_squares": %d}\\n' "$n" "$total" > out/result.json
"""

PYTHON_PROGRAM = """\
import json
import os

n = 10
total = sum(i * i for i in range(1, n + 1))
print(f"codeact: sum of the first {n} squares is {total}")
os.makedirs("out", exist_ok=True)
with open("out/result.json", "w") as f:
    json.dump({"n": n, "sum_of_squares": total}, f)
"""

#: Exit statuses: the program failed or the result is missing; a sandbox error; usage.
EXIT_PROGRAM_FAILED = 1
EXIT_SANDBOX_ERROR = 3
EXIT_USAGE = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", help="the daemon's socket (default: as the maf-sandbox CLI)")
    p.add_argument("--image", default=os.environ.get(IMAGE_ENV),
                   help=f"the sandbox image (default: ${IMAGE_ENV}; required)")
    p.add_argument("--python", action="store_true",
                   help="run the Python program (the image needs python3)")
    p.add_argument("--scope", default="codeact", help="the key's scope (tenant)")
    p.add_argument("--thread", default="conversation-1", help="the key's conversation")
    p.add_argument("--agent", default="coder", help="the key's agent")
    p.add_argument("--kind", default="codeact", help="the workload kind")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="a label for the sandbox (repeatable)")
    p.add_argument("--timeout", type=float, default=60.0, help="deadline of the program, s")
    p.add_argument("--keep", action="store_true",
                   help="keep the sandbox for the conversation's next call (default: dispose)")
    args = p.parse_args(argv)
    if not args.image:
        p.error(f"--image is required (or set {IMAGE_ENV})")
    labels = {}
    for item in args.label:
        name, sep, value = item.partition("=")
        if not sep or not name:
            p.error(f"--label {item!r}: expected KEY=VALUE")
        labels[name] = value
    args.labels = labels
    return args


async def run(args: argparse.Namespace) -> int:
    key = msb.SandboxKey(args.scope, args.thread, args.agent)
    spec = msb.SandboxSpec(kind=args.kind, image=args.image, labels=args.labels or None,
                           requires=["exec", "files_in", "files_out"])
    if args.python:
        program, name, argv = PYTHON_PROGRAM, "program.py", ["python3", "program.py"]
    else:
        program, name, argv = SHELL_PROGRAM, "program.sh", ["sh", "program.sh"]

    async with msb.AsyncClient(args.socket) as client:
        sandbox = await client.acquire(key, spec)
        try:
            print(f"sandbox {sandbox.name} ({'created' if sandbox.created else 'reused'}), "
                  f"work dir {sandbox.work_dir}", file=sys.stderr)
            # A directory of this call's own: what it leaves is reclaimed after.
            call_dir = f"call-{uuid.uuid4().hex[:12]}"
            await sandbox.write_file(f"{call_dir}/{name}", program)
            try:
                result = await sandbox.exec(argv, working_directory=call_dir,
                                            timeout=args.timeout)
                print("--- program output ---")
                print(result.stdout_text, end="" if result.stdout_text.endswith("\n") else "\n")
                if result.stderr_text:
                    print("--- program stderr ---")
                    print(result.stderr_text, end="")
                print(f"--- exit code {result.exit_code} ---")
                if result.exit_code != 0:
                    return EXIT_PROGRAM_FAILED
                try:
                    raw = await sandbox.read_file(f"{call_dir}/out/result.json", max_bytes=65536)
                except FileNotFoundError:
                    print("the program wrote no out/result.json", file=sys.stderr)
                    return EXIT_PROGRAM_FAILED
                print("--- result ---")
                print(json.dumps(json.loads(raw), sort_keys=True))
                return 0
            finally:
                if args.keep:
                    await sandbox.reclaim(call_dir)
        finally:
            if not args.keep:
                failure = await sandbox.dispose()
                if failure is not None:
                    print(f"dispose: {failure}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(run(args))
    except msb.SandboxError as exc:
        print(f"codeact: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_SANDBOX_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
