"""The Control role (venturi/backend/), control at run time (ADR 0139): kind states and
limit overrides (and that every claim statement leaves a paused kind alone), stored
schedules, backfills and the audit trail."""

from __future__ import annotations

from datetime import timedelta

import pytest
from backends import KIND, LEASE, WORKER, ClaimAll, new_job

from venturi.backend import Backend
from venturi.controls import Limits, StoredSchedule
from venturi.errors import DuplicateSchedule, ScheduleNotFound
from venturi.types import KindLimits

OTHER = "contract.other"


def schedule(name: str = "nightly", **changes: object) -> StoredSchedule:
    values: dict[str, object] = {
        "name": name,
        "cron": "0 3 * * *",
        "timezone": "UTC",
        "kind": KIND,
        "kwargs": {"n": 1},
    }
    values.update(changes)
    return StoredSchedule(**values)  # type: ignore[arg-type]


# -- kind states: the claim statements read them ---------------------------------------------


def test_a_paused_kind_is_claimed_by_no_claim_and_its_backlog_shortens_no_wait(
    backend: Backend, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job(KIND), new_job(OTHER)])
    control = backend.set_kind_paused(KIND, paused=True, actor="ops")
    assert (control.kind, control.paused) == (KIND, True)

    claimed = claim_all([KIND, OTHER])
    assert [job.kind for job in claimed] == [OTHER]
    assert claim_all([KIND]) == []
    limited = backend.claim_limited(
        kinds=[KIND],
        limit=5,
        worker_id=WORKER,
        lease=LEASE,
        limits={KIND: KindLimits(global_concurrency=3)},
    )
    assert limited.jobs == []
    assert backend.time_until_visible([KIND]) is None


def test_a_paused_fair_kind_takes_no_turn(backend: Backend) -> None:
    backend.enqueue([new_job(KIND, fair_key="tenant-a"), new_job(KIND, fair_key="tenant-b")])
    backend.set_kind_paused(KIND, paused=True, actor="ops")

    assert backend.claim_fair(kind=KIND, limit=5, worker_id=WORKER, lease=LEASE) == []
    backend.set_kind_paused(KIND, paused=False, actor="ops")
    assert len(backend.claim_fair(kind=KIND, limit=5, worker_id=WORKER, lease=LEASE)) == 2


def test_resuming_makes_the_backlog_claimable_again_and_running_jobs_are_not_touched(
    backend: Backend, claim_all: ClaimAll
) -> None:
    backend.enqueue([new_job(KIND)])
    [running] = claim_all()
    backend.enqueue([new_job(KIND)])
    backend.set_kind_paused(KIND, paused=True, actor="ops")
    assert claim_all() == []
    assert backend.renew_leases([running.claim], lease=LEASE).held == {running.claim.job_id}

    control = backend.set_kind_paused(KIND, paused=False, actor="ops")
    assert control.paused is False
    assert len(claim_all()) == 1


def test_limit_overrides_change_only_the_named_limits(backend: Backend) -> None:
    first = backend.set_kind_limits(
        KIND, {"global_concurrency": 4, "rate_limit": "10/s"}, actor="a"
    )
    assert first.overrides == Limits(4, "10/s", None)
    second = backend.set_kind_limits(KIND, {"rate_limit": None, "key_concurrency": 2}, actor="b")
    assert second.overrides == Limits(4, None, 2)
    assert second.paused is False
    paused = backend.set_kind_paused(KIND, paused=True, actor="c")
    assert paused.overrides == Limits(4, None, 2)

    assert backend.kind_controls() == [paused]
    assert backend.kind_controls([OTHER]) == []
    assert backend.kind_controls([KIND, OTHER]) == [paused]


def test_kind_known_sees_jobs_of_any_status_and_stored_states(
    backend: Backend, claim_all: ClaimAll
) -> None:
    assert backend.kind_known(KIND) is False
    backend.enqueue([new_job(KIND)])
    assert backend.kind_known(KIND) is True
    assert backend.kind_known(OTHER) is False
    backend.set_kind_limits(OTHER, {"global_concurrency": 1}, actor="a")
    assert backend.kind_known(OTHER) is True


# -- the audit trail -------------------------------------------------------------------------


