"""The embedded PostgreSQL server used when no database URL is configured.

A newcomer's first run needs no server: venturi starts one from the
``pgserver`` package (the ``embedded`` extra) with its data under
``./.venturi/pgdata``, or joins the one another process on this machine
already started there. Production deployments pass a URL instead.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from venturi.errors import EmbeddedUnavailable

logger = logging.getLogger(__name__)

EMBEDDED_DIR_ENV = "VENTURI_EMBEDDED_DIR"


def embedded_directory() -> Path:
    return Path(os.environ.get(EMBEDDED_DIR_ENV, ".venturi")).resolve() / "pgdata"


def embedded_database_url() -> str:
    """Start (or join) the embedded server and return its URL."""
    try:
        import pgserver
    except ImportError:
        raise EmbeddedUnavailable(
            "no database configured and the embedded server is not installed: set "
            "VENTURI_DATABASE_URL (or pass App(database_url=...)), or install it with "
            "pip install 'venturi[embedded]'"
        ) from None
    directory = embedded_directory()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        server = pgserver.get_server(directory, cleanup_mode=None)
    except Exception as exc:  # pgserver raises plain exceptions from initdb/pg_ctl
        raise EmbeddedUnavailable(
            f"could not start the embedded server in {directory}: {exc}"
        ) from exc
    url: str = server.get_uri()
    logger.info("no database URL configured: using the embedded PostgreSQL server in %s", directory)
    return url
