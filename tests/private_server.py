"""A PostgreSQL cluster of a test's own: for tests that stop, restart or reconfigure a server.

The shared server on 127.0.0.1:5432 serves every other test (and other
sessions), so it is never restarted. A ``PrivateServer`` is a fresh cluster
made by ``initdb`` in a temporary directory and started by ``pg_ctl`` on a
free loopback port, with trust authentication. PostgreSQL refuses to run as
root, so under root the cluster belongs to the ``postgres`` system user (the
server package's own) and its commands run as that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

#: Hang guard for initdb and pg_ctl, not a speed check.
COMMAND_TIMEOUT = 120.0


def postgres_bindir() -> Path:
    """The directory of ``initdb`` and ``pg_ctl``: on PATH, else Debian's newest version."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not versions:
        raise RuntimeError(
            "no initdb found: install the PostgreSQL server (e.g. apt-get install postgresql)"
        )
    return versions[-1].parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cluster_directory(prefix: str) -> tuple[Path, str | None]:
    """A new temporary directory for a cluster, and the system user its commands run as:
    ``postgres`` (who then owns the directory) under root, else the caller (None)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    user = "postgres" if os.geteuid() == 0 else None
    if user is not None:
        account = pwd.getpwnam(user)
        os.chown(directory, account.pw_uid, account.pw_gid)
    return directory, user


def run_program(bindir: Path, user: str | None, log: Path, program: str, *args: str) -> None:
    """Run one of the server's programs (as ``user`` when given); a failure raises with
    its stderr and the tail of the server's ``log``."""
    if user is not None:
        command = ["runuser", "-u", user, "--", str(bindir / program), *args]
    else:
        command = [str(bindir / program), *args]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
    )
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(
            f"{program} failed ({result.returncode}): {result.stderr.strip()}\n{tail}"
        )


class PrivateServer:
    """One throwaway cluster: ``start()``, ``restart()``, ``close()``; ``url`` reaches it.

    Its directory is made under the system's temporary directory rather than
    pytest's ``tmp_path``, whose parents only root may enter.
    """

    def __init__(self) -> None:
        self._bindir = postgres_bindir()
        directory, self._user = cluster_directory("venturi-pg-")
        self._root = directory
        self.data = directory / "data"
        self.log = directory / "server.log"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{directory}'\nfsync = off\n"
            )

    def start(self) -> None:
        self._pg_ctl("start", "-w", "-l", str(self.log))

    def restart(self) -> None:
        """Stop (fast: every session is ended at once) and start again on the same port."""
        self._pg_ctl("restart", "-w", "-m", "fast", "-l", str(self.log))

    def close(self) -> None:
        """Stop the server (if it runs) and delete the cluster."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._pg_ctl("stop", "-w", "-m", "fast")
        finally:
            shutil.rmtree(self._root, ignore_errors=True)

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.data), *args)

    def _run(self, program: str, *args: str) -> None:
        run_program(self._bindir, self._user, self.log, program, *args)
