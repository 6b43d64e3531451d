"""A position in the newest-first job listing, and its text form for shells and URLs.

``Cursor`` is the keyset the backend pages by; ``encode_cursor`` turns it
into the opaque token ``venturi jobs list`` prints and the dashboard puts in
its page links, ``decode_cursor`` reads it back. ``venturi.types`` re-exports
all three with the rest of the vocabulary.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["Cursor", "decode_cursor", "encode_cursor"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_CURSOR = re.compile(r"(?P<micros>-?[0-9]+)\.(?P<id>[^\x00-\x1f]+)")


@dataclass(frozen=True, slots=True)
class Cursor:
    """Keyset position in the newest-first listing: the last row's ``(created_at, id)``."""

    created_at: datetime
    id: str


def encode_cursor(cursor: Cursor) -> str:
    """The opaque text form of a listing position, safe in a shell and a URL.

    It packs the row's ``created_at`` (whole microseconds since the epoch, the
    database's own precision) and its id; users only copy it back.
    """
    micros = (cursor.created_at - _EPOCH) // _MICROSECOND
    raw = f"{micros}.{cursor.id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(text: str) -> Cursor:
    """Inverse of ``encode_cursor``; raises ``ValueError`` for anything it did not make."""
    invalid = ValueError(f"invalid cursor {text!r}: pass a cursor printed by 'venturi jobs list'")
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        match = _CURSOR.fullmatch(raw.decode())
        if match is None:
            raise invalid
        created_at = _EPOCH + int(match["micros"]) * _MICROSECOND
    except (binascii.Error, UnicodeDecodeError, OverflowError):
        raise invalid from None
    return Cursor(created_at=created_at, id=match["id"])
