"""A real PgBouncer in transaction pooling mode in front of the test server.

Debian's ``pgbouncer`` (``.ci/run`` installs it) runs from a temporary
directory with its own ini and userlist, on a free loopback port, with trust
authentication. ``server_round_robin`` spreads consecutive transactions of
one client over the server sessions, so anything that leans on session state
(a prepared statement, a ``SET``, a session lock) breaks at once instead of by
luck. PgBouncer refuses to run as root: under root it runs as the
``postgres`` system user, like ``private_server.PrivateServer``.

It lives beside the conformance suite, whose "postgres through pgbouncer"
case uses it (and whose typing test runs mypy on this folder); the other
suites import it as ``contract.pgbouncer``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

PGBOUNCER = Path("/usr/sbin/pgbouncer")
#: Hang guard for start and stop, not a speed check.
START_TIMEOUT = 20.0


def require_pgbouncer() -> None:
    """Skip (fail under CI) when Debian's pgbouncer is not installed."""
    if PGBOUNCER.exists():
        return
    message = (
        f"needs Debian's pgbouncer at {PGBOUNCER} (apt-get install -y pgbouncer); "
        ".ci/run installs it"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


class PgBouncer:
    """One pgbouncer process; ``url`` reaches the server's database through it."""

    def __init__(self, server_url: str, *, pool_size: int = 20) -> None:
        params = conninfo_to_dict(server_url)
        self._user = params.get("user") or "postgres"
        database = params.get("dbname") or self._user
        host = params.get("host") or "127.0.0.1"
        port = params.get("port") or "5432"
        self._root = Path(tempfile.mkdtemp(prefix="venturi-pgbouncer-"))
        self.log_path = self._root / "pgbouncer.log"
        self.port = _free_port()
        self.url = f"postgresql://{self._user}@127.0.0.1:{self.port}/{database}"
        (self._root / "userlist.txt").write_text(f'"{self._user}" ""\n')
        (self._root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{database} = host={host} port={port} dbname={database}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self._root / 'userlist.txt'}\n"
            "pool_mode = transaction\nserver_round_robin = 1\n"
            f"default_pool_size = {pool_size}\nmax_client_conn = 2000\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.log_path}\npidfile = {self._root / 'pgbouncer.pid'}\n"
        )
        self._runs_as = "postgres" if os.geteuid() == 0 else None
        if self._runs_as is not None:
            for path in (self._root, *self._root.iterdir()):
                shutil.chown(path, self._runs_as, self._runs_as)
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> PgBouncer:
        self._process = subprocess.Popen(
            [str(PGBOUNCER), str(self._root / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=self._runs_as,
            group=self._runs_as,
            extra_groups=[] if self._runs_as is not None else None,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not self._answers():
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"pgbouncer did not answer within {START_TIMEOUT}s:\n{self.log()}"
                )
            threading.Event().wait(0.1)
        return self

    def _answers(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited ({self._process.returncode}):\n{self.log()}")
        try:
            with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        """Stop pgbouncer (its server sessions end with it) and delete its directory."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(START_TIMEOUT)
        shutil.rmtree(self._root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


_shared: dict[str, PgBouncer] = {}


def shared_pgbouncer(server_url: str) -> PgBouncer:
    """One pgbouncer per server for the whole test process, stopped at exit."""
    require_pgbouncer()
    if server_url not in _shared:
        bouncer = PgBouncer(server_url).start()
        atexit.register(bouncer.close)
        _shared[server_url] = bouncer
    return _shared[server_url]
