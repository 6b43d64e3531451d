"""The schema and the backend's own lifecycle.

Part of the storage boundary; ``venturi.backend`` is where callers import it from.
"""

from __future__ import annotations

from typing import Protocol

from venturi.types import (
    AppliedMigration,
)

__all__ = ["Schema"]


class Schema(Protocol):
    """The schema and the backend's own lifecycle (ADR 24, 0118).

    Used by the App: ``migrate``, ``pending_migrations`` (``venturi migrate --sql``,
    ``--check``), ``check_schema`` (each service's start check) and ``close``/``aclose``.
    """

    def migrate(self) -> list[AppliedMigration]:
        """Apply pending migrations in version order (ADR 24); returns those applied now.

        Idempotent: ``[]`` when up to date. Raises ``ChecksumMismatch`` or
        ``DatabaseAhead`` (nothing applied), ``MigrationError`` when a file fails
        (that file rolled back).
        """
        ...

    def pending_migrations(self) -> tuple[list[AppliedMigration], str]:
        """What ``migrate`` would apply now, in order, and the SQL it would run for it;
        applies nothing. Raises as ``migrate`` does before applying (ADR 0136, 0140)."""
        ...

    def check_schema(self) -> str:
        """Check that this prefix's tables are there and readable; returns where the
        data lives, for a start banner (``host:port/dbname``, never a password).

        Uses a session of its own, so a refusal is reported at once rather than
        after a pool's wait. Raises ``SchemaMissing`` (run ``venturi migrate``),
        ``DatabaseRefused`` (no such database, login refused) or
        ``BackendUnavailable`` (an outage). Services call it once at start
        (ADR 0118).
        """
        ...

    def close(self) -> None:
        """Close the backend's own connections; idempotent. Listeners and
        leaderships it handed out are closed by their holders."""

    async def aclose(self) -> None:
        """``close``, from async code: the running loop's sessions are closed by awaiting."""
        ...
