"""The worker's runtime against real PostgreSQL: order, caps, kinds, waiting,
shutdown, leases and the fence, and a database outage.

Handlers synchronise with the test through ``threading.Event``s; the test
waits with a bounded ``wait_until`` (a guard against hanging, never a timing
assertion). Rows a crashed or competing worker would have left are written by
hand with ``db``. The outage test puts a TCP proxy between the worker and the
server and cuts it: the connections really break, nothing is simulated above
the socket.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from support import TcpProxy, count, row, wait_until
from ulid import ULID

import venturi
from venturi.errors import ConfigurationError
from venturi.types import Priority
from venturi.worker import Worker


def logged(caplog: pytest.LogCaptureFixture, text: str) -> Callable[[], bool]:
    return lambda: any(text in record.getMessage() for record in list(caplog.records))


# -- claim order, caps, kinds ----------------------------------------------------------


def test_one_slot_runs_high_before_normal_before_low_then_oldest_first(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    ran: list[str] = []

    @app.task(kind="rt.order")
    def note(label: str) -> None:
        ran.append(label)

    for label, tier in [
        ("low-1", Priority.LOW),
        ("normal-1", Priority.NORMAL),
        ("high-1", Priority.HIGH),
        ("normal-2", Priority.NORMAL),
        ("high-2", Priority.HIGH),
        ("low-2", Priority.LOW),
    ]:
        note.apply_async((label,), priority=tier)
    start_worker(concurrency=1)

    wait_until(lambda: count(db, "status = 'completed'") == 6)
    assert ran == ["high-1", "high-2", "normal-1", "normal-2", "low-1", "low-2"]


def test_a_concurrency_cap_of_two_is_never_exceeded_while_other_kinds_keep_flowing(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    lock = threading.Lock()
    running = 0
    peak = 0
    gate = threading.Event()

    @app.task(kind="rt.capped", concurrency=2)
    def capped(n: int) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        try:
            gate.wait(10)
        finally:
            with lock:
                running -= 1

    @app.task(kind="rt.free")
    def free(n: int) -> None: ...

    for n in range(20):
        capped.delay(n)
    for n in range(10):
        free.delay(n)
    start_worker(concurrency=8)

    # The capped kind is full and six slots are free: every other job runs meanwhile.
    wait_until(lambda: count(db, "kind = 'rt.free' AND status = 'completed'") == 10)
    assert peak == 2
    assert count(db, "kind = 'rt.capped' AND status = 'claimed'") == 2
    gate.set()
    wait_until(lambda: count(db, "kind = 'rt.capped' AND status = 'completed'") == 20)
    assert peak == 2


def test_a_worker_claims_only_the_kinds_it_serves_and_never_unknown_kinds(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="rt.mine")
    def mine() -> None: ...

    @app.task(kind="rt.theirs")
    def theirs() -> None: ...

    unknown = str(ULID())
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)
        VALUES (%s, 'rt.nobody.declares', '{}', 'pending', now() - interval '1 hour',
                now() - interval '1 hour')
        """,
        (unknown,),
    )
    mine_ref, theirs_ref = mine.delay(), theirs.delay()
    only_mine = start_worker(kinds=["rt.mine"])
    wait_until(lambda: row(db, mine_ref.id)["status"] == "completed")
    only_mine.stop()
    assert (row(db, theirs_ref.id)["status"], row(db, theirs_ref.id)["run_count"]) == ("pending", 0)

    start_worker()  # kinds=None: every task of the App
    wait_until(lambda: row(db, theirs_ref.id)["status"] == "completed")
    assert (row(db, unknown)["status"], row(db, unknown)["run_count"]) == ("pending", 0)


def test_a_worker_refuses_kinds_that_no_task_declares(app: venturi.App) -> None:
    @app.task(kind="rt.known")
    def known() -> None: ...

    with pytest.raises(ConfigurationError, match=r"rt\.unknown"):
        Worker(app, kinds=["rt.known", "rt.unknown"])
    with pytest.raises(ConfigurationError, match="recovery_interval"):
        Worker(app, recovery_interval=30)
    with pytest.raises(ConfigurationError, match="prefetch"):
        Worker(app, prefetch=-1)


# -- waiting ----------------------------------------------------------------------------


def test_an_idle_worker_is_woken_by_the_enqueue_notification_long_before_its_poll(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="rt.wake")
    def wake() -> None: ...

    start_worker(poll_interval=30)
    wait_until(
        lambda: db.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
            (f'LISTEN "{db.prefix}_wakeup"',),
        )
    )
    ref = wake.delay()
    wait_until(lambda: row(db, ref.id)["status"] == "completed", timeout=5)


