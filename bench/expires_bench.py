"""What an expiry costs the claim and the drain (ADR 0135): one run, the same server, side by side.

Variants on one fresh prefix: a task without ``expires`` (the baseline), and the same
no-op handler with ``@task(expires=timedelta(hours=1))``, so every job carries an expiry
that never binds and every claim evaluates it.

- **claim**: ``--claims`` claims of 8 from a backlog, the variants alternating claim by
  claim (lockstep), each claim's clock running only during its turn; the median per
  claim, and the difference to the plain claim.
- **drain**: ``--jobs`` no-op jobs drained by one in-process ``Worker`` (concurrency 8),
  timed by the database (first to last ``completed`` journal entry), best of ``--rounds``.

The whole measurement runs twice, the second time with the variants in the other
order, and each figure is the mean of the two: the variant enqueued (and drained)
first is favoured by the harness itself, by about as much as the difference sought.

    python bench/expires_bench.py [--database-url URL] [--claims 2000] [--jobs 5000] [--rounds 2]
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import variants

import venturi

VARIANTS: dict[str, dict[str, Any]] = {
    "none": {},
    "expires=1h": {"expires": timedelta(hours=1)},
}


def noop(n: int) -> None:
    """Nothing, so only the queue is measured."""


def _build(url: str, prefix: str) -> tuple[venturi.App, dict[str, Any]]:
    app = venturi.App(url, prefix=prefix, set_as_current=False)
    tasks = {
        name: app.task(kind="bench." + name.split("=", maxsplit=1)[0], **options)(noop)
        for name, options in VARIANTS.items()
    }
    return app, tasks


def _enqueue(name: str, task: Any, count: int) -> None:
    task.delay_many([{"n": n} for n in range(count)])


def _build_reversed(url: str, prefix: str) -> tuple[venturi.App, dict[str, Any]]:
    app, tasks = _build(url, prefix)
    return app, dict(reversed(tasks.items()))


def measure(url: str, *, claims: int, jobs: int, rounds: int) -> tuple[dict[str, float], ...]:
    """Per variant: ms per claim of 8 and drain jobs/s, each the mean of both orders."""
    runs = [
        variants.measure(url, build, _enqueue, claims=claims, jobs=jobs, rounds=rounds)
        for build in (_build, _build_reversed)
    ]
    return tuple(
        {name: sum(run[part][name] for run in runs) / len(runs) for name in VARIANTS}
        for part in (0, 1)
    )


def main() -> None:
    args = variants.options(__doc__ or "", claims=2000)
    per_claim, rates = measure(
        args.database_url, claims=args.claims, jobs=args.jobs, rounds=args.rounds
    )
    variants.print_table(per_claim, rates, baseline="none")


if __name__ == "__main__":
    main()
