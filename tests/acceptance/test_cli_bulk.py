"""``venturi jobs retry|cancel --kind K [--note TEXT] [--yes]``: bulk changes, counted first.

Run for real through the console script; every check reads the rows.
"""

from __future__ import annotations

from typing import Any

from cli_support import Run, failed_with, json_of, succeeded

STATUSES = "SELECT kind, status, count(*) AS n FROM {{prefix}}_jobs GROUP BY kind, status"


def counts(db: Any) -> dict[tuple[str, str], int]:
    return {(r["kind"], r["status"]): r["n"] for r in db.all(STATUSES)}


def make_dead(db: Any, ids: list[str], note: str) -> None:
    for job_id in ids:
        db.execute(
            "UPDATE {{prefix}}_jobs SET status = 'dead', finished_at = now() WHERE id = %s",
            (job_id,),
        )
        db.execute(
            "INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)"
            " SELECT id, kind, 1, now(), 'dead', %s FROM {{prefix}}_jobs WHERE id = %s",
            (note, job_id),
        )


def test_bulk_cancel_counts_first_and_changes_nothing_without_yes(
    venturi_cli: Run, double: Any, db: Any
) -> None:
    double.delay_many([{"n": n} for n in range(5)])
    before = counts(db)

    preview = succeeded(venturi_cli("jobs", "cancel", "--kind", "cli.double"))

    assert preview == "5 pending job(s) match; nothing changed: add --yes to cancel them\n"
    assert counts(db) == before == {("cli.double", "pending"): 5}


def test_bulk_cancel_with_yes_cancels_every_pending_job_of_the_kind(
    venturi_cli: Run, double: Any, db: Any
) -> None:
    double.delay_many([{"n": n} for n in range(5)])

    done = json_of(venturi_cli("jobs", "cancel", "--kind", "cli.double", "--yes", "--json"))

    assert done == {"matching": 5, "changed": 5, "applied": True}
    assert counts(db) == {("cli.double", "dead"): 5}
    notes = {r["note"] for r in db.all("SELECT note FROM {{prefix}}_journal")}
    assert notes == {"cancelled"}


def test_bulk_retry_takes_only_the_dead_jobs_whose_last_note_matches(
    venturi_cli: Run, double: Any, db: Any
) -> None:
    refs = double.delay_many([{"n": n} for n in range(6)])
    ids = [ref.id for ref in refs]
    make_dead(db, ids[:3], "ConnectionError: upstream refused")
    make_dead(db, ids[3:5], "ValueError: bad input")

    preview = succeeded(
        venturi_cli("jobs", "retry", "--kind", "cli.double", "--note", "connectionerror")
    )
    assert preview == "3 dead job(s) match; nothing changed: add --yes to retry them\n"

    done = succeeded(
        venturi_cli("jobs", "retry", "--kind", "cli.double", "--note", "ConnectionError", "--yes")
    )

    assert done == "retried 3 of 3 matching dead job(s)\n"
    rows = {r["id"]: r["status"] for r in db.all("SELECT id, status FROM {{prefix}}_jobs")}
    assert [rows[i] for i in ids] == ["pending"] * 3 + ["dead"] * 2 + ["pending"]


def test_bulk_changes_refuse_an_id_with_filters_a_missing_filter_and_another_status(
    venturi_cli: Run, double: Any, db: Any
) -> None:
    job_id = double.delay(1).id
    before = counts(db)

    both = failed_with(venturi_cli("jobs", "cancel", job_id, "--kind", "cli.double"), 2)
    assert "either a job ID or --kind/--note filters, not both" in both
    neither = failed_with(venturi_cli("jobs", "retry", "--yes"), 2)
    assert "give a job ID, or --kind/--note" in neither
    other = venturi_cli("jobs", "retry", "--kind", "cli.double", "--status", "completed")
    assert other.returncode == 2
    assert "invalid choice: 'completed'" in other.stderr

    assert counts(db) == before
