"""Reads from a read replica (SPEC 6.4, ADR 0140): ``App(url, read_url=...)``.

Against a real streaming replica (a private primary and a ``pg_basebackup -R``
standby): job and stats reads come from the standby, and lag with it while its replay
is paused; enqueues, claims, results, cancels and retries go to the primary (the
standby refuses every write, so one sent there would fail). And with a replica that
does not answer, reads fail with ``ReplicaUnavailable`` naming it while a worker runs
jobs on the primary.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from cli_support import COMMAND_TIMEOUT, HERE, cli_env, failed_with, succeeded
from dashboard_support import BASE, TOKEN
from private_server import PrivateServer
from replica_server import Standby
from starlette.testclient import TestClient

import venturi
from venturi.dashboard import create_app
from venturi.errors import ReplicaUnavailable
from venturi.types import Status
from venturi.worker import Worker

UNREACHABLE_REPLICA = "postgresql://reader:s3cret@127.0.0.1:1/replica"


def venturi_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "venturi", *args],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=env,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


# -- an unreachable replica (the shared server is the primary) ----------------------------


def test_reads_fail_naming_the_replica_while_a_worker_runs_jobs_on_the_primary(
    app: venturi.App,
    database_url: str,
    prefix: str,
    start_worker: Callable[..., Worker],
) -> None:
    reader = venturi.App(
        database_url, prefix=prefix, read_url=UNREACHABLE_REPLICA, set_as_current=False
    )
    try:

        @reader.task(kind="replica.square")
        def square(n: int) -> int:
            return n * n

        ref = square.delay(7)  # the primary
        for read in (
            reader.stats,
            reader.jobs,
            reader.job_summaries,
            reader.backlog,
            lambda: reader.job(ref.id),
        ):
            with pytest.raises(ReplicaUnavailable) as caught:
                read()
            message = str(caught.value)
            assert "read replica 127.0.0.1:1 unavailable (cannot reach" in message
            assert "s3cret" not in message and "reader" not in message
        dashboard = create_app(reader, token=TOKEN, public_read=True)
        with TestClient(dashboard, base_url=BASE) as client:
            page = client.get("/")
            assert page.status_code == 503
            assert "read replica 127.0.0.1:1 unavailable" in page.text
            assert "s3cret" not in page.text
        start_worker(reader)
        assert ref.result(timeout=20) == 49
        assert reader.status(ref.id) is Status.COMPLETED
        assert reader.job(ref.id, fresh=True).job.status is Status.COMPLETED
        assert reader.pending_migrations()[0] == []
    finally:
        reader.close()


def test_the_cli_reads_from_read_url_and_says_which_replica_failed(
    app: venturi.App, database_url: str, prefix: str
) -> None:
    env = cli_env(database_url, prefix)
    assert succeeded(venturi_command(env, "stats", "--backlog", "--prefix", prefix)) == "0\n"
    for args in (
        ("stats", "--backlog"),
        ("jobs", "list"),
        ("jobs", "show", "01J00000000000000000000000"),
    ):
        line = failed_with(
            venturi_command(env, *args, "--prefix", prefix, "--read-url", UNREACHABLE_REPLICA), 1
        )
        assert "read replica 127.0.0.1:1 unavailable" in line, line
        assert "s3cret" not in line
    env_replica = {**env, "VENTURI_READ_DATABASE_URL": UNREACHABLE_REPLICA}
    line = failed_with(venturi_command(env_replica, "stats", "--prefix", prefix), 1)
    assert "read replica 127.0.0.1:1 unavailable" in line


# -- a real streaming replica ------------------------------------------------------------


@pytest.fixture(scope="module")
def primary() -> Iterator[PrivateServer]:
    server = PrivateServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def standby(primary: PrivateServer) -> Iterator[Standby]:
    replica = Standby(primary)
    try:
        replica.start()
        yield replica
    finally:
        replica.close()


@pytest.mark.slow
def test_reads_come_from_the_streaming_replica_and_lag_with_it(
    primary: PrivateServer, standby: Standby
) -> None:
    prefix = f"r_{secrets.token_hex(4)}"
    app = venturi.App(primary.url, prefix=prefix, read_url=standby.url, set_as_current=False)
    worker: Worker | None = None
    try:
        app.migrate()

        @app.task(kind="replica.add")
        def add(a: int, b: int) -> int:
            return a + b

        first = add.delay(1, 2)
        standby.caught_up()
        assert app.job(first.id).job.status is Status.PENDING
        assert app.backlog() == 1

        standby.pause_replay()
        try:
            second = add.delay(3, 4)
            third = add.delay(5, 6)
            # The primary has them now; the replica does not, yet.
            assert app.status(second.id) is Status.PENDING
            assert app.job(second.id, fresh=True).job.status is Status.PENDING
            with pytest.raises(venturi.JobNotFound):
                app.job(second.id)
            assert app.count_jobs() == 1
            assert [s.job.id for s in app.job_summaries().jobs] == [first.id]
            assert app.backlog() == 1
            with TestClient(
                create_app(app, token=TOKEN, public_read=True), base_url=BASE
            ) as client:
                assert client.get(f"/jobs/{first.id}").status_code == 200
                assert client.get(f"/jobs/{second.id}").status_code == 404  # not replayed yet

            # Changes and claims go to the primary: the paused standby refuses writes.
            assert app.cancel(third.id).status is Status.DEAD
            worker = Worker(app, concurrency=2, poll_interval=0.5)
            worker.start()
            assert first.result(timeout=20) == 3  # results are read fresh, from the primary
            assert second.result(timeout=20) == 7
            assert app.retry(third.id).status is Status.PENDING
            assert third.result(timeout=20) == 11
            # ... while the replica still shows the queue as it was.
            assert app.job(first.id).job.status is Status.PENDING
            assert app.stats().kinds[0].counts == {Status.PENDING: 1}
            # Every routed read runs on a hot standby (none writes, none needs a lock).
            assert app.throughput().minutes == ()
            assert app.workflows() == []
            assert app.workflow_of(first.id) is None
            assert [j.id for j in app.jobs().jobs] == [first.id]

            env = {**cli_env(primary.url, prefix), "VENTURI_READ_DATABASE_URL": standby.url}
            replica_backlog = venturi_command(env, "stats", "--backlog", "--prefix", prefix)
            assert succeeded(replica_backlog) == "1\n"
            primary_only = {**cli_env(primary.url, prefix)}
            assert (
                succeeded(venturi_command(primary_only, "stats", "--backlog", "--prefix", prefix))
                == "0\n"
            )
        finally:
            standby.resume_replay()

        standby.caught_up()
        with TestClient(create_app(app, token=TOKEN, public_read=True), base_url=BASE) as client:
            assert client.get(f"/jobs/{second.id}").status_code == 200
        assert app.job(first.id).job.status is Status.COMPLETED
        assert app.job(second.id).job.status is Status.COMPLETED
        assert app.count_jobs(status="completed") == 3
        assert app.backlog() == 0
    finally:
        if worker is not None:
            worker.stop(grace=5)
        app.close()