def test_a_delayed_job_is_run_once_due_without_any_notification(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="rt.later")
    def later() -> None: ...

    # Written by hand: no NOTIFY is sent, so only the visible_at wait can find it.
    job_id = str(ULID())
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)
        VALUES (%s, 'rt.later', '{}', 'pending', now(), now() + interval '1 second')
        """,
        (job_id,),
    )
    start_worker(poll_interval=30)

    wait_until(lambda: row(db, job_id)["status"] == "completed", timeout=6)
    [entry] = db.journal(job_id)
    assert entry["recorded_at"] >= row(db, job_id)["visible_at"]


# -- claim-ahead ------------------------------------------------------------------------


def test_short_jobs_are_claimed_ahead_and_stop_releases_the_held_ones_unrun(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    started, gate = threading.Event(), threading.Event()
    ran: list[int] = []

    @app.task(kind="rt.ahead")
    def ahead(n: int) -> None:
        ran.append(n)
        if n == 0:
            started.set()
            gate.wait(10)

    worker = start_worker(concurrency=1)
    ahead.delay_many([(-n,) for n in range(1, 21)])  # short jobs: the worker learns its pace
    wait_until(lambda: count(db, "status = 'completed'") == 20)
    # One transaction, so one claim sees all eleven; job 0 is first in claim order.
    held = ahead.delay_many([(n,) for n in range(11)])
    assert started.wait(5)

    # One handler, eleven claims: ten are held ahead while job 0 runs.
    assert count(db, "status = 'claimed'") == 11
    worker.stop(grace=0.2)
    gate.set()

    assert sorted(n for n in ran if n >= 0) == [0]
    for ref in held:
        job = row(db, ref.id)
        assert (job["status"], job["run_count"], job["failure_count"]) == ("pending", 1, 0)
        assert db.outcomes(ref.id) == ["released"]

    start_worker(concurrency=1)
    wait_until(lambda: count(db, "status = 'completed'") == 31)
    assert all(db.outcomes(ref.id) == ["released", "completed"] for ref in held)


def test_jobs_longer_than_the_prefetch_horizon_are_not_claimed_ahead(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    started, gate = threading.Event(), threading.Event()

    @app.task(kind="rt.long")
    def long(n: int) -> None:
        if n == 0:
            started.set()
            gate.wait(10)
        else:
            time.sleep(0.3)  # one handler at 0.3 s a job starts none within 0.1 s

    start_worker(concurrency=1)
    long.delay(-1)
    wait_until(lambda: count(db, "status = 'completed'") == 1)
    long.delay_many([(n,) for n in range(3)])
    assert started.wait(5)

    assert count(db, "status = 'claimed'") == 1
    gate.set()
    wait_until(lambda: count(db, "status = 'completed'") == 4)


# -- shutdown ---------------------------------------------------------------------------


def test_stop_releases_a_job_still_running_after_the_grace_without_counting_a_failure(
    app: venturi.App,
    db: Any,
    start_worker: Callable[..., Worker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    started, gate, ended = threading.Event(), threading.Event(), threading.Event()

    @app.task(kind="rt.slow")
    def slow() -> str:
        started.set()
        try:
            gate.wait(10)
        finally:
            ended.set()
        return "too late"

    ref = slow.delay()
    worker = start_worker()
    assert started.wait(5)
    worker.stop(grace=0.2)

    job = row(db, ref.id)
    assert (job["status"], job["claimed_by"], job["claim_expires_at"]) == ("pending", None, None)
    assert (job["run_count"], job["failure_count"]) == (1, 0)
    assert db.outcomes(ref.id) == ["released"]

    gate.set()
    assert ended.wait(5)
    wait_until(logged(caplog, "after it was released at shutdown; that outcome is discarded"))
    assert row(db, ref.id)["status"] == "pending"
    assert db.outcomes(ref.id) == ["released"]


def test_stop_lets_a_running_handler_finish_within_the_grace(
    app: venturi.App,
    db: Any,
    start_worker: Callable[..., Worker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="venturi.worker")
    started, gate = threading.Event(), threading.Event()

    @app.task(kind="rt.finishing")
    def finishing() -> str:
        started.set()
        gate.wait(10)
        return "finished"

    ref = finishing.delay()
    worker = start_worker()
    assert started.wait(5)
    stopper = threading.Thread(target=worker.stop, kwargs={"grace": 10})
    stopper.start()
    wait_until(logged(caplog, "stopping"))
    gate.set()
    stopper.join(10)
    assert not stopper.is_alive()

    assert row(db, ref.id)["status"] == "completed"
    assert db.outcomes(ref.id) == ["completed"]

    # The App outlives its worker: a web process keeps enqueueing.
    @app.task(kind="rt.after")
    def after() -> None: ...

    assert row(db, after.delay().id)["status"] == "pending"


def test_start_and_stop_are_idempotent_and_a_stopped_worker_can_start_again(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="rt.again")
    def again() -> None: ...

    worker = Worker(app, poll_interval=1)
    worker.stop()
    worker.start()
    worker.start()
    worker.stop()
    worker.stop()
    ref = again.delay()
    worker.start()
    try:
        wait_until(lambda: row(db, ref.id)["status"] == "completed")
    finally:
        worker.stop()


def test_run_returns_on_sigterm_and_leaves_the_app_open_for_its_creator_to_close(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="rt.run")
    def job() -> None: ...

    first = job.delay()
    worker = Worker(app, concurrency=1, poll_interval=1)
    previous = signal.getsignal(signal.SIGTERM)

    def terminate_once_done() -> None:
        try:
            wait_until(lambda: row(db, first.id)["status"] == "completed")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=terminate_once_done)
    sender.start()
    worker.run()  # returns on SIGTERM instead of killing the test process
    sender.join(timeout=5)

    assert signal.getsignal(signal.SIGTERM) is previous
    # The App still works: the worker did not close it.
    second = job.delay()
    assert app.job(second.id).job.status is venturi.Status.PENDING
    assert worker.run_once() == 1
    assert row(db, second.id)["status"] == "completed"


# -- leases and the fence ---------------------------------------------------------------


def test_a_long_job_keeps_its_lease_renewed_past_the_first_expiry(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    started, gate = threading.Event(), threading.Event()

    @app.task(kind="rt.long", lease=timedelta(seconds=1.5))
    def long_job() -> None:
        started.set()
        gate.wait(20)

    ref = long_job.delay()
    start_worker(recovery_interval=0.5)
    assert started.wait(5)
    first_expiry = row(db, ref.id)["claim_expires_at"]

    wait_until(lambda: db.scalar("SELECT now() > %s", (first_expiry,)))
    job = row(db, ref.id)
    assert (job["status"], job["run_count"]) == ("claimed", 1)
    assert job["claim_expires_at"] > first_expiry
    gate.set()
    wait_until(lambda: row(db, ref.id)["status"] == "completed")
    assert db.outcomes(ref.id) == ["completed"]
    assert (row(db, ref.id)["run_count"], row(db, ref.id)["failure_count"]) == (1, 0)


def test_a_claim_whose_lease_expired_is_recovered_then_completed(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="rt.stale")
    def stale() -> str:
        return "second time lucky"

    job_id = str(ULID())
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at,
                                     claimed_by, claim_expires_at, run_count)
        VALUES (%s, 'rt.stale', '{}', 'claimed', now() - interval '5 minutes',
                now() - interval '5 minutes', 'crashed-host:1', now() - interval '1 second', 1)
        """,
        (job_id,),
    )
    start_worker(recovery_interval=0.5)

    wait_until(lambda: row(db, job_id)["status"] == "completed")
    job = row(db, job_id)
    assert (job["run_count"], job["failure_count"]) == (2, 1)
    assert [(e["outcome"], e["run_no"]) for e in db.journal(job_id)] == [
        ("stale-recovered", 1),
        ("completed", 2),
    ]


