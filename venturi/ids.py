"""Job ids: canonical ULIDs, made without python-ulid's per-id cost (ADR 2, ADR 0132).

python-ulid builds a ``ULID`` object per id, reads ``os.urandom`` per id and
encodes base 32 in pure Python, five bits at a time, which showed in
``delay_many``'s profile (bench/JOURNAL.md, section 6). The ids made here are
the same strings: 48 bits of Unix milliseconds, 80 bits of randomness, 26
upper-case Crockford base-32 characters, monotonic within a millisecond as
python-ulid's default generator is (the same millisecond increments the
previous randomness by one), so ``ulid.ULID.from_str(new_id())`` is a valid
``ULID`` and ids made in one process sort in the order they were made. The
encoding looks up 10 bits at a time in a table of character pairs, and within
a millisecond only the last pair usually changes, so the first 24 characters
are reused. Fresh randomness comes from ``os.urandom`` in blocks, a slice per
new millisecond. The first id of a millisecond (every ``.delay()`` at a few
thousand a second) encodes no 128-bit value: the millisecond's upper characters
are cached and the randomness is spelled from two 40-bit halves.

A forked child starts with an empty block and no previous id: otherwise parent
and child would hand out the same randomness (or the same increment) in the
same millisecond.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = [
    "encode",
    "new_id",
    "new_ids",
]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
#: Every 10-bit value as its two characters: 13 look-ups spell a ULID.
_PAIRS = [high + low for high in _CROCKFORD for low in _CROCKFORD]
_RANDOMNESS_BYTES = 10
_RANDOMNESS_MAX = (1 << 80) - 1
#: Fresh randomness drawn per ``os.urandom`` call: 409 new milliseconds' worth.
_BLOCK = 4096 - 4096 % _RANDOMNESS_BYTES


def encode(value: int) -> str:
    """The canonical 26-character form of a 128-bit ULID value."""
    p = _PAIRS
    return (
        p[value >> 120]
        + p[(value >> 110) & 1023]
        + p[(value >> 100) & 1023]
        + p[(value >> 90) & 1023]
        + p[(value >> 80) & 1023]
        + p[(value >> 70) & 1023]
        + p[(value >> 60) & 1023]
        + p[(value >> 50) & 1023]
        + p[(value >> 40) & 1023]
        + p[(value >> 30) & 1023]
        + p[(value >> 20) & 1023]
        + p[(value >> 10) & 1023]
        + p[value & 1023]
    )


class _Generator:
    """The process's id state, under one lock: the last value made and its millisecond,
    the text of the last value's first 24 characters (consecutive values mostly differ in
    the last two) and of the last millisecond's first 8 (they change about once a
    second), and the block of fresh randomness. The clock is read under the lock too, so
    a thread that read an earlier millisecond never gets in after one that read a later
    one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._millisecond = -1
        self._value = 0
        self._high = -1
        self._high_text = ""
        self._upper = -1
        self._upper_text = ""
        self._block = b""
        self._offset = 0

    def after_fork(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _start(self, millisecond: int) -> str:
        """The first id of ``millisecond``: fresh randomness. The millisecond's first 8
        characters are cached (they change every 1,024 ms), and the randomness is
        spelled from its two 40-bit halves, so no 128-bit value is encoded."""
        offset = self._offset
        if offset >= len(self._block):
            self._block = os.urandom(_BLOCK)
            offset = 0
        self._offset = offset + _RANDOMNESS_BYTES
        block = self._block
        middle = offset + _RANDOMNESS_BYTES // 2
        high = int.from_bytes(block[offset:middle], "big")
        low = int.from_bytes(block[middle : offset + _RANDOMNESS_BYTES], "big")
        self._millisecond = millisecond
        self._value = (millisecond << 80) | (high << 40) | low
        self._high = -1
        upper = millisecond >> 10
        if upper != self._upper:
            self._upper = upper
            self._upper_text = encode(millisecond << 80)[:8]
        p = _PAIRS
        return (
            self._upper_text
            + p[millisecond & 1023]
            + p[high >> 30]
            + p[(high >> 20) & 1023]
            + p[(high >> 10) & 1023]
            + p[high & 1023]
            + p[low >> 30]
            + p[(low >> 20) & 1023]
            + p[(low >> 10) & 1023]
            + p[low & 1023]
        )

    def _text(self, value: int) -> str:
        high = value >> 10
        if high != self._high:
            self._high = high
            self._high_text = encode(value)[:24]
        return self._high_text + _PAIRS[value & 1023]

    def _next(self, millisecond: int) -> str:
        """The id after the last one, in ``millisecond`` (the lock held). In a new
        millisecond it gets fresh randomness; later in the same millisecond it adds one
        to the previous id (python-ulid's default policy). If the randomness would
        overflow it starts afresh (python-ulid's "lax" policy also gives up monotonicity
        there; its default raises, which would fail an enqueue about once in 2**80 ids)."""
        value = self._value
        if millisecond == self._millisecond and value & _RANDOMNESS_MAX != _RANDOMNESS_MAX:
            self._value = value = value + 1
            return self._text(value)
        return self._start(millisecond)

    def one(self) -> str:
        """The next id."""
        with self._lock:
            return self._next(time.time_ns() // 1_000_000)

    def many(self, count: int) -> list[str]:
        """``count`` next ids under one lock and one clock reading: what ``count`` calls
        of ``one`` in the same millisecond would give (``delay_many``'s batches)."""
        if count < 1:
            return []
        with self._lock:
            millisecond = time.time_ns() // 1_000_000
            made = [self._next(millisecond)]
            value = self._value
            for _ in range(count - 1):  # inline: one call per id costs a batch its share
                if value & _RANDOMNESS_MAX == _RANDOMNESS_MAX:
                    made.append(self._start(millisecond))
                    value = self._value
                else:
                    value += 1
                    made.append(self._text(value))
            self._value = value
            return made


_generator = _Generator()
os.register_at_fork(after_in_child=_generator.after_fork)


def new_id() -> str:
    """A new job id: a canonical ULID string, after every id made before in this process
    (unless the system clock steps back, as with python-ulid)."""
    return _generator.one()


def new_ids(count: int) -> list[str]:
    """``count`` new job ids in order, as ``count`` calls of ``new_id`` would make them,
    for one lock and one clock reading."""
    return [_generator.one()] if count == 1 else _generator.many(count)
