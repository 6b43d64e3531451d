"""The Workers role (venturi/backend/), the worker registry (ADR 0119): register,
heartbeat (with its sweep), deregister, list, and the kinds with due work that no live
worker serves.

An entry is made expired without waiting by registering it with a negative
``expires_in``: its expiry is then already in the (database's) past.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest
from backends import ClaimAll, new_job

from venturi.backend import Backend
from venturi.types import WorkerInfo, WorkerRegistration

LIVE = timedelta(minutes=1)
EXPIRED = timedelta(seconds=-1)


def entry(worker_id: str = "host-a:100", *kinds: str, concurrency: int = 4) -> WorkerRegistration:
    return WorkerRegistration(
        id=worker_id, version="1.2.3", kinds=kinds or ("contract.kind",), concurrency=concurrency
    )


@pytest.fixture(autouse=True)
def empty_registry(database_url: str, prefix: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {prefix}_workers")


def only(backend: Backend) -> WorkerInfo:
    (info,) = backend.list_workers()
    return info


def ids(backend: Backend) -> list[str]:
    return [info.id for info in backend.list_workers()]


# -- register / list / deregister ------------------------------------------------------------


def test_a_registered_worker_is_listed_with_what_it_said_and_database_times(
    backend: Backend,
) -> None:
    before = backend.now()
    backend.register_worker(entry("host-a:100", "a.one", "a.two", concurrency=3), expires_in=LIVE)
    after = backend.now()

    info = only(backend)
    assert (info.id, info.version, info.kinds, info.concurrency, info.running) == (
        "host-a:100",
        "1.2.3",
        ("a.one", "a.two"),
        3,
        0,
    )
    assert before <= info.started_at == info.heartbeat_at <= after
    assert info.expires_at == info.heartbeat_at + LIVE
    assert info.claimed_by == "host-a:100"


def test_a_worker_serving_no_kinds_registers_with_an_empty_list(backend: Backend) -> None:
    backend.register_worker(
        WorkerRegistration("host-a:100", "1.2.3", (), concurrency=1), expires_in=LIVE
    )
    assert only(backend).kinds == ()


def test_registering_again_replaces_the_entry_of_the_same_id(backend: Backend) -> None:
    backend.register_worker(entry("host-a:100", "old.kind", concurrency=2), expires_in=LIVE)
    first = only(backend)
    backend.heartbeat_worker(
        entry("host-a:100", "old.kind", concurrency=2), running=2, expires_in=LIVE, sweep_limit=10
    )

    backend.register_worker(entry("host-a:100", "new.kind", concurrency=9), expires_in=LIVE)

    second = only(backend)
    assert (second.kinds, second.concurrency, second.running) == (("new.kind",), 9, 0)
    assert second.started_at > first.started_at


def test_workers_are_listed_newest_started_first(backend: Backend) -> None:
    for worker_id in ("host-a:1", "host-b:2", "host-a:1#2"):
        backend.register_worker(entry(worker_id), expires_in=LIVE)

    assert ids(backend) == ["host-a:1#2", "host-b:2", "host-a:1"]
    assert [info.claimed_by for info in backend.list_workers()] == [
        "host-a:1",
        "host-b:2",
        "host-a:1",
    ]


def test_expired_entries_are_not_listed(backend: Backend) -> None:
    backend.register_worker(entry("host-a:1"), expires_in=LIVE)
    backend.register_worker(entry("host-b:2"), expires_in=EXPIRED)

    assert ids(backend) == ["host-a:1"]


def test_deregister_deletes_the_entry_once(backend: Backend) -> None:
    backend.register_worker(entry("host-a:1"), expires_in=LIVE)
    backend.register_worker(entry("host-b:2"), expires_in=LIVE)

    assert backend.deregister_worker("host-a:1") is True
    assert backend.deregister_worker("host-a:1") is False
    assert ids(backend) == ["host-b:2"]


def test_an_empty_registry_lists_nothing(backend: Backend) -> None:
    assert backend.list_workers() == []
    assert backend.deregister_worker("nobody:0") is False


# -- heartbeat -------------------------------------------------------------------------------


def test_a_heartbeat_refreshes_heartbeat_running_and_expiry_and_keeps_started_at(
    backend: Backend,
) -> None:
    worker = entry("host-a:1")
    backend.register_worker(worker, expires_in=LIVE)
    registered = only(backend)

    assert backend.heartbeat_worker(worker, running=3, expires_in=2 * LIVE, sweep_limit=10) == []

    beaten = only(backend)
    assert beaten.started_at == registered.started_at
    assert beaten.heartbeat_at > registered.heartbeat_at
    assert beaten.running == 3
    assert beaten.expires_at == beaten.heartbeat_at + 2 * LIVE


def test_a_heartbeat_brings_back_its_own_expired_entry_instead_of_sweeping_it(
    backend: Backend,
) -> None:
    worker = entry("host-a:1")
    backend.register_worker(worker, expires_in=EXPIRED)
    assert backend.list_workers() == []

    assert backend.heartbeat_worker(worker, running=1, expires_in=LIVE, sweep_limit=10) == []
    assert ids(backend) == ["host-a:1"]


def test_a_heartbeat_re_creates_an_entry_that_was_swept(backend: Backend) -> None:
    worker = entry("host-a:1", "a.kind", concurrency=5)
    backend.register_worker(worker, expires_in=LIVE)
    backend.deregister_worker(worker.id)

    backend.heartbeat_worker(worker, running=2, expires_in=LIVE, sweep_limit=10)

    info = only(backend)
    assert (info.id, info.kinds, info.concurrency, info.running) == ("host-a:1", ("a.kind",), 5, 2)
    assert info.started_at == info.heartbeat_at


def test_a_heartbeat_sweeps_other_expired_entries_and_returns_their_ids(
    backend: Backend,
) -> None:
    live = entry("host-a:1")
    backend.register_worker(live, expires_in=LIVE)
    backend.register_worker(entry("host-b:2"), expires_in=LIVE)
    for worker_id in ("dead-c:3", "dead-d:4"):
        backend.register_worker(entry(worker_id), expires_in=EXPIRED)

    swept = backend.heartbeat_worker(live, running=0, expires_in=LIVE, sweep_limit=10)

    assert sorted(swept) == ["dead-c:3", "dead-d:4"]
    assert sorted(ids(backend)) == ["host-a:1", "host-b:2"]
    assert backend.heartbeat_worker(live, running=0, expires_in=LIVE, sweep_limit=10) == []


def test_one_heartbeat_sweeps_at_most_sweep_limit_entries_oldest_expiry_first(
    backend: Backend,
) -> None:
    live = entry("host-a:1")
    backend.register_worker(live, expires_in=LIVE)
    for n in range(5):
        backend.register_worker(entry(f"dead:{n}"), expires_in=EXPIRED - timedelta(minutes=n))

    first = backend.heartbeat_worker(live, running=0, expires_in=LIVE, sweep_limit=2)
    rest = backend.heartbeat_worker(live, running=0, expires_in=LIVE, sweep_limit=10)

    assert sorted(first) == ["dead:3", "dead:4"]
    assert sorted(rest) == ["dead:0", "dead:1", "dead:2"]


def test_workers_that_expired_together_heartbeat_at_once_without_waiting_on_each_other(
    build_backend: Callable[[], Backend], backend: Backend
) -> None:
    """Each sweeps the other's (expired) entry while refreshing its own: never a deadlock,
    and neither live worker loses its entry."""
    workers = [entry(f"host-{n}:{n}") for n in range(4)]
    backends = [build_backend() for _ in workers]
    errors: list[BaseException] = []
    for _ in range(10):
        for worker in workers:
            backend.register_worker(worker, expires_in=EXPIRED)
        barrier = threading.Barrier(len(workers))

        def beat(own: Backend, worker: WorkerRegistration, gate: threading.Barrier) -> None:
            try:
                gate.wait(5)
                own.heartbeat_worker(worker, running=0, expires_in=LIVE, sweep_limit=10)
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=beat, args=(own, worker, barrier))
            for own, worker in zip(backends, workers, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)

        assert errors == []
        # A sweep may take a peer's expired entry before the peer refreshes it; the
        # peer's heartbeat then re-creates it, so every live worker is listed.
        assert sorted(ids(backend)) == sorted(w.id for w in workers)


# -- unserved kinds --------------------------------------------------------------------------


def test_due_kinds_that_no_live_worker_serves_are_unserved(backend: Backend) -> None:
    backend.enqueue([new_job("k.served"), new_job("k.orphan"), new_job("k.orphan")])
    backend.enqueue([new_job("k.another")])
    backend.register_worker(entry("host-a:1", "k.served", "k.idle"), expires_in=LIVE)

    assert backend.unserved_kinds() == ["k.another", "k.orphan"]


def test_without_any_live_worker_every_due_kind_is_unserved(backend: Backend) -> None:
    backend.enqueue([new_job("k.one"), new_job("k.two")])
    backend.register_worker(entry("dead:1", "k.one", "k.two"), expires_in=EXPIRED)

    assert backend.unserved_kinds() == ["k.one", "k.two"]


def test_only_due_pending_jobs_make_a_kind_unserved(backend: Backend, claim_all: ClaimAll) -> None:
    backend.enqueue([new_job("k.later", delay=timedelta(hours=1))])
    backend.enqueue([new_job("k.held")])
    (held,) = claim_all(["k.held"])
    backend.enqueue([new_job("k.due", delay=timedelta(hours=1)), new_job("k.due")])

    assert backend.unserved_kinds() == ["k.due"]
    assert held.kind == "k.held"


def test_an_empty_queue_has_no_unserved_kinds(backend: Backend) -> None:
    assert backend.unserved_kinds() == []