def test_a_claim_taken_over_is_no_longer_renewed_and_its_late_result_is_discarded(
    app: venturi.App,
    db: Any,
    start_worker: Callable[..., Worker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    started, gate = threading.Event(), threading.Event()

    @app.task(kind="rt.stolen", lease=timedelta(seconds=1.5))
    def victim() -> str:
        started.set()
        gate.wait(10)
        return "late result"

    ref = victim.delay()
    start_worker()
    assert started.wait(5)
    # As if the lease had lapsed, been recovered, and another worker had claimed it.
    db.execute(
        """
        UPDATE {{prefix}}_jobs
        SET claimed_by = 'thief:1', run_count = run_count + 1,
            claim_expires_at = now() + interval '1 hour'
        WHERE id = %s
        """,
        (ref.id,),
    )
    wait_until(logged(caplog, f"lease lost for job {ref.id} (kind rt.stolen) run 1"))
    gate.set()

    wait_until(logged(caplog, f"job {ref.id} (kind rt.stolen) run 1 lost its claim"))
    job = row(db, ref.id)
    assert (job["status"], job["claimed_by"], job["run_count"]) == ("claimed", "thief:1", 2)
    assert job["finished_at"] is None
    assert "completed" not in db.outcomes(ref.id)


# -- database outage --------------------------------------------------------------------


@pytest.mark.slow
def test_a_database_outage_is_waited_out_and_no_job_is_lost_or_completed_twice(
    app: venturi.App,
    db: Any,
    database_url: str,
    prefix: str,
    start_worker: Callable[..., Worker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy = TcpProxy.in_front_of(database_url)
    proxied = venturi.App(
        proxy.url(database_url),
        prefix=prefix,
        set_as_current=False,
    )
    lock = threading.Lock()
    running = 0
    gate = threading.Event()

    @proxied.task(kind="rt.outage")
    def job(n: int) -> int:
        nonlocal running
        with lock:
            running += 1
        gate.wait(10)
        return n

    try:
        refs = [job.delay(n) for n in range(12)]
        worker = start_worker(proxied, concurrency=4, poll_interval=0.5)
        wait_until(lambda: running == 4)

        proxy.cut()
        gate.set()  # four outcomes now wait for the database
        wait_until(logged(caplog, "committer: database unreachable"))
        wait_until(logged(caplog, "claim: database unreachable"))
        assert count(db, "status = 'completed'") == 0
        proxy.restore()

        wait_until(lambda: count(db, "status = 'completed'") == 12, timeout=40)
        worker.stop()
    finally:
        proxied.close()
        proxy.stop()
    for ref in refs:
        assert db.outcomes(ref.id) == ["completed"]
        assert (row(db, ref.id)["run_count"], row(db, ref.id)["failure_count"]) == (1, 0)
