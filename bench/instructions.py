"""The client's instructions per ``.delay()`` (or per raw INSERT), counted by callgrind.

Wall time on a shared machine cannot resolve a few percent; instruction counts
can, for the client's side of a call (Python, psycopg, libpq: the server's
work is not in them). Each writer runs ``--calls`` and ``--calls + --extra``
times in a process of its own under ``valgrind --tool=callgrind``; the
difference of the two totals over ``--extra`` is the count per call, with
start-up, imports and the migrations cancelled out.

Writers: ``seed`` (plain psycopg INSERT on the seed's tables, ids made
beforehand), ``adelay`` (``await .adelay()`` in a loop, on one event loop
that runs throughout), and ``.delay()`` in each variant of
``enqueue_path.VARIANTS`` named by ``--variants`` (the code with that
variant's pieces swapped in for the whole process).

    python bench/instructions.py [--calls 200] [--extra 1000]
                                 [--variants "after,before round three,adelay"]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from workload import database_url

HERE = Path(__file__).resolve()


def _child(url: str, writer: str, calls: int) -> None:
    """The measured process: ``calls`` enqueues by ``writer`` after a warm-up."""
    if writer == "adelay":
        import asyncio

        from venturi_bench import Prefix

        prefix = Prefix(url)

        async def awaited() -> None:
            for n in range(calls, calls + 20):
                await prefix.noop.adelay(n)
            for n in range(calls):
                await prefix.noop.adelay(n)
            await prefix.app.aclose()

        try:
            asyncio.run(awaited())
        finally:
            prefix.close()
        return
    if writer == "seed":
        from baseline import VenturiSchemaTable

        table = VenturiSchemaTable(url, calls + 20, seed=True)
        op = table.insert_one
        close = table.close
    else:
        from enqueue_path import VARIANTS
        from venturi_bench import Prefix

        for owner, attr, value in VARIANTS[writer]:
            setattr(owner, attr, value)
        prefix = Prefix(url)
        op = prefix.noop.delay
        close = prefix.close
    try:
        for n in range(calls, calls + 20):
            op(n)
        for n in range(calls):
            op(n)
    finally:
        close()


def _instructions(url: str, writer: str, calls: int, env: dict[str, str] | None = None) -> int:
    """Callgrind's total for a child making ``calls`` enqueues by ``writer``; ``env``: the
    child's environment (default: this one's), e.g. a ``PYTHONPATH`` naming another tree."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                str(HERE),
                "--child",
                writer,
                "--calls",
                str(calls),
                "--database-url",
                url,
            ],
            check=True,
            capture_output=True,
            env={**(os.environ if env is None else env), "PYTHONHASHSEED": "0"},
        )
        found = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no summary line in callgrind's output for {writer}")
        return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--extra", type=int, default=1000)
    parser.add_argument("--variants", default="after,before round three,adelay")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    url = database_url(args.database_url)
    if args.child:
        _child(url, args.child, args.calls)
        return
    print(f"{'writer':<22} {'instructions per call':>22}")
    for writer in ["seed", *args.variants.split(",")]:
        low = _instructions(url, writer, args.calls)
        high = _instructions(url, writer, args.calls + args.extra)
        print(f"{writer:<22} {(high - low) / args.extra:>22,.0f}", flush=True)


if __name__ == "__main__":
    main()
