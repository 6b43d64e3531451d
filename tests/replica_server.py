"""A private primary and its streaming standby, for the read-replica tests (ADR 0140).

The primary is a ``PrivateServer``; the standby is made from it by ``pg_basebackup
-R`` (a base backup plus ``standby.signal`` and ``primary_conninfo``) into a
directory of its own and started on its own port, so it replays the primary's WAL
as a real replica does. ``pause_replay``/``resume_replay`` hold its replay back
(``pg_wal_replay_pause``), to show reads that lag; ``caught_up`` waits until it has
replayed everything the primary has written.
"""

from __future__ import annotations

import shutil
import time

import psycopg
from private_server import (
    PrivateServer,
    cluster_directory,
    free_port,
    postgres_bindir,
    run_program,
)

__all__ = ["Standby"]


class Standby:
    """A hot standby of ``primary``: ``url`` reads from it, it refuses every write."""

    def __init__(self, primary: PrivateServer) -> None:
        self._primary = primary
        # initdb on PATH may be a link into the server's own bin directory, which
        # holds pg_basebackup too.
        self._bindir = (postgres_bindir() / "initdb").resolve().parent
        directory, self._user = cluster_directory("venturi-standby-")
        self._root = directory
        self.data = directory / "data"
        self.log = directory / "server.log"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run(
            "pg_basebackup",
            "-D",
            str(self.data),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-X",
            "stream",
            "-R",
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nunix_socket_directories = '{directory}'\nhot_standby = on\n"
            )

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "start", "-w", "-l", str(self.log))

    def close(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "stop", "-w", "-m", "fast")
        finally:
            shutil.rmtree(self._root, ignore_errors=True)

    def pause_replay(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            deadline = time.monotonic() + 10
            while conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone() != ("paused",):
                assert time.monotonic() < deadline, "the standby's replay did not pause"
                time.sleep(0.02)

    def resume_replay(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def caught_up(self, timeout: float = 30.0) -> None:
        """Wait until the standby has replayed all the primary has written so far."""
        with psycopg.connect(self._primary.url, autocommit=True) as primary:
            row = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            target = row[0]
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.url, autocommit=True) as standby:
            while True:
                done = standby.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()
                if done == (True,):
                    return
                assert time.monotonic() < deadline, "the standby did not catch up"
                time.sleep(0.02)

    def _run(self, program: str, *args: str) -> None:
        run_program(self._bindir, self._user, self.log, program, *args)
