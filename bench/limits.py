"""What limits across workers cost (ADR 0128): one run, the same server, side by side.

For each variant (no limit; ``global_concurrency`` far above what is reached;
``rate_limit`` far above what is reached) on one fresh prefix:

- **claim**: ``--claims`` claims of 8 from a backlog, alternating the variants
  claim by claim (lockstep), each claim's clock running only during its turn;
  the median per claim, and the difference to the unlimited claim.
- **drain**: ``--jobs`` no-op jobs drained by one in-process ``Worker``
  (concurrency 8), timed by the database (first to last ``completed`` journal
  entry), best of ``--rounds``.

    python bench/limits.py [--database-url URL] [--claims 2000] [--jobs 5000] [--rounds 2]
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import variants

import venturi

VARIANTS = {
    "none": {},
    "global_concurrency=10000": {"global_concurrency": 10_000},
    "rate_limit=1000000/s": {"rate_limit": "1000000/s"},
}
LEASE = timedelta(minutes=5)


def noop(n: int) -> None:
    """Nothing, so only the queue is measured."""


def _kind(name: str) -> str:
    return "bench." + name.split("=", maxsplit=1)[0]


def build(url: str, prefix: str) -> tuple[venturi.App, dict[str, Any]]:
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    tasks = {
        name: app.task(kind=_kind(name), **options)(noop) for name, options in VARIANTS.items()
    }
    return app, tasks


def _enqueue(name: str, task: Any, count: int) -> None:
    task.delay_many([{"n": n} for n in range(count)])


def measure(url: str, claim_count: int, jobs: int, rounds: int) -> dict[str, dict[str, float]]:
    """Per variant: median ms per claim of 8 (lockstep) and the best drain of ``rounds``."""
    per_claim, rates = variants.measure(
        url, build, _enqueue, claims=claim_count, jobs=jobs, rounds=rounds
    )
    return {
        name: {"ms_per_claim": per_claim[name], "drain_jobs_per_s": rates[name]}
        for name in VARIANTS
    }


def main() -> None:
    args = variants.options(__doc__ or "", claims=2000)
    result = measure(args.database_url, args.claims, args.jobs, args.rounds)
    variants.print_table(
        {name: figures["ms_per_claim"] for name, figures in result.items()},
        {name: figures["drain_jobs_per_s"] for name, figures in result.items()},
        baseline="none",
    )


if __name__ == "__main__":
    main()
