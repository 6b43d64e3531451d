"""The enqueue path's own changes (ADR 0132), before and after in one run, in lockstep.

Each variant is the same ``Task`` with one piece of the enqueue path swapped
back to what it was, turn by turn (``enqueue._lockstep``), on one fresh prefix:

- ``before``: ids by ``str(ulid.ULID())`` and the ``ResultSource`` Protocol
  check on every call (the code before ADR 0132);
- ``python-ulid ids``: only the ids as before;
- ``no argument check``: the code as it is without the enqueue-time check of the
  arguments against the handler's annotations (ADR 0133), so its cost is
  ``after`` against it;
- ``no enqueue_job_now``: the code as it is, but a single call always goes
  through ``enqueue_job`` (eleven parameters), as before round three;
- ``before round three``: that, and ``EnqueueVerbs.enqueue`` without its path
  for one job (the split into plain and deduplicated jobs on every call);
- ``new_job per item``: ``delay_many`` making each job with ``new_job`` and its
  own id, as before round three (the code as it is otherwise);
- ``after``: the code as it is (``venturi.ids``, the check remembered per class).

Figures: ``.delay()`` and ``delay_many`` (batches of 5,000) in jobs/s, and
``Task.new_job`` alone (no I/O) in microseconds per call.

    python bench/enqueue_path.py [--database-url URL] [--single 3000] [--bulk 50000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from enqueue import WARM_UP, _lockstep
from ulid import ULID
from venturi_bench import Prefix
from workload import database_url, noop_payload

from venturi.binding import Binding
from venturi.postgres import enqueue as adapter_enqueue
from venturi.postgres.enqueue import EnqueueVerbs, _split_for_enqueue
from venturi.refs import JobRef, ResultSource

TASK = sys.modules["venturi.task"]  # the module (``venturi.task`` is also the decorator)


def _ulid_id() -> str:
    return str(ULID())


def _protocol_check(app: object) -> bool:
    return isinstance(app, ResultSource)


def _no_check(self: Binding[Any], arguments: Any) -> None:
    return None


def _never_immediate(job: object) -> bool:
    return False


def _enqueue_round_two(
    self: EnqueueVerbs, jobs: Any, *, connection: object | None = None
) -> list[JobRef]:
    """``EnqueueVerbs.enqueue`` as it was before round three (at b99f7c8)."""
    if not jobs:
        return []
    plain, deduplicated = _split_for_enqueue(jobs, self._dedup_lock_name)
    refs: dict[str, JobRef] = {}
    if not deduplicated and connection is None:
        self._run(lambda conn: self._insert(conn, plain))
    else:
        with self._transaction(connection) as conn:
            if plain:
                self._insert(conn, plain)
            for job in deduplicated:
                refs[job.id] = self._enqueue_deduplicated(conn, job)
            if not plain:
                self._queries.notify_wakeup.exec(conn, channel=self._prefix.channel)
    return [refs.get(job.id, JobRef(job.id)) for job in jobs]


def _batches_round_two(self: Any, items: Any, batch_size: int) -> Any:
    """``Task._batches`` as it was before round three: ``new_job`` per item."""
    batch: list[Any] = []
    for item in items:
        batch.append(self._new_job_from_item(item))
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


VARIANTS: dict[str, list[tuple[Any, str, Any]]] = {
    "before": [(TASK, "new_id", _ulid_id), (TASK, "_is_result_source", _protocol_check)],
    "python-ulid ids": [(TASK, "new_id", _ulid_id)],
    "no argument check": [(Binding, "check_types", _no_check)],
    "no enqueue_job_now": [(adapter_enqueue, "_is_immediate", _never_immediate)],
    "before round three": [
        (adapter_enqueue, "_is_immediate", _never_immediate),
        (EnqueueVerbs, "enqueue", _enqueue_round_two),
    ],
    "new_job per item": [(TASK.Task, "_batches", _batches_round_two)],
    "after": [],
}


@contextmanager
def variant(name: str) -> Iterator[None]:
    """The code with ``name``'s pieces swapped in, restored afterwards."""
    swaps = VARIANTS[name]
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in swaps]
    for owner, attr, value in swaps:
        setattr(owner, attr, value)
    try:
        yield
    finally:
        for owner, attr, value in saved:
            setattr(owner, attr, value)


def _in(name: str, op: Callable[[int], None]) -> Callable[[int], None]:
    def run(step: int) -> None:
        with variant(name):
            op(step)

    return run


def measure(url: str, single: int, bulk: int, batch: int = 5_000) -> dict[str, dict[str, float]]:
    """Jobs/s of ``.delay()`` and ``delay_many`` and us per ``new_job``, per variant."""
    prefix = Prefix(url)
    try:
        noop = prefix.noop
        result: dict[str, dict[str, float]] = {name: {} for name in VARIANTS}
        ops = {name: _in(name, noop.delay) for name in VARIANTS}
        _lockstep(ops, list(range(single, single + WARM_UP)))
        for name, seconds in _lockstep(ops, list(range(single))).items():
            result[name]["delay_jobs_per_s"] = single / seconds

        def many(start: int) -> None:
            noop.delay_many([noop_payload(n) for n in range(start, start + batch)])

        ops = {name: _in(name, many) for name in VARIANTS}
        full = max(batch, bulk - bulk % batch)  # whole batches only
        for name, seconds in _lockstep(ops, list(range(0, full, batch))).items():
            result[name]["delay_many_jobs_per_s"] = full / seconds

        def new_jobs(start: int) -> None:
            for n in range(start, start + 1_000):
                noop.new_job((n,))

        ops = {name: _in(name, new_jobs) for name in VARIANTS}
        steps = list(range(0, 100_000, 1_000))
        for name, seconds in _lockstep(ops, steps).items():
            result[name]["new_job_us"] = seconds / 100_000 * 1e6
        return result
    finally:
        prefix.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--single", type=int, default=3_000)
    parser.add_argument("--bulk", type=int, default=50_000)
    args = parser.parse_args()
    started = time.perf_counter()
    result = measure(database_url(args.database_url), args.single, args.bulk)
    after, before, unchecked = result["after"], result["before"], result["no argument check"]
    print(f"{'variant':<16} {'delay jobs/s':>13} {'delay_many jobs/s':>18} {'new_job us':>11}")
    for name, figures in result.items():
        print(
            f"{name:<16} {figures['delay_jobs_per_s']:>13,.0f}"
            f" {figures['delay_many_jobs_per_s']:>18,.0f} {figures['new_job_us']:>11.2f}"
        )
    print(
        f"after / before: delay {after['delay_jobs_per_s'] / before['delay_jobs_per_s']:.3f},"
        f" delay_many {after['delay_many_jobs_per_s'] / before['delay_many_jobs_per_s']:.3f}"
        f" ({time.perf_counter() - started:.0f} s)"
    )
    third, lean = result["before round three"], result["no enqueue_job_now"]
    per_item = result["new_job per item"]
    print(
        "after / new_job per item: delay_many"
        f" {after['delay_many_jobs_per_s'] / per_item['delay_many_jobs_per_s']:.3f}"
    )
    print(
        "after / before round three: delay"
        f" {after['delay_jobs_per_s'] / third['delay_jobs_per_s']:.3f},"
        f" after / no enqueue_job_now {after['delay_jobs_per_s'] / lean['delay_jobs_per_s']:.3f}"
    )
    print(
        "after / no argument check: delay"
        f" {after['delay_jobs_per_s'] / unchecked['delay_jobs_per_s']:.3f},"
        f" new_job {after['new_job_us'] - unchecked['new_job_us']:+.2f} us"
    )


if __name__ == "__main__":
    main()