def test_every_change_is_journaled_newest_first_with_who_and_database_time(
    backend: Backend,
) -> None:
    before = backend.now()
    backend.set_kind_paused(KIND, paused=True, actor="alice")
    backend.set_kind_limits(KIND, {"global_concurrency": 3}, actor="bob")
    backend.set_kind_paused(KIND, paused=False, actor="carol")
    backend.set_kind_paused(OTHER, paused=True, actor="dave")

    trail = backend.audit_trail("kind", KIND, limit=10)
    assert [(e.actor, e.action, dict(e.details)) for e in trail] == [
        ("carol", "resume", {}),
        ("bob", "set_limits", {"global_concurrency": 3}),
        ("alice", "pause", {}),
    ]
    assert all(before <= e.at <= backend.now() for e in trail)
    assert [e.actor for e in backend.audit_trail("kind", KIND, limit=1)] == ["carol"]
    assert backend.audit_trail("schedule", KIND, limit=10) == []


def test_record_audit_journals_a_change_that_stores_nothing_else(backend: Backend) -> None:
    backend.record_audit("schedule", "nightly", "trigger", {"job_id": "J1"}, actor="ops")
    [entry] = backend.audit_trail("schedule", "nightly", limit=5)
    assert (entry.subject_type, entry.subject, entry.action, dict(entry.details)) == (
        "schedule",
        "nightly",
        "trigger",
        {"job_id": "J1"},
    )


# -- stored schedules ------------------------------------------------------------------------


def test_a_stored_schedule_is_listed_with_database_times(backend: Backend) -> None:
    stored = backend.add_schedule(schedule(), actor="ops")
    assert (stored.name, stored.cron, stored.kind, dict(stored.kwargs), stored.paused) == (
        "nightly",
        "0 3 * * *",
        KIND,
        {"n": 1},
        False,
    )
    assert stored.created_at is not None and stored.created_at <= backend.now()
    assert backend.stored_schedules() == [stored]
    [entry] = backend.audit_trail("schedule", "nightly", limit=5)
    assert (entry.actor, entry.action) == ("ops", "add")


def test_a_duplicate_name_is_refused_and_nothing_is_written(backend: Backend) -> None:
    first = backend.add_schedule(schedule(), actor="ops")
    with pytest.raises(DuplicateSchedule):
        backend.add_schedule(schedule(cron="* * * * *"), actor="intruder")
    assert backend.stored_schedules() == [first]
    assert [e.actor for e in backend.audit_trail("schedule", "nightly", limit=5)] == ["ops"]


def test_pause_resume_and_remove_a_stored_schedule(backend: Backend) -> None:
    backend.add_schedule(schedule(), actor="ops")
    assert backend.set_schedule_paused("nightly", paused=True, actor="ops").paused is True
    assert backend.stored_schedules()[0].paused is True
    assert backend.set_schedule_paused("nightly", paused=False, actor="ops").paused is False
    removed = backend.remove_schedule("nightly", actor="ops")
    assert removed.name == "nightly"
    assert backend.stored_schedules() == []
    actions = [e.action for e in backend.audit_trail("schedule", "nightly", limit=10)]
    assert actions == ["remove", "resume", "pause", "add"]


@pytest.mark.parametrize("change", ["pause", "remove"])
def test_an_unknown_schedule_is_not_found_and_nothing_is_journaled(
    backend: Backend, change: str
) -> None:
    with pytest.raises(ScheduleNotFound):
        if change == "pause":
            backend.set_schedule_paused("missing", paused=True, actor="ops")
        else:
            backend.remove_schedule("missing", actor="ops")
    assert backend.audit_trail("schedule", "missing", limit=5) == []


def test_a_backfill_enqueues_each_tick_once_however_often_it_runs(backend: Backend) -> None:
    backend.add_schedule(schedule(), actor="ops")
    now = backend.now()
    ticks = [now - timedelta(days=d) for d in (3, 2, 1)]
    first = backend.backfill("nightly", [(t, new_job(KIND)) for t in ticks[:2]], actor="ops")
    assert [tick for tick, _ in first] == ticks[:2]
    again = backend.backfill("nightly", [(t, new_job(KIND)) for t in ticks], actor="ops")
    assert [tick for tick, _ in again] == ticks[2:]
    assert backend.count_jobs(status=None, kind=KIND, note=None) == 3
    trail = backend.audit_trail("schedule", "nightly", limit=5)
    assert [(e.action, e.details["enqueued"]) for e in trail[:2]] == [
        ("backfill", 1),
        ("backfill", 2),
    ]


def test_removing_a_schedule_forgets_its_backfills(backend: Backend) -> None:
    backend.add_schedule(schedule(), actor="ops")
    tick = backend.now() - timedelta(days=1)
    backend.backfill("nightly", [(tick, new_job(KIND))], actor="ops")
    backend.remove_schedule("nightly", actor="ops")
    backend.add_schedule(schedule(), actor="ops")
    assert len(backend.backfill("nightly", [(tick, new_job(KIND))], actor="ops")) == 1
