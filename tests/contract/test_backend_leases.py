"""The Leases role (venturi/backend/): what happens to a claimed row. ``finish``,
``renew_leases``, ``release`` and ``recover_stale``, each fenced on the claim, the
traceback ``finish`` stores, and how each of them honours a cancellation request
(ADR 11, 19, 21, 0104, 0106, 0121)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from backends import KIND, LEASE, WORKER, ClaimAll, new_job, running, stored_row

from venturi.backend import Backend
from venturi.types import Claim, Finished, Outcome, OutcomeKind, Renewal


def claimed_one(backend: Backend, claim_all: ClaimAll, **job: Any) -> Claim:
    backend.enqueue([new_job(**job)])
    [claimed] = claim_all()
    return claimed.claim


def expire(db: Any, *job_ids: str, ago: timedelta = timedelta(seconds=1)) -> None:
    """Make leases run out, as a dead worker's would."""
    db.execute(
        "UPDATE {{prefix}}_jobs SET claim_expires_at = now() - %s WHERE id = ANY(%s)",
        (ago, list(job_ids)),
    )


TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: boom\n'


# -- finish ---------------------------------------------------------------------------


def test_finish_records_every_field_of_every_outcome_exactly(backend: Backend, db: Any) -> None:
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at, carry)
        SELECT 'job-' || n, 'finish.kind', '{}', 'pending', now() - make_interval(secs => 10 - n),
               now() - make_interval(secs => 10 - n), '{"a": 1}'
        FROM generate_series(1, 3) AS n
        """
    )
    paused, retried, completed = backend.claim(
        kinds=["finish.kind"], limit=3, worker_id="h:1", lease=LEASE
    )
    delay = timedelta(seconds=90, microseconds=123456)
    eta = datetime(2031, 5, 6, 7, 8, 9, 654321, tzinfo=UTC)

    written = backend.finish(
        [
            Finished(paused.claim, Outcome(OutcomeKind.PAUSED, delay=delay, carry="null")),
            Finished(
                retried.claim,
                Outcome(OutcomeKind.RETRIED, note="Boom: x", is_failure=True, eta=eta),
            ),
            Finished(
                completed.claim,
                Outcome(
                    OutcomeKind.COMPLETED,
                    note='h\u00e9llo \u2713 "quoted"',
                    carry='{"b": [1, 2.5]}',
                    attachment='{"k": [1, 2], "s": "\u00fc"}',
                ),
            ),
        ]
    )

    assert written == {"job-1", "job-2", "job-3"}
    rows = {
        row["id"]: row
        for row in db.all(
            "SELECT j.id, j.status, j.visible_at, j.carry, j.failure_count, j.finished_at,"
            " e.outcome, e.note, e.attachment, e.recorded_at"
            " FROM {{prefix}}_jobs AS j JOIN {{prefix}}_journal AS e ON e.job_id = j.id"
        )
    }
    one, two, three = rows["job-1"], rows["job-2"], rows["job-3"]
    assert (one["status"], one["outcome"], one["failure_count"]) == ("pending", "paused", 0)
    assert one["visible_at"] - one["recorded_at"] == delay
    assert one["carry"] is None  # JSON null replaced {"a": 1}
    assert (two["status"], two["outcome"], two["failure_count"]) == ("pending", "retried", 1)
    assert (two["visible_at"], two["note"], two["carry"]) == (eta, "Boom: x", {"a": 1})
    assert (three["status"], three["outcome"]) == ("completed", "completed")
    assert three["finished_at"] == three["recorded_at"]
    assert three["note"] == 'h\u00e9llo \u2713 "quoted"'
    assert three["carry"] == {"b": [1, 2.5]}
    assert three["attachment"] == {"k": [1, 2], "s": "\u00fc"}


@pytest.mark.parametrize("is_failure", [True, False])
def test_a_dead_outcome_ends_the_row_and_counts_a_failure_only_when_it_is_one(
    backend: Backend, db: Any, claim_all: ClaimAll, is_failure: bool
) -> None:
    claim = claimed_one(backend, claim_all)

    outcome = Outcome(OutcomeKind.DEAD, note="Fail: no", is_failure=is_failure)
    assert backend.finish([Finished(claim, outcome)]) == {claim.job_id}

    row = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (claim.job_id,))
    assert (row["status"], row["failure_count"]) == ("dead", int(is_failure))
    assert (row["claimed_by"], row["claim_expires_at"]) == (None, None)
    assert row["finished_at"] is not None
    [entry] = db.journal(claim.job_id)
    assert (entry["outcome"], entry["note"], entry["run_no"]) == ("dead", "Fail: no", 1)


def test_a_finished_job_is_claimable_again_only_when_its_outcome_made_it_pending(
    backend: Backend, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job(), new_job()])
    paused, completed = claim_all()
    backend.finish(
        [
            Finished(paused.claim, Outcome(OutcomeKind.PAUSED)),
            Finished(completed.claim, Outcome(OutcomeKind.COMPLETED)),
        ]
    )

    [again] = claim_all()
    assert again.claim == Claim(paused.claim.job_id, WORKER, 2)


def test_finish_of_a_lost_claim_writes_nothing_and_the_others_of_the_batch_are_written(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job(), new_job()])
    kept, lost = (job.claim for job in claim_all())
    expire(db, lost.job_id)
    backend.recover_stale(max_failures={}, default_max_failures=20, limit=10)
    [retaken] = claim_all(worker_id="other-host:2")  # the lost job's newer claim
    before = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (lost.job_id,))

    done = Outcome(OutcomeKind.COMPLETED, note="late")
    written = backend.finish(
        [
            Finished(kept, done),
            Finished(lost, done),
            Finished(Claim(lost.job_id, retaken.claim.claimed_by, lost.run_count), done),
            Finished(Claim(lost.job_id, lost.claimed_by, retaken.claim.run_count), done),
        ]
    )

    assert written == {kept.job_id}
    assert db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (lost.job_id,)) == before
    assert [e["outcome"] for e in db.journal(lost.job_id)] == ["stale-recovered"]


def test_finish_of_nothing_writes_nothing(backend: Backend) -> None:
    assert backend.finish([]) == set()


def test_a_second_finish_of_the_same_claim_is_refused(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    claim = claimed_one(backend, claim_all)
    assert backend.finish([Finished(claim, Outcome(OutcomeKind.COMPLETED))]) == {claim.job_id}
    assert backend.finish([Finished(claim, Outcome(OutcomeKind.DEAD))]) == set()
    assert [e["outcome"] for e in db.journal(claim.job_id)] == ["completed"]


def test_finish_stores_each_outcomes_traceback_on_its_journal_entry(
    backend: Backend, claim_all: ClaimAll
) -> None:
    failed, completed = running(backend, claim_all, 2)

    backend.finish(
        [
            Finished(
                failed,
                Outcome(OutcomeKind.RETRIED, note="ValueError: boom", is_failure=True,
                        traceback=TRACEBACK),
            ),
            Finished(completed, Outcome(OutcomeKind.COMPLETED)),
        ]
    )  # fmt: skip

    detail = backend.get_job(failed.job_id)
    assert detail is not None
    [entry] = detail.journal
    assert (entry.outcome, entry.note, entry.traceback) == (
        OutcomeKind.RETRIED,
        "ValueError: boom",
        TRACEBACK,
    )
    other = backend.get_job(completed.job_id)
    assert other is not None
    assert [e.traceback for e in other.journal] == [None]


@pytest.mark.parametrize(
    ("outcome", "note"),
    [
        (Outcome(OutcomeKind.RETRIED, note="ValueError: x", is_failure=True),
         "cancelled (the run ended retried: ValueError: x)"),
        (Outcome(OutcomeKind.PAUSED, delay=timedelta(hours=1)),
         "cancelled (the run ended paused)"),
    ],
    ids=["retried", "paused"],
)  # fmt: skip
def test_a_cancelled_job_that_would_run_again_is_recorded_dead_instead(
    backend: Backend, db: Any, claim_all: ClaimAll, outcome: Outcome, note: str
) -> None:
    [claim] = running(backend, claim_all)
    backend.cancel_job(claim.job_id)

    assert backend.finish([Finished(claim, outcome)]) == {claim.job_id}

    job = stored_row(db, claim.job_id)
    assert (job["status"], job["finished_at"] is not None, job["claimed_by"]) == (
        "dead",
        True,
        None,
    )
    assert job["failure_count"] == int(outcome.is_failure)
    assert [(e["outcome"], e["note"]) for e in db.journal(claim.job_id)] == [("dead", note)]


@pytest.mark.parametrize("kind", [OutcomeKind.COMPLETED, OutcomeKind.DEAD])
def test_a_cancelled_job_that_ends_anyway_keeps_its_ending(
    backend: Backend, db: Any, claim_all: ClaimAll, kind: OutcomeKind
) -> None:
    [claim] = running(backend, claim_all)
    backend.cancel_job(claim.job_id)

    backend.finish([Finished(claim, Outcome(kind, note="done"))])

    assert stored_row(db, claim.job_id)["status"] == kind.value
    assert [(e["outcome"], e["note"]) for e in db.journal(claim.job_id)] == [(kind.value, "done")]


# -- renew_leases ---------------------------------------------------------------------


def test_renew_extends_the_leases_still_held_and_returns_their_ids(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job(), new_job()])
    held, finished = (job.claim for job in claim_all(lease=timedelta(seconds=30)))
    backend.finish([Finished(finished, Outcome(OutcomeKind.COMPLETED))])

    renewal = backend.renew_leases([held, finished], timedelta(minutes=10))

    assert renewal.held == {held.job_id}
    assert renewal.cancel_requested == set()

    lease = db.scalar(
        "SELECT claim_expires_at - now() FROM {{prefix}}_jobs WHERE id = %s", (held.job_id,)
    )
    assert timedelta(minutes=9) < lease <= timedelta(minutes=10)
    row = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (finished.job_id,))
    assert (row["status"], row["claim_expires_at"]) == ("completed", None)


def test_renew_never_revives_a_claim_taken_over_by_another_worker(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    lost = claimed_one(backend, claim_all)
    expire(db, lost.job_id)
    backend.recover_stale(max_failures={}, default_max_failures=20, limit=10)
    [newer] = claim_all(worker_id="other-host:2")
    before = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (lost.job_id,))

    assert backend.renew_leases([lost], timedelta(hours=1)).held == set()
    assert db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (lost.job_id,)) == before
    assert backend.renew_leases([newer.claim], LEASE).held == {lost.job_id}


def test_renew_of_nothing_is_nothing(backend: Backend) -> None:
    assert backend.renew_leases([], LEASE) == Renewal()


def test_renewal_reports_which_held_claims_have_a_cancellation_request(
    backend: Backend, claim_all: ClaimAll
) -> None:
    cancelled, other = running(backend, claim_all, 2)
    backend.cancel_job(cancelled.job_id)

    renewal = backend.renew_leases([cancelled, other], LEASE)

    assert renewal.held == {cancelled.job_id, other.job_id}
    assert renewal.cancel_requested == {cancelled.job_id}


def test_renewal_never_reports_a_lost_claim_even_with_a_request(
    backend: Backend, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    backend.cancel_job(claim.job_id)
    stale = Claim(claim.job_id, "someone-else:1", claim.run_count)

    renewal = backend.renew_leases([stale], LEASE)

    assert renewal.held == set()
    assert renewal.cancel_requested == set()


# -- release --------------------------------------------------------------------------


def test_release_returns_claims_to_pending_with_a_released_entry_and_no_failure(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    claim = claimed_one(backend, claim_all)
    visible_at = db.scalar("SELECT visible_at FROM {{prefix}}_jobs WHERE id = %s", (claim.job_id,))

    assert backend.release([claim]) == 1

    row = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (claim.job_id,))
    assert (row["status"], row["failure_count"], row["run_count"]) == ("pending", 0, 1)
    assert (row["claimed_by"], row["claim_expires_at"], row["finished_at"]) == (None, None, None)
    assert row["visible_at"] == visible_at, "a released job keeps its place (ADR 0110)"
    [entry] = db.journal(claim.job_id)
    assert (entry["outcome"], entry["run_no"]) == ("released", 1)
    [again] = claim_all()
    assert again.claim.run_count == 2


def test_release_is_idempotent_and_skips_claims_already_finished(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job(), new_job()])
    held, finished = (job.claim for job in claim_all())
    backend.finish([Finished(finished, Outcome(OutcomeKind.COMPLETED))])

    assert backend.release([held, finished]) == 1
    assert backend.release([held, finished]) == 0
    assert backend.release([]) == 0

    assert [e["outcome"] for e in db.journal(held.job_id)] == ["released"]
    assert [e["outcome"] for e in db.journal(finished.job_id)] == ["completed"]


def test_releasing_a_cancelled_claim_ends_it_dead(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    cancelled, other = running(backend, claim_all, 2)
    backend.cancel_job(cancelled.job_id)

    assert backend.release([cancelled, other]) == 2

    assert stored_row(db, cancelled.job_id)["status"] == "dead"
    assert stored_row(db, cancelled.job_id)["finished_at"] is not None
    assert stored_row(db, other.job_id)["status"] == "pending"
    assert [(e["outcome"], e["note"]) for e in db.journal(cancelled.job_id)] == [
        ("dead", "cancelled (worker shutdown)")
    ]


# -- recover_stale (ADR 19, 0106) ------------------------------------------------------


def test_recovery_returns_expired_claims_to_pending_as_a_failure(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job(), new_job()])
    expired, live = (job.claim for job in claim_all())
    expire(db, expired.job_id)

    assert backend.recover_stale(max_failures={}, default_max_failures=20, limit=10) == 1

    row = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (expired.job_id,))
    assert (row["status"], row["failure_count"], row["claimed_by"]) == ("pending", 1, None)
    [entry] = db.journal(expired.job_id)
    assert (entry["outcome"], entry["note"]) == ("stale-recovered", f"lease of {WORKER} expired")
    assert db.scalar("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (live.job_id,)) == (
        "claimed"
    )
    assert backend.recover_stale(max_failures={}, default_max_failures=20, limit=10) == 0


def test_recovery_at_the_backstop_makes_the_job_dead(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job("contract.a"), new_job("contract.b"), new_job("contract.c")])
    claimed = claim_all(["contract.a", "contract.b", "contract.c"])
    db.execute("UPDATE {{prefix}}_jobs SET failure_count = 2")
    expire(db, *(job.claim.job_id for job in claimed))

    recovered = backend.recover_stale(
        max_failures={"contract.a": 3, "contract.b": 10}, default_max_failures=3, limit=10
    )

    assert recovered == 3
    status = {r["kind"]: (r["status"], r["failure_count"]) for r in db.jobs()}
    assert status == {
        "contract.a": ("dead", 3),  # its own backstop
        "contract.b": ("pending", 3),  # a higher backstop of its own
        "contract.c": ("dead", 3),  # the default
    }
    entries = {e["kind"]: (e["outcome"], e["note"]) for e in db.journal()}
    assert entries["contract.a"] == ("dead", f"lease of {WORKER} expired; max_failures reached")
    assert entries["contract.b"][0] == "stale-recovered"
    dead = db.all("SELECT finished_at FROM {{prefix}}_jobs WHERE status = 'dead'")
    assert all(r["finished_at"] is not None for r in dead)


def test_recovery_takes_at_most_limit_rows_oldest_expiry_first(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job() for _ in range(3)])
    first, second, third = (job.claim for job in claim_all())
    expire(db, first.job_id, ago=timedelta(minutes=1))
    expire(db, second.job_id, ago=timedelta(minutes=3))
    expire(db, third.job_id, ago=timedelta(minutes=2))

    assert backend.recover_stale(max_failures={}, default_max_failures=20, limit=2) == 2

    pending = {r["id"] for r in db.jobs() if r["status"] == "pending"}
    assert pending == {second.job_id, third.job_id}
    assert backend.recover_stale(max_failures={KIND: 20}, default_max_failures=20, limit=2) == 1


def test_recovering_a_cancelled_claim_ends_it_dead_and_counts_the_failure(
    backend: Backend, db: Any, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    backend.cancel_job(claim.job_id)
    db.execute(
        "UPDATE {{prefix}}_jobs SET claim_expires_at = now() - interval '1 second' WHERE id = %s",
        (claim.job_id,),
    )

    assert backend.recover_stale(max_failures={}, default_max_failures=20, limit=10) == 1

    job = stored_row(db, claim.job_id)
    assert (job["status"], job["failure_count"]) == ("dead", 1)
    assert [(e["outcome"], e["note"]) for e in db.journal(claim.job_id)] == [
        ("dead", f"cancelled (lease of {claim.claimed_by} expired)")
    ]
