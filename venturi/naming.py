"""Names: the prefix (ADR 6), the only thing spliced into SQL, and the leadership roles.

The prefix is substituted into SQL text (table, index, constraint and history
names cannot be bind parameters), so this check is a security boundary: a
``Prefix`` can only be built by ``Prefix.parse``, and only a ``Prefix`` is
ever substituted.

A product concept, not an adapter detail: ``App`` parses the prefix in its
constructor, before any backend exists, and importing this module pulls in
no driver (ADR 8).

A leadership role names one lock per prefix (``Prefix.lock_name``): the
service holding it is the one active instance of its prefix. The roles live
here, below the services and the ``App`` that reads who holds them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from venturi.errors import InvalidPrefix

__all__ = [
    "BEAT_ROLE",
    "DEFAULT_PREFIX",
    "DERIVED_SUFFIXES",
    "MAX_PREFIX_LENGTH",
    "PRUNER_ROLE",
    "Prefix",
]

#: The prefix of an App (and an adapter) not told otherwise.
DEFAULT_PREFIX = "venturi"
_PATTERN = re.compile(r"^[a-z_][a-z0-9_]*$")
_IDENTIFIER_LIMIT = 63  # PostgreSQL's NAMEDATALEN - 1, in bytes

#: Every name derived from the prefix: tables, indexes, the constraints and
#: sequences PostgreSQL names itself, and the migration history table.
DERIVED_SUFFIXES = (
    "_jobs",
    "_jobs_pkey",
    "_jobs_priority_check",
    "_jobs_status_check",
    "_jobs_claim",
    "_jobs_claim_priority",
    "_jobs_visible",
    "_jobs_dedup",
    "_jobs_lease",
    "_jobs_history",
    "_jobs_finished",
    "_jobs_created",
    "_journal",
    "_journal_pkey",
    "_journal_id_seq",
    "_journal_job_id_fkey",
    "_journal_outcome_check",
    "_journal_job",
    "_journal_kind",
    "_migrations",
    "_migrations_pkey",
    "_workers",
    "_workers_pkey",
    "_jobs_workflow",
    "_steps",
    "_steps_pkey",
    "_steps_status_check",
    "_steps_workflow",
    "_steps_ended",
    "_edges",
    "_edges_pkey",
    "_edges_child",
    "_checkpoints",
    "_checkpoints_pkey",
    "_checkpoints_job",
    "_checkpoints_kind",
    "_checkpoints_seq",
    "_events",
    "_events_pkey",
    "_events_job_id_fkey",
)
MAX_PREFIX_LENGTH = _IDENTIFIER_LIMIT - max(len(s) for s in DERIVED_SUFFIXES)

#: The leadership role of ``Beat``, one holder per prefix: Beat takes it, and
#: ``App.active_beat`` reads who holds it (ADR 0131).
BEAT_ROLE = "beat"
#: The leadership role of the worker's pruner: one worker of the prefix prunes at a time.
PRUNER_ROLE = "pruner"


@dataclass(frozen=True, slots=True)
class Prefix:
    value: str

    @classmethod
    def parse(cls, raw: object) -> Prefix:
        if not isinstance(raw, str):
            raise InvalidPrefix(repr(raw), "must be a string")
        if not _PATTERN.fullmatch(raw):
            raise InvalidPrefix(raw, "must match ^[a-z_][a-z0-9_]*$ (lowercase ASCII, digits, _)")
        if len(raw) > MAX_PREFIX_LENGTH:
            raise InvalidPrefix(
                raw,
                f"is {len(raw)} characters; at most {MAX_PREFIX_LENGTH} keep every derived "
                f"name within PostgreSQL's {_IDENTIFIER_LIMIT}-byte identifier limit",
            )
        return cls(raw)

    def substitute(self, template: str) -> str:
        """Replace the ``{{prefix}}`` token in SQL text (migrations and queries)."""
        return template.replace("{{prefix}}", self.value)

    @property
    def channel(self) -> str:
        """LISTEN/NOTIFY channel for enqueue wake-ups."""
        return f"{self.value}_wakeup"

    def lock_name(self, role: str) -> str:
        """Text hashed into an advisory-lock key; sent as a parameter, never spliced."""
        return f"venturi:{self.value}:{role}"
