"""The Coordination role (venturi/backend/): what workers and beats wait and agree on,
``time_until_visible``, ``now``, ``listen``, ``try_lead`` and ``leader`` (ADR 20, 0102,
0108, 0131)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from backends import KIND, BackendCase, ClaimAll, new_job

from venturi.backend import Backend

ROLE = "contract-role"


# -- time_until_visible ---------------------------------------------------------------


def test_time_until_visible_is_none_without_pending_jobs_of_those_kinds(
    backend: Backend, claim_all: ClaimAll
) -> None:
    assert backend.time_until_visible([KIND]) is None
    backend.enqueue([new_job("contract.other"), new_job()])
    claim_all()
    assert backend.time_until_visible([KIND]) is None, "claimed rows are not waited for"
    assert backend.time_until_visible([]) is None


def test_time_until_visible_is_the_wait_for_the_soonest_future_job(backend: Backend) -> None:
    backend.enqueue([new_job(delay=timedelta(hours=1)), new_job(delay=timedelta(minutes=10))])
    backend.enqueue([new_job("contract.other", delay=timedelta(minutes=1))])

    wait = backend.time_until_visible([KIND])

    assert wait is not None
    assert timedelta(minutes=9) < wait <= timedelta(minutes=10)


def test_time_until_visible_is_zero_or_negative_when_a_job_is_due(backend: Backend) -> None:
    backend.enqueue([new_job(delay=timedelta(hours=1)), new_job()])

    wait = backend.time_until_visible([KIND, "contract.other"])

    assert wait is not None
    assert wait <= timedelta(0)


# -- now ------------------------------------------------------------------------------


def test_now_is_the_database_clock_that_stamps_the_rows(backend: Backend) -> None:
    before = backend.now()
    job = new_job()
    backend.enqueue([job])
    after = backend.now()

    assert before.tzinfo is not None
    detail = backend.get_job(job.id)
    assert detail is not None
    assert before <= detail.job.created_at <= after


# -- listen ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["one", "few", "large"])
def test_an_enqueue_of_any_size_wakes_a_listener_once_committed(
    backend: Backend, backend_case: BackendCase, size: str
) -> None:
    count = {"one": 1, "few": 3, "large": backend_case.large_batch}[size]
    listener = backend.listen()
    try:
        listener.wait(0)
        backend.enqueue([new_job() for _ in range(count)])
        assert listener.wait(5.0)
    finally:
        listener.close()


def test_a_deduplicated_enqueue_wakes_a_listener(backend: Backend) -> None:
    listener = backend.listen()
    try:
        listener.wait(0)
        backend.enqueue([new_job(dedup_key="k")])
        assert listener.wait(5.0)
    finally:
        listener.close()


def test_wait_without_an_enqueue_times_out_false_and_close_is_idempotent(
    backend: Backend,
) -> None:
    listener = backend.listen()
    try:
        assert listener.wait(0) is False
        assert listener.wait(0.2) is False
        assert listener.wait(-1) is False
    finally:
        listener.close()
        listener.close()


def test_every_listener_of_the_prefix_is_woken(backend: Backend) -> None:
    listeners = [backend.listen(), backend.listen()]
    try:
        for listener in listeners:
            listener.wait(0)
        backend.enqueue([new_job()])
        assert all(listener.wait(5.0) for listener in listeners)
    finally:
        for listener in listeners:
            listener.close()


# -- try_lead -------------------------------------------------------------------------


def test_a_role_is_held_by_one_holder_at_a_time(backend: Backend) -> None:
    leader = backend.try_lead(ROLE)
    assert leader is not None
    try:
        assert leader.is_held()
        assert backend.try_lead(ROLE) is None
    finally:
        leader.release()


def test_releasing_a_role_lets_another_take_it_and_release_is_idempotent(
    backend: Backend,
) -> None:
    first = backend.try_lead(ROLE)
    assert first is not None
    first.release()
    first.release()

    second = backend.try_lead(ROLE)
    assert second is not None
    second.release()


def test_a_released_role_is_no_longer_held(backend: Backend) -> None:
    leader = backend.try_lead(ROLE)
    assert leader is not None
    leader.release()
    assert leader.is_held() is False


def test_roles_are_independent_of_each_other(backend: Backend) -> None:
    one, two = backend.try_lead(ROLE), backend.try_lead("another-role")
    assert one is not None and two is not None
    one.release()
    two.release()


# -- leader -----------------------------------------------------------------------------


def test_leader_is_none_while_nobody_holds_the_role(backend: Backend) -> None:
    assert backend.leader(ROLE) is None
    held = backend.try_lead(ROLE)
    assert held is not None
    held.release()
    assert backend.leader(ROLE) is None


def test_leader_names_the_holding_process_and_since_when(backend: Backend) -> None:
    before = backend.now()
    held = backend.try_lead(ROLE)
    assert held is not None
    try:
        found = backend.leader(ROLE)
        after = backend.now()
        assert found is not None
        assert found.role == ROLE
        assert found.holder == f"{socket.gethostname()}:{os.getpid()}"
        assert found.since is not None
        assert before - timedelta(seconds=1) <= found.since <= after
        assert held.is_held()  # a ping on the holding session changes nothing shown
        assert backend.leader(ROLE) == found
        assert backend.leader("another-role") is None
    finally:
        held.release()


def test_leader_follows_the_role_to_its_next_holder(
    backend: Backend, build_backend: Callable[[], Backend]
) -> None:
    first = backend.try_lead(ROLE)
    assert first is not None
    shown = backend.leader(ROLE)
    first.release()
    other = build_backend()
    second = other.try_lead(ROLE)
    assert second is not None
    try:
        now_shown = backend.leader(ROLE)
        assert shown is not None and now_shown is not None
        assert now_shown.session_pid != shown.session_pid
        assert now_shown.since is not None and shown.since is not None
        assert now_shown.since >= shown.since
    finally:
        second.release()


def test_a_holder_whose_session_ended_is_no_longer_the_leader(backend: Backend, db: Any) -> None:
    held = backend.try_lead(ROLE)
    assert held is not None
    try:
        found = backend.leader(ROLE)
        assert found is not None
        # With a timeout, the call returns once the session is gone (its locks with it).
        db.execute("SELECT pg_terminate_backend(%s, 10000)", (found.session_pid,))
        assert backend.leader(ROLE) is None
        assert held.is_held() is False
    finally:
        held.release()


def test_leaders_of_other_prefixes_are_not_shown(
    backend: Backend, backend_case: BackendCase, database_url: str
) -> None:
    other = backend_case.build(database_url, "venturi_contract_other")
    held = other.try_lead(ROLE)
    assert held is not None
    try:
        assert backend.leader(ROLE) is None
        assert other.leader(ROLE) is not None
    finally:
        held.release()
        other.close()
