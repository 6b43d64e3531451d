"""Dedup and merge against real PostgreSQL (ADR 10): keep, replace, combine and
independent, the ``merged`` journal entry, tier promotion, what a merged row keeps,
and racing enqueues of one key."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

import venturi
from venturi.errors import EnqueueError
from venturi.merge import Merge
from venturi.refs import JobRef
from venturi.task import Task
from venturi.types import Priority


def counter_task(app: venturi.App, merge: Any = None, kind: str = "hits") -> Task[..., None]:
    options: dict[str, Any] = {"kind": kind, "dedup": lambda page, **_: page}
    if merge is not None:
        options["merge"] = merge

    @app.task(**options)
    def hits(page: str, count: int = 1, note: str = "") -> None: ...

    return hits


def only_row(db: Any) -> dict[str, Any]:
    [row] = db.jobs()
    return row


def test_keep_is_the_default_the_first_job_stands(app: venturi.App, db: Any) -> None:
    hits = counter_task(app)
    first = hits.delay("/home", count=1)
    second = hits.delay("/home", count=5)

    assert first == JobRef(first.id, merged=False)
    assert second == JobRef(first.id, merged=True)
    row = only_row(db)
    assert (row["id"], row["payload"], row["dedup_key"]) == (
        first.id,
        {"page": "/home", "count": 1},
        "/home",
    )
    [entry] = db.journal(first.id)
    assert (entry["outcome"], entry["kind"], entry["run_no"]) == ("merged", "hits", 0)
    assert entry["note"].startswith("keep")


def test_replace_gives_the_existing_row_the_incoming_payload(app: venturi.App, db: Any) -> None:
    hits = counter_task(app, merge=lambda existing, incoming: Merge.replace())
    first = hits.delay("/home", count=1)
    assert hits.delay("/home", count=5, note="latest") == JobRef(first.id, merged=True)

    assert only_row(db)["payload"] == {"page": "/home", "count": 5, "note": "latest"}
    assert [e["outcome"] for e in db.journal(first.id)] == ["merged"]


def test_combine_builds_the_payload_from_both(app: venturi.App, db: Any) -> None:
    def add(existing: dict[str, Any], incoming: dict[str, Any]) -> Merge:
        total = existing.get("count", 1) + incoming.get("count", 1)
        return Merge.combine({"page": existing["page"], "count": total})

    hits = counter_task(app, merge=add)
    first = hits.delay("/home", count=2)
    hits.delay("/home", count=3)
    hits.delay("/home")

    assert only_row(db)["payload"] == {"page": "/home", "count": 6}
    assert [e["outcome"] for e in db.journal(first.id)] == ["merged", "merged"]


def test_independent_inserts_a_row_of_its_own(app: venturi.App, db: Any) -> None:
    hits = counter_task(app, merge=lambda existing, incoming: Merge.independent())
    first = hits.delay("/home")
    second = hits.delay("/home")

    assert second.id != first.id and not second.merged
    assert [r["id"] for r in db.jobs()] == [first.id, second.id]
    assert db.journal() == []


def test_the_merged_row_takes_the_higher_tier(app: venturi.App, db: Any) -> None:
    hits = counter_task(app)
    first = hits.apply_async(("/a",), priority=Priority.LOW)
    hits.apply_async(("/a",), priority=Priority.HIGH)
    hits.apply_async(("/a",), priority=Priority.NORMAL)

    assert db.scalar("SELECT priority FROM {{prefix}}_jobs WHERE id = %s", (first.id,)) == 0


def test_a_merge_never_lowers_the_tier(app: venturi.App, db: Any) -> None:
    hits = counter_task(app, merge=lambda existing, incoming: Merge.replace())
    hits.apply_async(("/a",), priority=Priority.HIGH)
    hits.apply_async(("/a",), priority=Priority.LOW)

    assert only_row(db)["priority"] == Priority.HIGH


def test_a_merged_row_keeps_its_id_created_at_and_visible_at(app: venturi.App, db: Any) -> None:
    hits = counter_task(app, merge=lambda existing, incoming: Merge.replace())
    first = hits.apply_async(("/a",), countdown=timedelta(hours=1))
    before = only_row(db)
    hits.apply_async(("/a",), kwargs={"count": 9})
    after = only_row(db)

    assert after["id"] == first.id
    assert (after["created_at"], after["visible_at"]) == (
        before["created_at"],
        before["visible_at"],
    )
    assert after["visible_at"] - after["created_at"] == timedelta(hours=1)
    assert after["payload"] == {"page": "/a", "count": 9}


def test_the_merged_entry_records_the_rows_run_count(app: venturi.App, db: Any) -> None:
    hits = counter_task(app)
    first = hits.delay("/a")
    # As a row looks after two runs that ended paused or retried: pending again.
    db.execute(
        "UPDATE {{prefix}}_jobs SET run_count = 2, failure_count = 1 WHERE id = %s", (first.id,)
    )
    hits.delay("/a")

    [entry] = db.journal(first.id)
    assert entry["run_no"] == 2


def test_the_oldest_pending_sibling_absorbs_the_job(app: venturi.App, db: Any) -> None:
    def merge(existing: dict[str, Any], incoming: dict[str, Any]) -> Merge:
        return Merge.independent() if incoming.get("note") == "split" else Merge.keep()

    hits = counter_task(app, merge=merge)
    oldest = hits.delay("/a", note="split")
    newer = hits.delay("/a", note="split")
    merged = hits.delay("/a")

    assert merged == JobRef(oldest.id, merged=True)
    assert [e["job_id"] for e in db.journal()] == [oldest.id]
    assert newer.id in {r["id"] for r in db.jobs()}


@pytest.mark.parametrize("status", ["claimed", "completed", "dead"])
def test_only_pending_rows_are_siblings(app: venturi.App, db: Any, status: str) -> None:
    hits = counter_task(app)
    first = hits.delay("/a")
    db.execute("UPDATE {{prefix}}_jobs SET status = %s WHERE id = %s", (status, first.id))
    second = hits.delay("/a")

    assert not second.merged and second.id != first.id
    assert db.journal() == []


def test_jobs_of_other_kinds_or_keys_are_not_siblings(app: venturi.App, db: Any) -> None:
    hits = counter_task(app, kind="hits")
    views = counter_task(app, kind="views")
    refs = [hits.delay("/a"), hits.delay("/b"), views.delay("/a")]

    assert not any(ref.merged for ref in refs)
    assert len(db.jobs()) == 3


def test_the_dedup_key_of_the_call_overrides_the_tasks(app: venturi.App, db: Any) -> None:
    hits = counter_task(app)
    first = hits.apply_async(("/a",), dedup_key="same")
    second = hits.apply_async(("/b",), dedup_key="same")

    assert second == JobRef(first.id, merged=True)


def test_a_task_without_dedup_can_be_deduplicated_per_call(app: venturi.App, db: Any) -> None:
    @app.task(kind="plain")
    def plain(n: int) -> None: ...

    first = plain.apply_async((1,), dedup_key="k")
    assert plain.apply_async((2,), dedup_key="k") == JobRef(first.id, merged=True)
    assert plain.delay(3).merged is False
    assert len(db.jobs()) == 2


def test_a_failing_merge_function_writes_nothing(app: venturi.App, db: Any) -> None:
    hits = counter_task(app, merge=lambda existing, incoming: "not a decision")
    first = hits.delay("/a")
    with pytest.raises(EnqueueError, match="merge function"):
        hits.delay("/a", count=2)

    assert only_row(db)["payload"] == {"page": "/a"}
    assert db.journal() == []
    assert first.id == only_row(db)["id"]


def test_delay_many_merges_siblings_within_one_batch(app: venturi.App, db: Any) -> None:
    hits = counter_task(app)
    refs = hits.delay_many([{"page": "/a"}, {"page": "/b"}, {"page": "/a"}, ("/a", 3)])

    assert [ref.merged for ref in refs] == [False, False, True, True]
    assert refs[2].id == refs[3].id == refs[0].id
    assert len(db.jobs()) == 2
    assert len(db.journal(refs[0].id)) == 2


# -- racing enqueues -----------------------------------------------------------------

THREADS = 8
PER_THREAD = 50


def race(task: Task[..., None]) -> list[JobRef]:
    """THREADS threads enqueue one key PER_THREAD times each, starting together."""
    barrier = threading.Barrier(THREADS, timeout=30)
    refs: list[JobRef] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def enqueue() -> None:
        try:
            barrier.wait()
            mine = [task.delay("/hot") for _ in range(PER_THREAD)]
        except BaseException as exc:
            with lock:
                errors.append(exc)
            return
        with lock:
            refs.extend(mine)

    threads = [threading.Thread(target=enqueue) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    return refs


def test_racing_enqueues_of_one_key_leave_exactly_one_pending_row(
    app: venturi.App, db: Any
) -> None:
    refs = race(counter_task(app))

    [row] = db.jobs()
    assert len(refs) == THREADS * PER_THREAD
    assert {ref.id for ref in refs} == {row["id"]}
    assert sum(ref.merged for ref in refs) == THREADS * PER_THREAD - 1
    assert len(db.journal(row["id"])) == THREADS * PER_THREAD - 1


def test_racing_independent_enqueues_all_get_rows(app: venturi.App, db: Any) -> None:
    refs = race(counter_task(app, merge=lambda existing, incoming: Merge.independent()))

    assert len({ref.id for ref in refs}) == THREADS * PER_THREAD
    assert not any(ref.merged for ref in refs)
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'pending'") == 400
    assert db.journal() == []
