"""What fair claims cost (ADR 0129): one run, the same server, side by side.

Variants on one fresh prefix: a kind without ``fair_key`` (the baseline), and the same
no-op handler with ``fair_key`` over 2 keys and over 1,000 keys.

- **claim**: ``--claims`` claims of 8 from a backlog, the variants alternating claim by
  claim (lockstep), each claim's clock running only during its turn; the median per
  claim, and the difference to the plain claim.
- **drain**: ``--jobs`` no-op jobs drained by one in-process ``Worker`` (concurrency 8),
  timed by the database (first to last ``completed`` journal entry), best of ``--rounds``.

``measure(url, claims=..., jobs=..., rounds=...)`` returns the figures (for bench/run.py);
``python bench/fair_bench.py [--database-url URL] [--claims 1000] [--jobs 5000] [--rounds 2]``
prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import variants

import venturi

#: Variant name -> how many fair keys its jobs spread over (None: no fair_key declared).
VARIANTS: dict[str, int | None] = {"plain": None, "fair, 2 keys": 2, "fair, 1,000 keys": 1000}


@dataclass(frozen=True)
class Figures:
    """Per variant: median ms per claim of 8, and the best drain rate (jobs/s)."""

    ms_per_claim: dict[str, float]
    drain_jobs_per_second: dict[str, float]


def noop(tenant: str, n: int) -> None:
    """Nothing, so only the queue is measured."""


def _kind(name: str) -> str:
    return "bench." + "".join(c for c in name if c.isalnum())


def _build(url: str, prefix: str) -> tuple[venturi.App, dict[str, Any]]:
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    tasks = {
        name: app.task(kind=_kind(name), fair_key=lambda tenant, **_: tenant)(noop)
        if keys is not None
        else app.task(kind=_kind(name))(noop)
        for name, keys in VARIANTS.items()
    }
    return app, tasks


def _enqueue(name: str, task: Any, count: int) -> None:
    keys = VARIANTS[name] or 1
    task.delay_many([(f"tenant-{n % keys}", n) for n in range(count)])


def measure(url: str, *, claims: int = 1000, jobs: int = 5000, rounds: int = 2) -> Figures:
    """Claim cost and drain rate of every variant, on a fresh prefix dropped afterwards."""
    per_claim, rates = variants.measure(
        url, _build, _enqueue, claims=claims, jobs=jobs, rounds=rounds
    )
    return Figures(per_claim, rates)


def main() -> None:
    args = variants.options(__doc__ or "", claims=1000)
    figures = measure(args.database_url, claims=args.claims, jobs=args.jobs, rounds=args.rounds)
    variants.print_table(figures.ms_per_claim, figures.drain_jobs_per_second, baseline="plain")


if __name__ == "__main__":
    main()
